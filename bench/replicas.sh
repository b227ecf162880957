# bench/replicas.sh: case b with rwlock.wait_replicas = 1 next to the same
# with 0, in the same run, against run.sh's Redis as the master. Sourced by
# bench/run.sh after its other cases (it uses run.sh's WORK, RPORT, BENCH,
# REPS, free_port, bench_pg, log and cleanup, and tools/redis.sh).
#
# A replica of run.sh's Redis is started here (loopback, diskless sync) and
# waited for (master_link_status:up). Each repetition measures
# `redis_wlock` + `redis_unlock` (1 client) with rwlock.wait_replicas = 0,
# then = 1 (WAIT 1 pipelined after the acquire script: one round trip, the
# replica's acknowledgement included), so the report's ratio is taken
# within each repetition. The keys: b_1w0_* and b_1w1_*.

WDIR=$WORK/replica
mkdir -p "$WDIR"
WPORT=$(free_port $((RPORT + 2)))
log "== replicas: starting a replica of 127.0.0.1:$RPORT on $WPORT"
redis_start "$WPORT" "$WDIR" --replicaof 127.0.0.1 "$RPORT" || return 1
trap 'redis_stop "$WPORT"; cleanup' EXIT
for _ in $(seq 200); do
  redis-cli -p "$WPORT" info replication 2>/dev/null | grep -q 'master_link_status:up' && break
  sleep 0.1
done
redis-cli -p "$WPORT" info replication | grep -q 'master_link_status:up' ||
  { log "the replica did not sync"; return 1; }

log "== replicas: redis_wlock + redis_unlock, 1 client, wait_replicas 0 then 1, $REPS repetitions"
PGOPTIONS="-c rwlock.wait_replicas=1" pgbench -n -M prepared -T 1 -c 1 -f "$BENCH/sql/b_session.sql" >/dev/null 2>&1
for rep in $(seq "$REPS"); do
  PGOPTS_EXTRA="-c rwlock.wait_replicas=0" bench_pg b_1w0 1 b_session.sql
  PGOPTS_EXTRA="-c rwlock.wait_replicas=1" bench_pg b_1w1 1 b_session.sql
done
redis_stop "$WPORT"
