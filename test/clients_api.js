'use strict';
// clients_api.js: the Node client's scoped use, errors and URLs, against the
// real servers test/clients_api.py started (their URLs in argv[2], JSON).
// Prints "ok <what>" or "FAIL <what>: <detail>" a line, and the names of the
// error classes ("errors <json>") for the Python side to compare.
const path = require('path');
const rw = require(path.join(__dirname, '..', 'clients', 'node'));
const Redis = require(path.join(__dirname, '..', 'clients', 'node', 'node_modules', 'ioredis'));

const urls = JSON.parse(process.argv[2]);
let failed = 0;
function check(what, ok, detail = '') {
  if (!ok) failed++;
  console.log(`${ok ? 'ok' : 'FAIL'} node: ${what}${ok || !detail ? '' : `: ${detail}`}`);
}
async function rejects(p) {
  try {
    await p;
    return null;
  } catch (e) {
    return e;
  }
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

async function scoped(redis, locks) {
  // Not lost: fn's result, the lock free afterwards.
  const v = await locks.using('api:scoped', 'w', async (signal, lock) => {
    check('using(): fn runs with the lock held and a live signal', lock.held && !signal.aborted);
    return 42;
  });
  check('using() resolves to fn\'s result and releases', v === 42 && (await locks.info('api:scoped')).state === 'free');

  // Lost inside fn (the hash deleted, as a Redis that lost it): the signal
  // fires at the next renewal, using() rejects with LockLost.
  let firedAt = null;
  const t0 = Date.now();
  const e = await rejects(locks.using('api:lost', 'w', async (signal) => {
    signal.addEventListener('abort', () => { firedAt = Date.now() - t0; });
    await redis.del(rw.lockKeys('rwlock', 'api:lost')[0]);
    for (let i = 0; i < 50 && !signal.aborted; i++) await sleep(20);
    check('the AbortSignal fires on loss, its reason a LockLost',
      signal.aborted && signal.reason instanceof rw.LockLost, `aborted ${signal.aborted}`);
    return 'done';
  }, { lease: 600 }));
  check(`using() rejects with LockLost after a loss (signal after ${firedAt} ms)`,
    e instanceof rw.LockLost && e instanceof rw.RWLockError, String(e));

  // onLostError: false: resolves all the same.
  const v2 = await locks.using('api:lost2', 'w', async (signal) => {
    await redis.del(rw.lockKeys('rwlock', 'api:lost2')[0]);
    for (let i = 0; i < 50 && !signal.aborted; i++) await sleep(20);
    return signal.aborted;
  }, { lease: 600, onLostError: false });
  check('using(..., { onLostError: false }) resolves after a loss', v2 === true);

  // fn's own error wins over the loss.
  const e3 = await rejects(locks.using('api:lost3', 'w', async () => {
    await redis.del(rw.lockKeys('rwlock', 'api:lost3')[0]);
    throw new Error('mine');
  }));
  check('fn\'s own error is the one using() rejects with', e3 && e3.message === 'mine', String(e3));

  // Lost by the local clock: Redis paused (CLIENT PAUSE), the renewal hangs,
  // the signal fires at the lease's end all the same.
  const admin = new Redis(urls.redis);
  let pausedFired = null;
  const e4 = await rejects(locks.using('api:paused', 'w', async (signal) => {
    const t = Date.now();
    await admin.call('CLIENT', 'PAUSE', '1500', 'ALL');
    await new Promise((resolve) => {
      signal.addEventListener('abort', resolve);
      setTimeout(resolve, 1400);
    });
    pausedFired = signal.aborted ? Date.now() - t : null;
  }, { lease: 500 }));
  check(`a hold whose renewals hang is lost at its lease's end (signal after ${pausedFired} ms)`,
    pausedFired !== null && pausedFired < 1200 && e4 instanceof rw.LockLost, String(e4));
  await admin.call('CLIENT', 'UNPAUSE');
  admin.disconnect();
}

async function gone() {
  // Redis gone past the lease's end: using() rejects with LockLost, the
  // connection error as its cause.
  const r = new Redis(urls.gone, { maxRetriesPerRequest: 0, enableOfflineQueue: false,
    retryStrategy: () => null });
  r.on('error', () => {});
  await new Promise((resolve) => r.once('ready', resolve));
  const locks = new rw.Locks(r);
  const e = await rejects(locks.using('api:gone', 'w', async (signal) => {
    const admin = new Redis(urls.gone, { retryStrategy: () => null });
    admin.on('error', () => {});
    await admin.call('SHUTDOWN', 'NOSAVE').catch(() => {});
    admin.disconnect();
    await new Promise((resolve) => signal.addEventListener('abort', resolve));
  }, { lease: 600 }));
  check('using(): Redis gone past the lease: LockLost, the connection error its cause',
    e instanceof rw.LockLost && e.cause instanceof Error, String(e && e.stack));
  locks.close();
  r.disconnect();
}

async function misuse(locks) {
  const lk = locks.writeLock('api:misuse');
  await lk.acquire();
  const e1 = await rejects(lk.acquire());
  check('acquire() of a held Lock: AlreadyHeld', e1 instanceof rw.AlreadyHeld && e1 instanceof rw.RWLockError, String(e1));
  check('release() of a held lock: true', (await lk.release()) === true);
  const e2 = await rejects(lk.release());
  check('a second release(): NotHeld', e2 instanceof rw.NotHeld && e2 instanceof rw.RWLockError, String(e2));
  let e3 = null;
  try {
    locks.writeLock('');
  } catch (e) {
    e3 = e;
  }
  check('an empty name: TypeError', e3 instanceof TypeError);
  check('1.1\'s names are the same classes', rw.LockTimeoutError === rw.LockTimeout &&
    rw.UpgradeConflictError === rw.UpgradeConflict && rw.ReplicasNotAcknowledgedError === rw.ReplicasNotAcknowledged);
  check('UpgradeConflict is a Deadlock', new rw.UpgradeConflict('n', 'o') instanceof rw.Deadlock);
  const e4 = await rejects(locks.writeLock('api:misuse').acquire(0).then(() => null));
  check('a free lock acquired with timeout 0', e4 === null, String(e4));
  const held = locks.writeLock('api:held1');
  await held.acquire();
  await locks.readLock('api:held2').acquire();
  check('releaseAll() releases every hold', (await locks.releaseAll()) >= 2 && locks.holds.size === 0 &&
    (await locks.info('api:held1')).state === 'free' && (await locks.info('api:held2')).state === 'free');
}

async function fromUrl(label, url) {
  const locks = rw.Locks.fromUrl(url);
  try {
    const a = locks.writeLock(`api:url{${label}}`);
    const b = locks.writeLock(`api:url{${label}}`);
    const t = await a.acquire(5000);
    setTimeout(() => a.release(), 100);
    const t2 = await b.acquire(5000); // a wait: the subscriber of this topology
    check(`Locks.fromUrl(${label}): exclusion, a hand-off, tokens ${t} < ${t2}`, t2 > t && (await b.release()));
  } catch (e) {
    check(`Locks.fromUrl(${label})`, false, String(e && e.stack));
  } finally {
    await locks.close();
  }
}

async function main() {
  const redis = new Redis(urls.redis);
  const locks = new rw.Locks(redis);
  try {
    await scoped(redis, locks);
    await gone();
    await misuse(locks);
    for (const k of ['redis', 'unix', 'cluster', 'sentinel']) if (urls[k]) await fromUrl(k, urls[k]);
    let e = null;
    try {
      rw.Locks.fromUrl(urls.quorum);
    } catch (x) {
      e = x;
    }
    check('Locks.fromUrl(several URLs): refused, saying there is no quorum mode',
      e instanceof rw.RWLockError && /quorum/.test(e.message), String(e));
  } catch (e) {
    check('the Node checks ran', false, String(e && e.stack));
  } finally {
    locks.close();
    redis.disconnect();
  }
  const names = Object.keys(rw).filter((k) => rw[k] && rw[k].prototype instanceof Error &&
    !/Error$/.test(k) || k === 'RWLockError' || k === 'ProtocolVersionError');
  console.log(`errors ${JSON.stringify(names.sort())}`);
  process.exitCode = failed ? 1 : 0;
}
main();
