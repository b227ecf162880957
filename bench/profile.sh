#!/usr/bin/env bash
# bench/profile.sh: where a backend spends its time in case b (redis_wlock +
# redis_unlock, 1 client, session level). Run by bench/run.sh with
# BENCH_PROFILE=1 (or BENCH_PROFILE=only to skip the measurements), inside the
# environment it set up (PGHOST, PGPORT, PGUSER, PGDATABASE, WORK, RPORT).
# Writes bench/profile.txt:
#   1. backend CPU per pair (from /proc/<pid>/stat), rwlock vs advisory vs SELECT 1;
#   2. system calls per pair (strace -c on the backend);
#   3. perf: on-CPU profile of the backend, flat and by caller.
set -euo pipefail
BENCH=$(cd "$(dirname "$0")" && pwd)
OUT=$BENCH/profile.txt
SECS=${PROFILE_SECONDS:-5}
: "${WORK:?run me from bench/run.sh}"

# Nanoseconds a process has spent on a CPU.
oncpu() { awk '{print $1}' "/proc/$1/schedstat"; }

# Start pgbench on a script, 1 client, for $2 seconds; $pid is its backend.
start_pgbench() {
  PGOPTIONS=${PROF_PGOPTIONS:-} pgbench -n -M prepared -T "$2" -c 1 -f "$BENCH/sql/$1" >"$WORK/prof_pgbench.out" 2>&1 &
  PGB=$!
  sleep 0.5   # pgbench's first connection is a short-lived probe: skip it
  for _ in $(seq 100); do
    pid=$(psql -qXAt -c "SELECT pid FROM pg_stat_activity WHERE application_name = 'pgbench' LIMIT 1")
    [ -n "$pid" ] && return 0
    sleep 0.05
  done
  echo "no pgbench backend" >&2
  return 1
}
finish_pgbench() { wait "$PGB"; }
pgbench_tps() { awk '/^tps = /{print $3}' "$WORK/prof_pgbench.out"; }

{
  echo "# Profile of case b: SELECT redis_wlock(n); SELECT redis_unlock(n); 1 client"
  echo "# $(date -u '+%Y-%m-%d %H:%M UTC'), $(git -C "$BENCH/.." rev-parse --short HEAD)"
  echo
  echo "## 1. Backend CPU per script run (on-CPU ns from /proc/<pid>/schedstat,"
  echo "##    runs counted by pgbench; 1 client)"
  echo
  for s in b_session.sql b_session.sql@unix b_advisory.sql select1.sql c_xact.sql c_advisory.sql; do
    PROF_PGOPTIONS=
    [ "${s#*@}" = unix ] && PROF_PGOPTIONS="-c rwlock.redis_url=unix://$WORK/redis.sock"
    PROF_PGOPTIONS=$PROF_PGOPTIONS start_pgbench "${s%@*}" "$SECS"
    sleep 0.5
    c0=$(oncpu "$pid"); t0=$(date +%s.%N)
    sleep $((SECS - 2))
    c1=$(oncpu "$pid"); t1=$(date +%s.%N)
    finish_pgbench
    tps=$(pgbench_tps)
    awk -v s="$s" -v c0="$c0" -v c1="$c1" -v tps="$tps" -v t0="$t0" -v t1="$t1" \
      'BEGIN{n=tps*(t1-t0); printf "%-20s %7.0f runs/s  %7.1f µs wall per run  backend on CPU %6.1f µs per run (%3.0f%%)\n", s, tps, 1e6/tps, (c1-c0)/1000/n, (c1-c0)/1e9/(t1-t0)*100}'
  done
  echo
  echo "## 2. Redis's side of case b: commands per pair and server time per command"
  echo "##    (INFO commandstats over a ${SECS}s run)"
  echo
  redis-cli -p "$RPORT" config resetstat >/dev/null
  start_pgbench b_session.sql "$SECS"
  finish_pgbench
  tps=$(pgbench_tps)
  pairs=$(awk -v t="$tps" -v s="$SECS" 'BEGIN{printf "%d", t * s}')
  echo "pairs (pgbench tps x seconds): ~$pairs"
  redis-cli -p "$RPORT" info commandstats | tr -d '\r' | grep '^cmdstat_' |
    sed -e 's/^cmdstat_//' -e 's/:calls=/ calls=/' |
    awk -v p="$pairs" -F'[ =,]' '{printf "  %-10s calls %8d (%5.2f per pair)  usec_per_call %s\n", $1, $3, $3 / p, $7}'
  echo
  echo "## 3. System calls of the backend per pair (strace -c, 2 s; strace slows it)"
  echo
  start_pgbench b_session.sql 4
  sleep 0.5
  timeout -s INT 2 strace -c -f -p "$pid" -o "$WORK/strace.txt" >/dev/null 2>&1 || true
  finish_pgbench
  echo "(the backend reads each client statement with recvfrom and answers with sendto;"
  echo " hiredis writes each Redis command with write and reads its reply with read)"
  cat "$WORK/strace.txt"
  echo
  if command -v perf >/dev/null; then
    echo "## 4. perf record -g (frame pointers) of the backend, ${SECS}s"
    echo
    start_pgbench b_session.sql $((SECS + 2))
    sleep 1
    perf record -q -F 2999 -g -p "$pid" -o "$WORK/perf.data" -- sleep "$SECS" >/dev/null 2>&1 || true
    finish_pgbench
    echo "### by object (self)"
    perf report -i "$WORK/perf.data" --no-children --sort dso --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | head -12 || true
    echo
    echo "### user-space symbols (self), top 40"
    perf report -i "$WORK/perf.data" --no-children --sort dso,sym --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | grep -v kernel.kallsyms | head -40 || true
    echo
    echo "### rwlock.so and libhiredis functions, inclusive (children) and self;"
    echo "### a second recording with --call-graph dwarf, which unwinds through libc"
    start_pgbench b_session.sql $((SECS + 2))
    sleep 1
    perf record -q -F 499 --call-graph dwarf,16384 -p "$pid" -o "$WORK/perf2.data" -- sleep "$SECS" >/dev/null 2>&1 || true
    finish_pgbench
    perf report -i "$WORK/perf2.data" --children --sort dso,sym --stdio -g none 2>/dev/null |
      grep -E '^ +[0-9]' | grep -E 'rwlock\.so|hiredis|PostgresMain|ExecutorRun|exec_execute|epoll|__libc_(write|read)|CommitTransaction|finish_xact' | head -50 || true
  fi
} >"$OUT"
echo "wrote $OUT" >&2
