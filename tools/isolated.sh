#!/usr/bin/env bash
# isolated.sh: run a command in private mount and network namespaces, so that
# test runs can go side by side on one machine: each gets its own loopback
# and /var/run/postgresql (its Redis and PostgreSQL ports and sockets
# clash with nobody's) and its own copy of
# PostgreSQL's library and extension directories (its `make install` does
# not replace another run's rwlock.so). Needs root (unshare).
#   bash tools/isolated.sh bash test/run.sh
set -euo pipefail
exec unshare --mount --net --propagation private bash -c '
  set -e
  ip link set lo up
  for d in "$(pg_config --pkglibdir)" "$(pg_config --sharedir)/extension"; do
    copy=$(mktemp -d /tmp/rwlock-isolated.XXXXXX)
    cp -a "$d/." "$copy/"
    mount --bind "$copy" "$d"
  done
  # PostgreSQL unix sockets (and their lock files) live here, not on the
  # network: a private one keeps pg_virtualenv clusters apart too.
  mkdir -p /var/run/postgresql
  mount -t tmpfs tmpfs /var/run/postgresql
  chown postgres: /var/run/postgresql 2>/dev/null || true
  exec "$@"' isolated "$@"
