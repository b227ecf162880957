#!/usr/bin/env bash
# packages.sh: the clients install as their users install them, and carry
# the protocol's scripts, byte for byte the repository's lua/*.lua:
# - clients/python with pip into a fresh virtualenv (Debian's python3-redis
#   through --system-site-packages; no index needed);
# - clients/node with npm pack, its tarball installed into a fresh project
#   (ioredis from npm's cache where it can be, else from the registry, as
#   `npm ci` in clients/node got it: npm 11's --offline refuses a
#   dependency whose registry metadata the cache lacks, and `npm ci` caches
#   the tarballs only), then its TypeScript declarations checked with tsc
#   against that project's own ioredis (typescript and @types/node are
#   clients/node's devDependencies), and under TypeScript 5 and 6 with
#   nodenext and bundler resolution (test/node_types.sh);
# - the repository's LICENSE in both packages (sdist, install, tarball).
# Prints "packages: ok" or what failed; exits non-zero on a failure.
set -euo pipefail
cd "$(dirname "$0")/.."
ROOT=$PWD
TMP=$(mktemp -d)
trap 'rm -rf "$TMP"' EXIT
fail=0

/usr/bin/python3 -m venv --system-site-packages "$TMP/venv"
"$TMP/venv/bin/pip" install -q --no-build-isolation --no-index "$ROOT/clients/python"
rm -rf "$ROOT/clients/python/build" "$ROOT"/clients/python/*.egg-info
# The licence: the repository's LICENSE, the same in both packages, in the
# sdist, in the installed distribution and in the npm tarball.
for f in clients/python/LICENSE clients/node/LICENSE; do
  cmp -s LICENSE "$f" || { echo "packages: $f is not the repository's LICENSE"; fail=1; }
done
(cd clients/python && /usr/bin/python3 setup.py -q sdist -d "$TMP/sdist" >/dev/null 2>&1)
rm -rf "$ROOT/clients/python/build" "$ROOT"/clients/python/*.egg-info
tar tzf "$TMP"/sdist/rwlock-client-*.tar.gz | grep '^rwlock-client-[^/]*/LICENSE$' >/dev/null ||
  { echo "packages: no LICENSE in the sdist"; fail=1; }
ls "$TMP"/venv/lib/python3*/site-packages/rwlock_client-*.dist-info/LICENSE >/dev/null 2>&1 ||
  { echo "packages: no LICENSE in the installed rwlock-client"; fail=1; }
(cd "$TMP" && "$TMP/venv/bin/python" - "$ROOT" <<'PY') || fail=1
import os, sys
import rwlock_client as rw
from rwlock_client.aio import AsyncClient  # noqa: F401
d = rw.default_lua_dir()
assert d.startswith(sys.prefix), "scripts not from the installed package: %s" % d
for s in rw.SCRIPTS:
    with open(os.path.join(d, s + ".lua"), "rb") as a, open(os.path.join(sys.argv[1], "lua", s + ".lua"), "rb") as b:
        assert a.read() == b.read(), s + ".lua differs"
print("packages: pip install ./clients/python: rwlock_client with its scripts in %s" % d)
PY

(cd clients/node && npm pack --silent --pack-destination "$TMP" >/dev/null)
tar tzf "$TMP"/pg-rwlock-redis-*.tgz | grep -x 'package/LICENSE' >/dev/null ||
  { echo "packages: no LICENSE in the npm tarball"; fail=1; }
mkdir "$TMP/app"
IOREDIS=$(node -p "require('./clients/node/package-lock.json').packages['node_modules/ioredis'].version")
(cd "$TMP/app" && npm init -y >/dev/null &&
 npm install --prefer-offline --no-audit --no-fund --silent "ioredis@$IOREDIS" "$TMP"/pg-rwlock-redis-*.tgz &&
 node -e '
const rw = require("pg-rwlock-redis"); const fs = require("fs"); const path = require("path");
const d = rw.defaultLuaDir();
if (!d.startsWith(path.join(process.cwd(), "node_modules"))) throw new Error("scripts not from the package: " + d);
for (const s of rw.SCRIPTS) if (!fs.readFileSync(path.join(d, s + ".lua")).equals(fs.readFileSync(path.join(process.argv[1], "lua", s + ".lua")))) throw new Error(s + ".lua differs");
console.log("packages: npm pack clients/node: pg-rwlock-redis with its scripts in " + d);
' "$ROOT" &&
 # ioredis is a peer dependency: the service's own copy, never a second one
 # nested in the package (whose types would not match the service's).
 [ -d node_modules/ioredis ] && [ ! -e node_modules/pg-rwlock-redis/node_modules/ioredis ] &&
 # The declarations type-check against the service's own ioredis (tsc and
 # @types/node are clients/node's devDependencies, from its npm ci).
 cat > app.ts <<'TS' &&
import Redis, { Cluster } from 'ioredis';
import { Locks, LockLost, LockTimeout, LockTimeoutError, NotHeld, RWLockError, StaleRequestError,
  PROTOCOL_VERSION } from 'pg-rwlock-redis';
async function main(): Promise<void> {
  const redis = new Redis('redis://127.0.0.1:6379/0');
  const locks = new Locks(redis, { prefix: 'rwlock', lease: 30000 });
  const onCluster = new Locks(new Cluster([{ host: '127.0.0.1', port: 6379 }]));
  const fromUrl: Locks = Locks.fromUrl('redis+cluster://127.0.0.1:6379/');
  const total: number = await locks.using('invoice:42', 'w', async (signal: AbortSignal, lock) => {
    if (signal.aborted) throw signal.reason;
    return lock.token ?? 0;
  }, { timeout: 10000, onLostError: true });
  const lk = locks.readLock('invoice:42', { onLost: (l) => console.log(l.name) });
  const token: number = await lk.acquire(1000);
  const e: LockTimeoutError = new LockTimeout('x');
  if (e instanceof LockLost || e instanceof NotHeld || e instanceof RWLockError) console.log(total, token);
  const late = await lk.renew().catch((x: unknown) => x);
  const v: '3' = PROTOCOL_VERSION;
  if (late instanceof StaleRequestError && late instanceof RWLockError) console.log(v, late.lock, late.owner, late.seq + late.newest);
  await locks.releaseAll(); await onCluster.close(); await fromUrl.close();
}
main();
TS
 node "$ROOT/clients/node/node_modules/typescript/bin/tsc" --noEmit --strict --esModuleInterop \
   --module commonjs --target es2020 --types node --typeRoots "$ROOT/clients/node/node_modules/@types" app.ts &&
 echo "packages: the declarations type-check against the service's ioredis (tsc --strict)") || fail=1
[ -e clients/node/lua ] && { echo "packages: clients/node/lua left behind by npm pack"; fail=1; }
# The declarations under TypeScript 5 and 6, nodenext and bundler.
bash test/node_types.sh || fail=1
[ $fail = 0 ] && echo "packages: ok" || echo "packages: FAILED"
exit $fail
