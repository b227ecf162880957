// Type declarations of the rwlock client (index.js). Times are milliseconds.
import { EventEmitter } from 'events';
import type { Redis, Cluster } from 'ioredis';

export declare const PROTOCOL_VERSION: '3';
export declare const INTENT_MS: number;
export declare const KEEP_TOKEN_MS: number;
export declare const NAME_MAX: number;
export declare const SCRIPTS: readonly ['acquire', 'release', 'renew', 'info', 'waits', 'mark'];

export interface LocksOptions {
  /** Key prefix: the extension's rwlock.key_prefix. Default "rwlock". */
  prefix?: string;
  /** Default lease of a hold, ms: the extension's rwlock.lease. Default 30000. */
  lease?: number;
  /** Directory of the protocol's scripts. Default: those shipped in the package. */
  luaDir?: string;
  /** How long to wait for Redis to confirm a subscription, ms. Default 2000. */
  subscribeTimeout?: number;
  /** Replicas that must acknowledge a grant (WAIT). Default 0. */
  waitReplicas?: number;
  /** WAIT's timeout, ms. Default 100. */
  waitReplicasTimeout?: number;
  /** A wait this long says in Redis what it waits for (deadlock detection, docs/protocol.md 18), ms. Default 1000; null: never. */
  deadlockTimeout?: number | null;
}

export interface LockOptions {
  /** Lease of this hold, ms; renewed every third of it while held. */
  lease?: number;
  /** acquire()'s default timeout, ms; undefined waits as long as it takes. */
  timeout?: number;
  /** Called (as on('lost')) when a renewal finds the hold lost. */
  onLost?: (lock: Lock) => void;
  /** The owner id (default: a fresh one). Give a Lock the owner of another
   *  Lock the same task holds (of another name) to link them: its waits
   *  then wait for what that one holds, and a deadlock cycle through the
   *  task is found (docs/protocol.md 18). In this process only. */
  owner?: string;
}

export interface AcquireOptions {
  /** ms; undefined waits as long as it takes. Bounds the whole call, connecting to Redis included. */
  timeout?: number;
  /** Stops the wait: rejects with AbortError; what it had taken or queued is withdrawn. */
  signal?: AbortSignal;
}

export interface TryAcquireOptions {
  /** ms, default 0. */
  wait?: number;
  signal?: AbortSignal;
}

export interface UsingOptions extends LockOptions {
  /** false: a lost hold does not make using() reject (the 'lost' event still comes). Default true. */
  onLostError?: boolean;
  /** Stops the wait for the lock (AbortError). */
  signal?: AbortSignal;
}

export interface FromUrlOptions extends LocksOptions {
  /** Added to ioredis's options (for a Cluster, to its redisOptions). */
  redisOptions?: Record<string, unknown>;
}

export interface LockInfo {
  state: 'free' | 'read' | 'write';
  /** Last write token Redis keeps (0 if none). */
  token: number;
  writer: string | null;
  writerMs: number;
  /** Live readers: owner id -> ms left. */
  readers: Record<string, number>;
  /** Waiting writers, in the order they will be served: owner id -> ms left of their intent. */
  waiting: Record<string, number>;
}

export declare class Locks {
  constructor(redis: Redis | Cluster, options?: LocksOptions);
  /** Locks on what a rwlock.redis_url names (redis://, rediss://, unix://,
   *  redis+sentinel://, redis+cluster://; not a quorum's several URLs), on
   *  an ioredis client of its own that close() ends. */
  static fromUrl(url: string, options?: FromUrlOptions): Locks;
  readonly redis: Redis | Cluster;
  readonly prefix: string;
  readonly lease: number;
  /** The Locks held now (acquired, not released). */
  readonly holds: Set<Lock>;
  newOwner(): string;
  writeLock(name: string, options?: LockOptions): Lock;
  readLock(name: string, options?: LockOptions): Lock;
  /** Write locks on several names, all or none, taken in the canonical order (docs/protocol.md 19). */
  writeLocks(names: readonly string[], options?: LockOptions): MultiLock;
  readLocks(names: readonly string[], options?: LockOptions): MultiLock;
  /** Acquire, run fn, release; resolves to fn's result. signal fires (reason: a LockLost)
   *  if the hold is lost; then using() rejects with that LockLost once fn has settled. */
  using<T>(name: string, mode: 'r' | 'w', fn: (signal: AbortSignal, lock: Lock) => Promise<T> | T,
    options?: UsingOptions): Promise<T>;
  /** The same on several names, all or none (a MultiLock). */
  using<T>(names: readonly string[], mode: 'r' | 'w',
    fn: (signal: AbortSignal, lock: MultiLock) => Promise<T> | T, options?: UsingOptions): Promise<T>;
  /** Release every hold of this Locks (e.g. before the process exits); how many. */
  releaseAll(): Promise<number>;
  info(name: string): Promise<LockInfo>;
  /** Disconnects the subscriber connection, and fromUrl's client (not a Redis client given).
   *  Not needed for the process to end: fromUrl's client keeps it alive only while a call is under way. */
  close(): Promise<void>;
}

export declare class Lock extends EventEmitter {
  readonly locks: Locks;
  readonly name: string;
  /** "r" or "w" (a downgrade makes it "r", an upgrade "w"). */
  readonly mode: 'r' | 'w';
  readonly owner: string;
  readonly lease: number;
  timeout: number | undefined;
  /** The fencing token of the hold (for a read lock, the last write token); null before acquire(). Exact: tokens stay below 2^53. */
  readonly token: number | null;
  readonly held: boolean;
  /** The hold is known or presumed lost; stays true after its release, until the next acquire(). */
  readonly lost: boolean;
  /** Resolves to the fencing token; LockTimeout when the time runs out
   *  (Redis unreachable included), AbortError when the signal fires. */
  acquire(options?: number | AcquireOptions): Promise<number>;
  tryAcquire(options?: number | TryAcquireOptions): Promise<boolean>;
  /** Holding the read lock, wait for the write lock: its fencing token; false on timeout. */
  upgrade(options?: number | AcquireOptions): Promise<number | false>;
  downgrade(): Promise<boolean>;
  renew(): Promise<boolean>;
  /** true if it was still held, false if it had been lost. */
  release(): Promise<boolean>;
  on(event: 'lost', listener: (lock: Lock) => void): this;
  once(event: 'lost', listener: (lock: Lock) => void): this;
}

/** Read or write locks on several names, all or none: one Lock per name, in
 *  the canonical order, one owner id; taken one after another, keeping those
 *  taken while waiting for the next; on any failure (timeout, abort, error)
 *  what the call took is released before it rejects. */
export declare class MultiLock extends EventEmitter {
  /** One Lock per name, in the canonical order (duplicates once). */
  readonly locks: readonly Lock[];
  /** The names as given. */
  readonly names: readonly string[];
  readonly mode: 'r' | 'w';
  readonly owner: string;
  timeout: number | undefined;
  /** The fencing tokens in the caller's order (null before acquire()). */
  readonly tokens: (number | null)[];
  readonly held: boolean;
  readonly lost: boolean;
  /** Resolves to the tokens in the caller's order; the timeout bounds the whole call. */
  acquire(options?: number | AcquireOptions): Promise<number[]>;
  tryAcquire(options?: number | TryAcquireOptions): Promise<boolean>;
  /** true if none had been lost. */
  release(): Promise<boolean>;
  /** Emitted with the Lock of the name lost. */
  on(event: 'lost', listener: (lock: Lock) => void): this;
  once(event: 'lost', listener: (lock: Lock) => void): this;
}

/** Base class of every error of this package (bad arguments are TypeErrors). */
export declare class RWLockError extends Error {}
export declare class ProtocolVersionError extends RWLockError {}
/** A wait stopped by the caller's AbortSignal (Node's convention). */
export declare class AbortError extends RWLockError {
  readonly name: 'AbortError';
  readonly code: 'ABORT_ERR';
  readonly lock: string;
  /** The signal's reason. */
  readonly cause?: unknown;
}
/** Redis answered a request this client waits for with RWLOCK_STALE: it changed
 *  nothing, because Redis had already run request `newest` (>= `seq`) of the same
 *  owner id on the lock: another process uses the owner id (a bug), or (newest ===
 *  seq) the request was delivered twice and the answer to its first run was lost. */
export declare class StaleRequestError extends RWLockError {
  readonly lock: string;
  readonly owner: string;
  /** The request's number in its owner's order (docs/protocol.md 4.1). */
  readonly seq: number;
  /** The newest number Redis had run for the owner on the lock. */
  readonly newest: number;
}
export declare class LockTimeout extends RWLockError {}
/** Waiting could never end: UpgradeConflict, DeadlockDetected. */
export declare class Deadlock extends RWLockError {}
export declare class UpgradeConflict extends Deadlock {
  readonly other: string;
}
/** This holder's wait closed a cycle of waits and was chosen to give up (docs/protocol.md 18). */
export declare class DeadlockDetected extends Deadlock {
  readonly lock: string;
  /** One line per wait of the cycle: "<owner> <r|w> <blocked by owner> <lock key>". */
  readonly cycle: string;
}
export declare class LockLost extends RWLockError {
  readonly lock: string;
  readonly owner: string;
}
/** upgrade() found that Redis no longer has the read lock: the lock is lost. */
export declare class ReadLockLost extends LockLost {}
export declare class NotHeld extends RWLockError {}
export declare class AlreadyHeld extends RWLockError {}
export declare class ReplicasNotAcknowledged extends RWLockError {
  readonly lock: string;
  readonly acks: number;
  readonly wanted: number;
}
/** The names of version 1.1: the same classes. */
export declare const LockTimeoutError: typeof LockTimeout;
export declare type LockTimeoutError = LockTimeout;
export declare const UpgradeConflictError: typeof UpgradeConflict;
export declare type UpgradeConflictError = UpgradeConflict;
export declare const ReplicasNotAcknowledgedError: typeof ReplicasNotAcknowledged;
export declare type ReplicasNotAcknowledgedError = ReplicasNotAcknowledged;
export declare const ReadLockLostError: typeof ReadLockLost;
export declare type ReadLockLostError = ReadLockLost;
/** Another name of DeadlockDetected, as the names above. */
export declare const DeadlockDetectedError: typeof DeadlockDetected;
export declare type DeadlockDetectedError = DeadlockDetected;

export interface ParsedRedisUrl {
  kind: 'redis' | 'cluster';
  nodes?: { host: string; port: number }[];
  options: Record<string, unknown>;
}

export declare function encodeName(name: string): string;
export declare function lockKeys(prefix: string, name: string): [string, string, string];
/** The names in the canonical order (docs/protocol.md 19): UTF-8 bytes, duplicates once. */
export declare function canonicalOrder(names: Iterable<string>): string[];
export declare function loadScripts(luaDir?: string): Record<string, { body: Buffer; sha: string }>;
export declare function defaultLuaDir(): string;
export declare function parseRedisUrl(url: string): ParsedRedisUrl;
