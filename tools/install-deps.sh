#!/usr/bin/env bash
# install-deps.sh: install, as root on Debian 12, what building rwlock and
# running its tests, demo and benchmarks need (valkey-server from
# bookworm-backports for the server matrix, clang and its runtimes for
# verify/memcheck.sh and verify/fuzz.sh, spin for verify/spin.sh). Packages already there are
# skipped, so a second run is quick and needs no network.
set -euo pipefail
pkgs="build-essential postgresql-15 postgresql-server-dev-15 libhiredis-dev
      redis-server redis-tools libipc-run-perl python3-redis python3-psycopg2
      gnuplot-nox iproute2 faketime pgbouncer libssl-dev openssl
      python3-venv python3-setuptools python3-pip python3-mypy
      clang libclang-rt-14-dev spin"
need=""
for p in $pkgs; do
  dpkg -s "$p" >/dev/null 2>&1 || need="$need $p"
done
if [ -n "$need" ]; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq $need >/dev/null
fi
# Valkey 8, the server matrix's second server (test/valkey.sh). Debian 12
# has it only in bookworm-backports: that suite is added to apt for this one
# package, pinned so that nothing else is ever taken from it (priority -1
# for every other package there; valkey-tools is valkey-server's own
# dependency). Later Debian releases have it in main.
if ! dpkg-query -W -f '${Status}' valkey-server 2>/dev/null | grep -q "install ok installed"; then
  export DEBIAN_FRONTEND=noninteractive
  . /etc/os-release
  if [ "${VERSION_CODENAME:-}" = bookworm ]; then
    if ! grep -rqs 'bookworm-backports' /etc/apt/sources.list /etc/apt/sources.list.d/; then
      cat > /etc/apt/sources.list.d/rwlock-bookworm-backports.sources <<'EOF'
Types: deb
URIs: http://deb.debian.org/debian
Suites: bookworm-backports
Components: main
Signed-By: /usr/share/keyrings/debian-archive-keyring.gpg
EOF
    fi
    cat > /etc/apt/preferences.d/rwlock-valkey <<'EOF'
Package: valkey-server valkey-tools
Pin: release n=bookworm-backports
Pin-Priority: 500

Package: *
Pin: release n=bookworm-backports
Pin-Priority: -1
EOF
  fi
  apt-get update -qq
  apt-get install -y -qq valkey-server >/dev/null
fi
# The Node client (clients/node) and its compliance agent: node and npm,
# from the image if there, else Debian's; its dependencies (ioredis) as
# package-lock.json pins them.
if ! command -v node >/dev/null || ! command -v npm >/dev/null; then
  export DEBIAN_FRONTEND=noninteractive
  apt-get update -qq
  apt-get install -y -qq nodejs npm >/dev/null
fi
# (skipped when node_modules was installed from this package-lock.json)
node_dir="$(dirname "$0")/../clients/node"
if [ ! -e "$node_dir/node_modules/.package-lock.json" ] ||
   [ "$node_dir/package-lock.json" -nt "$node_dir/node_modules/.package-lock.json" ]; then
  (cd "$node_dir" && npm ci --no-audit --no-fund --loglevel=error)
fi
# Debian starts its own Redis, Valkey and pgbouncer on install; ours are
# started by the scripts.
for svc in redis-server valkey-server pgbouncer; do
  if [ -e /etc/init.d/$svc ]; then
    service $svc stop >/dev/null 2>&1 || true
  fi
done
