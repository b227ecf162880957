#!/usr/bin/env bash
# valkey.sh: the server matrix's second server. The suites whose outcome
# depends on the server (its Lua, ACL, pub/sub, error replies, INFO), run
# against valkey-server (Valkey 8, Debian 12's bookworm-backports, which
# tools/install-deps.sh installs) instead of redis-server: pg_regress and
# the isolation specs (and the keeper's regress test), test/protocol.sh,
# the compliance suite (Python, asyncio and Node agents with SQL sessions),
# the random SQL API test, chaos on one server, and the TAP tests listed in
# VALKEY_TAP (test/README.md says which and why). Every tool picks the
# server through RWLOCK_REDIS_SERVER and RWLOCK_REDIS_CLI (tools/redis.sh,
# t/RwlockTest.pm, test/rwtest.py).
#
# test/run.sh runs it in a namespace of its own (tools/isolated.sh: its own
# loopback, so its 6379 is not run.sh's Redis); alone, as root:
#   bash tools/isolated.sh bash test/valkey.sh
# Each section's time is printed ("valkey: <section> <N> s"). Exits non-zero
# if a suite failed, or if valkey-server is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export RWLOCK_REDIS_SERVER=${RWLOCK_REDIS_SERVER:-valkey-server}
export RWLOCK_REDIS_CLI=${RWLOCK_REDIS_CLI:-valkey-cli}
command -v "$RWLOCK_REDIS_SERVER" >/dev/null ||
  { echo "valkey: $RWLOCK_REDIS_SERVER not installed (tools/install-deps.sh)" >&2; exit 1; }
# The TAP tests that run on Valkey too: each server behaviour rwlock relies
# on, on one server (leases with and without the keeper, restarts and
# stalls, lost reads and marks, waits under faults, eviction policy and ACL
# refusals, deadlocks, statistics, late requests, protocol 2 beside 3),
# about 4.5 min here; Sentinel, Cluster, quorum and TLS stay Redis-only, and
# the longer single-server tests are left out for time (test/README.md).
VALKEY_TAP=${VALKEY_TAP:-"t/001_keeper_leases.pl t/002_no_keeper.pl t/004_redis_faults.pl
  t/025_lost_read_and_marks.pl t/026_wait_faults.pl t/028_redis_fitness.pl t/031_lock_waits.pl
  t/032_deadlock_servers.pl t/034_stats_and_losses.pl t/036_stale_release.pl
  t/040_protocol_upgrade.pl"}
. tools/redis.sh
DIR=$(mktemp -d)
trap 'redis_stop 6379; rm -rf "$DIR"' EXIT
echo "valkey: $("$REDIS_SERVER" --version)"
status=0
t0=$SECONDS
section() {  # name command...: run it, time it, remember a failure
  local name=$1 t=$SECONDS
  shift
  "$@" || { status=1; echo "valkey: $name FAILED"; }
  echo "valkey: $name $((SECONDS - t)) s"
}
make -s
make -s install
redis_start 6379 "$DIR"
regress() {
  pg_virtualenv -t make installcheck ||
    { cat regression.diffs output_iso/regression.diffs 2>/dev/null || true; return 1; }
  pg_virtualenv -t -o shared_preload_libraries=rwlock make installcheck REGRESS=keeper ISOLATION= ||
    { cat regression.diffs 2>/dev/null || true; return 1; }
}
section regress+isolation regress
section protocol bash test/protocol.sh
section compliance pg_virtualenv -t /usr/bin/python3 test/compliance/driver.py python python-async node
section random_api pg_virtualenv -t -o shared_preload_libraries=rwlock /usr/bin/python3 test/random_api.py
section chaos pg_virtualenv -t /usr/bin/python3 test/chaos.py
# shellcheck disable=SC2086
section tap bash test/tap.sh $VALKEY_TAP
echo "valkey: all $((SECONDS - t0)) s, status $status"
exit $status
