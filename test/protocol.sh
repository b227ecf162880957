#!/usr/bin/env bash
# protocol.sh: the Lua scripts in lua/ against a real redis-server on loopback.
# Starts its own Redis on a free port, asserts each script's replies and the
# state it leaves, prints "N passed, N failed" and exits non-zero on failure.
set -u
cd "$(dirname "$0")/.."
PORT=${RWLOCK_TEST_REDIS_PORT:-6391}
. tools/redis.sh
DIR=$(mktemp -d)
trap 'redis_stop "$PORT"; rm -rf "$DIR"' EXIT
redis_start "$PORT" "$DIR" || exit 1

pass=0 fail=0
K='rw:{a} rw:{a}:q'
V=3                      # the protocol version these scripts speak
# seq: each acquire and release takes the next request number (one counter
# for every owner here, kept in a file, so it survives subshells and never
# goes back per owner; shell builtins only: no process per call, so the
# steps keep to their 100 ms turns and 2 s intents on a loaded machine); a
# renewal or fence goes as of the newest.
echo 0 >"$DIR/seq"
seqarg() {
  local n
  read -r n <"$DIR/seq"
  case $1 in
    acquire|release) n=$((n + 1)); echo "$n" >"$DIR/seq" ;;
  esac
  echo "$n"
}
# run SCRIPT ARGS...: acquire, release, renew and fence speak the lean
# calling convention (the scripts' header comments): OWNER first, then its seq (added
# here), then the rest, the version being the script's own; mark and keep
# are left out where they are the defaults (0 and 600000), as clients do.
# info.lua and waits.lua take the version first: "$V" is passed to them.
run() {
  local s=$1; shift
  case $s in
    acquire|release|renew|fence)
      local o=$1; shift
      "$REDIS_CLI" -p "$PORT" --eval "lua/$s.lua" $K , "$o" "$(seqarg "$s")" "$@" ;;
    *) "$REDIS_CLI" -p "$PORT" --eval "lua/$s.lua" $K , "$@" ;;
  esac | tr '\n' ' ' | sed 's/ $//'
}
# raw SCRIPT OWNER SEQ ARGS...: as sent, no seq added (stale requests, by hand).
raw() { local s=$1; shift; "$REDIS_CLI" -p "$PORT" --eval "lua/$s.lua" $K , "$@" | tr '\n' ' ' | sed 's/ $//'; }
check() {  # description, expected (shell glob), actual
  if [[ "$3" == $2 ]]; then pass=$((pass+1)); else fail=$((fail+1)); echo "FAIL: $1: expected '$2', got '$3'"; fi
}

# listen: record the messages published on the lock's channels: rw:{a}:c
# (waiting readers) and rw:{a}:c:<owner> (a waiting writer).
listen() {
  "$REDIS_CLI" -p "$PORT" --csv PSUBSCRIBE 'rw:{a}:c*' >"$DIR/sub.out" 2>/dev/null &
  SUB=$!
  for _ in $(seq 100); do
    [ "$("$REDIS_CLI" -p "$PORT" pubsub numpat)" = 1 ] && return
    sleep 0.02
  done
}
# heard: what was heard since listen, space-separated: "r" for the readers,
# "w:<owner>" for a writer; stops listening. Redis published it all before
# the call that caused it answered; what may lag is redis-cli writing it out
# (a loaded machine): read once the file has stopped growing for 0.1 s (at
# most 2 s).
heard() {
  local last=-1 now
  for _ in $(seq 20); do
    sleep 0.1
    now=$(wc -c <"$DIR/sub.out")
    [ "$now" = "$last" ] && break
    last=$now
  done
  kill "$SUB" 2>/dev/null; wait "$SUB" 2>/dev/null
  grep '^"pmessage"' "$DIR/sub.out" | cut -d, -f3,4 | tr -d '"' |
    sed -e 's/^rw:{a}:c,r$/r/' -e 's/^rw:{a}:c:\(.*\),w$/w:\1/' | tr '\n' ' ' | sed 's/ $//'
}
# batch: several script calls sent through one "$REDIS_CLI" (no process start
# between them, for steps that must fit in the readers' 100 ms turn); one
# argument per call, "script args..."; prints one reply per line.
batch() {
  local c out=()
  for c in "$@"; do
    set -- $c
    local sha; sha=$("$REDIS_CLI" -p "$PORT" script load "$(cat "lua/$1.lua")")
    local script=$1 owner=$2
    shift 2
    out+=("EVALSHA $sha 2 $K $owner $(seqarg "$script") $*")
  done
  printf '%s\n' "${out[@]}" | "$REDIS_CLI" -p "$PORT" --csv | tr ',' ' ' | tr -d '"'
}
publishes() { "$REDIS_CLI" -p "$PORT" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_publish:calls=\([0-9]*\),.*/\1/p'; }

check "reader granted, token 0"          "0"        "$(run acquire o1 r 30000 2000)"
check "writer busy behind reader"        "-*"        "$(run acquire o2 w 30000 2000)"
check "new reader queues behind intent"  "-*"        "$(run acquire o3 r 30000 2000)"
check "info shows read, o2 waiting"      "read 0  0 o1 * o2 *" "$(run info $V)"
check "upgrade (\"u\") by sole reader granted" "1*" "$(run acquire o1 u 30000 2000)"
tok1=$(run acquire o1 u 30000 2000)
# "u" by the writer itself (a repeat of the upgrade) keeps its token; "w"
# would mean it holds nothing: checked below, where no writer waits.
check "re-entrant write (\"u\") keeps token" "$tok1"    "$(run acquire o1 u 30000 2000)"
check "downgrade keeps read"             "1"          "$(run release o1 r 30000)"
check "info after downgrade"             "read $tok1  0 o1 * o2 *" "$(run info $V)"
check "withdraw intent"                  "1"          "$(run release o2 q)"
check "release"                          "1"          "$(run release o1)"
check "release again: not held"          "0"          "$(run release o1)"
check "free lock keeps only the token"   "rw:{a}"     "$("$REDIS_CLI" -p "$PORT" keys '*' | tr '\n' ' ' | sed 's/ $//')"
tok2=$(run acquire o2 w 30000)
check "tokens strictly increase"         "yes"        "$([ "$tok2" -gt "$tok1" ] && echo yes || echo "no $tok1 $tok2")"
check "reader sees last write token"     "-*"        "$(run acquire o3 r 30000)"
check "renew by holder"                  "1"          "$(run renew o2 30000)"
check "renew by stranger"                "0"          "$(run renew o9 30000)"
run release o2 >/dev/null
check "reader after writer: write token" "$tok2"    "$(run acquire o3 r 30000)"
run acquire o4 r 30000 >/dev/null
check "first upgrader waits"             "-*"        "$(run acquire o3 u 30000 2000)"
check "second upgrader: conflict"        "o3"      "$(run acquire o4 u 30000 2000)"
run release o3 >/dev/null; run release o4 >/dev/null
check "short lease expires"              "[0-9]*"        "$(run acquire o5 w 500)"
sleep 0.7
check "expired hold is lost"             "0"          "$(run renew o5 30000)"
tok6=$(run acquire o6 w 30000)
check "other writer after expiry"        "[0-9]*"        "$tok6"
# Mode "w" says the caller holds nothing: a writer that asks "w" again has
# its w field dropped as left over (a lost release) and is granted anew,
# with a new token (protocol 3's lean convention; before, a repeat without
# a claim kept the token). "u", by the writer, keeps it.
tok7=$(run acquire o6 w 30000)
check "\"w\" again by the writer: a new, larger token" "yes" "$([ "$tok7" -gt "$tok6" ] && echo yes || echo "no $tok6 $tok7")"
check "  \"u\" by the writer keeps it"  "$tok7"      "$(run acquire o6 u 30000)"
check "  the writer still holds"         "o6 0"       "$("$REDIS_CLI" -p "$PORT" hget 'rw:{a}' w) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' r:o6)"
run release o6 >/dev/null
# readers who waited for a writer go before the next writer, for a turn
run acquire w1 w 30000 >/dev/null
check "reader waits for writer"          "-*"        "$(run acquire r1 r 30000 2000)"
check "next writer waits (intent)"       "-*"        "$(run acquire w2 w 30000 2000)"
# (within the turn's 100 ms: one batch)
got=$(batch "release w1" "acquire w2 w 30000 2000" \
            "acquire r1 r 30000 2000" "acquire w2 w 30000 2000" \
            "release r1" "acquire w2 w 30000 2000" | paste -sd'|')
check "writer leaves; turn: the next writer waits, the waiting reader passes its intent, the writer waits for it; the reader leaves, turn over, the writer enters" \
  "1|-*|[0-9]*|-*|1|[0-9]*" "$got"
check "a try (no wait) leaves no mark"   "-*"        "$(run acquire r2 r 30000)"
run release w2 >/dev/null
check "no reader waited: no turn"        "[0-9]*"        "$(run acquire w3 w 30000)"
check "reader waits again"               "-*"        "$(run acquire r2 r 30000 2000)"
run release w3 >/dev/null
sleep 0.15
check "a turn nobody uses runs out"      "[0-9]*"        "$(run acquire w4 w 30000)"
run release w4 >/dev/null
# a reader's mark goes when no writer holds or waits: no turn for nobody later
run acquire s1 r 30000 >/dev/null
check "writer waits for reader"          "-*"        "$(run acquire s2 w 30000 2000)"
check "new reader waits behind intent"   "-*"        "$(run acquire s3 r 30000 2000)"
check "writer gives up"                  "1"          "$(run release s2 q)"
check "the reader's mark goes with it"   ""           "$("$REDIS_CLI" -p "$PORT" hget 'rw:{a}' rw)"
check "the reader gets in"               "[0-9]*"        "$(run acquire s3 r 30000 2000)"
run release s3 >/dev/null; run release s1 >/dev/null
run acquire s4 w 30000 >/dev/null; run release s4 >/dev/null
check "no turn after a lone writer"      "[0-9]*"        "$(run acquire s5 w 30000)"
run release s5 >/dev/null
check "reader waits for a writer"        "[0-9]*|-*"    "$(batch "acquire e1 w 500" "acquire e2 r 30000 2000" | paste -sd'|')"
sleep 0.6
check "writer's lease ran out: reader in" "[0-9]*"       "$(run acquire e2 r 30000 2000)"
check "and its mark is gone"             ""           "$("$REDIS_CLI" -p "$PORT" hget 'rw:{a}' rw)"
run release e2 >/dev/null
run acquire d1 w 30000 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 5000 >/dev/null   # as if renewed long ago:
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' x "$(( $("$REDIS_CLI" -p "$PORT" time | head -1) * 1000 + 5000 ))" >/dev/null
check "downgrade with a long lease"      "1"          "$(run release d1 r 90000 1000)"
check "hash outlives the kept read lock" "yes"        "$([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 90000 ] && echo yes || echo no)"
run release d1 >/dev/null

# ---- hand-offs: who is told, and only when someone may proceed ----
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
"$REDIS_CLI" -p "$PORT" config resetstat >/dev/null
listen
run acquire n1 w 30000 2000 >/dev/null; run release n1 >/dev/null
run acquire n1 r 30000 2000 >/dev/null; run acquire n2 r 30000 2000 >/dev/null
run release n1 >/dev/null; run release n2 >/dev/null
run acquire n1 w 30000 2000 >/dev/null; run release n1 r 30000 >/dev/null
run renew n1 30000 >/dev/null; run release n1 >/dev/null
check "no publish without a waiter"      ""           "$(heard)"
check "  (PUBLISH never ran)"            ""           "$(publishes)"
# three writers queue behind a holder: a release names the first only
# (their intents last 10 s here, so that a slow machine does not let one
# lapse between the steps: the hand-offs, not the intents, are tested)
listen
run acquire h0 w 30000 >/dev/null
check "writer 1 queues"                  "-*"        "$(run acquire h1 w 30000 10000)"
check "writer 2 queues"                  "-*"        "$(run acquire h2 w 30000 10000)"
check "writer 3 queues"                  "-*"        "$(run acquire h3 w 30000 10000)"
check "info: waiting writers in order"   "write * h0 * h1 * h2 * h3 *" "$(run info $V)"
check "a busy writer is told nothing"    ""           "$(heard)"
listen
run release h0 >/dev/null
check "a hand-off names the first writer only" "w:h1" "$(heard)"
check "the second cannot jump the queue" "-*"        "$(run acquire h2 w 30000 10000)"
check "a writer that never waited neither" "-*"      "$(run acquire h9 w 30000)"
check "a new reader waits behind them"   "-*"        "$(run acquire h8 r 30000)"
t1=$(run acquire h1 w 30000 10000)
check "the named writer gets it"         "yes"        "$([ "$t1" -gt "$tok2" ] && echo yes || echo "no $t1")"
check "the token is stored exactly"      "$t1"        "$("$REDIS_CLI" -p "$PORT" hget 'rw:{a}' f)"
# the named writer gives up before taking it: the next one is told at once
listen
run release h1 >/dev/null
run release h2 q >/dev/null
check "named writer cancelled: next told" "w:h2 w:h3"  "$(heard)"
t3=$(run acquire h3 w 30000 10000)
check "and it gets the lock"             "yes"        "$([ "$t3" -gt "$t1" ] && echo yes || echo "no $t3")"
check "the queue is gone with its last writer" "0"    "$("$REDIS_CLI" -p "$PORT" exists 'rw:{a}:q')"
# waiting readers are let through together; the next writer learns of their turn
listen
check "reader 1 waits"                   "-*"        "$(run acquire g1 r 30000 2000)"
check "reader 2 waits"                   "-*"        "$(run acquire g2 r 30000 2000)"
check "writer waits"                     "-*"        "$(run acquire g3 w 30000 2000)"
got=$(batch "release h3" "acquire g1 r 30000 2000" \
            "acquire g2 r 30000 2000" "acquire g3 w 30000 2000" | paste -sd'|')
check "in the readers' turn: both readers in, the writer waits" "1|$t3|$t3|-*" "$got"
check "readers told together, writer told of their turn" "r w:g3" "$(heard)"
listen
run release g1 >/dev/null
check "a reader leaves, one stays: nobody told" ""    "$(heard)"
listen
run release g2 >/dev/null
check "the last reader leaves: writer told" "w:g3"    "$(heard)"
check "writer in"                        "[0-9]*"        "$(run acquire g3 w 30000 2000)"
run release g3 >/dev/null
# a reader waiting to upgrade is told when it is the only reader left
run acquire k1 r 30000 >/dev/null; run acquire k2 r 30000 >/dev/null
check "upgrader waits for the other reader" "-*"     "$(run acquire k1 u 30000 2000)"
check "a writer queues behind the upgrader" "-*"     "$(run acquire k3 w 30000 2000)"
listen
run release k2 >/dev/null
check "the other reader leaves: upgrader told" "w:k1" "$(heard)"
check "upgrader in"                      "[0-9]*"        "$(run acquire k1 u 30000 2000)"
listen
run release k1 >/dev/null
check "then the writer"                  "w:k3"       "$(heard)"
run release k3 q >/dev/null
# a named writer that dies: the next one gets in once its intent lapses
run acquire d0 w 30000 >/dev/null
listen
run acquire d1 w 30000 1000 >/dev/null      # a short intent, to test quickly
check "second writer waits"              "-*"        "$(run acquire d2 w 30000 2000)"
run release d0 >/dev/null
hint=$(run acquire d2 w 30000 2000)
check "the next is told to wait no longer than its intent" "yes" "$([ "$hint" -ge -1000 ] && [ "$hint" -lt 0 ] && echo yes || echo "no $hint")"
check "the dead writer is named"         "w:d1"       "$(heard)"
sleep 1
check "its intent lapsed: the next gets in" "[0-9]*"     "$(run acquire d2 w 30000 2000)"
check "info: nobody waits"               "write * d2 * " "$(run info $V) "
run release d2 >/dev/null
# readers whose leases ran out are noticed without a scan on every call
run acquire x1 r 300 >/dev/null; run acquire x2 r 30000 >/dev/null
check "writer waits for two readers"     "-*"        "$(run acquire x3 w 30000)"
run release x2 >/dev/null
sleep 0.35
check "the other reader's lease ran out" "[0-9]*"        "$(run acquire x3 w 30000)"
check "its field is gone"                "0"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' 'r:x1')"
run release x3 >/dev/null
# ---- leases, TTLs and tokens ----
# The writer's lease is not the hash's TTL (protocol 3, F5 of
# verify/FINDINGS.md): it ends where field we ("<token> <end ms>") says when
# we names the current token (f), else 30000 ms after the token's time
# (f / 1000). A write grant, renewal or release raises the TTL to
# 2 x max(keep, lease) when it is below max(keep, lease); nothing lowers it.
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
pttl() { "$REDIS_CLI" -p "$PORT" pttl 'rw:{a}'; }
nowms() { "$REDIS_CLI" -p "$PORT" time | { read -r s; read -r u; echo $((s * 1000 + 10#$u / 1000)); }; }
hw() { "$REDIS_CLI" -p "$PORT" hget 'rw:{a}' "$1"; }
# wend_in LOW HIGH: the writer's lease end (we's) lies LOW..HIGH ms from now,
# and we names the current token
wend_in() {
  local we f n; we=$(hw we); f=$(hw f); n=$(nowms)
  [ "${we%% *}" = "$f" ] && [ $(( ${we#* } - n )) -gt "$1" ] && [ $(( ${we#* } - n )) -le "$2" ] &&
    echo yes || echo "no we '$we' f $f now $n"
}
ta=$(run acquire l1 w 5000)
check "a write grant raises the TTL to 2 x max(keep, lease)" "yes" "$(p=$(pttl); [ "$p" -le 1200000 ] && [ "$p" -gt 1190000 ] && echo yes || echo "no $p")"
check "  a lease other than 30000 writes its end in we" "yes" "$(wend_in 4000 5000)"
check "renewal"                          "1"          "$(run renew l1 8000)"
check "  rewrites we, to the new lease"  "yes"        "$(wend_in 7000 8000)"
check "  and never lowers the TTL"       "yes"        "$(p=$(pttl); [ "$p" -gt 1180000 ] && echo yes || echo "no $p")"
check "a waiting reader"                 "-*"         "$(run acquire l2 r 30000 2000)"
check "  makes its record live keep past the writer's lease end (x)" "yes" "$(p=$(pttl); e=$(hw we); [ "$p" -ge $(( ${e#* } - $(nowms) + 600000 )) ] && echo yes || echo "no $p")"
check "info: writer's lease left, from we" "write $ta l1 [5-8][0-9][0-9][0-9]*"  "$(run info $V)"
run release l1 >/dev/null
check "released: the token stays for keep" "yes"      "$(p=$(pttl); [ "$p" -gt 590000 ] && echo yes || echo "no $p")"
sleep 0.15                                            # the turn l2's mark started
tb=$(run acquire l3 w 30000)
check "the next token is larger"         "yes" "$([ "$tb" -gt "$ta" ] && echo yes || echo "no $ta $tb")"
run release l3 >/dev/null
run acquire l4 w 300 >/dev/null
sleep 0.4
# w still names it: nobody called after its lease's end (any call would
# have removed w), so it held the lock alone throughout
check "a writer's lapsed lease, nobody came: release says held" "1" "$(run release l4)"
run acquire l7 w 300 >/dev/null
sleep 0.4
check "a writer's lapsed lease, another owner came after its end" "0 0" "$(run release l8) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' w)"
check "  its release then says lost"     "0"          "$(run release l7)"
tc=$(run acquire l5 w 30000)
check "the token after the writer's lapse is larger" "yes" "$([ "$tc" -gt "$tb" ] && echo yes || echo "no $tb $tc")"
run release l5 >/dev/null
run acquire l6 r 300 >/dev/null
sleep 0.4
check "a reader's lapsed lease: release says lost" "0" "$(run release l6)"
# A token is max(last + 1, TIME in µs): a last token from the future counts
# on by one; one from the past (a failover lost the grants after it) gives
# way to the clock, in the fast path and in the general one.
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' f 4000000000000000 >/dev/null
check "a last token ahead of the clock counts on" "4000000000000001" "$(run acquire t1 w 30000)"
run release t1 >/dev/null
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' f 1000 >/dev/null
check "a last token behind the clock: from the clock" "yes" "$(t=$(run acquire t2 w 30000); [ "$t" -gt "$tc" ] && echo yes || echo "no $t")"
run release t2 >/dev/null
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' f 1000 >/dev/null
run acquire t3 r 30000 >/dev/null
check "  and in the general path (an upgrade)" "yes" "$(t=$(run acquire t3 u 30000); [ "$t" -gt "$tc" ] && echo yes || echo "no $t")"
run release t3 >/dev/null
# A token from the clock is written as TIME's seconds and its µs padded to
# six digits (no number formatting): the field must hold the very number
# answered, also when the µs have fewer than six digits (the first 100 ms of
# every second). Rounds of grants, in the fast path and in the general one
# (an upgrade), until each path has granted such a token (2.5 s at most).
tokens_exact() {
  local acq rel n o round=0 fast=0 general=0 bad=""
  acq=$("$REDIS_CLI" -p "$PORT" script load "$(cat lua/acquire.lua)")
  rel=$("$REDIS_CLI" -p "$PORT" script load "$(cat lua/release.lua)")
  while [ $((fast * general)) = 0 ] && [ $round -lt 250 ] && [ -z "$bad" ]; do
    round=$((round + 1))
    read -r n <"$DIR/seq"
    for o in $(seq 10); do
      echo "EVALSHA $acq 2 $K x1 $((n + 1)) w 30000"; echo "HGET rw:{a} f"
      echo "EVALSHA $rel 2 $K x1 $((n + 2))"
      echo "EVALSHA $acq 2 $K x2 $((n + 3)) r 30000"
      echo "EVALSHA $acq 2 $K x2 $((n + 4)) u 30000"; echo "HGET rw:{a} f"
      echo "EVALSHA $rel 2 $K x2 $((n + 5))"
      n=$((n + 5))
    done >"$DIR/pipe"
    echo "$n" >"$DIR/seq"
    while read -r a f _ _ b g _; do
      [ "$a" = "$f" ] && [ "$b" = "$g" ] || bad="$bad $a/$f $b/$g"
      [ $((10#${a: -6})) -lt 100000 ] && fast=1
      [ $((10#${b: -6})) -lt 100000 ] && general=1
    done < <("$REDIS_CLI" -p "$PORT" <"$DIR/pipe" | paste -d' ' - - - - - - -)
    sleep 0.01
  done
  echo "fast $fast general $general${bad:+ differ:$bad}"
}
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
check "a token from the clock is stored exactly (µs of any length)" "fast 1 general 1" "$(tokens_exact)"

# ARGV[3], the mode, says what the caller holds. A reader field of its own
# that Redis still has after the caller let go of it (a release a failover
# lost) is dropped when the caller asks "w" (holding nothing): not an
# upgrade, and no conflict between two. "u" says it holds the read lock.
run acquire g1 r 30000 >/dev/null
run acquire g2 r 30000 >/dev/null
check "with \"u\" a held read is an upgrade: waits" "-*" "$(run acquire g1 u 30000 2000)"
check "  and the second is a conflict"   "g1"         "$(run acquire g2 u 30000 2000)"
check "with \"w\" the leftover read is dropped: busy behind g2's read" "-*" "$(run acquire g1 w 30000 2000)"
check "  g1's reader field is gone"      "0"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' r:g1)"
check "  g2 with \"w\": no conflict, busy behind g1's intent" "-*" "$(run acquire g2 w 30000 2000)"
check "  no reader is left"              "0"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' r:g2)"
check "  g1, first in the queue, is granted" "[0-9]*" "$(run acquire g1 w 30000 2000)"
check "an upgrade (\"u\") still holds only the write lock after" "0" "$(run release g1 >/dev/null; run acquire g3 r 30000 >/dev/null; run acquire g3 u 30000 >/dev/null; "$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' r:g3)"
run release g3 >/dev/null
run release g2 q >/dev/null

# A writer field of its own that Redis still has after the caller let go of
# it (a release a failover lost: F3 of verify/FINDINGS.md) is dropped when
# the caller asks "w" or "r" (holding nothing): a write is granted anew with a larger token, a read
# gets a hash that lives as long as its own lease, not the old writer's.
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' v "$V" w s1 f 100 x 0 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 1000 >/dev/null
check "a left-over writer field, \"w\": a new, larger token" "yes" "$(t=$(run acquire s1 w 30000); [ "$t" -gt 100 ] && echo yes || echo "no $t")"
check "  the hash outlives its lease by keep" "yes" "$(t=$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}'); [ "$t" -gt 629000 ] && echo yes || echo "no $t")"
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' v "$V" w s1 f 100 x 0 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 1000 >/dev/null
check "a left-over writer field, \"r\": granted, the last token" "100" "$(run acquire s1 r 30000)"
check "  the writer field is gone"     "0"         "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' w)"
check "  the hash outlives the read's lease, not the old writer's" "yes" "$(t=$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}'); [ "$t" -gt 30000 ] && echo yes || echo "no $t")"
check "  another writer is busy behind the read" "-*" "$(run acquire s2 w 30000)"
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null

# F2 of verify/FINDINGS.md: the clean-up (mode "r" or "w": the caller holds
# nothing) of a left-over reader field that frees the lock for a queued
# writer tells that writer, as the release Redis lost would have; a clean-up
# that frees nothing tells nobody.
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
run acquire p1 r 30000 >/dev/null
check "F2: a writer waits behind a reader" "-*" "$(run acquire p2 w 30000 2000)"
listen
check "  the reader's field is left over: \"r\" drops it, busy behind the writer" "-*" "$(run acquire p1 r 30000 2000)"
check "  the queued writer is told" "w:p2" "$(heard)"
check "  and is granted"              "[0-9]*" "$(run acquire p2 w 30000 2000)"
run release p2 >/dev/null
run release p1 q >/dev/null
run acquire p1 r 30000 >/dev/null
run acquire p3 r 30000 >/dev/null
run acquire p2 w 30000 2000 >/dev/null
listen
run acquire p1 r 30000 2000 >/dev/null
check "  a clean-up that leaves a reader tells nobody" "" "$(heard)"
run release p3 >/dev/null
run release p2 q >/dev/null
run release p1 q >/dev/null
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
# F2-failover: a writer field left over (its release lost by a failover)
# that readers wait behind; its owner, holding nothing, asks "r":
# the clean-up drops the field, the read is granted, and the waiting
# readers are told, as the lost release would have told them.
run acquire p1 w 30000 >/dev/null
check "F2-failover: a reader waits behind a writer" "-*" "$(run acquire p2 r 30000 2000)"
listen
check "  the writer's field is left over: \"r\" drops it, its read is granted" "[0-9]*" "$(run acquire p1 r 30000 2000)"
check "  the waiting readers are told" "r" "$(heard)"
check "  and the reader is granted"    "[0-9]*" "$(run acquire p2 r 30000 2000)"
run release p1 >/dev/null
run release p2 >/dev/null
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null

hf() { "$REDIS_CLI" -p "$PORT" hget 'rw:{a}' "$1"; }
zs() { "$REDIS_CLI" -p "$PORT" zscore 'rw:{a}:q' "$1"; }
fresh() { "$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null; }


# (27.7) An upgrade ("u") whose read lock Redis no longer has answers "" and
# changes nothing: the caller's read was lost, never silently upgraded.
fresh
run acquire u1 r 30000 >/dev/null
"$REDIS_CLI" -p "$PORT" hdel 'rw:{a}' r:u1 n rm >/dev/null        # lost (evicted, say)
check "upgrade of a lost read, free lock: the answer is \"\"" "" "$(run acquire u1 u 30000 2000)"
check "  and nothing was granted"        "0"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' w)"
check "  asking \"w\" (holding nothing) it is granted" "[0-9]*" "$(run acquire u1 w 30000 2000)"
run release u1 >/dev/null
run acquire u2 r 30000 >/dev/null; run acquire u3 r 30000 >/dev/null
"$REDIS_CLI" -p "$PORT" hdel 'rw:{a}' r:u2 >/dev/null
check "upgrade of a lost read beside another reader: \"\"" "" "$(run acquire u2 u 30000 2000)"
check "  and no intent, no upgrader left" "0 0"       "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' i:u2) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' u)"
run acquire u4 r 200 >/dev/null
sleep 0.3
check "upgrade of a lapsed read: \"\""   ""           "$(run acquire u4 u 30000 2000)"
check "upgrade by an owner that never read: \"\"" "" "$(run acquire u9 u 30000 2000)"
check "  it neither waits nor queues"    "0 0 0"      "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' i:u9) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' u) $("$REDIS_CLI" -p "$PORT" zscore 'rw:{a}:q' u9 | grep -c .)"
check "an upgrade of a live read, the only one left, is granted" "[0-9]*" "$(run acquire u3 u 30000 2000)"
run release u3 >/dev/null

# (27.9) A reader's new, shorter lease lowers rm: a writer waits no longer
# than that lease, in acquire's fast path, its general path and renew.lua.
fresh
run acquire m1 r 30000 >/dev/null
run acquire m1 r 300 >/dev/null            # again, shorter (fast path)
check "a shorter lease again lowers rm"  "yes"        "$(r=$(hf rm); f=$(hf r:m1); [ "$r" -le "$f" ] && echo yes || echo "no rm $r r:m1 $f")"
sleep 0.4
check "  the writer gets in once it ran out" "[0-9]*" "$(run acquire m9 w 30000)"
run release m9 >/dev/null; fresh
# The general path: a reader that asks "r" again now holds nothing (its
# field goes as left over), so the shorter lease is a second reader's, m7,
# that enters while z is still set (m8's intent lapsed: it no longer holds
# readers back, but only the general path clears z).
run acquire m2 r 30000 >/dev/null
run acquire m8 w 30000 300 >/dev/null      # waits, a short intent
sleep 0.35
check "  (the lapsed intent left z)"     "1"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' z)"
run acquire m7 r 300 >/dev/null            # the general path
check "  and in the general path"        "yes"        "$(r=$(hf rm); f=$(hf r:m7); [ "$r" -le "$f" ] && echo yes || echo "no rm $r r:m7 $f")"
run release m2 >/dev/null
sleep 0.4
check "  the writer gets in once it ran out" "[0-9]*" "$(run acquire m8 w 30000 2000)"
run release m8 >/dev/null; fresh
run acquire m3 r 30000 >/dev/null
check "renew.lua with a shorter lease"   "1"          "$(run renew m3 300)"
check "  lowers rm"                      "yes"        "$(r=$(hf rm); f=$(hf r:m3); [ "$r" -le "$f" ] && echo yes || echo "no rm $r r:m3 $f")"
sleep 0.4
check "  the writer gets in once it ran out" "[0-9]*" "$(run acquire m9 w 30000)"
run release m9 >/dev/null; fresh
run acquire m4 w 30000 >/dev/null
# A writer that also reads: the scripts no longer make one (mode "r" by the
# writer drops its w as left over; "u" leaves the write lock only), but a
# hash written before may hold both, and renew.lua serves it: made by hand.
e=$(( $("$REDIS_CLI" -p "$PORT" time | head -1) * 1000 + 30000 ))
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' r:m4 "$e" n 1 rm "$e" >/dev/null
check "a writer's renewal with a shorter lease" "1"  "$(run renew m4 300)"
check "  lowers rm for its reader field too" "yes"   "$(r=$(hf rm); f=$(hf r:m4); [ "$r" -le "$f" ] && echo yes || echo "no rm $r r:m4 $f")"
run release m4 >/dev/null

# (27.6) A waiting writer's intent that lapsed (here with the queue key,
# which lives as long as the latest intent) has lost its place: when it
# tries again it is back in the queue, behind those who came meanwhile.
fresh
run acquire q0 w 30000 >/dev/null
run acquire q1 w 30000 300 >/dev/null       # a short intent
sleep 0.4
check "the lapsed intent outlived the queue key" "0 1" "$("$REDIS_CLI" -p "$PORT" exists 'rw:{a}:q') $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' i:q1)"
check "a writer arrives meanwhile"       "-*"         "$(run acquire q2 w 30000 2000)"
check "the lapsed writer tries again: busy" "-*"      "$(run acquire q1 w 30000 2000)"
check "  and is in the queue, behind it" "write * q0 * q2 * q1 *" "$(run info $V)"
listen
run release q0 >/dev/null
check "  the hand-off names the first"   "w:q2"       "$(heard)"
check "  who gets it; q1 waits"          "[0-9]*|-*"  "$(run acquire q2 w 30000 2000)|$(run acquire q1 w 30000 2000)"
listen
run release q2 >/dev/null
check "  and q1 is told next (no missed wake-up)" "w:q1" "$(heard)"
check "  and gets it"                    "[0-9]*"     "$(run acquire q1 w 30000 2000)"
run release q1 >/dev/null
# A live intent keeps its place; should the queue key be gone, it is back in.
fresh
run acquire q0 w 30000 >/dev/null
run acquire q3 w 30000 2000 >/dev/null
s3=$(zs q3)
run acquire q3 w 30000 2000 >/dev/null
check "a live intent keeps its place"    "$s3"        "$(zs q3)"
"$REDIS_CLI" -p "$PORT" del 'rw:{a}:q' >/dev/null
run acquire q3 w 30000 2000 >/dev/null
check "  and is back in the queue when the queue key is gone" "[0-9]*" "$(zs q3)"
run release q3 q >/dev/null; run release q0 >/dev/null

# (27.18) A waiting reader that gives up takes its mark back (release "q"):
# no readers' turn is then started for nobody. Here the holder downgrades
# and upgrades again at once, as a SQL session holding read and write does
# with redis_unlock and redis_try_wlock.
fresh
run acquire s1 r 30000 >/dev/null
run acquire s1 u 30000 >/dev/null
check "a reader waits for the writer"    "-*"         "$(run acquire s2 r 30000 2000)"
check "  with a mark of its own"         "yes"        "$([ "$(hf m:s2)" = "$(hf rw)" ] && [ -n "$(hf rw)" ] && echo yes || echo no)"
check "it gives up: its mark goes"       "1"          "$(run release s2 q)"
check "  m:s2 and rw gone"               "0 0"        "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' m:s2) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' rw)"
got=$(batch "release s1 r 30000" "acquire s1 u 30000" | paste -sd'|')
check "downgrade, then upgrade at once: no turn for nobody" "1|[0-9]*" "$got"
run release s1 >/dev/null
# Two readers wait; the later gives up: the earlier's mark still starts a turn.
fresh
run acquire s1 w 30000 >/dev/null
run acquire s3 r 30000 2000 >/dev/null
sleep 0.01
run acquire s4 r 30000 2000 >/dev/null
run release s4 q >/dev/null
check "rw stays, at least the other reader's mark" "yes" "$([ -n "$(hf m:s3)" ] && [ "$(hf rw)" -ge "$(hf m:s3)" ] && echo yes || echo no)"
check "  one mark counted"               "1"          "$(hf mc)"
listen
# (within the turn's 100 ms: one batch)
got=$(batch "release s1" "acquire s5 w 30000" \
            "acquire s3 r 30000 2000" | paste -sd'|')
check "  the writer leaves: the readers' turn is on, the reader gets in" "1|-*|[0-9]*" "$got"
check "  the waiting reader was told"    "r"          "$(heard)"
check "  its mark is gone"               "0"          "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' m:s3)"
run release s3 >/dev/null

# (issue 38) Many waiting readers give up together, the latest mark first
# (the worst order): each withdrawal costs the same, whatever the number of
# marks: no script reads the whole hash for it (it did, once per
# withdrawal: O(N^2) for N readers). The last one out removes rw: nobody
# waits, so no turn for nobody.
# pipe SCRIPT "ARGS" OWNER...: one call per owner in one "$REDIS_CLI" (batch
# loads the script once per call: too slow for 200).
pipe() {
  local sha o n; sha=$("$REDIS_CLI" -p "$PORT" script load "$(cat "lua/$1.lua")")
  read -r n <"$DIR/seq"
  for o in "${@:3}"; do n=$((n + 1)); echo "EVALSHA $sha 2 $K $o $n $2"; done >"$DIR/pipe"
  echo "$n" >"$DIR/seq"
  "$REDIS_CLI" -p "$PORT" <"$DIR/pipe" >/dev/null
}
hgetalls() { "$REDIS_CLI" -p "$PORT" info commandstats | tr -d '\r' | sed -n 's/^cmdstat_hgetall:calls=\([0-9]*\),.*/\1/p'; }
fresh
run acquire t0 w 30000 >/dev/null
readers=$(seq -f 't%g' 1 200)
pipe acquire "r 30000 5000" $readers
check "  200 readers wait, 200 marks counted" "200"    "$(hf mc)"
before=$(hgetalls)
pipe release q $(tac <<<"$readers")
check "  they give up, latest first: no HGETALL" "${before:-}" "$(hgetalls)"
check "  the last one out removes rw and mc" "0 0"     "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' rw) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' mc)"
run release t0 >/dev/null

# (F5, verify/FINDINGS.md) A record lives keep at least, whatever the hash
# had left: a release of nothing (an owed release after a cut-off request)
# in a hash whose last writer left long ago, and a busy try of a reader's
# lock, each raise the hash's life to keep (x). Before, the record lived only
# as long as the hash had left, and the cut-off request, late by that, ran.
fresh
run acquire k1 w 30000 >/dev/null
run release k1 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 1000 >/dev/null     # keep nearly spent
check "a release of nothing is recorded"  "0"          "$(run release k2)"
check "  and its record lives keep at least" "yes"     "$([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 600000 ] && echo yes || echo no)"
fresh
run acquire k3 r 30000 >/dev/null
run acquire k4 w 30000 2000 >/dev/null          # a writer waits
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 1000 >/dev/null
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' x 1 >/dev/null
check "a busy try is recorded"            "-*"         "$(run acquire k5 r 30000)"
check "  and its record lives keep at least" "yes"     "$([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 600000 ] && echo yes || echo no)"
fresh

# ---- the writer's lease as a field (protocol 3, F5 of verify/FINDINGS.md) ----
# (a) A record written while a writer holds (a busy try, a release of
# nothing) lives keep past that writer's lease end, renewed or not: the
# owner's older request, arriving after the writer's lease has ended, is
# stale. (When the writer's lease was the hash's TTL, the hash, records and
# all, went with it, and the older request ran.)
fresh
check "F5: W writes, lease 300, keep 5000" "[0-9]*"   "$(run acquire W1 w 300 0 5000)"
check "  A's busy try (seq 10), keep 5000" "-*"       "$(raw acquire Fa 10 r 30000 0 5000)"
check "  B's release of nothing (seq 10), keep 5000" "0" "$(raw release Fb 10 '' 0 5000)"
check "  the hash lives keep past W's lease end" "yes" "$(p=$(pttl); w=$(hw f); [ "$p" -ge $(( w / 1000 + 300 + 5000 - $(nowms) )) ] && echo yes || echo "no $p")"
sleep 0.5                                             # W's lease ends, not renewed
check "  W's lease ended: A's older request (seq 9) is stale" "RWLOCK_STALE*request 9 of Fa*" "$(raw acquire Fa 9 r 30000 0 5000 2>&1)"
check "  and B's (seq 9)"                 "RWLOCK_STALE*request 9 of Fb*" "$(raw acquire Fb 9 w 30000 0 5000 2>&1)"
check "  their records stand"             "10 10"      "$(hw s:Fa) $(hw s:Fb)"
# (b) A writer whose lease has ended holds nothing: info and waits.lua do
# not show it, renew.lua does not revive it, the next caller is granted
# and the lapsed writer's w is gone.
fresh
tw=$(run acquire Wb w 300)
check "a writer, lease 300: another writer queues" "-*" "$(run acquire Bq w 30000 10000)"
check "  waits: it waits for the writer"  "1 Wb"       "$(run waits $V Bq w)"
check "  info: write, Bq waiting"         "write $tw Wb [0-9]* Bq *" "$(run info $V)"
sleep 0.4
check "its lease ended: info says free, Bq waiting" "free $tw  0  Bq *" "$(run info $V)"
check "  waits: Bq waits for nobody"      "1"          "$(run waits $V Bq w)"
check "  renew: 0, not revived"           "0 Wb"       "$(run renew Wb 30000) $(hw w)"
tb2=$(run acquire Bq w 30000 10000)
check "  the next writer is granted, a larger token" "yes Bq" "$([ "$tb2" -gt "$tw" ] && echo yes || echo "no $tw $tb2") $(hw w)"
check "  the lapsed writer's release: 0, Bq still holds" "0 write $tb2 Bq *" "$(run release Wb) $(run info $V)"
run release Bq >/dev/null
fresh
tw=$(run acquire Wb w 500)
sleep 0.6
check "a writer's lease (500, in we) ended: a reader is granted" "$tw" "$(run acquire Rb r 30000)"
check "  w and we are gone"               "0 0"        "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' w) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' we)"
check "  info: read"                      "read $tw  0 Rb *" "$(run info $V)"
run release Rb >/dev/null
# (c) A lease other than 30000: its end is in we, tied to the token; a
# renewal rewrites it; a we of another (earlier) token is ignored.
fresh
# (grant and renewal in one batch: a loaded machine may take the 500 ms
# between two redis-cli runs)
got=$(batch "acquire Wc w 500" "renew Wc 3000" | paste -sd'|')
tw=${got%%|*}
check "a write lease of 500, renewed at once to 3000" "[0-9]*|1" "$got"
check "  we is \"<token> <end>\", rewritten by the renewal" "yes $tw" "$(wend_in 2000 3000) $(hw we | cut -d' ' -f1)"
sleep 0.7                                             # past the grant's 500 ms
check "  it still holds, past the first lease" "write $tw Wc * -*" "$(run info $V) $(run acquire Xc w 30000)"
sleep 2.5                                             # past the renewal's
check "  and its lease ends with the renewal's" "free*" "$(run info $V)"
check "  the next writer is granted"      "[0-9]*"     "$(run acquire Xc w 30000)"
run release Xc >/dev/null
fresh
tp=$(run acquire Wd w 30000)
run release Wd >/dev/null
tw=$(run acquire We w 30000)
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' we "$tp $(( $(nowms) - 1000 ))" >/dev/null
check "a we of an earlier token, its end past: ignored" "write $tw We [12][0-9][0-9][0-9][0-9] *-*" "$(run info $V) $(run acquire Xe w 30000)"
check "  the writer still renews"        "1"           "$(run renew We 30000)"
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' f "$tw" we "$tp $(( $(nowms) + 100000 ))" >/dev/null
check "  one whose end is far: ignored too (30000 ms from the token)" "yes" "$(set -- $(run info $V); [ "$4" -le 30000 ] && echo yes || echo "no $*")"
run release We >/dev/null
# (d) fence.lua raises f for the writer and rewrites we with the new token:
# the writer's lease end stays where it was.
fresh
run acquire Wf w 500 >/dev/null
end0=$(hw we | cut -d' ' -f2)
check "fence by a writer with lease 500"  "1"          "$(run fence Wf 9000000000000000)"
check "  we: the new token, the same end" "9000000000000000 $end0" "$(hw we)"
sleep 0.6
check "  its lease still ends on time"   "free 9000000000000000 *" "$(run info $V)"
fresh
tw=$(run acquire Wg w 30000)
check "fence by a writer with lease 30000 (no we)" "1" "$(run fence Wg 9100000000000000)"
check "  we: the new token, the end from the old one" "9100000000000000 $(( tw / 1000 + 30000 ))" "$(hw we)"
check "  info: the lease left is still under 30000 ms" "yes" "$(set -- $(run info $V); [ "$2" = 9100000000000000 ] && [ "$4" -le 30000 ] && [ "$4" -gt 20000 ] && echo yes || echo "no $*")"
run release Wg >/dev/null
fresh

# The lean calling convention: owner and seq first, the version the
# script's own, the held claim in the mode ("u": an upgrade), mark and keep
# optional (absent: 0 and 600000). Most calls above leave them out; here
# what each default means, and what is refused.
within() { [ "$1" -gt "$2" ] && [ "$1" -le "$3" ] && echo yes || echo "no $1"; }  # N LOW HIGH
fresh
check "acquire owner seq mode lease: a write" "[0-9]*"  "$(run acquire L1 w 30000)"
check "  the TTL is 2 x keep's default, no we (LEASE)" "yes 0" "$(within "$(pttl)" 1190000 1200000) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' we)"
check "a busy try without a mark"        "-*"         "$(run acquire L2 w 30000)"
check "  leaves no intent (mark 0)"      "0 0"        "$("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' i:L2) $("$REDIS_CLI" -p "$PORT" exists 'rw:{a}:q')"
check "  but is recorded"                "$(cat "$DIR/seq")" "$(hf s:L2)"
p0=$(pttl)     # the busy try raised it: keep past the writer's lease end
check "  which raised the TTL past the writer's lease end + keep" "yes" "$(within "$p0" 1220000 1230000)"
check "release owner seq: released"      "1"          "$(run release L1)"
check "  the token stays (keep's default, 600000 ms, at least): the TTL is not lowered" "yes" "$(within "$(pttl)" $((p0 - 5000)) "$p0")"
check "a reader without keep"            "[0-9]*"     "$(run acquire L3 r 30000)"
check "  the hash lives lease + 2 x 600000 ms" "yes"  "$(within "$(pttl)" 1220000 1230000)"
run release L3 >/dev/null
fresh
check "a reader with keep 5000"          "0"          "$(run acquire L3 r 30000 0 5000)"
check "  the hash lives lease + 2 x 5000 ms" "yes"    "$(within "$(pttl)" 39000 40000)"
check "a writer waits, mark and keep given" "-*"      "$(run acquire L4 w 30000 2000 5000)"
check "  its intent lasts the mark"      "yes"        "$(n=$(( $("$REDIS_CLI" -p "$PORT" time | head -1) * 1000 )); i=$(hf i:L4); within "$((i - n))" 500 3000)"
check "  release q: the intent withdrawn" "1 0"       "$(run release L4 q) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' i:L4)"
run release L3 >/dev/null
fresh
check "a write with keep 5000"          "[0-9]*"     "$(run acquire L5 w 30000 0 5000)"
check "  the TTL is 2 x max(keep, lease)" "yes"       "$(within "$(pttl)" 50000 60000)"
check "  release with keep 5000"         "1"          "$(run release L5 '' 0 5000)"
check "  the token stays: the TTL is not lowered to keep" "yes" "$(within "$(pttl)" 50000 60000)"
check "renew owner seq lease (keep absent)" "1"       "$(run acquire L6 r 30000 >/dev/null; run renew L6 700000)"
check "  the hash lives the new lease + 2 x 600000 ms" "yes" "$(within "$(pttl)" 1890000 1900000)"
run release L6 >/dev/null
# fence owner seq token: raises f for the writer only, never lowers it.
fresh
run acquire F1 w 30000 >/dev/null
check "fence by the writer"              "1"          "$(run fence F1 9000000000000000)"
check "  f raised, exactly"              "9000000000000000" "$(hf f)"
check "  a lower token leaves it"        "1 9000000000000000" "$(run fence F1 5) $(hf f)"
check "fence by another owner: 0"        "0 9000000000000000" "$(run acquire F2 r 30000 >/dev/null; run fence F2 9100000000000000) $(hf f)"
check "  the next write token is above the fenced one" "9000000000000001" "$(run release F1 >/dev/null; run release F2 >/dev/null; run acquire F3 w 30000)"
run release F3 >/dev/null
# The mode: r, w or u; anything else is refused, before anything changes
# (the seq is not recorded).
fresh
check "mode x: RWLOCK_ARGS"              "RWLOCK_ARGS mode must be r, w or u, not x*" "$(raw acquire M 5 x 30000 2>&1)"
check "mode \"-\": RWLOCK_ARGS"          "RWLOCK_ARGS*not -*" "$(raw acquire M 6 - 30000 2>&1)"
check "no mode: RWLOCK_ARGS"             "RWLOCK_ARGS*mode*" "$(raw acquire M 7 2>&1)"
check "  nothing was written"            "0"          "$("$REDIS_CLI" -p "$PORT" exists 'rw:{a}')"
check "  the same seq is not stale after" "[0-9]*"    "$(raw acquire M 5 w 30000)"
raw release M 8 >/dev/null
# A caller still on the old layout (the version first) is refused: "3" is
# taken for the owner and the owner for the seq.
check "old layout acquire: RWLOCK_ARGS"  "RWLOCK_ARGS seq*not M*" "$(raw acquire 3 M 9 w 30000 0 600000 - 2>&1)"
check "old layout release: RWLOCK_ARGS"  "RWLOCK_ARGS seq*not M*" "$(raw release 3 M 9 '' 0 600000 2>&1)"
check "old layout renew: RWLOCK_ARGS"    "RWLOCK_ARGS seq*not M*" "$(raw renew 3 M 9 30000 600000 2>&1)"
check "old layout fence: RWLOCK_ARGS"    "RWLOCK_ARGS seq*not M*" "$(raw fence 3 M 9 5 2>&1)"
fresh

# docs/protocol.md's worked example shows each script's SHA1: they must be
# the files' (a script changed, the example must be regenerated).
docsha=$(grep -Eo '^ *[0-9a-f]{40}  lua/[a-z]+\.lua$' docs/protocol.md | sed 's/^ *//')
check "docs/protocol.md shows SHA1s"     "?*"         "$docsha"
while read -r sum file; do
  [ -n "$file" ] && check "docs/protocol.md: SHA1 of $file" "$(sha1sum "$file" | cut -d' ' -f1)" "$sum"
done <<<"$docsha"
for q in $(grep -Eo '^ *"[0-9a-f]{40}"$' docs/protocol.md | tr -d ' "'); do
  check "docs/protocol.md: SCRIPT LOAD's answer $q is a script's SHA1" "yes" "$(sha1sum lua/*.lua | grep -q "^$q " && echo yes || echo no)"
done

# waits.lua, mark.lua and checkin.lua: deadlock detection (docs/protocol.md 18).
"$REDIS_CLI" -p "$PORT" del 'rw:{a}' 'rw:{a}:q' >/dev/null
run acquire d1 r 30000 >/dev/null
run acquire d2 r 30000 >/dev/null
run acquire d3 w 30000 2000 >/dev/null          # waits behind d1, d2
sleep 0.002
run acquire d4 w 30000 2000 >/dev/null          # behind d3 too
run acquire d5 r 30000 2000 >/dev/null          # a reader behind d3
check "waits: a writer waits for the readers"       "1 d1 d2"    "$(run waits $V d3 w)"
check "waits: a second writer for them and the first" "1 d1 d2 d3" "$(run waits $V d4 w)"
check "waits: a reader for the first queued writer"  "1 d3"       "$(run waits $V d5 r)"
check "waits: a holder that does not wait here"      "0"          "$(run waits $V d1 w)"
run release d3 q >/dev/null
check "waits: a withdrawn intent is no wait"         "0"          "$(run waits $V d3 w)"
for o in d1 d2 d4 d5; do run release $o >/dev/null; done
WK='rw:wait:{d3}'
"$REDIS_CLI" -p "$PORT" set "$WK" "3 w n1 rw:{a}" px 10000 >/dev/null
mark() { "$REDIS_CLI" -p "$PORT" --eval lua/mark.lua "$WK" , $V "$@" | tr '\n' ' ' | sed 's/ $//'; }
check "mark: another wait's value is not marked"     "0"          "$(mark "3 w n0 rw:{a}" "cycle")"
check "mark: the value read is marked"               "1"          "$(mark "3 w n1 rw:{a}" "cycle")"
check "mark: the key says so, the cycle after it"    "!3 w n1 rw:{a}*cycle" "$("$REDIS_CLI" -p "$PORT" get "$WK" | tr '\n' ' ' | sed 's/ $//')"
check "mark: the time to live is kept"               "yes"        "$([ "$("$REDIS_CLI" -p "$PORT" pttl "$WK")" -gt 5000 ] && echo yes || echo no)"
check "mark: a client sees it in SET ... GET"           "!3 w n1 rw:{a}*" "$("$REDIS_CLI" -p "$PORT" set "$WK" "3 w n1 rw:{a}" px 10000 get | tr '\n' ' ')"
checkin() { "$REDIS_CLI" -p "$PORT" --eval lua/checkin.lua "$WK" , $V "$@" | tr '\n' ' ' | sed 's/ $//'; }
check "checkin: writes, answers the old value"      "3 w n1 rw:{a}" "$(checkin "3 w n2 rw:{a}" 10000)"
check "checkin: the key holds the new one"          "3 w n2 rw:{a}" "$("$REDIS_CLI" -p "$PORT" get "$WK")"
check "checkin: with its time to live"              "yes"        "$([ "$("$REDIS_CLI" -p "$PORT" pttl "$WK")" -gt 5000 ] && echo yes || echo no)"
mark "3 w n2 rw:{a}" "cycle" >/dev/null
check "checkin: the victim sees its mark"           "!3 w n2 rw:{a}*cycle" "$(checkin "3 w n2 rw:{a}" 10000)"
check "checkin: an empty value only reads"          "3 w n2 rw:{a}" "$(checkin "" 0)"
check "checkin: and writes nothing"                 "3 w n2 rw:{a}" "$("$REDIS_CLI" -p "$PORT" get "$WK")"
check "checkin: another version is refused"         "*RWLOCK_VERSION*" "$(checkin "1 w n1 rw:{a}" 10000 2>&1)"
"$REDIS_CLI" -p "$PORT" del "$WK" >/dev/null
check "checkin: no key, no old value"               ""           "$(checkin "3 w n3 rw:{a}" 10000)"
"$REDIS_CLI" -p "$PORT" del "$WK" >/dev/null
check "mark: an ended wait is not marked"            "0"          "$(mark "3 w n1 rw:{a}" "cycle")"
check "mark: and nothing is written"                 "0"          "$("$REDIS_CLI" -p "$PORT" exists "$WK")"
check "mark: another version is refused"             "*RWLOCK_VERSION*" "$(mark "1 w n1 rw:{a}" "cycle" 2>&1)"

"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' v 1 >/dev/null
check "protocol version mismatch"        "*RWLOCK_VERSION*is protocol 1*speaks 3*" "$(run acquire o7 w 30000 2>&1)"

# Protocol 3: a request that Redis runs after a newer one of the same owner
# changes nothing and is answered RWLOCK_STALE (docs/protocol.md 4.1).
hf2() { "$REDIS_CLI" -p "$PORT" hget 'rw:{a}' "$1"; }
fresh
# The issue's case: S's older read request, delivered after S's write grant.
check "stale: S is granted the write lock (seq 20)" "[0-9]*" "$(raw acquire S 20 w 30000 2000)"
check "  S's older read (seq 19) is stale"  "RWLOCK_STALE*request 19 of S*20*" "$(raw acquire S 19 r 30000 2>&1)"
check "  S still writes"                        "S 20"       "$(hf2 w) $(hf2 s:S)"
check "  T's read is busy"                      "-*"         "$(raw acquire T 1 r 30000)"
check "  a busy answer is recorded too"         "1"          "$(hf2 s:T)"
check "  T's same request again is stale"       "RWLOCK_STALE*" "$(raw acquire T 1 r 30000 2>&1)"
check "  S's older release (seq 18) is stale"   "RWLOCK_STALE*" "$(raw release S 18 2>&1)"
check "  S still writes, T cannot"              "S -*"       "$(hf2 w) $(raw acquire T 2 w 30000)"
check "  S's older write try (seq 17): stale, the token stays" "RWLOCK_STALE*" "$(raw acquire S 17 w 30000 2>&1)"
check "renew as of the newest request: renewed" "1"          "$(raw renew S 20 30000)"
check "renew as of an older one: stale"         "RWLOCK_STALE*renewal 19*" "$(raw renew S 19 30000 2>&1)"
check "  a renewal is not recorded"             "20"         "$(raw renew S 25 30000 >/dev/null; hf2 s:S)"
check "  an acquisition after it is not stale"  "[0-9]*"     "$(raw acquire S 21 w 30000)"
check "fence as of an older request: stale"     "RWLOCK_STALE*" "$("$REDIS_CLI" -p "$PORT" --eval lua/fence.lua 'rw:{a}' , S 20 5 2>&1)"
check "S releases (seq 22)"                     "1"          "$(raw release S 22)"
check "  its record stays, with the token, for keep" "22 yes" "$(hf2 s:S) $([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 590000 ] && echo yes || echo no)"
check "  a late acquisition (seq 21) is stale"  "RWLOCK_STALE*" "$(raw acquire S 21 r 30000 2>&1)"
check "  and nothing is held"                   "free*"      "$(run info $V)"
check "renew.lua of an owner without a record: 0" "0"        "$(raw renew Q 99 30000)"
# A release owed after a cut-off acquisition, run first, where nothing is:
# it leaves a record, and the acquisition arriving after it is stale.
fresh
check "a release where nothing is held: 0"      "0"          "$(raw release S 31)"
check "  it leaves a record that lives keep"    "3 31 yes"   "$(hf2 v) $(hf2 s:S) $([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 590000 ] && echo yes || echo no)"
check "  the cut-off acquisition (seq 30) is stale" "RWLOCK_STALE*" "$(raw acquire S 30 w 30000 2>&1)"
check "  the lock is free for others"           "[0-9]*"     "$(raw acquire T 1 w 30000)"
raw release T 2 >/dev/null
# Readers: the last one out leaves the hash (records and all) for keep.
fresh
raw acquire A 1 r 30000 >/dev/null; raw acquire B 1 r 30000 >/dev/null
check "two readers leave"                       "1 1"        "$(raw release A 2) $(raw release B 2)"
check "  their records stay, no reader count"   "2 2 0 yes"  "$(hf2 s:A) $(hf2 s:B) $("$REDIS_CLI" -p "$PORT" hexists 'rw:{a}' n) $([ "$("$REDIS_CLI" -p "$PORT" pttl 'rw:{a}')" -gt 590000 ] && echo yes || echo no)"
check "  A's late read (seq 1) is stale"        "RWLOCK_STALE*" "$(raw acquire A 1 r 30000 2>&1)"
check "bad seq: refused"                        "RWLOCK_ARGS*" "$(raw acquire A x r 30000 2>&1)"
# Records of owners who hold nothing are pruned once the hash has grown by
# half (48 fields at least); a holder's record is never pruned.
fresh
raw acquire keeper 1 r 600000 >/dev/null
for i in $(seq 1 120); do
  raw acquire "o$i" 1 r 30000 >/dev/null; raw release "o$i" 2 >/dev/null
done
check "pruned: the hash stays small"            "yes"        "$([ "$("$REDIS_CLI" -p "$PORT" hlen 'rw:{a}')" -lt 60 ] && echo yes || echo "no $("$REDIS_CLI" -p "$PORT" hlen 'rw:{a}')")"
check "  the holder's record and read are kept" "1 1"        "$(hf2 s:keeper) $(raw renew keeper 1 30000)"
raw release keeper 2 >/dev/null
# A free protocol 2 lock is taken over, its token kept; a held one is not.
fresh
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' v 2 f 4000000000000000 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 60000 >/dev/null
check "a free protocol 2 lock is taken over"    "4000000000000001 3" "$(raw acquire S 1 w 30000) $(hf2 v)"
raw release S 2 >/dev/null
fresh
"$REDIS_CLI" -p "$PORT" hset 'rw:{a}' v 2 w P f 7 >/dev/null
"$REDIS_CLI" -p "$PORT" pexpire 'rw:{a}' 60000 >/dev/null
check "a held protocol 2 lock is refused"       "RWLOCK_VERSION*protocol 2*speaks 3*" "$(raw acquire S 3 w 30000 2>&1)"
check "  its release too"                       "RWLOCK_VERSION*" "$(raw release S 4 2>&1)"
check "  and nothing changed"                   "2 P"        "$(hf2 v) $(hf2 w)"
fresh

echo "protocol: $pass passed, $fail failed"
[ "$fail" -eq 0 ]
