'use strict';
// rwlock: distributed read/write locks in Redis, shared with the rwlock
// PostgreSQL extension (protocol version 3, docs/protocol.md of the rwlock
// repository), on ioredis.
//
//   const Redis = require('ioredis');
//   const { Locks } = require('pg-rwlock-redis');
//   const locks = new Locks(new Redis());
//   const lk = locks.writeLock('invoice:42', { timeout: 10000 });
//   const token = await lk.acquire();
//   try { await save(data, token); } finally { await lk.release(); }

const fs = require('fs');
const os = require('os');
const path = require('path');
const crypto = require('crypto');
const { EventEmitter } = require('events');
const { performance } = require('perf_hooks');

const PROTOCOL_VERSION = '3';
const INTENT_MS = 2000; // a waiting caller's mark, as the SQL side
const KEEP_TOKEN_MS = 600000; // how long a free lock keeps its last write token (the scripts' default: never sent)
const NAME_MAX = 1024; // bytes: the longest name the SQL side accepts
const POLL_MS = 50; // sleep between tries when subscribing failed
// A try with little or no wait still gives Redis this long to answer (a
// connection being made included): acquire(t) settles within max(t, 1 s).
const MIN_CALL_MS = 1000;
// How long a wait that ended (timeout, abort) waits for the withdrawal of
// its intent and wait key; past that it goes on unawaited, on the same
// connection after any call still in flight (owed if it fails).
const CLEANUP_MS = 200;
const SCRIPTS = ['acquire', 'release', 'renew', 'info', 'waits', 'mark', 'checkin'];
const WALK_OWNERS = 64; // owners a deadlock walk visits at most (docs/protocol.md 18)
const WALK_DEPTH = 32; // the longest cycle it looks for
const WALK_CONFIRM_MS = 100; // a cycle awaiting signs of life is walked again this soon (C's DL_CONFIRM_MS)
const WALK_LIFE_STALE_MS = INTENT_MS / 2; // a look at them older than this is taken afresh
// acquire.lua ARGV[3], the mode, of a caller that holds the read lock and
// asks for the write lock (an upgrade); 'r' and 'w' say it holds nothing (a
// field of its own left in Redis is stale).
const MODE_UPGRADE = 'u';

// The four request scripts take what differs from their defaults only
// (docs/protocol.md 6: every argument costs Redis some 1 100 instructions a
// call): no version (theirs), no keep (KEEP_TOKEN_MS is their default), no
// mark when the caller will not wait.
function acquireArgs(owner, seq, mode, leaseMs, intentMs, upgrade) {
  const args = [owner, seq, upgrade ? MODE_UPGRADE : mode, leaseMs];
  if (intentMs) args.push(intentMs);
  return args;
}

/** keep '': a plain release; 'q': a withdrawal; 'r': a downgrade to the
 *  read lock, with its lease. */
function releaseArgs(owner, seq, keep, leaseMs) {
  if (keep === '') return [owner, seq];
  if (keep === 'r') return [owner, seq, keep, leaseMs];
  return [owner, seq, keep];
}

// -- errors: the same names and meanings as the Python client's -------------

/** Base class of every error of this package (bad arguments stay TypeError). */
class RWLockError extends Error {
  constructor(message) {
    super(message);
    this.name = this.constructor.name;
  }
}
/** The lock's keys in Redis, or the scripts, speak another protocol version. */
class ProtocolVersionError extends RWLockError {}
/** Redis answered a request this client waits for with RWLOCK_STALE
 *  (docs/protocol.md 4.1): the request changed nothing, because Redis had
 *  already run a request of its owner id numbered `newest` >= its own
 *  `seq` on that lock. Either another process uses the same owner id (a
 *  bug: owner ids must be unique), or (`newest` == `seq`) the request
 *  itself was delivered twice, e.g. sent again by the Redis client library
 *  after a reconnection, and the answer to its first run was lost. */
class StaleRequestError extends RWLockError {
  constructor(name, owner, seq, newest, reply) {
    super(`request ${seq} of owner ${owner} on lock ${JSON.stringify(name)} arrived after ` +
      (newest === seq ? 'itself (delivered twice: the answer to its first run was lost)'
        : `request ${newest} of the same owner id (does another process use it?)`) +
      `, and changed nothing: ${reply}`);
    Object.assign(this, { lock: name, owner, seq, newest });
  }
}
/** acquire() ran out of time. */
class LockTimeout extends RWLockError {}
/** Waiting could never end: the waiters wait for each other
 *  (UpgradeConflict, DeadlockDetected). */
class Deadlock extends RWLockError {}
/** Two readers of one name both wait to upgrade: this one gives up. */
class UpgradeConflict extends Deadlock {
  constructor(name, other) {
    super(`deadlock: this holder and ${other} both hold the read lock on ` +
      `${JSON.stringify(name)} and wait for its write lock; release the read lock and retry`);
    this.other = other;
  }
}
/** The hold was lost while it was meant to be held (lease ran out, Redis
 *  lost it): others may have held the lock meanwhile. */
class LockLost extends RWLockError {
  constructor(name, owner) {
    super(`lock ${JSON.stringify(name)} (owner ${owner}) was lost while held: ` +
      'others may have held it meanwhile');
    Object.assign(this, { lock: name, owner });
  }
}
/** This holder's wait closed a cycle of waits (sessions of any server,
 *  clients) and was chosen to give up (docs/protocol.md 18); its intent or
 *  mark is withdrawn. cycle: one line per wait, "<owner> <r|w> <blocked by
 *  owner> <lock key>". */
class DeadlockDetected extends Deadlock {
  constructor(name, cycle) {
    super(`deadlock detected while waiting for lock ${JSON.stringify(name)}: ` +
      cycle.split('\n').join('; '));
    Object.assign(this, { lock: name, cycle });
  }
}
/** upgrade() found that Redis no longer has this holder's read lock (its
 *  lease ran out, or Redis lost its data): the lock is lost, not upgraded. */
class ReadLockLost extends LockLost {
  constructor(name, owner) {
    super(name, owner);
    this.message = `lock ${JSON.stringify(name)} was lost: Redis no longer had its read lock ` +
      'when it was to be upgraded; acquire the lock anew';
  }
}
/** acquire(), tryAcquire() or upgrade() stopped by the caller's AbortSignal
 *  (Node's convention: name 'AbortError', code 'ABORT_ERR'; the signal's
 *  reason is the cause). Whatever the wait had taken or queued is withdrawn. */
class AbortError extends RWLockError {
  constructor(name, reason) {
    super(`the wait for lock ${JSON.stringify(name)} was aborted`);
    this.name = 'AbortError';
    this.code = 'ABORT_ERR';
    this.lock = name;
    if (reason !== undefined) this.cause = reason;
  }
}
/** Misuse: release(), renew(), downgrade() or upgrade() of a hold not held
 *  (e.g. a second release). */
class NotHeld extends RWLockError {}
/** Misuse: acquire() of a Lock already held (one Lock is one holder). */
class AlreadyHeld extends RWLockError {}
/** A grant fewer replicas than waitReplicas acknowledged; it was undone. */
class ReplicasNotAcknowledged extends RWLockError {
  constructor(name, acks, wanted) {
    super(`lock ${JSON.stringify(name)} was granted but only ${acks} of the ${wanted} ` +
      'replicas asked for acknowledged it; the grant was undone');
    Object.assign(this, { lock: name, acks, wanted });
  }
}
// The names of version 1.1, kept: the same classes.
const LockTimeoutError = LockTimeout;
const UpgradeConflictError = UpgradeConflict;
const ReplicasNotAcknowledgedError = ReplicasNotAcknowledged;
const ReadLockLostError = ReadLockLost;
const DeadlockDetectedError = DeadlockDetected;

const now = () => performance.now();
const sleep = (ms) => new Promise((resolve) => setTimeout(resolve, Math.max(0, ms)));
// A call cut off by its wait's deadline or signal (Lock._wait).
const CUT = Symbol('cut');

/** An owner id given as an option: what a Lock's own would be like. */
function checkOwner(owner) {
  if (typeof owner !== 'string' || !owner || Buffer.byteLength(owner, 'utf8') > 256 || /[\s]/.test(owner)) {
    throw new TypeError('owner must be a non-empty string of at most 256 bytes without spaces ' +
      '(another Lock\'s owner, to link them)');
  }
  return owner;
}

/** acquire()'s argument: a number (or undefined), or { [key], signal }:
 *  { timeout, signal }. */
function waitOptions(options, key, fallback) {
  if (options === null || typeof options !== 'object') return { timeout: options, signal: undefined };
  const signal = options.signal;
  if (signal !== undefined && !(signal && typeof signal.addEventListener === 'function' && 'aborted' in signal)) {
    throw new TypeError('signal must be an AbortSignal');
  }
  return { timeout: key in options ? options[key] : fallback, signal };
}

// The request sequence (docs/protocol.md 4.1): every acquire.lua and
// release.lua call carries the next number (a call sent again too), and
// renew.lua the number last given out. One counter serves every owner id
// of the process: each owner's numbers, a subsequence, strictly increase
// whatever Locks and Lock objects share its id (a waiting Lock's owner set
// to the holder's), and there is no per-owner state to keep or to forget
// too early. It never goes back while the process lives; owner ids carry
// the pid and a random part, so no other process continues one of ours.
let lastSeq = 0;
const nextSeq = () => ++lastSeq;

// -- names, keys, scripts ---------------------------------------------------

/** The name as it appears in keys: '%', '{', '}' percent-encoded. */
function encodeName(name) {
  return name.replace(/%/g, '%25').replace(/\{/g, '%7B').replace(/\}/g, '%7D');
}

/** <prefix>:wait:{<owner>}: what the owner waits for (docs/protocol.md 18). */
function waitKeyOf(prefix, owner) {
  return `${prefix}:wait:{${encodeName(owner)}}`;
}

/** A wait key's value "2 <r|w> <nonce>[@<as>] <lock hash key>" as
 *  { mode, as, key } (as: the owner after '@' that waits in the lock for
 *  the key's owner, else null); null for another version, a mark or
 *  anything malformed: no edge. */
function parseWait(value) {
  const head = `${PROTOCOL_VERSION} `;
  if (!value.startsWith(head)) return null;
  const mode = value[head.length];
  if ((mode !== 'r' && mode !== 'w') || value[head.length + 1] !== ' ') return null;
  const rest = value.slice(head.length + 2);
  const sp = rest.indexOf(' ');
  if (sp < 0 || sp + 1 === rest.length) return null;
  const at = rest.slice(0, sp).indexOf('@');
  return { mode, as: at >= 0 ? rest.slice(at + 1, sp) : null, key: rest.slice(sp + 1) };
}

/** [hash, queue, channel] of lock `name` under `prefix`. */
function lockKeys(prefix, name) {
  const base = `${prefix}:{${encodeName(name)}}`;
  return [base, `${base}:q`, `${base}:c`];
}

/** The names in the canonical order of docs/protocol.md 19: duplicates
 *  once, sorted by their UTF-8 bytes (Buffer.compare: unsigned, a prefix
 *  first), not by JavaScript's < (UTF-16 code units). */
function canonicalOrder(names) {
  if (typeof names === 'string' || !names || typeof names[Symbol.iterator] !== 'function') {
    throw new TypeError('names must be an array of lock names');
  }
  const list = [...new Set(names)];
  for (const n of list) {
    if (typeof n !== 'string' || !n) throw new TypeError('lock name must be a non-empty string');
  }
  return list.map((n) => [Buffer.from(n, 'utf8'), n]).sort((a, b) => Buffer.compare(a[0], b[0]))
    .map((x) => x[1]);
}

function candidateDirs() {
  // 1. copied into the package at pack time (npm pack / publish);
  // 2. the repository's lua/, when used from a checkout (clients/node).
  return [path.join(__dirname, 'lua'), path.join(__dirname, '..', '..', 'lua')];
}

/** $RWLOCK_LUA_DIR, else the scripts shipped in the package, else the repository's lua/. */
function defaultLuaDir() {
  if (process.env.RWLOCK_LUA_DIR) return process.env.RWLOCK_LUA_DIR;
  for (const d of candidateDirs()) {
    if (SCRIPTS.every((s) => fs.existsSync(path.join(d, `${s}.lua`)))) return d;
  }
  throw new RWLockError('rwlock: the protocol\'s scripts were not found (looked in ' +
    `${candidateDirs().join(' and ')}). Install the package made by npm pack in the ` +
    'rwlock repository (it copies lua/*.lua into it), or pass luaDir / set RWLOCK_LUA_DIR.');
}

/** {name: {body, sha}} of the protocol's scripts, checked to be PROTOCOL_VERSION. */
function loadScripts(luaDir) {
  const dir = luaDir || defaultLuaDir();
  const out = {};
  for (const name of SCRIPTS) {
    const file = path.join(dir, `${name}.lua`);
    const body = fs.readFileSync(file);
    const m = /^-- rwlock protocol (\S+):/.exec(body.toString('utf8'));
    if (!m) throw new ProtocolVersionError(`${file} does not say which protocol it is`);
    if (m[1] !== PROTOCOL_VERSION) {
      throw new ProtocolVersionError(
        `${file} is rwlock protocol ${m[1]}; this client speaks ${PROTOCOL_VERSION}`);
    }
    out[name] = { body, sha: crypto.createHash('sha1').update(body).digest('hex') };
  }
  return out;
}

function isNoScript(e) {
  return e && typeof e.message === 'string' && e.message.startsWith('NOSCRIPT');
}

/** Redis's error replies RWLOCK_VERSION and RWLOCK_STALE as this package's
 *  errors; other errors as they are. */
function replyError(name, owner, e) {
  if (!e || typeof e.message !== 'string') return e;
  if (e.message.includes('RWLOCK_VERSION')) {
    return new ProtocolVersionError(`lock ${JSON.stringify(name)} is kept in another rwlock ` +
      `protocol version than this client's (${PROTOCOL_VERSION}): ${e.message}`);
  }
  // "RWLOCK_STALE <hash> request|renewal <seq> of <owner> is not newer|older than <s>"
  const m = /RWLOCK_STALE \S+ \w+ (\d+) of .* than (\d+)/.exec(e.message);
  if (m) return new StaleRequestError(name, owner, Number(m[1]), Number(m[2]), e.message);
  return e;
}

// -- the subscriber: one connection per Locks for every waiter ---------------

// It never keeps the process alive: its socket is unref'd (a waiter's own
// timer keeps the process alive while it waits), and it is closed once no
// channel has been listened to for IDLE_MS (for a Cluster, whose subscriber
// socket is not ours to unref, the process ends then).
const IDLE_MS = 1000;

class Subscriber {
  constructor(redis, timeoutMs) {
    this.redis = redis;
    this.timeoutMs = timeoutMs;
    this.conn = null;
    this.idle = null;
    this.channels = new Map(); // channel -> { fns: Set, ready: Promise }
  }

  connection() {
    clearTimeout(this.idle);
    this.idle = null;
    if (!this.conn) {
      const conn = this.redis.duplicate();
      this.conn = conn;
      conn.on('error', () => {}); // it reconnects and subscribes again itself
      conn.on('connect', () => {
        if (conn.stream && typeof conn.stream.unref === 'function') conn.stream.unref();
      });
      conn.on('message', (channel) => {
        const entry = this.channels.get(channel);
        if (entry) for (const fn of entry.fns) fn();
      });
    }
    return this.conn;
  }

  /** Call fn on every message on channel once Redis confirmed the
   *  subscription; resolves to the function that stops it. */
  async listen(channel, fn) {
    let entry = this.channels.get(channel);
    if (!entry) {
      const conn = this.connection();
      let timer;
      const ready = Promise.race([
        conn.subscribe(channel),
        new Promise((_, reject) => {
          timer = setTimeout(() => reject(new RWLockError('subscribe timed out')), this.timeoutMs);
        }),
      ]).finally(() => clearTimeout(timer));
      entry = { fns: new Set(), ready };
      this.channels.set(channel, entry);
      ready.catch(() => {
        if (this.channels.get(channel) === entry) this.channels.delete(channel);
        this._idleCheck();
      });
    }
    entry.fns.add(fn);
    try {
      await entry.ready;
    } catch (e) {
      entry.fns.delete(fn);
      throw e;
    }
    return () => {
      entry.fns.delete(fn);
      if (entry.fns.size === 0 && this.channels.get(channel) === entry) {
        this.channels.delete(channel);
        if (this.conn) this.conn.unsubscribe(channel).catch(() => {});
        this._idleCheck();
      }
    };
  }

  /** No channel left: close the connection after IDLE_MS unless one is
   *  listened to again by then. */
  _idleCheck() {
    if (this.channels.size > 0 || !this.conn || this.idle) return;
    this.idle = setTimeout(() => {
      this.idle = null;
      if (this.channels.size === 0) this.close();
    }, IDLE_MS);
    this.idle.unref();
  }

  close() {
    clearTimeout(this.idle);
    this.idle = null;
    if (this.conn) this.conn.disconnect();
    this.conn = null;
    this.channels.clear();
  }
}

// -- URLs: the forms rwlock.redis_url accepts ---------------------------------

function hostPorts(list, defaultPort) {
  return list.split(',').filter(Boolean).map((hp) => {
    const m = /^(\[[^\]]+\]|[^:]+)(?::(\d+))?$/.exec(hp);
    if (!m) throw new TypeError(`bad host:port ${JSON.stringify(hp)} in a Redis URL`);
    return { host: m[1].replace(/^\[|\]$/g, ''), port: m[2] ? Number(m[2]) : defaultPort };
  });
}

function dbNumber(text, url) {
  if (text === undefined || text === '') return 0;
  if (!/^\d+$/.test(text)) throw new TypeError(`bad database number in ${JSON.stringify(redact(url))}`);
  return Number(text);
}

function redact(url) {
  return url.replace(/\/\/[^@/]*@/, '//***@');
}

/**
 * What a rwlock.redis_url names, as ioredis options: { kind, options } with
 * kind 'redis' (redis://, rediss://, unix://, redis+sentinel://,
 * rediss+sentinel://: options for new Redis(options)) or 'cluster'
 * (redis+cluster://, rediss+cluster://: { nodes, options } for new
 * Cluster(nodes, options)). Several URLs separated by spaces (a quorum)
 * are refused: this client has no quorum mode.
 */
function parseRedisUrl(url) {
  if (typeof url !== 'string') throw new TypeError('the Redis URL must be a string');
  const urls = url.trim().split(/\s+/).filter(Boolean);
  if (urls.length !== 1) {
    throw new RWLockError('several Redis URLs name a quorum (rwlock.redis_url\'s experimental ' +
      'quorum mode), which this Node client does not implement: use the Python client\'s ' +
      'QuorumClient, or SQL');
  }
  const u = urls[0];
  const m = /^([a-z+]+):\/\/(?:([^@/]*)@)?([^/?]*)(\/[^?]*)?(?:\?(.*))?$/.exec(u);
  if (!m) throw new TypeError(`not a Redis URL: ${JSON.stringify(redact(u))}`);
  const [, scheme, userinfo, hosts, pathPart = '', query = ''] = m;
  const auth = {};
  if (userinfo !== undefined) {
    const i = userinfo.indexOf(':');
    const user = decodeURIComponent(i < 0 ? userinfo : userinfo.slice(0, i));
    if (user) auth.username = user;
    if (i >= 0) auth.password = decodeURIComponent(userinfo.slice(i + 1));
  }
  const params = new URLSearchParams(query);
  const tls = scheme.startsWith('rediss') ? { tls: {} } : {};
  const segs = pathPart.split('/').filter((x, k) => k > 0);
  switch (scheme) {
    case 'redis':
    case 'rediss': {
      const [hp] = hostPorts(hosts || '127.0.0.1', 6379);
      const db = dbNumber(segs[0] !== undefined ? segs[0] : params.get('db') || '', u);
      return { kind: 'redis', options: { ...hp, db, ...auth, ...tls } };
    }
    case 'unix': {
      if (hosts) throw new TypeError('a unix:// URL names a path: unix:///path/to.sock');
      return { kind: 'redis', options: { path: decodeURIComponent(pathPart), db: dbNumber(params.get('db') || '', u), ...auth } };
    }
    case 'redis+sentinel':
    case 'rediss+sentinel': {
      const [name, db] = segs;
      if (!name) throw new TypeError('a redis+sentinel:// URL names the master: .../<master-name>[/db]');
      return {
        kind: 'redis',
        options: {
          sentinels: hostPorts(hosts, 26379), name: decodeURIComponent(name), db: dbNumber(db, u),
          ...auth, ...tls, ...(tls.tls ? { sentinelTLS: {}, enableTLSForSentinelMode: true } : {}),
        },
      };
    }
    case 'redis+cluster':
    case 'rediss+cluster': {
      if (segs.some(Boolean)) throw new TypeError('a Redis Cluster has only database 0: redis+cluster://host:port,.../');
      return { kind: 'cluster', nodes: hostPorts(hosts, 6379), options: { redisOptions: { ...auth, ...tls } } };
    }
    default:
      throw new TypeError(`unsupported Redis URL scheme ${JSON.stringify(scheme)}: redis://, rediss://, ` +
        'unix://, redis+sentinel://, rediss+sentinel://, redis+cluster://, rediss+cluster://');
  }
}

// -- Locks: one Redis service ------------------------------------------------

const GRANTED = 1;
const BUSY = 0;
const CONFLICT = -1;
const UNACKED = -2;
const READ_LOST = -3; // an upgrade whose read lock Redis no longer has

class Locks {
  /**
   * @param redis an ioredis Redis (also one made for Sentinel) or Cluster
   * @param options prefix (the extension's rwlock.key_prefix), lease (ms, the
   *   extension's rwlock.lease), luaDir, subscribeTimeout (ms), waitReplicas,
   *   waitReplicasTimeout (ms), deadlockTimeout (ms, default 1000: a wait
   *   this long says in Redis what it waits for, so that deadlocks through
   *   it are found; null: never)
   */
  constructor(redis, options = {}) {
    const prefix = options.prefix === undefined ? 'rwlock' : options.prefix;
    if (!prefix || /[{}\x00-\x1f]/.test(prefix)) {
      throw new TypeError('prefix must be non-empty, without braces or control characters');
    }
    this.redis = redis;
    this.prefix = prefix;
    this.lease = options.lease === undefined ? 30000 : options.lease;
    if (!(this.lease > 0)) throw new TypeError('lease must be positive (ms)');
    this.waitReplicas = options.waitReplicas || 0;
    this.waitReplicasTimeout = options.waitReplicasTimeout || 100;
    this.deadlockTimeout = options.deadlockTimeout === undefined ? 1000 : options.deadlockTimeout;
    this.scripts = loadScripts(options.luaDir);
    this.ownerPrefix = `node:${os.hostname().slice(0, 40)}:${process.pid}`;
    this.subscriber = new Subscriber(redis, options.subscribeTimeout || 2000);
    this.owed = new Map(); // name -> Map(owner -> [keep, leaseMs]): releases owed
    this.holds = new Set(); // the Locks held (acquired, not released)
    this._active = 0; // calls of the API under way (waits, releases, info)
    this._idleTimer = null;
    this._ownsRedis = false;
    this._closed = false;
    this._lastError = null; // fromUrl's client: the last connection error seen
    this._idleClosed = false; // fromUrl's client disconnected while idle
  }

  // -- fromUrl's own client: what keeps the process alive ----------------------
  // A client fromUrl made keeps the process alive only while this Locks has
  // work under way (a wait, a release, info()): then its socket is ref'd.
  // Idle, its socket is unref'd, as the subscriber's and the renewal timers
  // are; and idle for IDLE_MS with no hold, or idle while it cannot reach
  // Redis (ioredis's reconnection timers are not unref'd), it is
  // disconnected, and connected again at the next call. A client given to
  // the constructor is the caller's: left alone.

  _enter() {
    this._active++;
    clearTimeout(this._idleTimer);
    this._idleTimer = null;
    if (!this._ownsRedis || this._closed) return;
    const r = this.redis;
    if (this._idleClosed || r.status === 'end' || r.status === 'close' || r.status === 'wait') {
      this._idleClosed = false;
      r.connect().catch(() => {});
    }
    this._refSockets(true);
  }

  _leave() {
    if (--this._active > 0 || !this._ownsRedis || this._closed) return;
    this._refSockets(false);
    clearTimeout(this._idleTimer);
    this._idleTimer = setTimeout(() => {
      this._idleTimer = null;
      this._disconnectIdle(true);
    }, IDLE_MS);
    this._idleTimer.unref();
    this._disconnectIdle(false);
  }

  /** Idle and (after IDLE_MS, or not connected now) holding nothing:
   *  disconnect fromUrl's client; the next call connects it again. */
  _disconnectIdle(timedOut) {
    if (this._active > 0 || this.holds.size > 0 || this._closed || this._idleClosed) return;
    const r = this.redis;
    if (r.status === 'end' || r.status === 'wait') return;
    if (timedOut || r.status !== 'ready') {
      // (ioredis leaves a client disconnected while reconnecting in that
      // status: the flag says to connect it again.)
      this._idleClosed = true;
      r.disconnect();
    }
  }

  _refSockets(ref) {
    const r = this.redis;
    const conns = typeof r.nodes === 'function' ? r.nodes('all') : [r];
    for (const c of conns) {
      if (c.stream && typeof c.stream.ref === 'function') {
        if (ref) c.stream.ref();
        else c.stream.unref();
      }
    }
  }

  /** Run fn() as work under way (see _enter). */
  async _busy(fn) {
    this._enter();
    try {
      return await fn();
    } finally {
      this._leave();
    }
  }

  /** Release every hold of this Locks (lost ones too): for a process about
   *  to exit, whose holds would otherwise last until their leases end.
   *  Resolves to how many were released; rejects with the first error, once
   *  every release was tried. */
  async releaseAll() {
    const results = await Promise.allSettled([...this.holds].map((lk) => lk.release()));
    const failed = results.find((r) => r.status === 'rejected');
    if (failed) throw failed.reason;
    return results.length;
  }

  /**
   * Locks on the Redis a rwlock.redis_url names (every form the extension
   * accepts but a quorum's several URLs), on a client of its own that
   * close() ends. redisOptions are added to ioredis's options (for a
   * Cluster, to its redisOptions); the rest are Locks options.
   */
  static fromUrl(url, options = {}) {
    const { redisOptions = {}, ...rest } = options;
    const Redis = require('ioredis');
    const p = parseRedisUrl(url);
    // lazyConnect: nothing is connected (and nothing keeps the process
    // alive) before the first call.
    const redis = p.kind === 'cluster'
      ? new Redis.Cluster(p.nodes, {
        lazyConnect: true, ...p.options, redisOptions: { ...p.options.redisOptions, ...redisOptions },
      })
      : new Redis({ lazyConnect: true, disconnectTimeout: 500, ...p.options, ...redisOptions });
    const locks = new Locks(redis, rest);
    locks._ownsRedis = true;
    // Its errors are ours to handle: an unreachable Redis is a rejection of
    // the call that needed it (LockTimeout, or ioredis's error, its cause),
    // never an unhandled 'error' event. While idle and unable to connect,
    // it stops trying (_disconnectIdle).
    redis.on('error', (e) => {
      locks._lastError = e;
      if (locks._active === 0) locks._disconnectIdle(false);
    });
    redis.on('node error', (e) => {
      locks._lastError = e;
    });
    redis.on('connect', () => locks._refSockets(locks._active > 0));
    return locks;
  }

  /**
   * Scoped use: acquire lock `name` ('r' or 'w'), run fn(signal, lock),
   * release, and resolve to fn's result. `signal` is an AbortSignal that
   * fires (reason: a LockLost) if the hold is lost meanwhile; then, once fn
   * has settled, using() rejects with that LockLost (unless fn rejected:
   * then with fn's error), or with options.onLostError: false only emits
   * the lock's 'lost' event. options: lease, timeout (acquire's; LockTimeout),
   * onLost, onLostError.
   */
  async using(name, mode, fn, options = {}) {
    if (mode !== 'r' && mode !== 'w') throw new TypeError("mode must be 'r' or 'w'");
    if (typeof fn !== 'function') throw new TypeError('using() needs a function to run under the lock');
    // An array of names: a MultiLock, all or none; its 'lost' names the Lock lost.
    const lk = Array.isArray(name) ? new MultiLock(this, name, mode, options)
      : new Lock(this, name, mode, options);
    const ac = new AbortController();
    lk.on('lost', (l) => ac.abort(new LockLost(l.name, l.owner)));
    await lk.acquire({ timeout: lk.timeout, signal: options.signal });
    let result;
    try {
      result = await fn(ac.signal, lk);
    } catch (e) {
      await lk.release().catch(() => {}); // owed if it fails; fn's error is the one to see
      throw e;
    }
    let held;
    try {
      held = await lk.release();
    } catch (e) {
      // Redis unreachable past the lease's end: the hold is lost (its
      // release owed), which is what to say.
      if (!ac.signal.aborted || options.onLostError === false) throw e;
      ac.signal.reason.cause = e;
      throw ac.signal.reason;
    }
    if ((!held || ac.signal.aborted) && options.onLostError !== false) {
      throw ac.signal.aborted ? ac.signal.reason
        : new LockLost(lk.locks ? (lk.locks.find((l) => l.lost) || lk.locks[0]).name : name, lk.owner);
    }
    return result;
  }

  /** A fresh owner id: node:<hostname>:<pid>:<random>. */
  newOwner() {
    return `${this.ownerPrefix}:${crypto.randomBytes(6).toString('hex')}`;
  }

  writeLock(name, options) {
    return new Lock(this, name, 'w', options);
  }

  readLock(name, options) {
    return new Lock(this, name, 'r', options);
  }

  /** Write locks on several names, all or none (a MultiLock, not yet taken). */
  writeLocks(names, options) {
    return new MultiLock(this, names, 'w', options);
  }

  readLocks(names, options) {
    return new MultiLock(this, names, 'r', options);
  }

  /** The state of lock `name` as Redis has it now. */
  async info(name) {
    const [state, token, writer, writerMs, readers, waiting] =
      await this._busy(() => this._run('info', name, [PROTOCOL_VERSION]));
    const pairs = (flat) => {
      const o = {};
      for (let i = 0; i < flat.length; i += 2) o[flat[i]] = Number(flat[i + 1]);
      return o;
    };
    return {
      state, token: Number(token), writer: writer || null, writerMs: Number(writerMs),
      readers: pairs(readers), waiting: pairs(waiting),
    };
  }

  /** Stop the subscriber connection; the Redis client given is left alone,
   *  one fromUrl() made is closed too (QUIT). Holds are not released. */
  async close() {
    this.subscriber.close();
    clearTimeout(this._idleTimer);
    if (this._ownsRedis && !this._closed) {
      this._closed = true;
      const r = this.redis;
      if (r.status !== 'ready') {
        r.disconnect();
        return;
      }
      // QUIT's answer is awaited: the socket keeps the process alive till then.
      this._refSockets(true);
      await r.quit().catch(() => r.disconnect());
    }
  }

  // -- the protocol's calls --------------------------------------------------

  async _run(script, name, args) {
    try {
      return await this._eval(script, lockKeys(this.prefix, name).slice(0, 2), args);
    } catch (e) {
      throw replyError(name, args[1], e);
    }
  }

  /** EVALSHA, EVAL when Redis does not have the script yet; a Cluster routes
   *  it by its keys. */
  async _eval(script, keys, args) {
    const s = this.scripts[script];
    try {
      return await this.redis.evalsha(s.sha, keys.length, ...keys, ...args);
    } catch (e) {
      if (!isNoScript(e)) throw e;
      return await this.redis.eval(s.body, keys.length, ...keys, ...args);
    }
  }

  /** Several calls (and WAIT) in one round trip, on one connection, in
   *  order: [results, acks or null], a result being [error or null, reply].
   *  calls() makes the calls: [script, args] each. If Redis lacked a script,
   *  they are all made again (new request numbers: those that ran recorded
   *  theirs) and sent again with EVAL, which needs no SCRIPT right. */
  async _pipeline(name, calls, wait) {
    const [k1, k2] = lockKeys(this.prefix, name);
    for (let attempt = 0; ; attempt++) {
      const pl = this.redis.pipeline();
      for (const [script, args] of calls()) {
        const s = this.scripts[script];
        if (attempt === 0) pl.evalsha(s.sha, 2, k1, k2, ...args);
        else pl.eval(s.body, 2, k1, k2, ...args);
      }
      if (wait) pl.call('WAIT', this.waitReplicas, this.waitReplicasTimeout);
      const res = await pl.exec();
      if (attempt === 0 && res.some(([e]) => isNoScript(e))) continue;
      if (!wait) return [res, null];
      const [e, acks] = res[res.length - 1];
      if (e) throw e;
      return [res.slice(0, -1), Number(acks)];
    }
  }

  async _acquire(name, owner, mode, leaseMs, intentMs, upgrade) {
    const args = () => acquireArgs(owner, nextSeq(), mode, leaseMs, intentMs, upgrade);
    const owed = [...(this.owed.get(name) || new Map())];
    const wait = this.waitReplicas > 0;
    let reply;
    let acks = null;
    if (owed.length || wait) {
      // Owed releases of this name go first, on the same connection, each
      // with a new number (a copy of the first, if it arrives late, changes
      // nothing).
      const calls = () => [...owed.map(([o, [keep, lm]]) =>
        ['release', releaseArgs(o, nextSeq(), keep, lm)]), ['acquire', args()]];
      let results;
      [results, acks] = await this._pipeline(name, calls, wait);
      // An owed release answered stale ran before (its first copy) or
      // lost to a newer request of its owner: owed no more either way.
      const sent = [];
      owed.forEach(([o], i) => {
        const e = results[i][0] && replyError(name, o, results[i][0]);
        if (e && !(e instanceof StaleRequestError)) throw e;
        sent.push(o);
      });
      this._owedDone(name, sent);
      const [e, r] = results[results.length - 1];
      if (e) throw replyError(name, owner, e);
      reply = r;
    } else {
      reply = await this._run('acquire', name, args());
    }
    if (typeof reply === 'string') return reply ? [CONFLICT, reply] : [READ_LOST, null];
    const r = Number(reply);
    if (r >= 0 && acks !== null && acks < this.waitReplicas) return [UNACKED, acks];
    return r >= 0 ? [GRANTED, r] : [BUSY, -r];
  }

  /** release.lua; one whose answer does not come is owed (sent again, with
   *  a new number, ahead of the next acquisition of the name). One answered
   *  stale is not: it ran before, or a newer request of its owner did. */
  async _release(name, owner, keep, leaseMs = 0) {
    let held;
    try {
      held = Number(await this._run('release', name,
        releaseArgs(owner, nextSeq(), keep, leaseMs)));
    } catch (e) {
      if (!(e instanceof ProtocolVersionError) && !(e instanceof StaleRequestError)) {
        if (!this.owed.has(name)) this.owed.set(name, new Map());
        this.owed.get(name).set(owner, [keep, leaseMs]);
      }
      throw e;
    }
    if (keep === '') this._owedDone(name, [owner]);
    return held;
  }

  _owedDone(name, owners) {
    const m = this.owed.get(name);
    if (!m) return;
    for (const o of owners) m.delete(o);
    if (m.size === 0) this.owed.delete(name);
  }

  // -- deadlock detection (docs/protocol.md 18; src/deadlock.c walks alike) ---
  // A failed call is no edge: the walk just finds less.

  /** waits.lua: whom `owner` waits for in the lock `key` (hash key) in
   *  `mode`; [] when it does not wait there now, or Redis could not say.
   *  The writers queued ahead of a writer are left out but the walker `me`
   *  (waits.lua ARGV[4]): whatever blocks them blocks it. */
  async _blockers(key, owner, mode, me) {
    const r = await this._eval('waits', [key, `${key}:q`], [PROTOCOL_VERSION, owner, mode, me])
      .catch(() => null);
    return Array.isArray(r) && Number(r[0]) === 1 ? r.slice(1).map(String) : [];
  }

  /** The value of `owner`'s wait key, or null. */
  async _waitOf(owner) {
    const v = await this.redis.get(waitKeyOf(this.prefix, owner)).catch(() => null);
    return v == null ? null : String(v);
  }

  /**
   * Walk the wait-for graph from `me`'s wait (mode, hash key, its wait key's
   * value), depth first, hop by hop (at most WALK_OWNERS owners, WALK_DEPTH
   * hops). A cycle back to `me` whose edges still hold (_recheck) is broken:
   * its victim is the member with the greatest owner id (byte order, as
   * every finder picks it); another member is marked (mark.lua) and walks
   * again at its next check-in, failing if it finds the cycle, once every
   * other member showed a sign of life
   * (_alive, with `life`, this wait's record of them). Resolves to { victim:
   * the encoded cycle when `me` is the victim, else null; foreign: an owner
   * met whose id does not start with "pg:" (a client, which may not walk
   * itself: walk again next time); confirming: a cycle awaits its members'
   * signs of life (walk again soon, WALK_CONFIRM_MS) }.
   */
  async _walk(me, mode, key, value, life = {}) {
    const path = [{ owner: me, as: me, value, mode, key }];
    const visited = new Set();
    let foreign = false;
    const search = async () => {
      const hop = path[path.length - 1];
      for (const b of await this._blockers(hop.key, hop.as, hop.mode, me)) {
        if (b === me) return true;
        if (visited.has(b) || visited.size === WALK_OWNERS) continue;
        visited.add(b);
        if (!b.startsWith('pg:')) foreign = true;
        const v = path.length === WALK_DEPTH ? null : await this._waitOf(b);
        const wait = v === null ? null : parseWait(v);
        if (!wait) continue;
        if (wait.as === null) wait.as = b;
        else if (!wait.as.startsWith('pg:')) foreign = true;
        path.push({ owner: b, value: v, ...wait });
        if (await search()) return true;
        path.pop();
      }
      return false;
    };
    if (!(await search()) || !(await this._recheck(path))) return { victim: null, foreign, confirming: false };
    if (!(await this._alive(path, life))) return { victim: null, foreign, confirming: true };
    const cycle = path.map((h, i) => `${h.owner} ${h.mode} ${path[(i + 1) % path.length].owner} ${h.key}`)
      .join('\n');
    let v = 0;
    for (let i = 1; i < path.length; i++) {
      if (Buffer.compare(Buffer.from(path[i].owner), Buffer.from(path[v].owner)) > 0) v = i;
    }
    if (v === 0) return { victim: cycle, foreign, confirming: false };
    await this._eval('mark', [waitKeyOf(this.prefix, path[v].owner)],
      [PROTOCOL_VERSION, path[v].value, cycle]).catch(() => {});
    return { victim: null, foreign, confirming: false };
  }

  /**
   * Whether every other member of the cycle `path` has shown a sign of life
   * (docs/protocol.md 18; C's walk_alive): its intent (a writer hop,
   * i:<as>) or mark (a reader hop, m:<as>) end moved forward since an
   * earlier look at the same cycle (`life`: sig, at, ends, alive, kept by
   * the wait between its walks). A wait cut off in a stall leaves its wait
   * key and intent or mark, looking live until they lapse, but renews
   * nothing; a live waiter renews at each try (at least every INTENT_MS / 2)
   * and tries at once when woken, which the first look does (a PUBLISH on
   * its channel, as a release's). False: not yet, never "no cycle".
   */
  async _alive(path, life) {
    const sig = path.map((h) => `${h.owner}\t${h.as}\t${h.value}\n`).join('');
    const t = now();
    const same = life.sig === sig && t - life.at <= WALK_LIFE_STALE_MS;
    if (!same) {
      life.sig = sig;
      life.ends = path.map(() => -1);
      life.alive = path.map(() => false);
    }
    let all = true;
    for (let i = 1; i < path.length; i++) {
      const hop = path[i];
      if (life.alive[i]) continue;
      const end = await this.redis.hget(hop.key, `${hop.mode === 'w' ? 'i' : 'm'}:${hop.as}`)
        .then((e) => Number(e || 0), () => null);
      if (!same) {
        const channel = hop.mode === 'w' ? `${hop.key}:c:${hop.as}` : `${hop.key}:c`;
        await this.redis.publish(channel, hop.mode).catch(() => {});
      }
      if (end !== null) {
        if (life.ends[i] >= 0 && end > life.ends[i]) life.alive[i] = true;
        life.ends[i] = end;
      }
      all = all && life.alive[i];
    }
    life.at = t;
    return all;
  }

  /** Every edge of a cycle found once more: each wait key unchanged (but
   *  ours), each blocker still among its waiter's blockers. */
  async _recheck(path) {
    const me = path[0].as; // the walker, whose intent is in its lock
    for (let i = 0; i < path.length; i++) {
      const hop = path[i];
      if (i > 0 && (await this._waitOf(hop.owner)) !== hop.value) return false;
      const next = path[(i + 1) % path.length].owner;
      if (!(await this._blockers(hop.key, hop.as, hop.mode, me)).includes(next)) return false;
    }
    return true;
  }

  /** renew.lua with the request number last given out: 1 held, 0 lost.
   *  Answered stale, a newer acquire or release of the owner's ran on the
   *  lock since the number was read (renewals are checked, not recorded):
   *  not a loss; asked again with the newer number. Stale with no newer
   *  number given out since: StaleRequestError (another process uses the
   *  owner id). */
  async _renew(name, owner, leaseMs) {
    for (;;) {
      const seq = lastSeq;
      const args = [owner, seq, leaseMs];
      try {
        if (this.waitReplicas > 0) {
          const [[[e, held]]] = await this._pipeline(name, () => [['renew', args]], true);
          if (e) throw replyError(name, owner, e);
          return Number(held); // too few acknowledgements: the master has it all the same
        }
        return Number(await this._run('renew', name, args));
      } catch (e) {
        if (!(e instanceof StaleRequestError) || lastSeq === seq) throw e;
      }
    }
  }
}

// -- Lock: one holder --------------------------------------------------------

class Lock extends EventEmitter {
  /**
   * Not taken until acquire(). options: lease (ms), timeout (ms, for
   * acquire(); undefined waits as long as it takes), onLost(lock).
   */
  constructor(locks, name, mode, options = {}) {
    super();
    if (typeof name !== 'string' || !name) throw new TypeError('lock name must be a non-empty string');
    if (Buffer.byteLength(name, 'utf8') > NAME_MAX) throw new TypeError(`lock name is longer than ${NAME_MAX} bytes`);
    this.locks = locks;
    this.name = name;
    this.mode = mode;
    this.lease = options.lease === undefined ? locks.lease : options.lease;
    if (!(this.lease > 0)) throw new TypeError('lease must be positive (ms)');
    this.timeout = options.timeout;
    if (options.onLost) this.on('lost', options.onLost);
    // One owner id per holder. options.owner links Lock objects of one task
    // (each of another name): what one holds, the other's wait waits with,
    // so a deadlock cycle through the task is seen (docs/protocol.md 18).
    this.owner = options.owner === undefined ? locks.newOwner() : checkOwner(options.owner);
    this.token = null;
    this._channel = lockKeys(locks.prefix, name)[2];
    this._held = false;
    this._lost = false;
    this._validUntil = 0; // our clock: the lease's end as we know it
    this._timer = null;
    this._expiry = null;
    this._renewing = null;
  }

  /** Acquired and not released (it may have been lost meanwhile). */
  get held() {
    return this._held;
  }

  /** Known or presumed lost: Redis said so at a renewal, or the lease ran out
   *  by our clock without a renewal. Others may hold the lock. */
  get lost() {
    return this._lost || (this._held && now() > this._validUntil);
  }

  /** Wait for the lock (up to timeout ms); the fencing token. Takes the
   *  timeout, or { timeout, signal }: an AbortSignal that stops the wait
   *  (AbortError; what the wait had taken or queued is withdrawn). */
  async acquire(options = this.timeout) {
    const { timeout, signal } = waitOptions(options, 'timeout', this.timeout);
    if (!(await this._take(this.mode, timeout, false, false, signal))) {
      throw new LockTimeout(`timed out after ${timeout} ms waiting for the ` +
        `${this.mode === 'w' ? 'write' : 'read'} lock ${JSON.stringify(this.name)}`);
    }
    return this.token;
  }

  /** Take the lock if it is free within wait ms; true if taken. Takes the
   *  wait, or { wait, signal }. */
  tryAcquire(options = 0) {
    const { timeout, signal } = waitOptions(options, 'wait', 0);
    return this._take(this.mode, timeout, false, true, signal);
  }

  /** Holding the read lock, wait for the write lock too: its fencing token,
   *  as acquire() resolves to; false on timeout (the read lock is kept). UpgradeConflict if another reader waits
   *  to upgrade; ReadLockLost if Redis no longer has the read lock (the
   *  lock is then lost). Takes the timeout, or { timeout, signal }. */
  async upgrade(options) {
    if (!this._held || this.mode !== 'r') throw new NotHeld('upgrade() needs a held read lock');
    const { timeout, signal } = waitOptions(options, 'timeout', undefined);
    return (await this._take('w', timeout, true, false, signal)) ? this.token : false;
  }

  async _take(mode, timeout, upgrade, isTry, signal) {
    if (this._held && !upgrade) throw new AlreadyHeld(`lock ${JSON.stringify(this.name)} is already held`);
    if (signal && signal.aborted) throw new AbortError(this.name, signal.reason);
    const L = this.locks;
    L._enter();
    try {
      return await this._wait(mode, timeout, upgrade, isTry, signal);
    } finally {
      L._leave();
    }
  }

  async _wait(mode, timeout, upgrade, isTry, signal) {
    const L = this.locks;
    const leaseMs = Math.max(1, Math.round(this.lease));
    const start = now();
    const deadline = timeout == null ? null : start + Math.max(0, timeout);
    // Every call to Redis is bounded by the deadline (connecting included),
    // a short wait's by MIN_CALL_MS, and by the signal: a call cut off
    // rejects with CUT, and goes on in ioredis's queue (see the catch).
    const cutoff = deadline === null ? null : Math.max(deadline, start + MIN_CALL_MS);
    let cutWhy = null;
    const bounded = (promise) => {
      if (cutoff === null && !signal) return promise;
      return new Promise((resolve, reject) => {
        let timer = null;
        const stop = () => {
          clearTimeout(timer);
          if (signal) signal.removeEventListener('abort', onAbort);
        };
        const onAbort = () => {
          stop();
          cutWhy = 'abort';
          reject(CUT);
        };
        if (cutoff !== null) {
          timer = setTimeout(() => {
            stop();
            cutWhy = 'timeout';
            reject(CUT);
          }, Math.max(0, cutoff - now()));
        }
        if (signal) signal.addEventListener('abort', onAbort, { once: true });
        promise.then((v) => {
          stop();
          resolve(v);
        }, (e) => {
          stop();
          reject(e);
        });
      });
    };
    // A wait that ended gives its withdrawal CLEANUP_MS, no more: the call
    // goes on, after any call still in flight on the connection.
    const settle = (promise) => {
      if (L.redis.status !== 'ready') return promise.catch(() => {}) && Promise.resolve();
      let timer;
      return Promise.race([promise.catch(() => {}),
        new Promise((resolve) => { timer = setTimeout(resolve, CLEANUP_MS); })])
        .finally(() => clearTimeout(timer));
    };
    // A caller that will wait leaves a mark (a writer's intent, a reader's
    // claim to a turn), renewed at each try, and withdrawn ('q') when the
    // wait ends without the lock: a reader that gave up is owed no turn.
    const intent = timeout == null || timeout > 0 ? INTENT_MS : 0;
    const withdraw = intent > 0;
    const undo = upgrade ? 'r' : '';
    // Readers are woken on the lock's channel, a writer on its own.
    const channel = mode === 'r' ? this._channel : `${this._channel}:${this.owner}`;
    let unlisten = null;
    let woken = false;
    let wake = null;
    let done = false;
    let inFlight = false; // an acquire.lua call whose answer has not come
    let listening = null; // a subscription under way (cut off: stopped once made)
    const onAbort = () => {
      if (wake) wake();
    };
    if (signal) signal.addEventListener('abort', onAbort);
    // Deadlock detection (docs/protocol.md 18): once waiting that long, say
    // what we wait for, again each deadlockTimeout; a mark left there by a
    // deadlock's finder makes this wait its victim. Then walk the wait-for
    // graph: the first time, and again only while walks meet clients.
    const hashKey = lockKeys(L.prefix, this.name)[0];
    const waitKey = waitKeyOf(L.prefix, this.owner);
    const waitValue = `${PROTOCOL_VERSION} ${mode} ${crypto.randomBytes(4).toString('hex')} ${hashKey}`;
    let checkAt = null;
    let walk = true;
    let confirming = false; // the last walk awaits its cycle's signs of life
    const life = {}; // what the walks read of them (_alive)
    let published = false;
    const dropWait = () => {
      const p = published ? L.redis.del(waitKey).catch(() => {}) : Promise.resolve();
      published = false;
      return settle(p);
    };
    const withdrawn = () => settle(withdraw ? L._release(this.name, this.owner, 'q') : Promise.resolve());
    try {
      for (;;) {
        if (signal && signal.aborted) {
          cutWhy = 'abort';
          throw CUT;
        }
        const sent = now();
        inFlight = true;
        const [status, value] = await bounded(L._acquire(this.name, this.owner, mode, leaseMs, intent, upgrade));
        inFlight = false;
        if (status === GRANTED) {
          done = true;
          this._granted(mode, value, sent);
          await dropWait();
          return true;
        }
        if (status === UNACKED) {
          done = true;
          await settle(L._release(this.name, this.owner, undo, leaseMs)); // owed if it fails
          if (isTry) return false;
          throw new ReplicasNotAcknowledged(this.name, value, L.waitReplicas);
        }
        if (status === CONFLICT) {
          done = true;
          await withdrawn();
          throw new UpgradeConflict(this.name, value);
        }
        if (status === READ_LOST) {
          // Nothing changed in Redis; an intent of earlier tries goes.
          done = true;
          await withdrawn();
          this._markLost(); // 'lost' emitted; release() resolves false
          throw new ReadLockLost(this.name, this.owner);
        }
        const t = now();
        if (deadline !== null && t >= deadline) {
          done = true;
          await withdrawn();
          await dropWait();
          return false;
        }
        if (intent && L.deadlockTimeout) {
          if (checkAt === null) checkAt = t + L.deadlockTimeout;
          else if (t >= checkAt) {
            const ttl = Math.max(3 * L.deadlockTimeout, 2 * INTENT_MS);
            published = true;
            // checkin.lua, not SET ... GET: EVAL is all the documented ACL
            // user needs for it, and Redis 6.2's GET option is not needed.
            const old = await bounded(L._eval('checkin', [waitKey],
              [PROTOCOL_VERSION, waitValue, String(Math.round(ttl))]));
            const head = `!${waitValue}\n`;
            // Marked a victim by another walker: the cycle is walked again
            // here before this wait fails (it may have broken meanwhile),
            // as the SQL extension does; the mark itself is gone (checkin.lua).
            const marked = old != null && String(old).startsWith(head);
            let cycle = null;
            if (marked || walk || confirming) {
              const found = await bounded(L._walk(this.owner, mode, hashKey, waitValue, life));
              cycle = found.victim;
              walk = found.foreign;
              confirming = found.confirming;
            }
            checkAt = now() + (confirming && cycle === null ? WALK_CONFIRM_MS : L.deadlockTimeout);
            if (cycle !== null) {
              done = true;
              await withdrawn();
              await dropWait();
              throw new DeadlockDetected(this.name, cycle);
            }
          }
        }
        if (!unlisten) {
          // Listen first, then try again before any sleep, so a release
          // published in between cannot be missed.
          listening = L.subscriber.listen(channel, () => {
            woken = true;
            if (wake) wake();
          }).catch(() => null);
          unlisten = await bounded(listening);
          listening = null;
          if (unlisten) continue;
        }
        let wait = value; // never past the hint
        if (intent) wait = Math.min(wait, intent / 2); // keep our mark alive
        if (deadline !== null) wait = Math.min(wait, deadline - t);
        if (!unlisten) wait = Math.min(wait, POLL_MS);
        if (checkAt !== null) wait = Math.max(0, Math.min(wait, checkAt - t));
        if (!woken && !(signal && signal.aborted)) {
          await new Promise((resolve) => {
            const timer = setTimeout(resolve, wait);
            wake = () => {
              clearTimeout(timer);
              resolve();
            };
          });
          wake = null;
        }
        woken = false;
      }
    } catch (e) {
      if (e === CUT) {
        // The deadline or the signal: a call still in flight goes on in
        // ioredis's queue; an acquisition may yet be granted. The release
        // sent now runs after it on the same connection and undoes it (and
        // the intent), or is owed if it fails; it is awaited CLEANUP_MS at
        // most, so that an unreachable Redis does not hold the caller.
        if (!done) {
          await settle(inFlight ? L._release(this.name, this.owner, undo, leaseMs)
            : (withdraw ? L._release(this.name, this.owner, 'q') : Promise.resolve()));
          await dropWait();
        }
        if (cutWhy === 'abort') throw new AbortError(this.name, signal && signal.reason);
        if (isTry || upgrade) return false;
        const err = new LockTimeout(`timed out after ${timeout} ms waiting for the ` +
          `${mode === 'w' ? 'write' : 'read'} lock ${JSON.stringify(this.name)}: Redis did not ` +
          `answer in time${L._lastError ? ` (${L._lastError.message})` : ''}`);
        if (L._lastError) err.cause = L._lastError;
        throw err;
      }
      // The connection failed with a call in flight, or the call's first
      // copy ran and its answer was lost (stale, newest === seq): undo
      // whatever may have been granted, withdraw the intent (owed if it
      // fails too). Not when a newer request of the owner id ran: this one
      // changed nothing, and what Redis has is that request's.
      if (!done && !(e instanceof StaleRequestError && e.newest > e.seq)) {
        await settle(L._release(this.name, this.owner, undo, leaseMs));
      }
      if (!done) await dropWait();
      throw e;
    } finally {
      if (signal) signal.removeEventListener('abort', onAbort);
      if (unlisten) unlisten();
      if (listening) listening.then((u) => u && u());
    }
  }

  _granted(mode, token, sent) {
    this.mode = mode;
    this.token = token;
    this._lost = false;
    this._validUntil = sent + this.lease;
    this._held = true;
    this.locks.holds.add(this);
    this._schedule(this.lease / 3);
    this._armExpiry();
  }

  /** A timer (unref'd) at the lease's end by our clock: a hold no renewal
   *  extended by then is lost, and said so ('lost', the AbortSignal of
   *  using()), even if the renewal is still waiting for Redis. */
  _armExpiry() {
    clearTimeout(this._expiry);
    this._expiry = setTimeout(() => {
      if (!this._held || this._lost) return;
      if (now() > this._validUntil) this._markLost();
      else this._armExpiry();
    }, Math.max(1, this._validUntil - now() + 1));
    this._expiry.unref();
  }

  /** The hold is lost: stop renewing, tell the listeners (once). */
  _markLost() {
    if (this._lost || !this._held) return;
    this._lost = true;
    clearTimeout(this._timer);
    clearTimeout(this._expiry);
    this.emit('lost', this);
  }

  // -- renewing --------------------------------------------------------------

  _schedule(ms) {
    clearTimeout(this._timer);
    this._timer = setTimeout(() => {
      this._renewing = this._renewTick().finally(() => {
        this._renewing = null;
      });
    }, ms);
    this._timer.unref();
  }

  async _renewTick() {
    if (!this._held || this._lost) return;
    try {
      if (await this._renewOnce()) this._schedule(this.lease / 3);
      else this._markLost();
    } catch (e) {
      if (!this._held) return;
      // Keep trying, sooner, until the lease has run out by our clock:
      // then the hold is lost (others may have it), and said so.
      if (!(e instanceof ProtocolVersionError) && now() <= this._validUntil) {
        this._schedule(Math.min(this.lease / 3, 1000));
      } else {
        this._markLost();
      }
    }
  }

  /** renew.lua once: true if still held (the lease extended). */
  async _renewOnce() {
    const sent = now();
    if (await this.locks._renew(this.name, this.owner, Math.max(1, Math.round(this.lease))) === 1) {
      if (!this._lost) {
        this._validUntil = sent + this.lease;
        this._armExpiry();
      }
      return true;
    }
    return false;
  }

  /** Renew the lease now; true if still held (done every third of the lease by itself). */
  async renew() {
    if (!this._held) throw new NotHeld(`lock ${JSON.stringify(this.name)} is not held`);
    if (this._lost) return false;
    if (await this.locks._busy(() => this._renewOnce())) return true;
    this._markLost();
    return false;
  }

  // -- releasing -------------------------------------------------------------

  /** Release the hold: true if it was still held, false if it had been lost
   *  (others may have held the lock meanwhile). If Redis's answer does not
   *  come, the error is thrown and the release is owed: it is sent again
   *  ahead of the next acquisition of the name. */
  release() {
    return this._drop('');
  }

  /** Holding the write lock, keep only a read lock (no writer in between). */
  async downgrade() {
    if (!this._held || this.mode !== 'w') throw new NotHeld('downgrade() needs a held write lock');
    return this._drop('r');
  }

  async _drop(keep) {
    if (!this._held) throw new NotHeld(`lock ${JSON.stringify(this.name)} is not held`);
    return this.locks._busy(() => this._dropHeld(keep));
  }

  async _dropHeld(keep) {
    clearTimeout(this._timer);
    clearTimeout(this._expiry);
    if (this._renewing) await this._renewing.catch(() => {});
    const lost = this._lost;
    const sent = now();
    let held;
    try {
      held = await this.locks._release(this.name, this.owner, keep, Math.max(1, Math.round(this.lease)));
    } catch (e) {
      this._held = false; // owed now (unless answered stale); the lease is the backstop
      this.locks.holds.delete(this);
      throw e;
    }
    if (keep && held === 1) {
      this.mode = 'r';
      this._validUntil = sent + this.lease;
      this._schedule(this.lease / 3);
      this._armExpiry();
    } else {
      // lost keeps saying whether the hold was lost, until the next acquire.
      this._lost = lost || held !== 1;
      this._held = false;
      this.locks.holds.delete(this);
    }
    return held === 1 && !lost;
  }
}

// -- MultiLock: several names, all or none ---------------------------------------

/**
 * Read or write locks on several names (docs/protocol.md 19): one Lock per
 * name, in the canonical order, sharing one owner id. acquire() takes them
 * one after another, keeping those taken while it waits for the next
 * (ordered locking: two callers never wait for each other in a cycle,
 * whatever order they gave the names in, SQL sessions included); on any
 * failure (its timeout, which bounds the whole call; an AbortSignal; an
 * error) it releases what it took before it rejects. 'lost' is emitted with
 * the Lock of the name lost.
 */
class MultiLock extends EventEmitter {
  constructor(locks, names, mode, options = {}) {
    super();
    if (typeof names === 'string' || !names || typeof names[Symbol.iterator] !== 'function') {
      throw new TypeError('names must be an array of lock names');
    }
    this.names = [...names]; // once: names may be an iterator
    const order = canonicalOrder(this.names);
    if (!order.length) throw new TypeError('no lock names given');
    this.mode = mode;
    this.timeout = options.timeout;
    if (options.onLost) this.on('lost', options.onLost);
    const first = new Lock(locks, order[0], mode, { lease: options.lease, owner: options.owner });
    this.owner = first.owner;
    this.locks = [first, ...order.slice(1).map((n) => new Lock(locks, n, mode,
      { lease: options.lease, owner: this.owner }))];
    this._byName = new Map(order.map((n, i) => [n, this.locks[i]]));
    for (const lk of this.locks) lk.on('lost', (l) => this.emit('lost', l));
  }

  /** Every name acquired and not released. */
  get held() {
    return this.locks.every((l) => l.held);
  }

  /** Some name's hold is known or presumed lost. */
  get lost() {
    return this.locks.some((l) => l.lost);
  }

  /** The fencing tokens in the caller's order (a name given twice: at each place). */
  get tokens() {
    return this.names.map((n) => this._byName.get(n).token);
  }

  /** Take every name; resolves to the tokens in the caller's order.
   *  LockTimeout (or the error that stopped it), holding none of them. */
  async acquire(options = this.timeout) {
    const { timeout, signal } = waitOptions(options, 'timeout', this.timeout);
    const at = await this._take(timeout, false, signal);
    if (at !== null) {
      throw new LockTimeout(`timed out after ${timeout} ms waiting for the ` +
        `${this.mode === 'w' ? 'write' : 'read'} locks ${JSON.stringify(this.names)} (at ${JSON.stringify(at)})`);
    }
    return this.tokens;
  }

  /** Take every name within wait ms (the whole call); true if taken,
   *  false holding none of them. Takes the wait, or { wait, signal }. */
  async tryAcquire(options = 0) {
    const { timeout, signal } = waitOptions(options, 'wait', 0);
    return (await this._take(timeout, true, signal)) === null;
  }

  /** null once all are taken, else the name it gave up at. */
  async _take(timeout, isTry, signal) {
    if (this.locks.some((l) => l.held)) {
      throw new AlreadyHeld(`locks ${JSON.stringify(this.names)} are already held (in part)`);
    }
    const deadline = timeout == null ? null : now() + Math.max(0, timeout);
    const taken = [];
    try {
      for (const lk of this.locks) {
        const left = deadline === null ? undefined : Math.max(0, deadline - now());
        let ok = true;
        if (isTry) {
          ok = await lk.tryAcquire({ wait: left, signal });
        } else {
          try {
            await lk.acquire({ timeout: left, signal });
          } catch (e) {
            if (!(e instanceof LockTimeout) || left === undefined) throw e;
            ok = false;
          }
        }
        if (!ok) {
          await MultiLock._giveBack(taken, true);
          return lk.name;
        }
        taken.push(lk);
      }
    } catch (e) {
      await MultiLock._giveBack(taken, false);
      throw e;
    }
    return null;
  }

  /** Release what a call took, last first; every release is tried (one
   *  that fails is owed, its lease the backstop). */
  static async _giveBack(taken, throwFirst) {
    let first = null;
    for (const lk of taken.reverse()) {
      if (!lk.held) continue;
      try {
        await lk.release();
      } catch (e) {
        first = first || e;
      }
    }
    if (first && throwFirst) throw first;
  }

  /** Release every name held: true if none had been lost. Every release
   *  is tried; then the first error is thrown. */
  async release() {
    let first = null;
    let ok = true;
    for (const lk of [...this.locks].reverse()) {
      if (!lk.held) continue;
      try {
        ok = (await lk.release()) && ok;
      } catch (e) {
        first = first || e;
      }
    }
    if (first) throw first;
    return ok;
  }
}

module.exports = {
  PROTOCOL_VERSION, INTENT_MS, KEEP_TOKEN_MS, NAME_MAX, SCRIPTS,
  Locks, Lock, MultiLock, RWLockError, AbortError, ProtocolVersionError, StaleRequestError, LockTimeout, Deadlock,
  DeadlockDetected, DeadlockDetectedError,
  UpgradeConflict, LockLost, ReadLockLost, NotHeld, AlreadyHeld, ReplicasNotAcknowledged,
  LockTimeoutError, UpgradeConflictError, ReplicasNotAcknowledgedError, ReadLockLostError,
  encodeName, lockKeys, canonicalOrder, loadScripts, defaultLuaDir, parseRedisUrl,
};
