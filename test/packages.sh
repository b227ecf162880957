#!/usr/bin/env bash
# packages.sh: the clients install as their users install them, and carry
# the protocol's scripts, byte for byte the repository's lua/*.lua:
# - clients/python with pip into a fresh virtualenv (Debian's python3-redis
#   through --system-site-packages; no index needed);
# - clients/node with npm pack, its tarball installed into a fresh project
#   (ioredis from npm's cache where it can be, else from the registry, as
#   `npm ci` in clients/node got it: npm 11's --offline refuses a
#   dependency whose registry metadata the cache lacks, and `npm ci` caches
#   the tarballs only).
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
mkdir "$TMP/app"
(cd "$TMP/app" && npm init -y >/dev/null &&
 npm install --prefer-offline --no-audit --no-fund --silent "$TMP"/rwlock-*.tgz &&
 node -e '
const rw = require("rwlock"); const fs = require("fs"); const path = require("path");
const d = rw.defaultLuaDir();
if (!d.startsWith(path.join(process.cwd(), "node_modules"))) throw new Error("scripts not from the package: " + d);
for (const s of rw.SCRIPTS) if (!fs.readFileSync(path.join(d, s + ".lua")).equals(fs.readFileSync(path.join(process.argv[1], "lua", s + ".lua")))) throw new Error(s + ".lua differs");
console.log("packages: npm pack clients/node: rwlock with its scripts in " + d);
' "$ROOT") || fail=1
[ -e clients/node/lua ] && { echo "packages: clients/node/lua left behind by npm pack"; fail=1; }
[ $fail = 0 ] && echo "packages: ok" || echo "packages: FAILED"
exit $fail
