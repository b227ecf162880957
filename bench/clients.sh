#!/usr/bin/env bash
# bench/clients.sh: the clients (clients/python, clients/node) measured
# against what services use otherwise, in the same run:
#  - acquire + release of a free write lock, 1 client: rwlock_client (sync,
#    asyncio) vs redis-py's Lock and a plain SET NX PX + compare-and-delete
#    script (bench/clients_pairs.py); the Node package vs the same plain
#    script on ioredis (bench/clients_pairs.js); printed as ratios;
#  - hand-off latency SQL -> client and client -> SQL
#    (bench/clients_handoff.py, under pg_virtualenv).
# Needs the extension installed (make install) and clients/node/node_modules
# (npm ci). Settings: BENCH_SECONDS (2), BENCH_REPS (3), HANDOFF_ROUNDS
# (200), REDIS_PORT (6396).
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/redis.sh
PORT=${REDIS_PORT:-6396}
DIR=$(mktemp -d)
trap 'redis_stop "$PORT"; rm -rf "$DIR"' EXIT
redis_start "$PORT" "$DIR"
S=${BENCH_SECONDS:-2}
N=${BENCH_REPS:-3}
/usr/bin/python3 bench/clients_pairs.py --port "$PORT" --seconds "$S" --reps "$N"
node bench/clients_pairs.js --port "$PORT" --seconds "$S" --reps "$N"
pg_virtualenv -t /usr/bin/python3 bench/clients_handoff.py --rounds "${HANDOFF_ROUNDS:-200}" \
  python python-async node 2>&1 | grep -v '^ok \|^     \[\|PostgreSQL cluster'
