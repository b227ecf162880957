#!/usr/bin/env bash
# node_types.sh: the Node client's TypeScript declarations (clients/node/
# index.d.ts) compile, with the flags clients/node/README.md gives, under
# TypeScript 5 and 6 (clients/node's devDependencies `typescript` and
# `typescript6`, pinned in its package-lock: offline after `npm ci`), each
# with module/moduleResolution `nodenext` (an ES module, .mts, and a
# CommonJS one, .cts) and `bundler` (module `preserve`). The example uses
# what a service uses: ioredis's `Redis` and `Cluster`, every option of
# acquire() (timeout, AbortSignal), the `owner` option, the errors, several
# names at once (writeLocks, using() with an array); and a
# wrong call (a string timeout) must be refused, so the check can fail.
# Prints "node types: ok" or what failed; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
NODE_DIR=$PWD/clients/node
[ -d "$NODE_DIR/node_modules/typescript6" ] && [ -d "$NODE_DIR/node_modules/typescript" ] ||
  { echo "node types: run npm ci in clients/node first"; exit 1; }
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
mkdir "$TMP/node_modules"
# The package as a service installs it, beside its own ioredis and @types/node.
ln -s "$NODE_DIR" "$TMP/node_modules/pg-rwlock-redis"
ln -s "$NODE_DIR/node_modules/ioredis" "$TMP/node_modules/ioredis"
ln -s "$NODE_DIR/node_modules/@types" "$TMP/node_modules/@types"

body='
const redis = new Redis("redis://127.0.0.1:6379/0");
const locks = new Locks(redis, { prefix: "rwlock", lease: 30000, deadlockTimeout: 1000 });
const onCluster = new Locks(new Cluster([{ host: "127.0.0.1", port: 6379 }]));
const fromUrl: Locks = Locks.fromUrl("redis://127.0.0.1:6379/0", { redisOptions: { enableReadyCheck: false } });
async function main(): Promise<void> {
  const ac = new AbortController();
  const held = locks.writeLock("a", { timeout: 1000 });
  const token: number = await held.acquire({ timeout: 1000, signal: ac.signal });
  const other = locks.writeLock("b", { owner: held.owner, onLost: (l) => console.log(l.name) });
  try {
    await other.acquire(5000);
    const ok: boolean = await other.tryAcquire({ wait: 10, signal: ac.signal });
    console.log(ok, await other.upgrade({ timeout: 10 }));
  } catch (e) {
    if (e instanceof AbortError) console.log(e.code, e.cause, e.lock);
    else if (e instanceof DeadlockDetected) console.log(e.cycle);
    else if (e instanceof LockTimeout || e instanceof RWLockError) console.log(e.message);
  }
  const total: number = await locks.using("c", "w", async (signal: AbortSignal, lock: Lock) => {
    if (signal.aborted) throw signal.reason;
    return lock.token ?? token;
  }, { timeout: 1000, signal: ac.signal, owner: held.owner, onLostError: true });
  console.log(total, (await locks.info("c")).state);
  const many = locks.writeLocks(["d", "c"], { timeout: 1000, owner: held.owner });
  const tokens: number[] = await many.acquire({ timeout: 1000, signal: ac.signal });
  const both: boolean = await locks.readLocks(["e", "f"]).tryAcquire({ wait: 10 });
  const count: number = await locks.using(["g", "h"], "w", async (signal: AbortSignal, lock: MultiLock) =>
    lock.locks.length + tokens.length + canonicalOrder(lock.names).length, { timeout: 1000 });
  console.log(both, count, await many.release());
  await held.release();
  await locks.releaseAll();
  await onCluster.close();
  await fromUrl.close();
}
'
printf '%s\n' "import { Redis, Cluster } from 'ioredis';" \
  "import { Locks, Lock, MultiLock, canonicalOrder, AbortError, DeadlockDetected, LockTimeout, RWLockError } from 'pg-rwlock-redis';" \
  "$body" 'await main();' > "$TMP/app.mts"
printf '%s\n' "import Redis, { Cluster } from 'ioredis';" \
  "import { Locks, Lock, MultiLock, canonicalOrder, AbortError, DeadlockDetected, LockTimeout, RWLockError } from 'pg-rwlock-redis';" \
  "$body" 'main();' > "$TMP/app.cts"
cp "$TMP/app.mts" "$TMP/app.ts"
# A wrong call each configuration must refuse.
printf '%s\n' "import { Locks } from 'pg-rwlock-redis';" \
  "declare const locks: Locks;" \
  "export const bad = locks.writeLock('x').acquire({ timeout: 'soon' });" > "$TMP/bad.ts"

fail=0
for ts in typescript typescript6; do
  tsc="$NODE_DIR/node_modules/$ts/bin/tsc"
  v=$(node "$tsc" --version)
  # The flags clients/node/README.md gives for each.
  common=(--noEmit --strict --target es2022 --types node)
  for conf in "nodenext app.mts" "nodenext app.cts" "bundler app.ts"; do
    set -- $conf
    if [ "$1" = nodenext ]; then flags=(--module nodenext --moduleResolution nodenext)
    else flags=(--module preserve --moduleResolution bundler); fi
    if (cd "$TMP" && node "$tsc" "${common[@]}" "${flags[@]}" "$2"); then
      echo "node types: ok $v --module ${flags[1]} --moduleResolution $1 ($2)"
    else
      echo "node types: FAILED $v --module ${flags[1]} --moduleResolution $1 ($2)"; fail=1
    fi
    if (cd "$TMP" && node "$tsc" "${common[@]}" "${flags[@]}" bad.ts >/dev/null); then
      echo "node types: FAILED $v --moduleResolution $1 accepts acquire({ timeout: 'soon' })"; fail=1
    fi
  done
done
[ $fail = 0 ] && echo "node types: ok" || echo "node types: FAILED"
exit $fail
