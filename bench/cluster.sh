#!/usr/bin/env bash
# bench/cluster.sh: rwlock over a Redis Cluster against a single Redis, in the
# same run. Builds this tree, starts a single Redis, a six-node cluster (three
# masters, a replica each; redis-cli --cluster create) and a throw-away
# PostgreSQL loading a private copy of the build, then, BENCH_REPS times
# interleaved (medians reported):
#   lock+unlock  redis_wlock + redis_unlock, 1 client (bench/sql/b_session.sql):
#                latency in ms
#   16 clients   the same, 16 clients, each its own name: throughput in tps
# once with rwlock.redis_url = redis://... (single) and once with
# redis+cluster://... (cluster), and prints both with the ratio
# cluster/single; then the hand-off of a write lock to one waiting session
# (bench/handoff.py's g1: unlock returns to the waiter's lock returns), whose
# wake-up crosses the cluster bus when the waiter listens on another master;
# then the wake-up's two ways in the cluster alone, PUBLISH against sharded
# pub/sub (bench/cluster_pubsub.py). Everything is on loopback and
# stopped at the end.
#
# Settings (environment): BENCH_SECONDS (default 3), BENCH_REPS (default 3).
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

# ---- servers ----------------------------------------------------------------
SINGLE=$(free_port 7501)
redis_start "$SINGLE" "$WORK"
PORTS+=("$SINGLE")
CPORTS=()
p=$((SINGLE + 1))
for _ in 1 2 3 4 5 6; do
  p=$(free_port "$p")
  mkdir -p "$WORK/c$p"
  redis_start "$p" "$WORK/c$p" --cluster-enabled yes --cluster-node-timeout 2000 \
    --cluster-config-file "$WORK/c$p/nodes.conf"
  PORTS+=("$p")
  CPORTS+=("$p")
  p=$((p + 1))
done
redis-cli --cluster create $(printf '127.0.0.1:%s ' "${CPORTS[@]}") \
  --cluster-replicas 1 --cluster-yes >/dev/null
for _ in $(seq 100); do
  redis-cli -p "${CPORTS[0]}" cluster info | grep -q cluster_state:ok && break
  sleep 0.1
done
CLUSTER_URL="redis+cluster://$(printf '127.0.0.1:%s,' "${CPORTS[@]}" | sed 's/,$//')/"
log "== single Redis on $SINGLE; cluster on ${CPORTS[*]}"

bench_pg_start 5601

# ---- measurements --------------------------------------------------------------
# run <key> <url> <clients>: pgbench of b_session.sql with that URL.
run() { PGOPTIONS="-c rwlock.redis_url=$2" bench_pgbench "$1" "$3"; }
SINGLE_URL="redis://127.0.0.1:$SINGLE/0"
run warm "$CLUSTER_URL" 2
run warm "$SINGLE_URL" 2
for rep in $(seq "$REPS"); do
  log "== repetition $rep of $REPS"
  run single1 "$SINGLE_URL" 1
  run cluster1 "$CLUSTER_URL" 1
  run single16 "$SINGLE_URL" 16
  run cluster16 "$CLUSTER_URL" 16
done
log "== hand-off of a write lock, 1 waiter (bench/handoff.py), single then cluster"
for rep in $(seq "$REPS"); do
  for where in single cluster; do
    url=$SINGLE_URL
    [ $where = cluster ] && url=$CLUSTER_URL
    PGOPTIONS="-c rwlock.redis_url=$url" /usr/bin/python3 "$BENCH/handoff.py" \
      --dsn "host=$WORK port=$PGPORT user=$PGUSER_NAME dbname=postgres" \
      --redis-port "$SINGLE" --rounds 200 --grants 200 --poll-rounds 2 --tsv 2>/dev/null |
      sed -n "s/^g1_p\(50\|99\)_ms/${where}_handoff_p\1/p" >>"$RAW"
  done
done
log "== wake-ups: PUBLISH across nodes against SPUBLISH in the slot's shard"
/usr/bin/python3 "$BENCH/cluster_pubsub.py" --ports "$(IFS=,; echo "${CPORTS[*]}")" >>"$RAW"

# ---- report: printed, and kept as a section of bench/results.md ------------------
/usr/bin/python3 - "$RAW" "$REPS" "$T" "$BENCH/results.md" "$(git rev-parse --short HEAD)" <<'EOF'
import datetime, os, re, statistics, sys
raw, reps, secs, md_path, rev = sys.argv[1:6]
vals = {}
for line in open(raw):
    k, v = line.split("\t")
    vals.setdefault(k, []).append(float(v))
med = lambda k: statistics.median(vals[k])
row = lambda name, s, c, unit: "%-34s %9.3f %-3s %9.3f %-3s %6.2fx" % (name, s, unit, c, unit, c / s)
out = ["rwlock over Redis Cluster (3 masters + 3 replicas) vs a single Redis, same run;"
       " medians of %s repetitions of %s s" % (reps, secs),
       "%-34s %13s %13s %7s" % ("", "single", "cluster", "ratio"),
       row("lock+unlock latency, 1 client", med("single1_lat"), med("cluster1_lat"), "ms"),
       row("lock+unlock, 16 clients", med("single16_tps"), med("cluster16_tps"), "tps")]
for p in ("50", "99"):
    out.append(row("hand-off to 1 waiter, p" + p, med("single_handoff_p" + p),
                   med("cluster_handoff_p" + p), "ms"))
out += ["", "wake-up delivery in the cluster                 median      p99   publisher rate"]
for way, what in (("publish", "PUBLISH, subscriber on another master"),
                  ("spublish", "SPUBLISH, SSUBSCRIBE on the slot's master")):
    out.append("  %-42s %6.0f µs %6.0f µs  %7.0f msg/s" % (
        what, med(way + "_median_us"), med(way + "_p99_us"), med(way + "_rate")))
text = "\n".join(out) + "\n"
print(text, end="")
# The section of bench/results.md this script owns (report.py keeps it).
section = "## Redis Cluster (bench/cluster.sh)\n\nRun %s UTC at commit `%s`, %d CPUs.\n\n```\n%s```\n" % (
    datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), rev, os.cpu_count(), text)
md = open(md_path).read() if os.path.exists(md_path) else ""
md = re.sub(r"(?s)\n## Redis Cluster \(bench/cluster\.sh\).*?(?=\n## |\Z)", "", md)
with open(md_path, "w") as f:
    f.write(md.rstrip("\n") + "\n\n" + section)
EOF
