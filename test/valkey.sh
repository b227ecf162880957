#!/usr/bin/env bash
# valkey.sh: the server matrix's second server. The suites whose outcome
# depends on the server (its Lua, ACL, pub/sub, error replies, INFO), run
# against valkey-server (Valkey 8, Debian 12's bookworm-backports, which
# tools/install-deps.sh installs) instead of redis-server: pg_regress and
# the isolation specs (and the keeper's regress test), test/protocol.sh,
# the compliance suite (Python, asyncio and Node agents with SQL sessions),
# the random SQL API test, chaos on one server, and every TAP test, t/*.pl:
# Sentinel (valkey-server --sentinel), Cluster (valkey-cli --cluster
# create), TLS (Debian's valkey-server is built with it) and quorum
# included, as Redis's are in test/run.sh (the tests of RWLOCK_TAP_ACL
# as docs/connecting.md's ACL user, the others as the default user). None
# needs a feature Valkey 8 lacks. Every tool picks the server through
# RWLOCK_REDIS_SERVER and RWLOCK_REDIS_CLI (tools/redis.sh,
# t/RwlockTest.pm, test/rwtest.py).
#
#   bash tools/isolated.sh bash test/valkey.sh [--tap | --no-tap]
# as root, in a namespace of its own (tools/isolated.sh: its own loopback,
# so its 6379 and the TAP tests' ports are nobody else's). --tap: the TAP
# tests only (about 15 min, mostly waiting: test/run.sh runs them beside
# Redis's TAP run, in a second namespace); --no-tap: all but them (about
# 9 min). Each section's time is printed ("valkey: <section> <N> s").
# Exits non-zero if a suite failed, or if valkey-server is not installed.
set -euo pipefail
cd "$(dirname "$0")/.."
export RWLOCK_REDIS_SERVER=${RWLOCK_REDIS_SERVER:-valkey-server}
export RWLOCK_REDIS_CLI=${RWLOCK_REDIS_CLI:-valkey-cli}
command -v "$RWLOCK_REDIS_SERVER" >/dev/null ||
  { echo "valkey: $RWLOCK_REDIS_SERVER not installed (tools/install-deps.sh)" >&2; exit 1; }
what=${1:-all}
case $what in all | --tap | --no-tap) ;; *) echo "usage: $0 [--tap | --no-tap]" >&2; exit 2 ;; esac
# As test/run.sh's acl_tap, which passes its list.
RWLOCK_TAP_ACL=${RWLOCK_TAP_ACL:-"t/031_lock_waits.pl t/032_deadlock_servers.pl
  t/033_deadlock_clients.pl t/034_stats_and_losses.pl t/037_deadlock_node.pl
  t/038_deadlock_quorum.pl t/052_deadlock_cluster_failover.pl
  t/053_deadlock_cluster_migration.pl t/054_deadlock_quorum_member_down.pl
  t/055_deadlock_cutoff_leftovers.pl t/056_deadlock_cutoff_nopreload.pl
  t/065_multi_names.pl t/066_multi_quorum.pl
  t/067_deadlock_no_preload.pl"}
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
regress() {
  pg_virtualenv -t make installcheck ||
    { cat regression.diffs output_iso/regression.diffs 2>/dev/null || true; return 1; }
  pg_virtualenv -t -o shared_preload_libraries=rwlock make installcheck REGRESS=keeper ISOLATION= ||
    { cat regression.diffs 2>/dev/null || true; return 1; }
}
tap_all() {  # every t/*.pl, those of RWLOCK_TAP_ACL as the documented user
  local other rc=0
  mapfile -t other < <(ls t/*.pl | grep -vxF -f <(tr -s ' \n' '\n' <<<"$RWLOCK_TAP_ACL"))
  bash test/tap.sh "${other[@]}" || rc=1
  # shellcheck disable=SC2086
  RWLOCK_TEST_ACL=1 bash test/tap.sh $RWLOCK_TAP_ACL || rc=1
  return $rc
}
if [ "$what" != --tap ]; then
  make -s
  make -s install
  redis_start 6379 "$DIR"
  section regress+isolation regress
  section protocol bash test/protocol.sh
  section compliance pg_virtualenv -t /usr/bin/python3 test/compliance/driver.py python python-async node
  section random_api pg_virtualenv -t -o shared_preload_libraries=rwlock /usr/bin/python3 test/random_api.py
  section chaos pg_virtualenv -t /usr/bin/python3 test/chaos.py
fi
[ "$what" = --no-tap ] || section tap tap_all
echo "valkey: $what $((SECONDS - t0)) s, status $status"
exit $status
