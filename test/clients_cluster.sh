#!/usr/bin/env bash
# clients_cluster.sh: both clients on a Redis Cluster through their
# libraries' own cluster classes (redis-py's RedisCluster, sync and asyncio;
# ioredis's Cluster): a lock handed from one holder to a waiter, for names
# whose keys land in different slots (braces and '%' included), and an owed
# release sent before the name is taken again (both clients). Three masters on
# 127.0.0.1:6410-6412 (RWLOCK_CLUSTER_PORT for the first). Prints
# "clients_cluster: N passed, M failed".
set -euo pipefail
cd "$(dirname "$0")/.."
. tools/redis.sh
P0=${RWLOCK_CLUSTER_PORT:-6410}
PORTS="$P0 $((P0 + 1)) $((P0 + 2))"
D=$(mktemp -d)
trap 'for p in $PORTS; do redis_stop $p; done; rm -rf "$D"' EXIT
nodes=""
for p in $PORTS; do
  mkdir -p "$D/$p"
  redis_start "$p" "$D/$p" --cluster-enabled yes --cluster-config-file "$D/$p/nodes.conf"
  nodes="$nodes 127.0.0.1:$p"
done
"$REDIS_CLI" --cluster create $nodes --cluster-yes >/dev/null
for _ in $(seq 100); do
  "$REDIS_CLI" -p "$P0" cluster info | grep -q 'cluster_state:ok' && break
  sleep 0.1
done
out=$( { /usr/bin/python3 - "$P0" <<'PY'
import asyncio, sys, threading, time
sys.path.insert(0, "clients/python")
from redis.cluster import RedisCluster
import redis.asyncio.cluster as acluster
import rwlock_client as rw
port = int(sys.argv[1])
c = rw.Client(RedisCluster(host="127.0.0.1", port=port))
for name in ("a", "b{x}", "zz%"):
    w = c.write_lock(name)
    t = w.acquire(1)
    w2 = c.write_lock(name)
    threading.Thread(target=lambda: (time.sleep(0.2), w.release())).start()
    t0 = time.monotonic()
    t2 = w2.acquire(3)
    el = time.monotonic() - t0
    print("%s python: %r handed to a waiter in %.3f s" % ("ok" if t2 > t and el < 0.5 else "FAIL", name, el))
    c._owed.add(name, w2.owner, "", 0)      # as if its release had been cut off
    w2._held = False
    t3 = w2.acquire(1)
    print("%s python: %r owed release sent first (new token)" % ("ok" if t3 > t2 else "FAIL", name))
    w2.release()

async def main():
    a = rw.AsyncClient(acluster.RedisCluster(host="127.0.0.1", port=port))
    lk = a.write_lock("q")
    ok = await lk.acquire(1) > 0 and await lk.release()
    print("%s python-async: acquire and release" % ("ok" if ok else "FAIL"))
asyncio.run(main())
PY
node - "$P0" <<'JS'
const path = require('path');
const CLIENT = path.resolve('clients/node');
const { Cluster } = require(require.resolve('ioredis', { paths: [CLIENT] }));
const { Locks } = require(CLIENT);
(async () => {
  const c = new Cluster([{ host: '127.0.0.1', port: Number(process.argv[2]) }]);
  const locks = new Locks(c);
  for (const name of ['a', 'b{x}', 'zz%']) {
    const w = locks.writeLock(name);
    const t = await w.acquire(1000);
    const w2 = locks.writeLock(name);
    setTimeout(() => w.release(), 200);
    const t0 = performance.now();
    const t2 = await w2.acquire(3000);
    const el = performance.now() - t0;
    console.log(`${t2 > t && el < 500 ? 'ok' : 'FAIL'} node: ${JSON.stringify(name)} handed to a waiter in ${Math.round(el)} ms`);
    locks.owed.set(name, new Map([[w2.owner, ['', 0]]])); // as if its release had been cut off
    w2._held = false;
    locks.holds.delete(w2);
    const t3 = await w2.acquire(1000);
    console.log(`${t3 > t2 && !locks.owed.has(name) ? 'ok' : 'FAIL'} node: ${JSON.stringify(name)} owed release sent first (new token)`);
    await w2.release();
  }
  locks.close();
  c.disconnect();
})().catch((e) => { console.log(`FAIL node: ${e}`); process.exit(1); });
JS
} 2>&1 ) || true
echo "$out"
pass=$(grep -c '^ok' <<<"$out" || true)
fail=$(grep -vc '^ok' <<<"$out" || true)
echo "clients_cluster: $pass passed, $fail failed"
[ "$fail" = 0 ] && [ "$pass" = 13 ]
