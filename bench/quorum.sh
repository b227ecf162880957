#!/usr/bin/env bash
# bench/quorum.sh: rwlock in quorum mode (three independent Redis masters,
# rwlock.redis_url with three URLs) against a single Redis, in the same run.
# Builds this tree, starts four Redis servers and a throw-away PostgreSQL
# loading a private copy of the build, then, BENCH_REPS times interleaved
# (medians reported):
#   lock+unlock  redis_wlock + redis_unlock, 1 client (bench/sql/b_session.sql):
#                latency in ms
#   16 clients   the same, 16 clients, each its own name: throughput in tps
# once in the database whose rwlock.redis_url is the single Redis and once in
# the one whose rwlock.redis_url is the quorum, and prints both with the ratio
# quorum/single. rwlock.quorum_max_lease is 2 s, so that the masters, just
# started, count toward a majority after 3 s. Everything is on loopback and
# stopped at the end.
#
# Settings (environment): BENCH_SECONDS (default 3), BENCH_REPS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

# ---- servers ----------------------------------------------------------------
p=$(free_port 7601)
for _ in 1 2 3 4; do
  p=$(free_port "$p")
  redis_start "$p" "$WORK"
  PORTS+=("$p")
  p=$((p + 1))
done
SINGLE_URL="redis://127.0.0.1:${PORTS[0]}/0"
QUORUM_URL=$(printf 'redis://127.0.0.1:%s/0 ' "${PORTS[@]:1}" | sed 's/ $//')
log "== single Redis on ${PORTS[0]}; quorum on ${PORTS[*]:1}"

bench_pg_start 5611 "rwlock.quorum_max_lease = '2s'"
for db in single quorum; do
  psql -qX -v ON_ERROR_STOP=1 -c "CREATE DATABASE $db" >/dev/null
  psql -qX -v ON_ERROR_STOP=1 -d "$db" -f "$WORK/lib/rwlock.sql" >/dev/null
done
psql -qX -v ON_ERROR_STOP=1 -c "ALTER DATABASE single SET rwlock.redis_url = '$SINGLE_URL'" \
  -c "ALTER DATABASE quorum SET rwlock.redis_url = '$QUORUM_URL'" >/dev/null
sleep 3.5    # the masters count toward a majority once up for quorum_max_lease

# ---- measurements --------------------------------------------------------------
# run <db> <clients>: pgbench of b_session.sql in that database.
run() { bench_pgbench "$1$2" "$2" "$1"; }
run quorum 2 && run single 2    # warm-up
for rep in $(seq "$REPS"); do
  log "== repetition $rep of $REPS"
  run single 1
  run quorum 1
  run single 16
  run quorum 16
done

# ---- report -----------------------------------------------------------------------
/usr/bin/python3 - "$RAW" "$REPS" "$T" <<'EOF'
import statistics, sys
raw, reps, secs = sys.argv[1:4]
vals = {}
for line in open(raw):
    k, v = line.split("\t")
    vals.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(vals[k])
row = lambda name, s, q, unit: "%-34s %9.3f %-3s %9.3f %-3s %6.2fx" % (name, s, unit, q, unit, q / s)
print("rwlock in quorum mode (3 independent masters) vs a single Redis, same run;"
      " medians of %s repetitions of %s s" % (reps, secs))
print("%-34s %13s %13s %7s" % ("", "single", "quorum", "ratio"))
print(row("lock+unlock latency, 1 client", med("single1_lat"), med("quorum1_lat"), "ms"))
print(row("lock+unlock, 16 clients", med("single16_tps"), med("quorum16_tps"), "tps"))
EOF
