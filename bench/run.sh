#!/usr/bin/env bash
# bench/run.sh: rwlock's benchmark. Builds and installs the extension, starts
# its own Redis and its own throw-away PostgreSQL cluster, measures every
# figure next to a baseline taken in the same run, prints a table and writes
# bench/results.md and bench/chart.png. See bench/README.md.
#
# Settings (environment):
#   BENCH_SECONDS  seconds of each pgbench run (default 2)
#   BENCH_REPS     repetitions of each pgbench/Redis measurement, interleaved;
#                  the report shows medians (default 3)
#   REDIS_PORT     first port tried for the bench's Redis (default 6395)
#   PG_PORT        first port tried for the bench's PostgreSQL (default 5495)
#   BENCH_INSTALL  1: always `make install`; 0: never; unset: only when rwlock
#                  is not installed at all. The bench itself always loads a
#                  private copy of this tree's build, never the shared install.
#   BENCH_PRELOAD  1: put the library in shared_preload_libraries
#   BENCH_PROFILE  1: also profile case b (1 client) with perf (bench/profile.sh,
#                  writes bench/profile.txt); only: the profile, no measurements
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/redis.sh
ROOT=$(pwd)
BENCH=$ROOT/bench
T=${BENCH_SECONDS:-2}
REPS=${BENCH_REPS:-3}
PY=/usr/bin/python3
PGBIN=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
[ -x "$PGBIN/pgbench" ] || PGBIN=/usr/lib/postgresql/15/bin
export PATH=$PGBIN:$PATH

log() { printf '%s\n' "$*" >&2; }

# Ports other engineers use: never ours.
port_reserved() { [ "$1" = 6379 ] || { [ "$1" -ge 6381 ] && [ "$1" -le 6392 ]; }; }
port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q . ; }
free_port() {
  local p=$1
  while port_reserved "$p" || port_busy "$p"; do p=$((p + 1)); done
  echo "$p"
}

# ---- build ------------------------------------------------------------------
bash tools/install-deps.sh	# packages missing on a fresh machine, if any
log "== building rwlock"
make -s >/dev/null
if [ "${BENCH_INSTALL:-}" = 1 ] ||
   { [ "${BENCH_INSTALL:-}" != 0 ] && [ ! -f "$(pg_config --sharedir)/extension/rwlock.control" ]; }; then
  log "== installing rwlock"
  make -s install >/dev/null
fi

# ---- servers ----------------------------------------------------------------
WORK=$(mktemp -d /tmp/rwlock-bench.XXXXXX)
chmod 755 "$WORK"
# The bench loads a private copy of this tree's build, not the shared install
# (which other trees overwrite at any moment): the SQL script is run with
# MODULE_PATHNAME pointing at the copy.
mkdir -p "$WORK/lib"
cp rwlock.so "$WORK/lib/rwlock.so"
sed -e "s|MODULE_PATHNAME|$WORK/lib/rwlock.so|" -e '/^\\echo/d' rwlock--1.0.sql >"$WORK/lib/rwlock.sql"
RPORT=$(free_port "${REDIS_PORT:-6395}")
PGPORT=$(free_port "${PG_PORT:-5495}")
PGDATA=$WORK/pg
RUNAS=()
[ "$(id -u)" = 0 ] && RUNAS=(runuser -u postgres --)
PGUSER_NAME=$([ "$(id -u)" = 0 ] && echo postgres || id -un)

cleanup() {
  set +e
  redis-cli -p "$RPORT" shutdown nosave >/dev/null 2>&1
  [ -f "$PGDATA/postmaster.pid" ] && "${RUNAS[@]}" pg_ctl -D "$PGDATA" -m immediate stop >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

log "== starting Redis on 127.0.0.1:$RPORT"
redis_start "$RPORT" "$WORK" --unixsocket "$WORK/redis.sock" --unixsocketperm 777

log "== starting PostgreSQL on port $PGPORT (socket in $WORK)"
mkdir -p "$PGDATA"
[ "$(id -u)" = 0 ] && chown postgres "$WORK" "$PGDATA"
"${RUNAS[@]}" initdb -D "$PGDATA" -A trust -U "$PGUSER_NAME" --no-sync >/dev/null
cat >>"$PGDATA/postgresql.conf" <<EOF
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$WORK'
max_connections = 130
shared_buffers = 128MB
fsync = off
synchronous_commit = off
full_page_writes = off
log_min_messages = warning
rwlock.redis_url = 'redis://127.0.0.1:$RPORT/0'
rwlock.key_prefix = 'bench'
EOF
[ "${BENCH_PRELOAD:-0}" = 1 ] && echo "shared_preload_libraries = '$WORK/lib/rwlock.so'" >>"$PGDATA/postgresql.conf"
"${RUNAS[@]}" pg_ctl -D "$PGDATA" -l "$WORK/pg.log" -w start >/dev/null
export PGHOST=$WORK PGPORT PGUSER=$PGUSER_NAME PGDATABASE=postgres
psql -qX -v ON_ERROR_STOP=1 -f "$WORK/lib/rwlock.sql" -f "$BENCH/setup.sql" >/dev/null

export WORK RPORT
if [ "${BENCH_PROFILE:-0}" = only ]; then
  bash "$BENCH/profile.sh"
  exit 0
fi

RAW=$WORK/raw.tsv
: >"$RAW"
put() { printf '%s\t%s\n' "$1" "$2" >>"$RAW"; }

# pgbench: put <key>_tps and <key>_lat (ms) for a script at C clients.
bench_pg() {
  local key=$1 clients=$2 script=$3 jobs=1 out
  [ "$clients" -gt 1 ] && jobs=2
  out=$(PGOPTIONS=${PGOPTS_EXTRA:-} pgbench -n -M prepared -T "$T" -c "$clients" -j "$jobs" -f "$BENCH/sql/$script" 2>&1) ||
    { log "$out"; return 1; }
  local tps lat
  tps=$(awk '/^tps = /{print $3}' <<<"$out" | tail -1)
  lat=$(awk '/^latency average = /{print $4}' <<<"$out")
  put "${key}_tps" "$tps"
  put "${key}_lat_ms" "$lat"
  log "   $key ($clients clients, $script): $tps tps, $lat ms"
}

# redis-benchmark, 1 client: put <key>_us (µs per command, from requests/s).
bench_redis() {
  local key=$1 n=$2; shift 2
  local rps
  rps=$(redis-benchmark -p "$RPORT" -c 1 -n "$n" --csv "$@" 2>/dev/null | awk -F'"' 'NR==2{print $4}')
  put "${key}_us" "$(awk -v r="$rps" 'BEGIN{printf "%.2f", 1e6 / r}')"
  log "   $key: $rps req/s"
}

# ---- a, b, c, e: interleaved repetitions; the report takes medians -------------
cc -O2 -o "$WORK/redis_rtt" "$BENCH/redis_rtt.c" -lhiredis
ONE_SHA=$(redis-cli -p "$RPORT" script load "return 1")
rtt() { put "$1_us" "$("$WORK/redis_rtt" "$RPORT" "$2" "${@:3}")"; }

log "== warm-up"
pgbench -n -M prepared -T 1 -c 2 -j 2 -f "$BENCH/sql/b_session.sql" >/dev/null 2>&1
for rep in $(seq "$REPS"); do
  log "== repetition $rep of $REPS"
  # b's 1-client run sits right after its floor: the report also takes the
  # median of per-repetition ratios, which cancels slow drifts of the machine.
  log "-- a. floor: PostgreSQL and Redis round trips; b. redis_wlock + redis_unlock"
  bench_pg a_pg 1 select1.sql
  rtt a_pair "$T" pair lua/acquire.lua lua/release.lua
  bench_pg b_1 1 b_session.sql
  bench_pg a_info 1 a_info.sql
  bench_pg b_16 16 b_session.sql
  bench_pg b_adv 1 b_advisory.sql
  PGOPTS_EXTRA="-c rwlock.redis_url=unix://$WORK/redis.sock" bench_pg b_1unix 1 b_session.sql
  rtt a_ping 1 ping
  rtt a_eval1 1 eval1
  rtt a_chain 1 chain
  bench_redis a_rb_ping 10000 PING
  # (no redis-benchmark of acquire.lua + release.lua: protocol 3's request
  # numbers must grow per call, which redis-benchmark cannot send; the
  # hiredis loop's pair above is the figure)
  log "-- c. redis_wlock_xact vs pg_advisory_xact_lock, autocommit"
  bench_pg c_adv 1 c_advisory.sql
  bench_pg c_rw 1 c_xact.sql
  PGOPTS_EXTRA="-c rwlock.redis_url=unix://$WORK/redis.sock" bench_pg c_rwunix 1 c_xact.sql
  log "-- e. 16 readers on one name"
  bench_pg e_adv 16 e_advisory_shared.sql
  bench_pg e_rw 16 e_rlock.sql
done

# ---- d. stacked re-lock of a held lock, PL/pgSQL loop -----------------------
log "== d. stacked re-lock + unlock in a PL/pgSQL loop"
N_LOOP=100000
best_rw=; best_adv=
for _ in 1 2 3; do
  adv=$(psql -qXAt -c "SELECT bench_loop_advisory($N_LOOP)")
  rw=$(psql -qXAt -c "SELECT bench_loop_rwlock($N_LOOP)")
  best_adv=$(awk -v a="$adv" -v b="$best_adv" 'BEGIN{print (b == "" || a < b) ? a : b}')
  best_rw=$(awk -v a="$rw" -v b="$best_rw" 'BEGIN{print (b == "" || a < b) ? a : b}')
done
put d_adv_us "$best_adv"
put d_rw_us "$best_rw"
log "   advisory $best_adv µs/iteration, rwlock $best_rw µs/iteration (best of 3)"

# ---- f. application-side peer: redis-py Lock ---------------------------------
log "== f. redis-py Lock acquire + release"
put f_redispy_us "$($PY "$BENCH/redispy_lock.py" --port "$RPORT" --seconds "$T")"

# ---- g. hand-off latency ------------------------------------------------------
log "== g. hand-off latency (bench/handoff.py)"
$PY "$BENCH/handoff.py" --dsn "host=$WORK port=$PGPORT user=$PGUSER_NAME dbname=postgres" \
  --redis-port "$RPORT" --tsv >>"$RAW"

# ---- TLS: b over rediss:// beside plain TCP (bench/tls.sh) --------------------
source "$BENCH/tls.sh" || log "TLS case failed: no TLS row"
# ---- h. hand-offs with many waiters -------------------------------------------
log "== h. hand-offs with 10, 50, 100 waiting writers (bench/drain.py)"
$PY "$BENCH/drain.py" --dsn "host=$WORK port=$PGPORT user=$PGUSER_NAME dbname=postgres" \
  --redis-port "$RPORT" --waiters 10,50,100 --rounds "$REPS" --tsv >>"$RAW"

# ---- i. Redis CPU per script call, against the baselines ----------------------
log "== i. Redis CPU per script call: rwlock, Redisson-style, SET NX PX (bench/scriptcost.py)"
$PY "$BENCH/scriptcost.py" --port "$RPORT" --tsv >>"$RAW"
log "   the same, one command per round trip (as the extension talks)"
$PY "$BENCH/scriptcost.py" --port "$RPORT" --batch 0 --pairs 300 --reps 15 --tag cpuseq --tsv >>"$RAW"

# ---- j. the release at transaction end: EVAL's cost to Redis --------------------
log "== j. Redis CPU of release.lua by EVAL (as sent at transaction end) and EVALSHA (bench/evalcost.py)"
$PY "$BENCH/evalcost.py" --port "$RPORT" >&2

# ---- wait_replicas: b with WAIT 1 beside 0 (bench/replicas.sh) ---------------
source "$BENCH/replicas.sh" || log "replicas case failed: no wait_replicas row"

# ---- optional profile --------------------------------------------------------
if [ "${BENCH_PROFILE:-0}" = 1 ]; then
  log "== profile of b, 1 client"
  bash "$BENCH/profile.sh" || log "profile failed"
fi

# ---- report -------------------------------------------------------------------
cp "$RAW" "$BENCH/raw.tsv"
$PY "$BENCH/report.py" "$RAW" "$BENCH/results.md" "$WORK/chart.dat"
if command -v gnuplot >/dev/null; then
  gnuplot -e "datafile='$WORK/chart.dat'; outfile='$BENCH/chart.png'" "$BENCH/chart.gp" ||
    log "gnuplot failed; no chart"
fi
log "== wrote bench/results.md, bench/chart.png, bench/raw.tsv"
