# bench/lib.sh: what the stand-alone topology benches (cluster.sh, quorum.sh)
# share: a work directory with a private copy of this tree's build, free
# ports, a throw-away PostgreSQL that loads the copy, a pgbench run recorded
# in $RAW, and the cleanup (every Redis in PORTS, PostgreSQL, the
# directory). Source it from the tree's top directory; it sources
# tools/redis.sh and sets BENCH, T (BENCH_SECONDS, default 3), REPS
# (BENCH_REPS, default 3), WORK, RUNAS, PGUSER_NAME, PORTS, RAW and the
# EXIT trap.

. tools/redis.sh
BENCH=$PWD/bench
T=${BENCH_SECONDS:-3}
REPS=${BENCH_REPS:-3}
PGBIN=$(pg_config --bindir 2>/dev/null || echo /usr/lib/postgresql/15/bin)
export PATH=$PGBIN:$PATH

log() { printf '%s\n' "$*" >&2; }
port_busy() { ss -Htln "sport = :$1" 2>/dev/null | grep -q . ; }
# The first port from $1 that is free, and (for a cluster's bus) 10000 above.
free_port() {
  local p=$1
  while port_busy "$p" || port_busy $((p + 10000)); do p=$((p + 1)); done
  echo "$p"
}

make -s >/dev/null
WORK=$(mktemp -d /tmp/rwlock-bench-topology.XXXXXX)
chmod 755 "$WORK"
mkdir -p "$WORK/lib"
cp rwlock.so "$WORK/lib/rwlock.so"
sed -e "s|MODULE_PATHNAME|$WORK/lib/rwlock.so|" -e '/^\\echo/d' rwlock--1.0.sql >"$WORK/lib/rwlock.sql"
RUNAS=()
[ "$(id -u)" = 0 ] && RUNAS=(runuser -u postgres --)
PGUSER_NAME=$([ "$(id -u)" = 0 ] && echo postgres || id -un)
PORTS=()
RAW=$WORK/raw.tsv
: >"$RAW"
cleanup() {
  set +e
  for p in "${PORTS[@]}"; do redis_stop "$p"; done
  [ -f "$WORK/pg/postmaster.pid" ] && "${RUNAS[@]}" pg_ctl -D "$WORK/pg" -m immediate stop >/dev/null 2>&1
  rm -rf "$WORK"
}
trap cleanup EXIT

# bench_pg_start <first port> [postgresql.conf lines]: start PostgreSQL with
# rwlock's functions in database postgres; exports PGHOST, PGPORT, PGUSER.
bench_pg_start() {
  PGPORT=$(free_port "$1")
  mkdir -p "$WORK/pg"
  [ "$(id -u)" = 0 ] && chown postgres "$WORK" "$WORK/pg"
  "${RUNAS[@]}" initdb -D "$WORK/pg" -A trust -U "$PGUSER_NAME" --no-sync >/dev/null
  cat >>"$WORK/pg/postgresql.conf" <<EOF
port = $PGPORT
listen_addresses = ''
unix_socket_directories = '$WORK'
max_connections = 50
fsync = off
synchronous_commit = off
log_min_messages = warning
rwlock.key_prefix = 'bench'
${2:-}
EOF
  "${RUNAS[@]}" pg_ctl -D "$WORK/pg" -l "$WORK/pg.log" -w start >/dev/null
  export PGHOST=$WORK PGPORT PGUSER=$PGUSER_NAME PGDATABASE=postgres
  psql -qX -v ON_ERROR_STOP=1 -f "$WORK/lib/rwlock.sql" >/dev/null
}

# bench_pgbench <key> <clients> [pgbench arguments]: bench/sql/b_session.sql
# for BENCH_SECONDS; records <key>_tps and <key>_lat (ms) in $RAW.
bench_pgbench() {
  local key=$1 clients=$2 jobs=1 out
  shift 2
  [ "$clients" -gt 1 ] && jobs=2
  out=$(pgbench -n -M prepared -T "$T" -c "$clients" -j "$jobs" \
    -f "$BENCH/sql/b_session.sql" "$@" 2>&1) || { log "$out"; exit 1; }
  printf '%s_tps\t%s\n%s_lat\t%s\n' "$key" "$(awk '/^tps = /{print $3}' <<<"$out" | tail -1)" \
    "$key" "$(awk '/^latency average = /{print $4}' <<<"$out")" >>"$RAW"
}
