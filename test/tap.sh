#!/usr/bin/env bash
# tap.sh: the TAP suite, t/*.pl (or the files given). Each test starts its own redis-server processes (loopback, a
# free port in 6382-6389) and its own PostgreSQL clusters, with rwlock in
# shared_preload_libraries where it tests the keeper.
#
# The suite runs against a private installation of this tree (see below).
# Not run through PGXS's TAP_TESTS: initdb refuses to run as root, and
# `make installcheck` is often run as root inside pg_virtualenv. Here, as
# root, the suite runs as the postgres user in a scratch directory.
# Logs: $TESTDIR/tmp_check/log (kept, and named, when a test fails).
set -euo pipefail
cd "$(dirname "$0")/.."
SRC=$PWD
BINDIR=$(pg_config --bindir)
PGXSSRC=$(dirname "$(dirname "$(pg_config --pgxs)")")
TESTS=("$@")
[ ${#TESTS[@]} -gt 0 ] || TESTS=(t/*.pl)

TESTDIR=$(mktemp -d /tmp/rwlock-tap.XXXXXX)
chmod 755 "$TESTDIR"

# A private installation: the server's binaries copied (they find their
# share and lib directories relative to themselves), everything else linked,
# and this tree's build installed into it. The shared installation is
# rewritten by whoever runs `make install` next; the suite must not be.
INST=$TESTDIR/inst
SYSLIB=$(pg_config --pkglibdir)
SYSSHARE=$(pg_config --sharedir)
mkdir -p "$INST$(dirname "$BINDIR")" "$INST$SYSLIB" "$INST$SYSSHARE/extension"
cp -a "$BINDIR" "$INST$BINDIR"
for f in "$SYSLIB"/*; do
  case "$(basename "$f")" in rwlock*) ;; *) ln -s "$f" "$INST$SYSLIB/" ;; esac
done
for f in "$SYSSHARE"/*; do
  [ "$(basename "$f")" = extension ] || ln -s "$f" "$INST$SYSSHARE/"
done
for f in "$SYSSHARE"/extension/*; do
  case "$(basename "$f")" in rwlock*) ;; *) ln -s "$f" "$INST$SYSSHARE/extension/" ;; esac
done
make -s
make -s install DESTDIR="$INST" >/dev/null
BINDIR=$INST$BINDIR
[ "$("$BINDIR/pg_config" --pkglibdir)" = "$INST$SYSLIB" ] ||
  { echo "tap: the private installation is not relocatable" >&2; exit 1; }

RUN=()
if [ "$(id -u)" = 0 ]; then
  chown postgres: "$TESTDIR"
  RUN=(runuser -u postgres --)
fi

# A DNS server that never answers, for t/022_dns_stall.pl: as root, a UDP
# socket on 127.0.0.1:53 that reads queries and drops them, and the suite
# run in a private mount namespace whose /etc/resolv.conf names it (host
# names in /etc/hosts, such as localhost, still resolve at once). Without
# root, unshare or a free port 53, t/022 skips.
DNS=()
SINK_PID=
SINK_ENV=
if [ "$(id -u)" = 0 ] && command -v unshare >/dev/null &&
   unshare --mount --propagation private true 2>/dev/null; then
  python3 -c '
import socket, sys
s = socket.socket(socket.AF_INET, socket.SOCK_DGRAM)
s.bind(("127.0.0.1", 53))
print("bound", flush=True)
while True:
    s.recvfrom(4096)
' > "$TESTDIR/dns-sink.out" 2>&1 &
  SINK_PID=$!
  trap 'kill "$SINK_PID" 2>/dev/null || true' EXIT
  for _ in $(seq 50); do
    grep -q bound "$TESTDIR/dns-sink.out" 2>/dev/null && break
    kill -0 "$SINK_PID" 2>/dev/null || break
    sleep 0.1
  done
  if grep -q bound "$TESTDIR/dns-sink.out"; then
    printf 'nameserver 127.0.0.1\noptions timeout:5 attempts:2\n' > "$TESTDIR/resolv.conf"
    chmod 644 "$TESTDIR/resolv.conf"
    DNS=(unshare --mount --propagation private sh -c
         'mount --bind "$0" /etc/resolv.conf && exec "$@"' "$TESTDIR/resolv.conf")
    SINK_ENV=RWLOCK_TEST_DNS_SINK=127.0.0.1
  else
    kill "$SINK_PID" 2>/dev/null || true
    SINK_PID=
  fi
fi

status=0
"${DNS[@]}" "${RUN[@]}" env TESTDIR="$TESTDIR" PATH="$BINDIR:$PATH" ${SINK_ENV:+"$SINK_ENV"} \
  PG_REGRESS="$PGXSSRC/test/regress/pg_regress" \
  prove -I "$PGXSSRC/test/perl" -I "$SRC/t" ${PROVE_FLAGS:-} "${TESTS[@]}" || status=$?
[ -z "$SINK_PID" ] || kill "$SINK_PID" 2>/dev/null || true
if [ $status -eq 0 ]; then
  rm -rf "$TESTDIR"
else
  echo "tap: failed; logs in $TESTDIR/tmp_check/log" >&2
fi
exit $status
