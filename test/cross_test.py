#!/usr/bin/python3
"""cross_test.py: the Python client (clients/python) and SQL sessions of the
rwlock extension on the same locks, against a real redis-server and
PostgreSQL: the compliance suite (test/compliance/driver.py) run with the
Python client's agents, synchronous (rwlock_client) and asyncio
(rwlock_client.aio), plus what only the Python client has to show.

Run under pg_virtualenv (it sets PGHOST, PGPORT, PGUSER, PGPASSWORD), with
the extension installed:

    pg_virtualenv -t /usr/bin/python3 test/cross_test.py

Starts its own redis-server on a free port (6392 if free, else one the OS
picks; $RWLOCK_CROSS_REDIS_PORT to choose) and stops it at the end. Every SQL
connection sets rwlock.redis_url to it. Prints "N passed, N failed" and the
measured hand-off latencies; exits non-zero on a failure.
"""
import os
import shutil
import sys
import tempfile
import time

import redis
import redis.asyncio

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, os.path.join(HERE, "compliance"))
import rwlock_client as rw  # noqa: E402
from driver import Results, run_clients  # noqa: E402
from rwtest import RedisServer  # noqa: E402


def python_only(srv, res):
    """The scripts: found, and refused when of another protocol version."""
    r = redis.Redis(port=srv.port)
    res.check("the scripts are found without lua_dir (%s)" % rw.default_lua_dir(),
              set(rw.load_scripts()) == set(rw.SCRIPTS))
    lua3 = tempfile.mkdtemp(prefix="rwlock-lua3-")
    try:
        for f in rw.SCRIPTS:
            with open(os.path.join(ROOT, "lua", f + ".lua")) as src:
                body = src.read()
            with open(os.path.join(lua3, f + ".lua"), "w") as out:
                out.write(body.replace("-- rwlock protocol 2:", "-- rwlock protocol 3:", 1))
        for cls in (rw.Client, rw.AsyncClient):
            try:
                cls(r, lua_dir=lua3)
                res.check("%s refuses scripts of another version" % cls.__name__, False)
            except rw.ProtocolVersionError:
                res.check("%s refuses scripts of another version" % cls.__name__, True)
    finally:
        shutil.rmtree(lua3, ignore_errors=True)
    read_lost(r, res)


def read_lost(r, res):
    """An upgrade whose read lock Redis lost raises ReadLockLost (the lock is
    lost, nothing granted), in the synchronous and the asyncio client."""
    import asyncio
    key = rw.lock_keys("rwlock", "cross-read-lost")[0]
    c = rw.Client(r)
    lock = c.read_lock("cross-read-lost")
    lock.acquire()
    r.hdel(key, "r:" + lock.owner, "n", "rm")           # as an eviction would
    try:
        lock.upgrade(timeout=1)
        res.check("an upgrade of a lost read lock raises ReadLockLost", False)
    except rw.ReadLockLost:
        res.check("an upgrade of a lost read lock raises ReadLockLost", True)
    res.check("  nothing was granted", not r.hexists(key, "w"))
    res.check("  the lock is lost, release() says False", lock.lost and lock.release() is False)

    async def aio():
        ac = rw.AsyncClient(redis.asyncio.Redis(port=r.connection_pool.connection_kwargs["port"]))
        al = ac.read_lock("cross-read-lost")
        await al.acquire()
        r.hdel(key, "r:" + al.owner, "n", "rm")
        try:
            await al.upgrade(timeout=1)
            ok = False
        except rw.ReadLockLost:
            ok = True
        res.check("the asyncio client raises ReadLockLost too", ok and al.lost)
        res.check("  and release() says False", (await al.release()) is False)
    asyncio.run(aio())


def main():
    srv = RedisServer(int(os.environ.get("RWLOCK_CROSS_REDIS_PORT", "6392")),
                      prefix="rwlock-cross-")
    try:
        passed, failed, _ = run_clients(["python", "python-async"], srv)
        res = Results("python")
        python_only(srv, res)
    finally:
        srv.stop()
    passed += res.passed
    failed += res.failed
    print("cross: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    t0 = time.monotonic()
    rc = main()
    print("cross: took %.1f s" % (time.monotonic() - t0))
    sys.exit(rc)
