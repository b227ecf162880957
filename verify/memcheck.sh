#!/usr/bin/env bash
# memcheck.sh: the pg_regress and isolation suites (make installcheck, as
# test/run.sh runs them, the keeper's test in a server that preloads rwlock)
# and verify/memcheck/deep.sql (deep stacking at both levels), against a
# PostgreSQL 15 whose backends load rwlock built with AddressSanitizer and
# UBSan (clang; the ASan runtime LD_PRELOADed into the server), then the
# sanitizer logs and the server log are read: any report, or a backend
# that died of a signal, fails the run and is printed.
#
# Every palloc rwlock makes is a malloc of its own in this build
# (verify/memcheck/asan_mcxt.c, linked with -Wl,--wrap): ASan sees an
# overflow of a palloc'd array, which in the server's own allocator would
# land unseen in the next chunk of the same block. The server itself is
# not instrumented (Debian's build), so what is checked is rwlock's code
# and what it hands to libc.
#
# Needs root (it runs itself through tools/isolated.sh: its own loopback
# for its Redis on 6379 and its server, its own copy of PostgreSQL's
# library directory for the instrumented rwlock.so) and clang.
#   bash verify/memcheck.sh            # under a minute
#   bash verify/memcheck.sh CMD ARGS   # and CMD against the same server
#   MEMCHECK_KEEP=1 ...                # keep the work directory (logs)
#   MEMCHECK_EXTRA=file.sql ...        # more parts for deep.sql
#   MEMCHECK_TAP=1 ...                 # the TAP suite too (or MEMCHECK_TAP="t/0..pl ...")
set -euo pipefail
cd "$(dirname "$0")/.."
[ "$(id -u)" = 0 ] || { echo "memcheck: needs root (unshare, runuser)" >&2; exit 1; }
if [ -z "${MEMCHECK_ISOLATED:-}" ]; then
  export MEMCHECK_ISOLATED=1
  exec bash tools/isolated.sh bash verify/memcheck.sh "$@"
fi
SRC=$PWD
. tools/redis.sh
WORK=$(mktemp -d /tmp/rwlock-memcheck.XXXXXX)
chmod 755 "$WORK"
BINDIR=$(pg_config --bindir)
PGDATA=$WORK/data
PORT=5432
ASAN_RT=$(clang -print-file-name=libclang_rt.asan-x86_64.so)
[ -f "$ASAN_RT" ] || { echo "memcheck: no ASan runtime from clang" >&2; exit 1; }

cleanup()
{
  runuser -u postgres -- "$BINDIR/pg_ctl" -D "$PGDATA" -m immediate stop >/dev/null 2>&1 || true
  redis_stop 6379
  if [ -n "${MEMCHECK_KEEP:-}" ]; then echo "memcheck: kept $WORK"; else rm -rf "$WORK"; fi
}
trap cleanup EXIT

# The instrumented build, in a copy of the tree (this tree's objects stay
# the production build's).
B=$WORK/build
mkdir -p "$B"
cp -a Makefile rwlock.control ./*.sql src lua tools sql expected specs "$B/"
rm -f "$B"/src/*.o "$B"/src/*.bc "$B"/src/lua_scripts.c
SAN="-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer"
# -fno-strict-aliasing as the server's build; not its -fwrapv: a signed
# overflow is reported (a lease or token computation that wraps is a bug,
# defined or not).
CFLAGS="-g -O1 $SAN -fno-strict-aliasing -Wall -Wno-unused-command-line-argument -Wno-ignored-attributes"
WRAP=
for f in palloc palloc0 palloc_extended MemoryContextAlloc MemoryContextAllocZero \
  MemoryContextAllocZeroAligned MemoryContextAllocExtended MemoryContextStrdup \
  pstrdup pnstrdup; do
  WRAP="$WRAP,--wrap=$f"
done
clang $CFLAGS -fPIC -I"$(pg_config --includedir-server)" \
  -c verify/memcheck/asan_mcxt.c -o "$B/asan_mcxt.o"
# Started first in the server: see there.
gcc -O2 -Wall -shared -fPIC -o "$B/asan_early.so" verify/memcheck/asan_early.c -ldl
make -s -C "$B" CC=clang with_llvm=no CFLAGS="$CFLAGS" \
  LDFLAGS_SL="$B/asan_mcxt.o -shared-libasan -Wl$WRAP"
make -s -C "$B" with_llvm=no install >/dev/null

redis_start 6379 "$WORK"
mkdir "$PGDATA"
chown postgres: "$PGDATA"
runuser -u postgres -- "$BINDIR/initdb" -D "$PGDATA" -A trust --no-sync >/dev/null
mkdir -p "$WORK/san" "$WORK/log"
chown postgres: "$WORK/san" "$WORK/log"
# Every postgres started in this namespace (this server, and the TAP
# suite's with MEMCHECK_TAP) runs with the ASan runtime preloaded: the
# binary is bind-mounted over by a script that execs a copy of it so, under
# its own name (the server finds its share directory from argv[0]), the
# runtime first and what LD_PRELOAD named after it.
# halt_on_error: an ASan report ends the backend (the postmaster then
# restarts the others; the suites fail too). UBSan reports are fatal too
# (-fno-sanitize-recover). Leaks: memory contexts free what rwlock
# pallocs; LeakSanitizer at a backend's exit would report every context.
cp "$BINDIR/postgres" "$WORK/postgres.real"
cat > "$WORK/postgres.asan" <<WRAPPER
#!/bin/bash
export LD_PRELOAD="$ASAN_RT $B/asan_early.so\${LD_PRELOAD:+ \$LD_PRELOAD}"
export ASAN_OPTIONS="log_path=$WORK/san/report:detect_leaks=0:halt_on_error=1:detect_stack_use_after_return=1:strict_string_checks=1:check_initialization_order=1"
export UBSAN_OPTIONS="log_path=$WORK/san/report:print_stacktrace=1:halt_on_error=1"
exec -a "\$0" "$WORK/postgres.real" "\$@"
WRAPPER
chmod 755 "$WORK/postgres.asan"
mount --bind "$WORK/postgres.asan" "$BINDIR/postgres"
start_server()
{
  runuser -u postgres -- "$BINDIR/pg_ctl" -D "$PGDATA" -w -t 120 \
    -l "$WORK/log/server.log" -o "-p $PORT -k $WORK/log -c listen_addresses= -c fsync=off $*" start >/dev/null
}
# After a backend dies the server restarts all (crash recovery): wait for
# it before the next session, and before stopping it (a shutdown request
# in the middle of recovery costs a minute).
wait_ready()
{
  for _ in $(seq 300); do
    psql -X -q -d postgres -c 'SELECT 1' >/dev/null 2>&1 && return 0
    sleep 0.1
  done
}
stop_server()
{
  wait_ready
  runuser -u postgres -- "$BINDIR/pg_ctl" -D "$PGDATA" -w -t 120 -m fast stop >/dev/null
}
export PGHOST=$WORK/log PGPORT=$PORT PGUSER=postgres
status=0
start=$(date +%s)
start_server
# From here on a failure is noted and the run goes on to the verdict.
set +e
make -s -C "$B" installcheck || { status=1; cat "$B"/regression.diffs "$B"/output_iso/regression.diffs 2>/dev/null; }
stop_server
start_server -c shared_preload_libraries=rwlock || status=1
wait_ready
make -s -C "$B" installcheck REGRESS=keeper ISOLATION= || { status=1; cat "$B"/regression.diffs 2>/dev/null; }
wait_ready
createdb memcheck || status=1
# deep.sql, and MEMCHECK_EXTRA's file if given: a session per part.
awk -v out="$WORK/deep" '/^-- session/ { n++ } { print > (out "." sprintf("%02d", n) ".sql") }' \
  verify/memcheck/deep.sql ${MEMCHECK_EXTRA:+"$MEMCHECK_EXTRA"}
for f in "$WORK"/deep.*.sql; do
  wait_ready
  psql -X -q -v VERBOSITY=terse -d memcheck -f "$f" >>"$WORK/deep.out" 2>&1
done
# A command given runs against the same server (PGHOST, PGPORT, PGUSER and
# database memcheck; Redis on 127.0.0.1:6379), e.g. the random API test.
if [ $# -gt 0 ]; then
  wait_ready
  PGDATABASE=memcheck "$@" || { status=1; echo "memcheck: $* failed"; }
fi
stop_server || status=1
echo "memcheck: suites ran in $(( $(date +%s) - start )) s under ASan+UBSan"

# The TAP suite too, with MEMCHECK_TAP=1 (or the t/*.pl files to run): its
# nodes are postgres processes of this namespace, its installation this
# build. Its own failures (timing checks, under ASan's slowdown) are
# reported, but the verdict is the sanitizers'.
if [ -n "${MEMCHECK_TAP:-}" ]; then
  cp -a t test clients "$B/"
  # Not t/009: the server under libfaketime and the ASan runtime hangs
  # in its first bindtextdomain, as without asan_early.so.
  tap=()
  if [ "$MEMCHECK_TAP" = 1 ]; then
    for f in t/*.pl; do [ "$f" = t/009_clock_step.pl ] || tap+=("$f"); done
  else
    read -r -a tap <<<"$MEMCHECK_TAP"
  fi
  tstart=$(date +%s)
  (cd "$B" && bash test/tap.sh "${tap[@]}") >"$WORK/tap.out" 2>&1 || tap_status=$?
  grep -E '^(t/|Files=|Result:|Failed)' "$WORK/tap.out" || true
  echo "memcheck: TAP suite ran in $(( $(date +%s) - tstart )) s under ASan+UBSan, exit ${tap_status:-0}"
fi

# The verdict: every sanitizer report, and every backend the postmaster saw
# die of a signal or of an exit code a sanitizer gives.
reports=$(ls "$WORK"/san/ 2>/dev/null | wc -l)
if [ "$reports" -gt 0 ]; then
  status=1
  echo "memcheck: $reports sanitizer report(s):"
  for f in "$WORK"/san/*; do
    echo "=== $f"
    cat "$f"
  done
  echo "memcheck: reports with a frame in rwlock's code: $(grep -l "$B/src/" "$WORK"/san/* | wc -l)"
fi
if grep -E 'terminated by signal|server process \(PID [0-9]+\) exited with exit code' "$WORK/log/server.log"; then
  status=1
  echo "memcheck: backends died (server log above); deep.sql said:"
  cat "$WORK/deep.out"
fi
[ $status = 0 ] && echo "memcheck: 0 sanitizer reports, no backend died"
exit $status
