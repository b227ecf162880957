#!/usr/bin/env bash
# protocol.sh: the Lua scripts in lua/ against a real redis-server on loopback.
# Starts its own Redis on a free port, asserts each script's replies and the
# state it leaves, prints "N passed, N failed" and exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
PORT=${RWLOCK_TEST_REDIS_PORT:-6391}
DIR=$(mktemp -d)
redis-server --port "$PORT" --bind 127.0.0.1 --save '' --appendonly no \
  --dir "$DIR" --daemonize yes --pidfile "$DIR/redis.pid" >/dev/null
trap 'redis-cli -p "$PORT" shutdown nosave >/dev/null 2>&1; rm -rf "$DIR"' EXIT
for _ in $(seq 50); do redis-cli -p "$PORT" ping >/dev/null 2>&1 && break; sleep 0.1; done

pass=0 fail=0
K='rw:{a} rw:{a}:r rw:{a}:q'
run() { local s=$1; shift; redis-cli -p "$PORT" --eval "lua/$s.lua" $K , "$@" | tr '\n' ' ' | sed 's/ $//'; }
check() {  # description, expected (shell glob), actual
  if [[ "$3" == $2 ]]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1: expected '$2', got '$3'"; fi
}

check "reader granted, token 0"          "1 0"        "$(run acquire 1 o1 r 30000 2000 600000)"
check "writer busy behind reader"        "0 *"        "$(run acquire 1 o2 w 30000 2000 600000)"
check "new reader queues behind intent"  "0 *"        "$(run acquire 1 o3 r 30000 2000 600000)"
check "info shows read, o2 waiting"      "read 0  0 o1 * o2 *" "$(run info 1)"
check "upgrade by sole reader granted"   "1 1*"       "$(run acquire 1 o1 w 30000 2000 600000)"
tok1=$(run acquire 1 o1 w 30000 2000 600000 | cut -d' ' -f2)
check "re-entrant write keeps token"     "1 $tok1"    "$(run acquire 1 o1 w 30000 2000 600000)"
check "downgrade keeps read"             "1"          "$(run release 1 o1 r 30000 600000)"
check "info after downgrade"             "read $tok1  0 o1 * o2 *" "$(run info 1)"
check "withdraw intent"                  "1"          "$(run release 1 o2 q 0 600000)"
check "release"                          "1"          "$(run release 1 o1 '' 0 600000)"
check "release again: not held"          "0"          "$(run release 1 o1 '' 0 600000)"
check "free lock keeps only the token"   "rw:{a}"     "$(redis-cli -p "$PORT" keys '*' | tr '\n' ' ' | sed 's/ $//')"
tok2=$(run acquire 1 o2 w 30000 0 600000 | cut -d' ' -f2)
check "tokens strictly increase"         "yes"        "$([ "$tok2" -gt "$tok1" ] && echo yes || echo "no $tok1 $tok2")"
check "reader sees last write token"     "0 *"        "$(run acquire 1 o3 r 30000 0 600000)"
check "renew by holder"                  "1"          "$(run renew 1 o2 30000 600000)"
check "renew by stranger"                "0"          "$(run renew 1 o9 30000 600000)"
run release 1 o2 '' 0 600000 >/dev/null
check "reader after writer: write token" "1 $tok2"    "$(run acquire 1 o3 r 30000 0 600000)"
run acquire 1 o4 r 30000 0 600000 >/dev/null
check "first upgrader waits"             "0 *"        "$(run acquire 1 o3 w 30000 2000 600000)"
check "second upgrader: conflict"        "-1 o3"      "$(run acquire 1 o4 w 30000 2000 600000)"
run release 1 o3 '' 0 600000 >/dev/null; run release 1 o4 '' 0 600000 >/dev/null
check "short lease expires"              "1 *"        "$(run acquire 1 o5 w 500 0 600000)"
sleep 0.7
check "expired hold is lost"             "0"          "$(run renew 1 o5 30000 600000)"
check "other writer after expiry"        "1 *"        "$(run acquire 1 o6 w 30000 0 600000)"
run release 1 o6 '' 0 600000 >/dev/null
# readers who waited for a writer go before the next writer, for a turn
run acquire 1 w1 w 30000 0 600000 >/dev/null
check "reader waits for writer"          "0 *"        "$(run acquire 1 r1 r 30000 2000 600000)"
check "next writer waits (intent)"       "0 *"        "$(run acquire 1 w2 w 30000 2000 600000)"
check "writer leaves"                    "1"          "$(run release 1 w1 '' 0 600000)"
check "turn: next writer still waits"    "0 *"        "$(run acquire 1 w2 w 30000 2000 600000)"
check "turn: waiting reader passes intent" "1 *"      "$(run acquire 1 r1 r 30000 2000 600000)"
check "turn: writer waits for reader"    "0 *"        "$(run acquire 1 w2 w 30000 2000 600000)"
check "last reader leaves: turn over"    "1"          "$(run release 1 r1 '' 0 600000)"
check "writer enters after the turn"     "1 *"        "$(run acquire 1 w2 w 30000 2000 600000)"
check "a try (no wait) leaves no mark"   "0 *"        "$(run acquire 1 r2 r 30000 0 600000)"
run release 1 w2 '' 0 600000 >/dev/null
check "no reader waited: no turn"        "1 *"        "$(run acquire 1 w3 w 30000 0 600000)"
check "reader waits again"               "0 *"        "$(run acquire 1 r2 r 30000 2000 600000)"
run release 1 w3 '' 0 600000 >/dev/null
sleep 0.15
check "a turn nobody uses runs out"      "1 *"        "$(run acquire 1 w4 w 30000 0 600000)"
run release 1 w4 '' 0 600000 >/dev/null
# a reader's mark goes when no writer holds or waits: no turn for nobody later
run acquire 1 s1 r 30000 0 600000 >/dev/null
check "writer waits for reader"          "0 *"        "$(run acquire 1 s2 w 30000 2000 600000)"
check "new reader waits behind intent"   "0 *"        "$(run acquire 1 s3 r 30000 2000 600000)"
check "writer gives up"                  "1"          "$(run release 1 s2 q 0 600000)"
check "the reader's mark goes with it"   ""           "$(redis-cli -p "$PORT" hget 'rw:{a}' rw)"
check "the reader gets in"               "1 *"        "$(run acquire 1 s3 r 30000 2000 600000)"
run release 1 s3 '' 0 600000 >/dev/null; run release 1 s1 '' 0 600000 >/dev/null
run acquire 1 s4 w 30000 0 600000 >/dev/null; run release 1 s4 '' 0 600000 >/dev/null
check "no turn after a lone writer"      "1 *"        "$(run acquire 1 s5 w 30000 0 600000)"
run release 1 s5 '' 0 600000 >/dev/null
run acquire 1 e1 w 500 0 600000 >/dev/null
check "reader waits for a writer"        "0 *"        "$(run acquire 1 e2 r 30000 2000 600000)"
sleep 0.6
check "writer's lease ran out: reader in" "1 *"       "$(run acquire 1 e2 r 30000 2000 600000)"
check "and its mark is gone"             ""           "$(redis-cli -p "$PORT" hget 'rw:{a}' rw)"
run release 1 e2 '' 0 600000 >/dev/null
run acquire 1 d1 w 30000 0 600000 >/dev/null
redis-cli -p "$PORT" pexpire 'rw:{a}' 5000 >/dev/null   # as if renewed long ago
check "downgrade with a long lease"      "1"          "$(run release 1 d1 r 90000 1000)"
check "hash outlives the kept read lock" "yes"        "$([ "$(redis-cli -p "$PORT" pttl 'rw:{a}')" -gt 90000 ] && echo yes || echo no)"
run release 1 d1 '' 0 600000 >/dev/null
redis-cli -p "$PORT" hset 'rw:{a}' v 2 >/dev/null
check "protocol version mismatch"        "*RWLOCK_VERSION*" "$(run acquire 1 o7 w 30000 0 600000 2>&1)"

echo "protocol: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
