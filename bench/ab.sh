#!/usr/bin/env bash
# ab.sh: lock + unlock of this tree against an older build, in one run.
#
#   bash bench/ab.sh [REV]        (REV: default d2d460a, the last protocol 2)
#
# Builds REV in a scratch worktree, and loads each build into a database of
# one throw-away PostgreSQL (this tree's in "postgres", REV's in "old", each
# with a key prefix of its own, so their locks never meet) on one Redis.
# Then, BENCH_REPS times (default 5) in turn: pgbench of
# bench/sql/b_session.sql (redis_wlock + redis_unlock, 1 client,
# BENCH_SECONDS each, default 3) against each database, REV first in odd
# repetitions and second in even ones, so that a drift of the machine's
# load falls on both alike. Prints each repetition's latencies and the
# median of the per-repetition ratios (this tree / REV), then the Redis CPU
# of the scripts (bench/scriptcost.py with REV's lua/ as "old": this tree's
# scripts, REV's and the Redisson-style baseline in the same Redis).
# Figures, not a test: nothing fails on a ratio.
set -euo pipefail
cd "$(dirname "$0")/.."
REV=${1:-d2d460a}
export BENCH_SECONDS=${BENCH_SECONDS:-3}
export BENCH_REPS=${BENCH_REPS:-5}
. bench/lib.sh

OLD=$WORK/old-tree
git worktree add -q --detach "$OLD" "$REV"
cleanup_old() { git worktree remove --force "$OLD" >/dev/null 2>&1 || true; cleanup; }
trap cleanup_old EXIT
make -s -C "$OLD" >/dev/null
cp "$OLD/rwlock.so" "$WORK/lib/rwlock_old.so"
sed -e "s|MODULE_PATHNAME|$WORK/lib/rwlock_old.so|" -e '/^\\echo/d' \
  "$OLD/rwlock--1.0.sql" >"$WORK/lib/rwlock_old.sql"

RPORT=$(free_port 7601)
redis_start "$RPORT" "$WORK"
PORTS+=("$RPORT")
bench_pg_start 5601 "rwlock.redis_url = 'redis://127.0.0.1:$RPORT/0'"
psql -qX -c "CREATE DATABASE old" -c "ALTER DATABASE old SET rwlock.key_prefix = 'benchold'"
psql -qX -d old -v ON_ERROR_STOP=1 -f "$WORK/lib/rwlock_old.sql" >/dev/null
for db in postgres old; do     # warm: connections made, scripts cached
  pgbench -n -M prepared -T 1 -c 1 -d "$db" -f bench/sql/b_session.sql >/dev/null 2>&1
done

lat() {   # database -> ms per transaction (lock + unlock)
  pgbench -n -M prepared -T "$T" -c 1 -f bench/sql/b_session.sql "$1" 2>&1 |
    awk '/^latency average = /{print $4}'
}
ratios=()
printf '%-4s %12s %12s %8s\n' rep "this (ms)" "$REV (ms)" ratio
for i in $(seq "$REPS"); do
  if [ $((i % 2)) = 1 ]; then o=$(lat old); n=$(lat postgres); else n=$(lat postgres); o=$(lat old); fi
  r=$(awk -v n="$n" -v o="$o" 'BEGIN{printf "%.3f", n / o}')
  ratios+=("$r")
  printf '%-4s %12s %12s %8s\n' "$i" "$n" "$o" "$r"
done
printf '%s\n' "${ratios[@]}" | sort -n |
  awk '{a[NR]=$1} END{printf "lock+unlock latency, this / %s: median of %d ratios %.3f\n", rev, NR, (NR%2 ? a[(NR+1)/2] : (a[NR/2]+a[NR/2+1])/2)}' rev="$REV"

echo "Redis CPU per script call (INFO commandstats), this tree's scripts, $REV's (old) and the Redisson-style baseline:"
/usr/bin/python3 bench/scriptcost.py --port "$RPORT" --old-lua "$OLD/lua" --reps "${BENCH_CPU_REPS:-25}"
