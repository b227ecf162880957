"""rwlock_client: distributed read/write locks in Redis, shared with the
rwlock PostgreSQL extension (protocol version 3, docs/protocol.md of the
rwlock repository).

    import redis
    from rwlock_client import Client

    locks = Client(redis.Redis(host="127.0.0.1", port=6379))
    with locks.write_lock("invoice:42") as lk:      # waits as long as it takes
        store.write(data, fencing_token=lk.token)

asyncio: rwlock_client.aio.AsyncClient (also importable from here) on
redis.asyncio. Any redis-py client works: redis.Redis,
redis.sentinel.Sentinel(...).master_for(...), redis.cluster.RedisCluster.

The protocol's Lua scripts ship inside the package (copied from the
repository's lua/ when it was built); run from a checkout, the repository's
lua/ is used. Override with lua_dir= or $RWLOCK_LUA_DIR.

Quorum mode (experimental): rwlock_client.QuorumClient (AsyncQuorumClient
for asyncio, its calls in threads) holds
locks on a majority of independent masters, as SQL sessions whose
rwlock.redis_url lists several URLs (rwlock_client.quorum).

A Lock object is one holder (one owner id) and is meant for one thread at a
time. Leases are renewed every third of the lease until release(). A release
whose answer did not come is owed: it is sent again, on the same connection
just ahead of the next acquisition of that name. Every acquisition and
release carries its owner's next request number (one counter per process),
so that one cut off in flight and run late by Redis changes nothing; a
stale answer to a request the client waits for raises StaleRequestError
(another process uses the same owner id).
"""
from typing import TYPE_CHECKING

from ._protocol import (INTENT_MS, KEEP_TOKEN_MS, NAME_MAX, PROTOCOL_VERSION, SCRIPTS,
                        AlreadyHeld, Deadlock, DeadlockDetected, LockLost, LockTimeout, NotHeld,
                        ProtocolVersionError, ReadLockLost, ReplicasNotAcknowledged,
                        RWLockError, StaleRequestError, UpgradeConflict, default_lua_dir,
                        encode_name,
                        load_scripts, lock_keys)
from ._multi import AsyncMultiLock, MultiLock, canonical_order
from ._sync import Client, Lock, sentinel_redis
from .quorum import AsyncQuorumClient, QuorumClient

if TYPE_CHECKING:
    from .aio import AsyncClient, AsyncLock


def __getattr__(name):
    # The asyncio classes, imported on first use (redis.asyncio is not needed otherwise).
    if name in ("AsyncClient", "AsyncLock"):
        from . import aio
        return getattr(aio, name)
    raise AttributeError(name)


__all__ = [
    "PROTOCOL_VERSION", "INTENT_MS", "KEEP_TOKEN_MS", "NAME_MAX", "SCRIPTS",
    "Client", "Lock", "AsyncClient", "AsyncLock", "MultiLock", "AsyncMultiLock",
    "canonical_order", "RWLockError",
    "ProtocolVersionError", "LockTimeout", "UpgradeConflict", "Deadlock", "DeadlockDetected",
    "LockLost", "ReadLockLost", "NotHeld", "AlreadyHeld", "ReplicasNotAcknowledged",
    "StaleRequestError",
    "lock_keys", "encode_name", "sentinel_redis",
    "load_scripts", "default_lua_dir", "QuorumClient", "AsyncQuorumClient",
]
__version__ = "1.2.0"
