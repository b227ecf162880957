// Type declarations of the rwlock client (index.js). Times are milliseconds.
import { EventEmitter } from 'events';
import type { Redis, Cluster } from 'ioredis';

export declare const PROTOCOL_VERSION: '2';
export declare const INTENT_MS: number;
export declare const KEEP_TOKEN_MS: number;
export declare const NAME_MAX: number;
export declare const SCRIPTS: readonly ['acquire', 'release', 'renew', 'info'];

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
  readonly redis: Redis | Cluster;
  readonly prefix: string;
  readonly lease: number;
  newOwner(): string;
  writeLock(name: string, options?: LockOptions): Lock;
  readLock(name: string, options?: LockOptions): Lock;
  info(name: string): Promise<LockInfo>;
  /** Disconnects the subscriber connection (not the Redis client given). */
  close(): void;
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
  readonly lost: boolean;
  /** Resolves to the fencing token; LockTimeoutError when the time runs out. */
  acquire(timeout?: number): Promise<number>;
  tryAcquire(wait?: number): Promise<boolean>;
  upgrade(timeout?: number): Promise<boolean>;
  downgrade(): Promise<boolean>;
  renew(): Promise<boolean>;
  /** true if it was still held, false if it had been lost. */
  release(): Promise<boolean>;
  on(event: 'lost', listener: (lock: Lock) => void): this;
  once(event: 'lost', listener: (lock: Lock) => void): this;
}

export declare class RWLockError extends Error {}
export declare class ProtocolVersionError extends RWLockError {}
export declare class LockTimeoutError extends RWLockError {}
export declare class UpgradeConflictError extends RWLockError {
  readonly other: string;
}
export declare class DeadlockDetectedError extends RWLockError {
  readonly lock: string;
  /** One line per wait of the cycle: "<owner> <r|w> <blocked by owner> <lock key>". */
  readonly cycle: string;
}
export declare class ReadLockLostError extends RWLockError {
  readonly lock: string;
}
export declare class ReplicasNotAcknowledgedError extends RWLockError {
  readonly lock: string;
  readonly acks: number;
  readonly wanted: number;
}

export declare function encodeName(name: string): string;
export declare function lockKeys(prefix: string, name: string): [string, string, string];
export declare function loadScripts(luaDir?: string): Record<string, { body: Buffer; sha: string }>;
export declare function defaultLuaDir(): string;
