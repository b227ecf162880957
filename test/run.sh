#!/usr/bin/env bash
# run.sh: every test suite. Starts a Redis on 127.0.0.1:6379 and a throw-away
# PostgreSQL cluster (pg_virtualenv), builds and installs the extension, runs
# pg_regress and the isolation specs through `make installcheck` (and again
# on a server set up as the README says: test/installcheck_live.sh), then the
# protocol test, the protocol model check (verify/spin.sh) and the
# differential test of its script steps (verify/diff_scripts.py), the client packages (test/packages.sh), both clients on a
# Redis Cluster (test/clients_cluster.sh, 6410-6412), the compliance suite
# of the clients with SQL sessions (test/cross_test.py for the Python client,
# test/compliance/driver.py node for the Node client, which needs
# clients/node/node_modules: `npm ci`, done by tools/install-deps.sh; each its
# own Redis), the code blocks of the clients' READMEs and of the
# examples of README.md and docs/services.md (test/readme_examples.py), both clients' scoped
# use, errors and URLs (test/clients_api.py), the same compliance suite on a
# Redis Cluster of three masters
# (driver.py --cluster, 6420-6422: SQL sessions on its redis+cluster:// URL,
# the clients through their cluster classes), the load test, the chaos test
# (faults injected into its own Redis, and requests delivered late by a
# proxy, as the documented ACL user; CHAOS_DURATION, default 30 s), the same
# in quorum mode (three masters, each fault on one of them), on a Redis
# Cluster (slot moves among the faults) and on a Sentinel set (sentinels on
# 26450-26452),
# the model-based random test of the SQL API (test/random_api.py, its own
# Redis on 6393 if free), the TAP suite (test/tap.sh: its own Redis
# servers on 6382-6389, its own clusters, and pgbouncer in t/011), the
# waits, deadlock and statistics TAP tests as docs/connecting.md's ACL user
# (RWLOCK_TEST_ACL=1), the server matrix's Valkey pass (test/valkey.sh, its
# own namespace; its TAP tests beside Redis's), the
# pg_regress and isolation suites again with rwlock built with ASan and UBSan
# (verify/memcheck.sh: its own namespace, Redis and server), and the URL and
# password-file parsers fuzzed (verify/fuzz.sh, FUZZ_SECONDS each, default 60).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/redis.sh
DIR=$(mktemp -d)
trap 'redis_stop 6379; rm -rf "$DIR"' EXIT
redis_start 6379 "$DIR"
make -s
make -s install
status=0
pg_virtualenv -t make installcheck || { status=1; cat regression.diffs output_iso/regression.diffs 2>/dev/null || true; }
# The keeper's regress test, where the keeper runs.
pg_virtualenv -t -o shared_preload_libraries=rwlock make installcheck REGRESS=keeper ISOLATION= ||
  { status=1; cat regression.diffs 2>/dev/null || true; }
# The same on a server set up as the README says: preloaded, the documented
# ACL user (its password in a password file), a key prefix of its own; a
# namespace of its own (its Redis is on 6379 too).
bash tools/isolated.sh bash test/installcheck_live.sh || status=1
bash test/protocol.sh || status=1
# The protocol model-checked (SPIN): the configurations that must pass, the
# findings and mutants that must be caught (the fixed findings' old forms,
# protocol 2 and scripts that forget the request order among them); and the
# model's script steps against lua/ on a real Redis.
bash verify/spin.sh || status=1
for m in no-publish old-F1 old-F3-token proto2 no-seq-acquire no-seq-release; do
  bash verify/spin.sh --mutant $m >/dev/null || { echo "spin: mutant $m not caught"; status=1; }
done
/usr/bin/python3 verify/diff_scripts.py --steps 300 || status=1
if [ ! -d clients/node/node_modules/ioredis ]; then
  (cd clients/node && npm ci --no-audit --no-fund) ||
    echo "clients/node: npm ci failed (no registry?); run tools/install-deps.sh"
fi
bash test/packages.sh || status=1
bash test/clients_cluster.sh || status=1
pg_virtualenv -t /usr/bin/python3 test/cross_test.py || status=1
# (the compliance suite as docs/connecting.md's ACL user: cross_test.py's
# Python agents too)
pg_virtualenv -t /usr/bin/python3 test/compliance/driver.py --acl node || status=1
# The clients' README examples as pasted (on the Redis at 6379 above), and a
# Node process ending by itself after a wait.
pg_virtualenv -t /usr/bin/python3 test/readme_examples.py || status=1
# Scoped use, errors and URLs of both clients (its own servers, 6440 on).
/usr/bin/python3 test/clients_api.py || status=1
pg_virtualenv -t /usr/bin/python3 test/compliance/driver.py --cluster python python-async node ||
  status=1
pg_virtualenv -t /usr/bin/python3 test/load.py || status=1
pg_virtualenv -t /usr/bin/python3 test/chaos.py || status=1
CHAOS_QUORUM=3 pg_virtualenv -t /usr/bin/python3 test/chaos.py || status=1
CHAOS_CLUSTER=1 pg_virtualenv -t /usr/bin/python3 test/chaos.py || status=1
CHAOS_SENTINEL=1 pg_virtualenv -t /usr/bin/python3 test/chaos.py || status=1
# The SQL API against its model (3,000 random steps, a new seed each run; the
# keeper preloaded for redis_locks). A known bug not yet fixed is avoided with
# --skip-known ID (test/random_api.py KNOWN), never by turning checks off
# (none is open).
pg_virtualenv -t -o shared_preload_libraries=rwlock /usr/bin/python3 test/random_api.py \
  || status=1
# The waits, deadlock, statistics and multi-name tests as docs/connecting.md's ACL user
# (t/RwlockTest.pm), the others as Redis's default user.
acl_tap="t/031_lock_waits.pl t/032_deadlock_servers.pl t/033_deadlock_clients.pl
  t/034_stats_and_losses.pl t/037_deadlock_node.pl t/038_deadlock_quorum.pl
  t/052_deadlock_cluster_failover.pl t/053_deadlock_cluster_migration.pl
  t/054_deadlock_quorum_member_down.pl t/055_deadlock_cutoff_leftovers.pl
  t/056_deadlock_cutoff_nopreload.pl t/065_multi_names.pl t/066_multi_quorum.pl
  t/067_deadlock_no_preload.pl"
mapfile -t other_tap < <(ls t/*.pl | grep -vxF -f <(tr -s ' \n' '\n' <<<"$acl_tap"))
# The server matrix's Valkey TAP pass (every t/*.pl on valkey-server, the
# same ones as the ACL user) beside Redis's: about 15 min each, mostly
# waiting, so side by side in a namespace of its own; its output goes to a
# log shown once both are done.
RWLOCK_TAP_ACL=$acl_tap bash tools/isolated.sh bash test/valkey.sh --tap \
  >"$DIR/valkey-tap.log" 2>&1 &
valkey_tap=$!
bash test/tap.sh "${other_tap[@]}" || status=1
# shellcheck disable=SC2086
RWLOCK_TEST_ACL=1 bash test/tap.sh $acl_tap || status=1
valkey_status=0
wait $valkey_tap || valkey_status=1
echo "=== the Valkey TAP pass (test/valkey.sh --tap, beside the TAP run above):"
cat "$DIR/valkey-tap.log"
[ $valkey_status = 0 ] || { status=1; echo "=== the Valkey TAP pass FAILED"; }
# The rest of the server matrix: the other suites that depend on the server
# again on Valkey 8 (test/valkey.sh says which; about 9 min).
bash tools/isolated.sh bash test/valkey.sh --no-tap || status=1
bash verify/memcheck.sh || status=1
FUZZ_SECONDS=${FUZZ_SECONDS:-60} bash verify/fuzz.sh || status=1
exit $status
