'use strict';
// clients_api.js: the Node client's scoped use, errors, URLs, several names
// at once (writeLocks, using() with an array), and its
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

// Several names at once (docs/protocol.md 19): the canonical order whatever
// the caller's, seen in Redis while the call waits; the UTF-8 order, not
// JavaScript's <; duplicates; all or none on a timeout, an abort and an
// error; a timeout that bounds the whole call; using() with an array.
async function multi(redis, locks) {
  const p = 'api:mnode:';
  const [a, b, c] = [`${p}a`, `${p}b`, `${p}c`];
  const state = async (n) => (await locks.info(n)).state;
  const until = async (cond, ms = 5000) => {
    const end = Date.now() + ms;
    while (Date.now() < end) {
      if (await cond()) return true;
      await sleep(20);
    }
    return cond();
  };
  const short = (l) => JSON.stringify(l.map((n) => n.slice(p.length)));
  for (const given of [[c, b, a], [b, c, a], [a, c, b]]) {
    const blocker = locks.writeLock(b);
    await blocker.acquire(5000);
    const ml = locks.writeLocks(given);
    const pending = ml.acquire(10000);
    const waited = await until(async () => ml.owner in (await locks.info(b)).waiting);
    const ia = await locks.info(a);
    const sc = await state(c);
    check(`writeLocks(${short(given)}): holds a, not c, while it waits for b`,
      waited && ia.state === 'write' && ia.writer === ml.owner && sc === 'free', `${waited} ${ia.state} ${sc}`);
    await blocker.release();
    const toks = await pending;
    const want = await Promise.all(given.map(async (n) => (await locks.info(n)).token));
    check(`writeLocks(${short(given)}): then all, tokens in the caller's order`,
      ml.held && JSON.stringify(toks) === JSON.stringify(want), `${toks} ${want}`);
    check('one owner id, one Lock per name in the canonical order',
      JSON.stringify(ml.locks.map((l) => l.name)) === JSON.stringify([a, b, c]) &&
      ml.locks.every((l) => l.owner === ml.owner));
    check('release() gives every name back', (await ml.release()) === true &&
      (await state(a)) === 'free' && (await state(b)) === 'free' && (await state(c)) === 'free');
  }
  // UTF-8 bytes: 'x\uFF5E' (EF BD 9E) before 'x\u{1F600}' (F0 9F 98 80), which < puts first.
  const odd = [`${p}x\u{1F600}`, `${p}x\uFF5E`];
  const blocker = locks.writeLock(odd[0]);
  await blocker.acquire(5000);
  const mo = locks.writeLocks(odd);
  check('the canonical order is the UTF-8 bytes\', not JavaScript\'s <',
    mo.locks[0].name === odd[1] && rw.canonicalOrder(odd)[0] === odd[1] && [...odd].sort()[0] === odd[0]);
  const got = await mo.tryAcquire(200);
  check('tryAcquire(200) with its last name busy: false, the first given back',
    got === false && (await state(odd[1])) === 'free' && !mo.locks.some((l) => l.held));
  await blocker.release();
  // Duplicates: one hold, its token at each place.
  const md = locks.writeLocks([b, a, b]);
  const td = await md.acquire(5000);
  check(`a name given twice is one hold (${md.locks.length} locks), its token at each place`,
    md.locks.length === 2 && td.length === 3 && td[0] === td[2] && td[0] === (await locks.info(b)).token);
  await md.release();
  // A timeout on the second name gives the first back.
  const hb = locks.writeLock(b);
  await hb.acquire(5000);
  let t0 = Date.now();
  const e1 = await rejects(locks.writeLocks([b, a]).acquire(300));
  let el = Date.now() - t0;
  check(`a timeout on the second name: LockTimeout after ${el} ms, the first given back`,
    e1 instanceof rw.LockTimeout && el >= 280 && el < 1500 && (await state(a)) === 'free', String(e1));
  // An abort likewise.
  const ac = new AbortController();
  const mab = locks.writeLocks([b, a]);
  setTimeout(() => ac.abort(), 200);
  const e2 = await rejects(mab.acquire({ signal: ac.signal }));
  check('an AbortSignal during the wait for the second name: AbortError, the first given back',
    e2 instanceof rw.AbortError && (await state(a)) === 'free' && !mab.locks.some((l) => l.held), String(e2));
  await hb.release();
  // The timeout bounds the whole call: a let go after 300 ms, c held throughout.
  const ha = locks.writeLock(a);
  const hc = locks.writeLock(c);
  await ha.acquire(5000);
  await hc.acquire(5000);
  setTimeout(() => ha.release(), 300);
  t0 = Date.now();
  const e3 = await rejects(locks.writeLocks([c, a, b]).acquire(600));
  el = Date.now() - t0;
  check(`the timeout bounds the whole call (600 ms: ${el} ms), a and b given back`,
    e3 instanceof rw.LockTimeout && el >= 580 && el < 1200 && (await state(a)) === 'free' &&
    (await state(b)) === 'free', String(e3));
  await hc.release();
  // An error on the second name (its key is not a hash).
  await redis.set(rw.lockKeys('rwlock', b)[0], 'not a hash');
  const e4 = await rejects(locks.writeLocks([b, a]).acquire(2000));
  check('an error on the second name is thrown, the first given back',
    e4 instanceof Error && /WRONGTYPE/.test(e4.message) && (await state(a)) === 'free', String(e4));
  await redis.del(rw.lockKeys('rwlock', b)[0]);
  // using() with an array: all held in fn, all free after; read locks share.
  const v = await locks.using([c, a], 'r', async (signal, ml) => {
    const other = await locks.readLocks([a, c]).tryAcquire();
    return ml.held && !signal.aborted && other && Object.keys((await locks.info(a)).readers).length === 2;
  });
  await locks.releaseAll();
  check('using([c, a], "r", fn): all held in fn (shared), free after', v === true &&
    (await state(a)) === 'free' && (await state(c)) === 'free');
  const e5 = await rejects(locks.using([a, b], 'w', async () => {
    await redis.del(rw.lockKeys('rwlock', b)[0]);
    await sleep(700);
  }, { lease: 600 }));
  check('using([a, b]): a lost name rejects with LockLost naming it',
    e5 instanceof rw.LockLost && e5.lock === b, String(e5));
  let e6 = null;
  try {
    locks.writeLocks('ab');
  } catch (x) {
    e6 = x;
  }
  check('writeLocks(a string): TypeError', e6 instanceof TypeError);
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
    const late = await r.evalsha(locks.scripts.release.sha, 2, ...k, a.owner, seq)
      .then(() => null, (e) => e);
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
        crossed = Number(args[1]);
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
    await multi(redis, locks);
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
