#!/usr/bin/env bash
# installcheck_live.sh: `make installcheck` against a server set up as the
# README and docs/connecting.md say, as a DBA checks an install: rwlock in
# shared_preload_libraries, a key prefix of its own (rwlock.key_prefix =
# $RWLOCK_LIVE_PREFIX, default rwlive), and a Redis whose only usable user is
# docs/connecting.md's least-privilege ACL user (the line as documented,
# tools/acl_line.py, its key and channel patterns for that prefix, a
# password of its own), the password in a password file (mode 0600, the
# server's OS user's) named by rwlock.password_file; the URL has no
# credentials. The default Redis user is off, so nothing else could have
# passed. Runs pg_regress and the isolation specs, then the keeper's regress
# test (the library is preloaded). The Redis is RWLOCK_REDIS_SERVER's
# (tools/redis.sh) on 127.0.0.1:6379, the URL's default; run it alone in a
# namespace of its own:
#   bash tools/isolated.sh bash test/installcheck_live.sh
# (the extension built and installed: make && make install).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/redis.sh
PREFIX=${RWLOCK_LIVE_PREFIX:-rwlive}
PORT=6379
DIR=$(mktemp -d)
chmod 755 "$DIR"
stop() {
  [ -s "$DIR/redis-$PORT.pid" ] && kill "$(cat "$DIR/redis-$PORT.pid")" 2>/dev/null || true
  rm -rf "$DIR"
}
trap stop EXIT
redis_start "$PORT" "$DIR"
pw=$(od -An -N16 -tx1 /dev/urandom | tr -d ' \n')
mapfile -t acl < <(/usr/bin/python3 tools/acl_line.py --prefix "$PREFIX" --password "$pw")
[ "$("$REDIS_CLI" -p "$PORT" "${acl[@]}")" = OK ] || { echo "live: ACL SETUSER failed" >&2; exit 1; }
[ "$("$REDIS_CLI" -p "$PORT" ACL SETUSER default off)" = OK ] || exit 1
# The password file, as docs/connecting.md has it (host:port:user:password).
mkdir "$DIR/pass"
printf '# host:port:user:password\n127.0.0.1:%d:rwlock:%s\n' "$PORT" "$pw" >"$DIR/pass/rwlock.pass"
chmod 0600 "$DIR/pass/rwlock.pass"
chown -R postgres: "$DIR/pass" 2>/dev/null || true
conf=(-o shared_preload_libraries=rwlock
      -o "rwlock.redis_url=redis://127.0.0.1:$PORT/0"
      -o "rwlock.password_file=$DIR/pass/rwlock.pass"
      -o "rwlock.key_prefix=$PREFIX")
echo "live: $("$REDIS_SERVER" --version | cut -d' ' -f1-3); user rwlock as docs/connecting.md's line," \
  "~$PREFIX:* &$PREFIX:*, default user off; preloaded, password file, key prefix $PREFIX"
status=0
pg_virtualenv -t "${conf[@]}" make installcheck ||
  { status=1; cat regression.diffs output_iso/regression.diffs 2>/dev/null || true; }
pg_virtualenv -t "${conf[@]}" make installcheck REGRESS=keeper ISOLATION= ||
  { status=1; cat regression.diffs 2>/dev/null || true; }
exit $status
