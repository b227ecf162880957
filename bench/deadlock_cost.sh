#!/usr/bin/env bash
# bench/deadlock_cost.sh: what deadlock detection costs a lock wait that is
# not a deadlock (SPEC 12, issue 29's target: at most one extra Redis call
# per deadlock_timeout), against the same wait in the same run without it.
# Builds this tree, starts a Redis and a throw-away PostgreSQL loading a
# private copy of the build; then, BENCH_REPS times interleaved:
#   with     a session holds a write lock; another asks for it with
#            deadlock_timeout = 1 s and waits until lock_timeout (BENCH_WAIT
#            seconds, default 8) ends its wait
#   without  the same wait with deadlock_timeout = 1 h (no check-in)
# Redis's MONITOR, started before each wait, counts every call a client
# makes meanwhile (not those made by scripts; the holder's renewals too:
# the same in both). Prints the calls
# of each by command, the extra calls, and the extra calls per
# deadlock_timeout of the wait. Scripts are named by their SHA1s
# (evalsha:checkin.lua is the check-in, evalsha:waits.lua a hop of a walk).
# Then, once, BENCH_WAITERS (default 200) sessions wait as writers behind a
# holder of another client (owner id py:bench-holder, written by
# acquire.lua as the Python client writes it, so every walk meets a
# foreign owner and is repeated): the Redis calls of deadlock detection per
# waiter and per deadlock_timeout over BENCH_MANY_WINDOW seconds (default
# 20) after a warm-up of 15 s. BENCH_PRELOAD=0 runs it all without the
# library in shared_preload_libraries. Everything is on loopback and
# stopped at the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
WAIT=${BENCH_WAIT:-8}

p=$(free_port 7651)
redis_start "$p" "$WORK"
PORTS+=("$p")
WAITERS=${BENCH_WAITERS:-200}
WINDOW=${BENCH_MANY_WINDOW:-20}
# Preloaded, as the keeper needs, unless BENCH_PRELOAD=0: the library is
# then loaded by each session's first call, with no waiters' table in
# shared memory (waits.lua itself leaves out the writers queued ahead of a
# walking writer, walk.c).
PRELOAD="shared_preload_libraries = '$WORK/lib/rwlock.so'" PRELOADED=preloaded
[ "${BENCH_PRELOAD:-1}" = 0 ] && PRELOAD= PRELOADED="not preloaded"
bench_pg_start 5651 "rwlock.redis_url = 'redis://127.0.0.1:$p/0'
$PRELOAD
max_connections = $((WAITERS + 20))"
log "== Redis on $p; waits of ${WAIT} s, deadlock_timeout 1 s against 1 h, $PRELOADED"

# calls <monitor file>: the calls clients made (not those of scripts), as
# "<command> <calls>" lines.
# The SHA1s of the scripts as embedded (tools/embed_lua.pl --compact).
SHAS=$(for f in lua/*.lua; do printf 's/^evalsha %s$/evalsha:%s/;' "$(perl tools/embed_lua.pl --compact "$f" | sha1sum | cut -d' ' -f1)" "${f#lua/}"; done)
calls() {
  grep -v ' \[[0-9]* lua\] ' "$1" |
    sed -n 's/^[0-9.]* \[[^]]*\] "\([^"]*\)"\( "\([0-9a-f]*\)"\)\{0,1\}.*/\1 \3/p' |
    awk '{c = tolower($1); print (c == "evalsha" ? c " " $2 : c)}' | sed "$SHAS" |
    sed 's/^evalsha [0-9a-f]*$/evalsha:other/' | sort | uniq -c | awk '{print $2, $1}'
}

# wait_once <label> <deadlock_timeout>: one wait; its calls go to $RAW.
wait_once() {
  local label=$1 dt=$2 out
  psql -qXAt -c "SELECT redis_wlock('bench_dc'); SELECT pg_sleep($WAIT + 3)" >/dev/null &
  local holder=$!
  sleep 0.5
  redis-cli -p "$p" MONITOR >"$WORK/monitor" &
  local monitor=$!
  sleep 0.2
  out=$(psql -qXAt -c "SET deadlock_timeout = '$dt'" -c "SET lock_timeout = '${WAIT}s'" \
    -c "SELECT redis_wlock('bench_dc')" 2>&1 || true)
  grep -q 'lock timeout\|canceling statement due to lock timeout' <<<"$out" ||
    { log "the wait did not end at lock_timeout: $out"; exit 1; }
  sleep 0.3    # the wait key's DEL is sent without waiting for its answer
  kill "$monitor"; wait "$monitor" 2>/dev/null || true
  calls "$WORK/monitor" | sed "s/^/$label\t/" >>"$RAW"
  wait "$holder"
}

for rep in $(seq "$REPS"); do
  log "== repetition $rep of $REPS"
  wait_once with 1s
  wait_once without 1h
done

/usr/bin/python3 - "$RAW" "$REPS" "$WAIT" <<'PY'
import statistics, sys
from collections import defaultdict
raw, reps, wait = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
tot = {"with": defaultdict(int), "without": defaultdict(int)}
for line in open(raw):
    label, rest = line.rstrip("\n").split("\t")
    cmd, n = rest.split()
    tot[label][cmd] += int(n)
cmds = sorted(set(tot["with"]) | set(tot["without"]))
print("## Deadlock detection: Redis calls of a %g s wait that is not a deadlock" % wait)
print()
print("Mean over %d repetitions; the holder's calls are in both columns." % reps)
print()
print("| command | with (deadlock_timeout 1 s) | without (1 h) | extra |")
print("| --- | ---: | ---: | ---: |")
for c in cmds + ["all"]:
    w = sum(tot["with"].values()) if c == "all" else tot["with"][c]
    o = sum(tot["without"].values()) if c == "all" else tot["without"][c]
    print("| %s | %.1f | %.1f | %+.1f |" % (c, w / reps, o / reps, (w - o) / reps))
extra = (sum(tot["with"].values()) - sum(tot["without"].values())) / reps
checkins = tot["with"]["evalsha:checkin.lua"] / reps
print()
print("check-ins (checkin.lua): %.1f in %g s; extra calls per deadlock_timeout: "
      "%.2f in all (the one walk and the DEL included), %.2f once the walk is done "
      "(check-ins only; target <= 1)" % (checkins, wait, extra / wait, checkins / wait))
print("ratio of all calls with / without: %.3f" %
      (sum(tot["with"].values()) / max(1, sum(tot["without"].values()))))
PY

# ---- many waiters behind a holder of another client ----
log "== $WAITERS waiters behind a client's holder, deadlock_timeout 1 s"
body=$(cat lua/acquire.lua)
redis-cli -p "$p" EVAL "$body" 2 'bench:{bench_many}' 'bench:{bench_many}:q' \
  py:bench-holder 1 w 600000 >/dev/null
printf '%s\n' "SET deadlock_timeout = '1s';" "SET lock_timeout = '$((WINDOW + 25))s';" \
  "SELECT redis_wlock('bench_many');" >"$WORK/many.sql"
pgbench -n -c "$WAITERS" -j 2 -t 1 -f "$WORK/many.sql" >/dev/null 2>&1 &
bench=$!
sleep 15
redis-cli -p "$p" MONITOR >"$WORK/monitor_many" &
monitor=$!
sleep "$WINDOW"
kill "$monitor"; wait "$monitor" 2>/dev/null || true
waiting=$(psql -qXAt -c "SELECT count(*) FROM pg_stat_activity WHERE query LIKE '%bench_many%' AND state = 'active' AND pid <> pg_backend_pid()")
calls "$WORK/monitor_many" >"$WORK/many_calls"
[ -z "${BENCH_KEEP:-}" ] || cp "$WORK/monitor_many" "$BENCH_KEEP"
wait "$bench" || true
redis-cli -p "$p" DEL 'bench:{bench_many}' 'bench:{bench_many}:q' >/dev/null
/usr/bin/python3 - "$WORK/many_calls" "$waiting" "$WINDOW" <<'PY'
import sys
calls = dict((c, int(n)) for c, n in (l.split() for l in open(sys.argv[1])))
waiters, window = int(sys.argv[2]), float(sys.argv[3])
per = lambda n: n / max(waiters, 1) / window
print()
print("## %d waiters (still waiting at the end) behind a client's holder, %g s after a 15 s warm-up" % (waiters, window))
print()
print("| call | per waiter per deadlock_timeout (1 s) |")
print("| --- | ---: |")
for c in sorted(calls):
    print("| %s | %.2f |" % (c, per(calls[c])))
checkin = calls.get("evalsha:checkin.lua", 0)
det = checkin + calls.get("evalsha:waits.lua", 0) + calls.get("evalsha:mark.lua", 0)
print()
print("deadlock detection (checkin.lua, waits.lua, mark.lua): %.2f calls per waiter "
      "per deadlock_timeout, %.2f of them beyond the check-in" % (per(det), per(det - checkin)))
PY
