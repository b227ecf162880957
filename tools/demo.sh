#!/usr/bin/env bash
# demo.sh: set everything up and show rwlock at work. Installs the packages
# (tools/install-deps.sh), builds and installs the extension, starts a Redis
# of its own and a throw-away PostgreSQL cluster, and runs tools/demo.sql: two
# sessions taking the same locks, with what Redis holds shown after each
# step. From a terminal it then opens psql on that cluster, extension loaded.
set -euo pipefail
cd "$(dirname "$0")/.."
bash tools/install-deps.sh
make -s && make -s install
. tools/redis.sh
PORT=${RWLOCK_DEMO_REDIS_PORT:-6390}
DIR=$(mktemp -d)
trap 'redis_stop "$PORT"; rm -rf "$DIR"' EXIT
redis_start "$PORT" "$DIR"
export PGOPTIONS="-c rwlock.redis_url=redis://127.0.0.1:$PORT/0"
interactive=""
[ -t 0 ] && [ -t 1 ] && interactive=yes
INTERACTIVE=$interactive pg_virtualenv -t bash -c '
  psql -X -q -v ON_ERROR_STOP=1 -f tools/demo.sql
  echo
  echo "--- Redis keys now (redis-cli -p '"$PORT"' --scan):"
  redis-cli -p '"$PORT"' --scan | sort
  if [ -n "$INTERACTIVE" ]; then
    echo
    echo "psql with rwlock loaded; Redis on 127.0.0.1:'"$PORT"'. \\q ends the demo."
    psql -X
  fi'
