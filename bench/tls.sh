# bench/tls.sh: case b over TLS (rediss://) next to the same over plain TCP,
# in the same run. Sourced by bench/run.sh after its other cases (it uses
# run.sh's WORK, RPORT, BENCH, REPS, free_port, bench_pg, log and cleanup).
#
# A second Redis, with TLS only (certificates made here with openssl: a CA
# and a server certificate for 127.0.0.1), runs beside run.sh's plain one.
# Each repetition measures `redis_wlock` + `redis_unlock` (1 client) over
# plain TCP, then over TLS (server certificate and host verified, the
# default), so that the report's ratio is taken within each repetition.
# The keys: b_1tcp_* (plain), b_1tls_* (TLS).

TLSDIR=$WORK/tls
mkdir -p "$TLSDIR"
tls_key() { openssl genpkey -algorithm EC -pkeyopt ec_paramgen_curve:prime256v1 -out "$1" 2>/dev/null; }
tls_key "$TLSDIR/ca.key"
openssl req -x509 -new -key "$TLSDIR/ca.key" -out "$TLSDIR/ca.crt" -days 30 \
  -subj /CN=rwlock-bench-ca 2>/dev/null
tls_key "$TLSDIR/server.key"
openssl req -new -key "$TLSDIR/server.key" -out "$TLSDIR/server.csr" -subj /CN=127.0.0.1 2>/dev/null
echo 'subjectAltName=IP:127.0.0.1' >"$TLSDIR/server.ext"
openssl x509 -req -in "$TLSDIR/server.csr" -CA "$TLSDIR/ca.crt" -CAkey "$TLSDIR/ca.key" \
  -set_serial 1 -out "$TLSDIR/server.crt" -days 30 -extfile "$TLSDIR/server.ext" 2>/dev/null
chmod 644 "$TLSDIR"/*    # the server's OS user reads the CA; Redis runs as us

TPORT=$(free_port $((RPORT + 1)))
tls_cli() { redis-cli --tls --cacert "$TLSDIR/ca.crt" -p "$TPORT" "$@"; }
log "== TLS: starting Redis with TLS on 127.0.0.1:$TPORT"
redis-server --port 0 --tls-port "$TPORT" --bind 127.0.0.1 \
  --tls-cert-file "$TLSDIR/server.crt" --tls-key-file "$TLSDIR/server.key" \
  --tls-ca-cert-file "$TLSDIR/ca.crt" --tls-auth-clients no \
  --save '' --appendonly no --dir "$TLSDIR" \
  --daemonize yes --pidfile "$TLSDIR/redis.pid" --logfile "$TLSDIR/redis.log" >/dev/null
for _ in $(seq 50); do tls_cli ping >/dev/null 2>&1 && break; sleep 0.1; done
trap 'tls_cli shutdown nosave >/dev/null 2>&1 || true; cleanup' EXIT
tls_cli ping >/dev/null || { log "TLS Redis did not start"; return 1; }

TLS_OPTS="-c rwlock.redis_url=rediss://127.0.0.1:$TPORT/0 -c rwlock.tls_ca_file=$TLSDIR/ca.crt"
log "== TLS: redis_wlock + redis_unlock, 1 client, plain TCP then TLS, $REPS repetitions"
PGOPTS_EXTRA="$TLS_OPTS" pgbench -n -M prepared -T 1 -c 1 -f "$BENCH/sql/b_session.sql" >/dev/null 2>&1
for rep in $(seq "$REPS"); do
  bench_pg b_1tcp 1 b_session.sql
  PGOPTS_EXTRA="$TLS_OPTS" bench_pg b_1tls 1 b_session.sql
done
tls_cli shutdown nosave >/dev/null 2>&1 || true
