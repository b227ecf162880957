'use strict';
// clients_api.js: the Node client's scoped use, errors and URLs, and its
// late requests (protocol 3's request order, as the least-privilege Redis
// user of docs/connecting.md), against the real servers
// test/clients_api.py started (their URLs in argv[2], JSON).
// Prints "ok <what>" or "FAIL <what>: <detail>" a line, and the names of the
// error classes ("errors <json>") for the Python side to compare.
const fs = require('fs');
const path = require('path');
const { spawnSync } = require('child_process');
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

// A request that Redis runs after a newer one of its owner changes nothing
// (docs/protocol.md 4.1), and the client says so with StaleRequestError.
// As the Redis user of docs/connecting.md's ACL line (no SCRIPT, no INFO,
// no CLIENT): the user the documentation tells services to use.
async function stale(admin) {
  const doc = fs.readFileSync(path.join(__dirname, '..', 'docs', 'connecting.md'), 'utf8');
  const line = /^ *(ACL SETUSER rwlock .*)$/m.exec(doc)[1].trim().split(/\s+/);
  check('docs/connecting.md\'s ACL line is accepted', (await admin.call(...line)) === 'OK');
  const pw = line.find((w) => w.startsWith('>')).slice(1);
  const u = new URL(urls.redis);
  const userOptions = { host: u.hostname, port: Number(u.port), username: 'rwlock', password: pw,
    enableReadyCheck: false }; // ioredis's ready check is INFO, which the line does not grant
  const r = new Redis(userOptions);
  const locks = new rw.Locks(r);
  const name = 'api:stale';
  const [hash, queue] = rw.lockKeys('rwlock', name);
  const state = async () => JSON.stringify([await admin.hgetall(hash), await admin.exists(queue)]);
  // Another process with the same owner id (a bug: ids must be unique):
  // its counter starts again, so its requests are older than ours.
  const other = (owner, mode) => {
    const js = `
      const rw = require(${JSON.stringify(path.join(__dirname, '..', 'clients', 'node'))});
      const Redis = require(${JSON.stringify(path.join(__dirname, '..', 'clients', 'node', 'node_modules', 'ioredis'))});
      const r = new Redis(${JSON.stringify(userOptions)});
      const locks = new rw.Locks(r);
      const lk = locks.${mode === 'w' ? 'writeLock' : 'readLock'}(${JSON.stringify(name)});
      lk.owner = ${JSON.stringify(owner)};
      lk.acquire(1000).then(
        (t) => ({ token: t }),
        (e) => ({ error: e.constructor.name, stale: e instanceof rw.StaleRequestError && e instanceof rw.RWLockError,
          seq: e.seq, newest: e.newest, message: e.message }))
        .then((o) => { console.log(JSON.stringify({ ...o, held: lk.held, holds: locks.holds.size })); r.disconnect(); });`;
    const p = spawnSync('node', ['-e', js], { encoding: 'utf8', timeout: 20000 });
    try {
      return JSON.parse(p.stdout);
    } catch (e) {
      return { error: `no answer: ${p.stdout}${p.stderr}` };
    }
  };
  try {
    const a = locks.writeLock(name);
    const t1 = await a.acquire(1000);
    const seq = Number(await admin.hget(hash, `s:${a.owner}`));
    check(`the acquisition recorded its request number (s:<owner> ${seq})`, seq >= 1);

    // A copy of the acquisition's request, as a release, arriving late.
    const before = await state();
    const k = [hash, queue];
    const late = await r.evalsha(locks.scripts.release.sha, 2, ...k, rw.PROTOCOL_VERSION, a.owner, seq,
      '', 0, rw.KEEP_TOKEN_MS).then(() => null, (e) => e);
    check('a late release (an older request number) is refused RWLOCK_STALE',
      late && /^RWLOCK_STALE /.test(late.message), String(late));
    check('and changes nothing: the write lock stays held', (await state()) === before &&
      (await locks.info(name)).writer === a.owner, await state());

    // The same owner id in another process: its acquisitions are older.
    for (const mode of ['w', 'r']) {
      const o = other(a.owner, mode);
      check(`held: a late acquisition (${mode}) rejects with StaleRequestError (${o.seq} < ${o.newest})`,
        o.stale && o.seq < o.newest && !o.held && o.holds === 0, JSON.stringify(o));
      check(`held: and changes nothing in Redis (${mode})`, (await state()) === before, await state());
    }
    check('release() after the late requests: true', (await a.release()) === true);
    const free = await state();
    const o = other(a.owner, 'w');
    check(`free: a late acquisition rejects with StaleRequestError (${o.seq} < ${o.newest})`,
      o.stale && o.seq < o.newest && !o.held, JSON.stringify(o));
    check('free: and changes nothing in Redis (no holder, the same token)', (await state()) === free &&
      (await locks.info(name)).state === 'free' && (await locks.info(name)).token === t1, await state());
    const t2 = await a.acquire(1000);
    check(`the owner's own next acquisition is granted (token ${t1} < ${t2})`, t2 > t1);

    // A renewal that crossed a newer request of its owner: not a loss,
    // asked again with the newer number.
    const eval0 = locks._eval;
    let crossed = null;
    locks._eval = async function (script, keys, args) {
      if (script === 'renew' && crossed === null) {
        crossed = Number(args[2]);
        const x = locks.writeLock('api:stale-x');
        await x.acquire(1000); // the counter moves on
        await x.release();
        await admin.hset(hash, `s:${a.owner}`, crossed + 1); // as if request crossed + 1 had run here
      }
      return eval0.call(this, script, keys, args);
    };
    const renewed = await a.renew().catch((e) => e);
    locks._eval = eval0;
    check(`a renewal answered stale after a newer request ran (${crossed} < ${crossed + 1}) is sent again ` +
      'with the newer number: renew() true', renewed === true && !a.lost, String(renewed));
    // Stale with no newer number given out: another process ran a newer
    // request under this owner id.
    await admin.hset(hash, `s:${a.owner}`, 2 ** 52);
    const e = await a.renew().catch((x) => x);
    check('a renewal stale for a newer request of another process: StaleRequestError, not a loss',
      e instanceof rw.StaleRequestError && e.newest === 2 ** 52 && !a.lost, String(e));
    const e2 = await a.release().catch((x) => x);
    check('a release stale likewise: StaleRequestError, not owed', e2 instanceof rw.StaleRequestError &&
      !locks.owed.has(name) && !a.held, String(e2));
    await admin.del(hash, queue);

    // An owed release after Redis lost its scripts: the pipeline's NOSCRIPT
    // fallback is EVAL (the user may not SCRIPT LOAD), its numbers new.
    const b = locks.writeLock('api:stale-owed');
    const t3 = await b.acquire(1000);
    locks.owed.set(b.name, new Map([[b.owner, ['', 0]]])); // as if its release had been cut off
    b._held = false;
    locks.holds.delete(b);
    await admin.script('FLUSH');
    const t4 = await b.acquire(1000).catch((x) => x);
    check(`an owed release after SCRIPT FLUSH, as this user: sent first, a new grant (${t3} < ${t4})`,
      t4 > t3 && !locks.owed.has(b.name), String(t4));
    await b.release();
  } catch (e) {
    check('the late requests ran to their end', false, String(e && e.stack));
  } finally {
    locks.close();
    r.disconnect();
  }
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
    await stale(redis);
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
    !/Error$/.test(k) || ['RWLockError', 'ProtocolVersionError', 'StaleRequestError'].includes(k));
  console.log(`errors ${JSON.stringify(names.sort())}`);
  process.exitCode = failed ? 1 : 0;
}
main();
