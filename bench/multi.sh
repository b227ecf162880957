#!/usr/bin/env bash
# bench/multi.sh: what several names at once cost (issue 40, SPEC 16), next
# to the same names taken by single calls in the same run. Builds this tree,
# starts its own Redis and a throw-away PostgreSQL loading a private copy of
# the build (bench/lib.sh), and runs pgbench (1 client, BENCH_SECONDS each,
# BENCH_REPS times interleaved) on transactions that each take N write
# locks at transaction level and release them at COMMIT, each client on
# names of its own (no contention):
#   multi N       SELECT redis_wlock_xact(ARRAY[N names])        N = 1, 4, 16
#   singles 16    16 statements SELECT redis_wlock_xact(name)
#   one stmt 16   SELECT redis_wlock_xact(n) FROM unnest(ARRAY[16 names]) n
#                 (one statement of single calls: what PostgreSQL's round
#                 trips add, apart from Redis's)
#   held 16       SELECT redis_wlock_xact(name 1); then
#                 SELECT redis_wlock_xact(ARRAY[16 names]): one name already
#                 held (stacked), 15 to take
#   unlock 16     (session level) SELECT redis_wlock(ARRAY[16 names]);
#                 SELECT redis_unlock(ARRAY[16 names])
#   unlocks 16    the same, let go by 16 statements redis_unlock(name)
# Then the Redis calls one transaction of each makes (MONITOR: EVALSHA and
# EVAL of the lock scripts). Prints the median ms per transaction and per
# name, and the calls. Everything is on loopback and stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh

p=$(free_port 7661)
redis_start "$p" "$WORK"
PORTS+=("$p")
# The multi-name forms are 1.2's: the whole script chain, pointed at the copy.
for f in rwlock--1.0--1.1.sql rwlock--1.1--1.2.sql; do
  sed -e "s|MODULE_PATHNAME|$WORK/lib/rwlock.so|" -e '/^\\echo/d' "$f" >>"$WORK/lib/rwlock.sql"
done
bench_pg_start 5661 "rwlock.redis_url = 'redis://127.0.0.1:$p/0'"
log "== Redis on $p, PostgreSQL on $PGPORT; ${T} s per run, $REPS repetitions"

names() {   # names <n>: an ARRAY of n names of this pgbench client
  local n=$1 out="ARRAY["
  for i in $(seq "$n"); do
    out+="'bm:' || :client_id || ':$i'"
    [ "$i" -lt "$n" ] && out+=", "
  done
  echo "$out]"
}
for n in 1 4 16; do
  printf 'BEGIN;\nSELECT redis_wlock_xact(%s);\nCOMMIT;\n' "$(names "$n")" >"$WORK/multi$n.sql"
done
{ echo 'BEGIN;'
  for i in $(seq 16); do echo "SELECT redis_wlock_xact('bm:' || :client_id || ':$i');"; done
  echo 'COMMIT;'; } >"$WORK/singles16.sql"
printf 'BEGIN;\nSELECT count(redis_wlock_xact(n)) FROM unnest(%s) n;\nCOMMIT;\n' \
  "$(names 16)" >"$WORK/onestmt16.sql"
printf "BEGIN;\nSELECT redis_wlock_xact('bm:' || :client_id || ':1');\nSELECT redis_wlock_xact(%s);\nCOMMIT;\n" \
  "$(names 16)" >"$WORK/held16.sql"
printf 'SELECT redis_wlock(%s);\nSELECT redis_unlock(%s);\n' "$(names 16)" "$(names 16)" \
  >"$WORK/unlock16.sql"
{ printf 'SELECT redis_wlock(%s);\n' "$(names 16)"
  for i in $(seq 16); do echo "SELECT redis_unlock('bm:' || :client_id || ':$i');"; done
} >"$WORK/unlocks16.sql"

CASES="multi1 multi4 multi16 singles16 onestmt16 held16 unlock16 unlocks16"
for rep in $(seq "$REPS"); do
  for c in $CASES; do
    out=$(pgbench -n -M prepared -T "$T" -c 1 -j 1 -f "$WORK/$c.sql" 2>&1) || { log "$out"; exit 1; }
    printf '%s\t%s\n' "$c" "$(awk '/^latency average = /{print $4}' <<<"$out")" >>"$RAW"
  done
done

# The Redis calls of one transaction of each (the lock scripts only).
for c in $CASES; do
  redis-cli -p "$p" MONITOR >"$WORK/monitor" &
  mon=$!
  sleep 0.3
  psql -qXAt -v client_id=0 -f "$WORK/$c.sql" >/dev/null
  sleep 0.3
  kill "$mon"; wait "$mon" 2>/dev/null || true
  printf '%s_calls\t%s\n' "$c" "$(grep -v ' lua\] ' "$WORK/monitor" | grep -ci '"evalsha"\|"eval"')" >>"$RAW"
done

/usr/bin/python3 - "$RAW" <<'PY'
import statistics, sys
rows = {}
for line in open(sys.argv[1]):
    k, v = line.rstrip("\n").split("\t")
    rows.setdefault(k, []).append(float(v))
names = {"multi1": 1, "multi4": 4, "multi16": 16, "singles16": 16, "onestmt16": 16,
         "held16": 16, "unlock16": 16, "unlocks16": 16}
what = {"multi1": "redis_wlock_xact(ARRAY[1 name])",
        "multi4": "redis_wlock_xact(ARRAY[4 names])",
        "multi16": "redis_wlock_xact(ARRAY[16 names])",
        "singles16": "16 statements redis_wlock_xact(name)",
        "onestmt16": "1 statement, 16 redis_wlock_xact(name)",
        "held16": "redis_wlock_xact(name 1); redis_wlock_xact(ARRAY[16 names])",
        "unlock16": "(session) redis_wlock(ARRAY[16 names]); redis_unlock(ARRAY[16 names])",
        "unlocks16": "(session) redis_wlock(ARRAY[16 names]); 16 x redis_unlock(name)"}
print("| transaction (BEGIN; ...; COMMIT) | ms per transaction | ms per name | Redis script calls |")
print("| --- | ---: | ---: | ---: |")
for k in names:
    ms = statistics.median(rows[k])
    calls = int(rows.get(k + "_calls", [0])[0])
    print("| %s | %.3f | %.3f | %d |" % (what[k], ms, ms / names[k], calls))
base = statistics.median(rows["singles16"])
print()
print("16 names at once: %.2f x the time of 16 single statements"
      % (statistics.median(rows["multi16"]) / base))
PY
