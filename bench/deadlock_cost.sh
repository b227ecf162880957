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
# deadlock_timeout of the wait. Everything is on loopback and stopped at
# the end.
set -euo pipefail
cd "$(dirname "$0")/.."
. bench/lib.sh
WAIT=${BENCH_WAIT:-8}

p=$(free_port 7651)
redis_start "$p" "$WORK"
PORTS+=("$p")
bench_pg_start 5651 "rwlock.redis_url = 'redis://127.0.0.1:$p/0'"
log "== Redis on $p; waits of ${WAIT} s, deadlock_timeout 1 s against 1 h"

# calls <monitor file>: the calls clients made (not those of scripts), as
# "<command> <calls>" lines.
calls() {
  grep -v ' \[[0-9]* lua\] ' "$1" | sed -n 's/^[0-9.]* \[[^]]*\] "\([^"]*\)".*/\1/p' |
    tr 'A-Z' 'a-z' | sort | uniq -c | awk '{print $2, $1}'
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
checkins = tot["with"]["set"] / reps
print()
print("check-ins (the wait key's SET): %.1f in %g s; extra calls per deadlock_timeout: "
      "%.2f in all (the one walk and the DEL included), %.2f once the walk is done "
      "(SETs only; target <= 1)" % (checkins, wait, extra / wait, checkins / wait))
print("ratio of all calls with / without: %.3f" %
      (sum(tot["with"].values()) / max(1, sum(tot["without"].values()))))
PY
