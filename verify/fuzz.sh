#!/usr/bin/env bash
# fuzz.sh: build the libFuzzer harnesses of verify/fuzz/ (clang,
# -fsanitize=fuzzer,address,undefined) and run each for FUZZ_SECONDS
# (default 60) from its seed corpus in verify/fuzz/corpus/ (read-only: what
# a run finds new stays in its work directory). A crash, a sanitizer report
# or a broken property fails the run; the input is printed and kept in
# verify/fuzz/crashes/ (add it to the corpus with the fix: a regression
# case). No server is needed: the parsers run with stand-ins for the few
# backend functions they call (verify/fuzz/pg_stubs.c).
#   bash verify/fuzz.sh                      # every harness, 60 s each
#   FUZZ_SECONDS=600 bash verify/fuzz.sh url # one, longer
#   bash verify/fuzz.sh -replay              # the corpus only, once each
set -euo pipefail
cd "$(dirname "$0")/.."
SECONDS_EACH=${FUZZ_SECONDS:-60}
REPLAY=
if [ "${1:-}" = -replay ]; then REPLAY=1; shift; fi
HARNESSES=("$@")
[ ${#HARNESSES[@]} -gt 0 ] || HARNESSES=(url passfile)
WORK=$(mktemp -d /tmp/rwlock-fuzz.XXXXXX)
trap 'rm -rf "$WORK"' EXIT
CFLAGS="-g -O1 -fsanitize=fuzzer,address,undefined -fno-sanitize-recover=undefined
  -Isrc -Iverify/fuzz -I$(pg_config --includedir-server) -Wall -Werror
  -Wno-ignored-attributes -Wno-unused-command-line-argument"
# What each harness is built from.
declare -A SOURCES=(
  [url]="verify/fuzz/fuzz_url.c src/url.c"
  [passfile]="verify/fuzz/fuzz_passfile.c src/url.c src/passfile.c"
)
status=0
for h in "${HARNESSES[@]}"; do
  [ -n "${SOURCES[$h]:-}" ] || { echo "fuzz: no harness $h" >&2; exit 2; }
  # shellcheck disable=SC2086
  clang $CFLAGS ${SOURCES[$h]} verify/fuzz/pg_stubs.c -o "$WORK/fuzz_$h"
  mkdir -p "$WORK/corpus_$h" "$WORK/crash_$h"
  if [ -n "$REPLAY" ]; then
    args=(-runs=0)
  else
    args=(-max_total_time="$SECONDS_EACH" -dict=verify/fuzz/url.dict
      -print_final_stats=1 -rss_limit_mb=4096 -timeout=10)
  fi
  # New inputs go to the first directory (the work one), the seeds are read.
  if "$WORK/fuzz_$h" "${args[@]}" -artifact_prefix="$WORK/crash_$h/" \
      "$WORK/corpus_$h" "verify/fuzz/corpus/$h" >"$WORK/$h.log" 2>&1; then
    line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$WORK/$h.log" | tail -1 || true)
    execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$WORK/$h.log")
    if [ -n "$REPLAY" ]; then
      echo "fuzz $h: ok, the corpus replayed; ${line#*DONE}"
    else
      echo "fuzz $h: ok, $execs executions in $SECONDS_EACH s; ${line#*DONE}"
    fi
  else
    status=1
    echo "fuzz $h: FAILED"
    tail -60 "$WORK/$h.log"
    mkdir -p verify/fuzz/crashes
    for f in "$WORK/crash_$h"/*; do
      [ -e "$f" ] || continue
      cp "$f" "verify/fuzz/crashes/$h-$(basename "$f")"
      echo "fuzz $h: input kept in verify/fuzz/crashes/$h-$(basename "$f"):"
      od -c "$f" | head -20
    done
  fi
done
exit $status
