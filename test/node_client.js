'use strict';
// node_client.js: what the Node client promises a service about waits and
// process life (issue 39, 37), against a real Redis (URL in argv[2]):
// - `timeout` bounds every wait, connecting included: with nothing listening
//   on the port, and with a listener that never answers, acquire() rejects
//   once, with LockTimeout, within the timeout (+ a margin), and a process
//   using Locks.fromUrl prints no "Unhandled error event";
// - a process with no lock held or waited for exits by itself, whatever
//   made its Locks (fromUrl without close(), after a hold, after a wait,
//   after Redis was unreachable);
// - acquire({ signal }): the caller's AbortSignal stops a wait with an
//   AbortError and leaves no queue place, intent or wait key behind;
// - the `owner` option: two tasks of one process, each holding one lock
//   under one Lock object and waiting for the other's under another Lock
//   object with the same owner, are a deadlock cycle that is broken.
// Prints "ok node: <what>" or "FAIL node: <what>: <detail>" a line; exits 1
// on a failure.
//   node test/node_client.js redis://127.0.0.1:6440/0
const net = require('net');
const path = require('path');
const { spawn } = require('child_process');
const NODE_DIR = path.join(__dirname, '..', 'clients', 'node');
const rw = require(NODE_DIR);
const Redis = require(path.join(NODE_DIR, 'node_modules', 'ioredis'));

const url = process.argv[2];
let failed = 0;
function check(what, ok, detail = '') {
  if (!ok) failed++;
  console.log(`${ok ? 'ok' : 'FAIL'} node: ${what}${ok || !detail ? '' : `: ${detail}`}`);
}
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));

/** A port nothing listens on (one just closed). */
function deadPort() {
  return new Promise((resolve) => {
    const s = net.createServer();
    s.listen(0, '127.0.0.1', () => {
      const { port } = s.address();
      s.close(() => resolve(port));
    });
  });
}

/** Run `code` in a child node process (the package as `rw`, the URL as
 *  `url`): { out, err, code, ms: from start to exit, lastMs: from its
 *  last line of output to exit }. Killed after `limit` ms. */
function child(code, childUrl, limit = 20000) {
  const src = `const rw = require(${JSON.stringify(NODE_DIR)}); const url = ${JSON.stringify(childUrl)};\n` +
    `(async () => {\n${code}\n})().catch((e) => { console.log('failed', e && e.stack); process.exitCode = 1; });`;
  return new Promise((resolve) => {
    const t0 = Date.now();
    let last = t0;
    const p = spawn(process.execPath, ['-e', src], { stdio: ['ignore', 'pipe', 'pipe'] });
    let out = '';
    let err = '';
    p.stdout.on('data', (d) => { out += d; last = Date.now(); });
    p.stderr.on('data', (d) => { err += d; });
    const killer = setTimeout(() => p.kill('SIGKILL'), limit);
    p.on('exit', (exitCode, sig) => {
      clearTimeout(killer);
      const end = Date.now();
      resolve({ out, err, code: exitCode, sig, ms: end - t0, lastMs: end - last });
    });
  });
}

// The child's acquisition against an address that does not answer: how
// long it took, what it rejected with, when the process ended.
const UNREACHABLE = `
  const locks = rw.Locks.fromUrl(url);
  const t0 = Date.now();
  let n = 0;
  try {
    await locks.writeLock('node:unreachable').acquire({ timeout: 1500 });
    console.log('granted');
  } catch (e) {
    n++;
    console.log('rejected', Date.now() - t0, e.name, e instanceof rw.LockTimeout && e instanceof rw.RWLockError,
      e.cause ? e.cause.code || e.cause.message : '-');
  }
  const info = await locks.info('x').then(() => 'answered', (e) => 'info rejected ' + e.name);
  console.log(info, n);
`;

async function unreachable(label, port) {
  const r = await child(UNREACHABLE, `redis://127.0.0.1:${port}/0`);
  const m = /^rejected (\d+) (\w+) (true|false) (.*)$/m.exec(r.out);
  const ms = m ? Number(m[1]) : NaN;
  check(`${label}: acquire({ timeout: 1500 }) rejects with LockTimeout in ${ms} ms ` +
    `(cause ${m ? m[4] : '?'})`, m && m[2] === 'LockTimeout' && m[3] === 'true' && ms >= 1450 && ms < 2200,
  r.out + r.err);
  check(`${label}: no unhandled 'error' event, nothing on stderr`,
    !/Unhandled error event/.test(r.err) && r.err.trim() === '', r.err.slice(0, 2000));
  // info() has no timeout: ioredis's own retries bound it (maxRetriesPerRequest).
  check(`${label}: the process ends by itself (${r.lastMs} ms after its last line), status 0`,
    r.code === 0 && r.lastMs < 3000, `${r.code} ${r.sig} ${r.out}`);
}

async function lifecycle() {
  // fromUrl without close(): after a hold, after a wait, after info().
  let r = await child(`
    const locks = rw.Locks.fromUrl(url);
    const a = locks.writeLock('node:exit1');
    await a.acquire(5000);
    await a.release();
    console.log('done');`, url);
  check(`fromUrl, a hold released, no close(): the process ends ${r.lastMs} ms after its work`,
    r.code === 0 && /done/.test(r.out) && r.lastMs < 3000, r.out + r.err);
  r = await child(`
    const locks = rw.Locks.fromUrl(url);
    const a = locks.writeLock('node:exit2'), b = locks.writeLock('node:exit2');
    await a.acquire(5000);
    setTimeout(() => a.release(), 300);
    await b.acquire(5000);          // waits: subscribes
    await b.release();
    console.log(JSON.stringify(await locks.info('node:exit2')));`, url);
  check(`fromUrl, a wait and a hand-off, no close(): the process ends ${r.lastMs} ms after its work`,
    r.code === 0 && /"free"/.test(r.out) && r.lastMs < 3000, r.out + r.err);
  r = await child(`
    const locks = rw.Locks.fromUrl(url);
    console.log('created');`, url);
  check(`fromUrl never used: the process ends at once (${r.ms} ms)`, r.code === 0 && r.ms < 3000, r.out + r.err);
  // A hold keeps nothing alive either (renewal timers are unref'd): a
  // process that ends holding a lock leaves it to its lease.
  r = await child(`
    const locks = rw.Locks.fromUrl(url);
    await locks.writeLock('node:exit3', { lease: 2000 }).acquire(5000);
    console.log('holding');`, url);
  check(`fromUrl, ended holding a lock: the process ends ${r.lastMs} ms after its work`,
    r.code === 0 && r.lastMs < 3000, r.out + r.err);
  // While a wait is under way, the process lives: the wait ends it.
  r = await child(`
    const locks = rw.Locks.fromUrl(url);
    const a = locks.writeLock('node:exit4', { lease: 5000 });
    await a.acquire(5000);
    const r2 = new (require(${JSON.stringify(path.join(NODE_DIR, 'node_modules', 'ioredis'))}))(url);
    const other = new rw.Locks(r2);
    const t0 = Date.now();
    other.writeLock('node:exit4').acquire(1500).catch((e) => { console.log('waited', Date.now() - t0, e.name); r2.disconnect(); });
    // nothing else keeps the process alive: the wait does
    setTimeout(() => a.release(), 2500).unref();`, url);
  check(`a wait under way keeps the process alive until it ends (${r.out.trim()})`,
    r.code === 0 && /waited 1[45]\d\d LockTimeout/.test(r.out), r.out + r.err);
}

async function signals(redis) {
  const locks = new rw.Locks(redis, { deadlockTimeout: 200 });
  const name = 'node:signal';
  const a = locks.writeLock(name);
  await a.acquire(1000);
  try {
    // A writer waits (queued, intent, wait key after deadlockTimeout), then is aborted.
    const b = locks.writeLock(name);
    const ac = new AbortController();
    const t0 = Date.now();
    setTimeout(() => ac.abort(new Error('the caller gave up')), 700);
    const e = await b.acquire({ timeout: 10000, signal: ac.signal }).catch((x) => x);
    const ms = Date.now() - t0;
    check(`acquire({ signal }): aborted after 700 ms, rejects at once (${ms} ms) with AbortError, the reason its cause`,
      e instanceof rw.AbortError && e instanceof rw.RWLockError && e.name === 'AbortError' &&
      e.code === 'ABORT_ERR' && e.cause && e.cause.message === 'the caller gave up' && ms < 900, String(e));
    const info = await locks.info(name);
    const waitKey = `rwlock:wait:{${b.owner}}`;
    check('after the abort: no queue place or intent of the waiter, no wait key',
      !(b.owner in info.waiting) && !b.held && (await redis.exists(waitKey)) === 0,
      JSON.stringify(info));
    // Already aborted: rejects without a call.
    const e2 = await locks.writeLock(name).acquire({ signal: AbortSignal.abort() }).catch((x) => x);
    check('acquire() with a signal already aborted: AbortError', e2 instanceof rw.AbortError, String(e2));
    // A reader aborted while waiting behind the writer.
    const c = locks.readLock(name);
    const ac2 = new AbortController();
    setTimeout(() => ac2.abort(), 200);
    const e3 = await c.tryAcquire({ wait: 5000, signal: ac2.signal }).catch((x) => x);
    check('tryAcquire({ wait, signal }): AbortError', e3 instanceof rw.AbortError, String(e3));
    // using() takes it too.
    const ac3 = new AbortController();
    setTimeout(() => ac3.abort(), 200);
    const e4 = await locks.using(name, 'w', async () => 'ran', { signal: ac3.signal }).catch((x) => x);
    check('using(..., { signal }): AbortError, fn not run', e4 instanceof rw.AbortError, String(e4));
    await a.release();
    // The lock is free for the next one at once: nothing of the aborted waiters holds it back.
    const d = locks.writeLock(name);
    const t1 = Date.now();
    await d.acquire(1000);
    check(`after the aborted waits, the next writer gets the lock at once (${Date.now() - t1} ms)`,
      Date.now() - t1 < 100);
    await d.release();
    // A signal that fires after the grant changes nothing.
    const ac4 = new AbortController();
    const f = locks.writeLock(name);
    await f.acquire({ signal: ac4.signal });
    ac4.abort();
    check('a signal aborted after the grant: the hold stays', f.held && (await f.release()));
    let te = null;
    try {
      await locks.writeLock(name).acquire({ signal: 'no' });
    } catch (x) {
      te = x;
    }
    check('a signal that is not an AbortSignal: TypeError', te instanceof TypeError, String(te));
  } finally {
    if (a.held) await a.release();
  }
}

async function ownerCycle(redis) {
  // Two tasks of one process, one Locks: each holds one lock under one
  // Lock object and waits for the other's under another Lock object that
  // shares its owner id (the owner option). The cycle is broken: one gets
  // DeadlockDetected within deadlockTimeout + 1 s, the other its lock.
  const locks = new rw.Locks(redis, { deadlockTimeout: 500 });
  const task = async (first, second, delay) => {
    const held = locks.writeLock(first);
    await held.acquire(2000);
    await sleep(delay);
    const wanted = locks.writeLock(second, { owner: held.owner });
    const t0 = Date.now();
    try {
      await wanted.acquire(8000);
      await wanted.release();
      return { outcome: 'granted', ms: Date.now() - t0, owner: held.owner };
    } catch (e) {
      return { outcome: e instanceof rw.DeadlockDetected ? 'deadlock' : String(e), ms: Date.now() - t0, owner: held.owner, e };
    } finally {
      await held.release();
    }
  };
  const t0 = Date.now();
  const [x, y] = await Promise.all([task('node:own-x', 'node:own-y', 100), task('node:own-y', 'node:own-x', 400)]);
  const outcomes = [x.outcome, y.outcome].sort().join(',');
  const victim = x.outcome === 'deadlock' ? x : y;
  check(`owner option: a cycle of two tasks of one process (held under one Lock, waited under another) ` +
    `is broken: ${outcomes} after ${Date.now() - t0} ms`, outcomes === 'deadlock,granted', JSON.stringify([x, y]));
  check('the victim is the greater owner id, its error names both waits',
    victim.owner === [x.owner, y.owner].sort()[1] && victim.e && victim.e.cycle.split('\n').length === 2 &&
    victim.e.cycle.includes(x.owner) && victim.e.cycle.includes(y.owner), victim.e && victim.e.cycle);
  check(`broken within deadlockTimeout + 1 s of closing (${victim.ms} ms after the victim began to wait)`,
    victim.ms < 2500);
  let te = null;
  try {
    locks.writeLock('x', { owner: 'has space' });
  } catch (e) {
    te = e;
  }
  check('an owner with a space: TypeError', te instanceof TypeError, String(te));
}

async function main() {
  const silent = net.createServer(() => {}); // accepts, never answers
  const silentSockets = new Set();
  silent.on('connection', (s) => { silentSockets.add(s); s.on('close', () => silentSockets.delete(s)); });
  await new Promise((r) => silent.listen(0, '127.0.0.1', r));
  const redis = new Redis(url);
  try {
    await unreachable('nothing listening on the port', await deadPort());
    await unreachable('a listener that never answers', silent.address().port);
    await lifecycle();
    await signals(redis);
    await ownerCycle(redis);
  } catch (e) {
    check('the checks ran to their end', false, String(e && e.stack));
  } finally {
    redis.disconnect();
    for (const s of silentSockets) s.destroy();
    silent.close();
  }
  console.log(`node_client: ${failed ? 'FAILED' : 'ok'}`);
  process.exitCode = failed ? 1 : 0;
}
main();
