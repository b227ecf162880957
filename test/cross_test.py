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
import asyncio
import os
import shutil
import sys
import tempfile
import threading
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
    other = tempfile.mkdtemp(prefix="rwlock-lua-other-")
    try:
        for f in rw.SCRIPTS:
            with open(os.path.join(ROOT, "lua", f + ".lua")) as src:
                body = src.read()
            with open(os.path.join(other, f + ".lua"), "w") as out:
                out.write(body.replace("-- rwlock protocol 3:", "-- rwlock protocol 2:", 1))
        for cls in (rw.Client, rw.AsyncClient):
            try:
                cls(r, lua_dir=other)
                res.check("%s refuses scripts of another version" % cls.__name__, False)
            except rw.ProtocolVersionError:
                res.check("%s refuses scripts of another version" % cls.__name__, True)
    finally:
        shutil.rmtree(other, ignore_errors=True)
    read_lost(r, res)
    sequence(r, res)
    least_privilege(r, res)


def acl_line():
    """The arguments of the least-privilege ACL line of docs/connecting.md,
    as documented ("ACL SETUSER rwlock on >s3cret ...", read by
    tools/acl_line.py), after the user name."""
    sys.path.insert(0, os.path.join(ROOT, "tools"))
    import acl_line as doc
    return doc.setuser_args()[3:]


def least_privilege(r, res):
    """The client as the documented least-privilege Redis user (no SCRIPT
    LOAD, nothing in @admin or @dangerous): a hand-off to a waiter, an owed
    release sent ahead of an acquisition after SCRIPT FLUSH (the pipeline's
    NOSCRIPT path), deadlock detection (wait keys, waits.lua), sync and
    asyncio."""
    port = r.connection_pool.connection_kwargs["port"]
    r.execute_command("ACL", "SETUSER", "rwlock", *acl_line())
    kw = dict(port=port, username="rwlock", password="s3cret")
    c = rw.Client(redis.Redis(**kw), deadlock_timeout=0.2)
    name = "acl"
    try:
        a, b = c.write_lock(name), c.write_lock(name)
        t1 = a.acquire(1)
        threading.Timer(0.1, a.release).start()
        t2 = b.acquire(5)
        res.check("least privilege: a hand-off to a waiter", t2 > t1 and b.release())
        r.script_flush()
        c._owed.add(name, a.owner, "", 0)      # as if its release had been cut off
        t3 = a.acquire(1)
        res.check("least privilege: after SCRIPT FLUSH, an owed release goes ahead of "
                  "an acquisition (no SCRIPT LOAD)", t3 > t2 and not c._owed and a.release())
        a.acquire(1)
        try:
            b.acquire(5)            # the same thread holds it through a: a cycle
            res.check("least privilege: deadlock detection", False, "no error")
        except rw.DeadlockDetected as e:
            res.check("least privilege: deadlock detection (%s)" % e, True)
        a.release()
    except Exception as e:      # noqa: BLE001 - reported as a failure
        res.check("least privilege: the synchronous client", False, repr(e))

    async def aio():
        ac = rw.AsyncClient(redis.asyncio.Redis(**kw))
        lk = ac.write_lock(name)
        r.script_flush()
        ac._owed.add(name, lk.owner, "", 0)
        ok = await lk.acquire(1) > 0 and not ac._owed and await lk.release()
        res.check("least privilege: asyncio, an owed release after SCRIPT FLUSH", ok)
    try:
        asyncio.run(aio())
    except Exception as e:      # noqa: BLE001
        res.check("least privilege: asyncio", False, repr(e))


class Resending(redis.Redis):
    """redis-py as its RedisCluster behaves after a connection error: a
    command that ran is sent again (here: every call of the script whose
    SHA1 is `sha`, twice, the second answer returned)."""

    sha = None

    def evalsha(self, sha, numkeys, *args):
        first = super().evalsha(sha, numkeys, *args)
        if sha == self.sha:
            return super().evalsha(sha, numkeys, *args)
        return first


def sequence(r, res):
    """Protocol 3's request order (docs/protocol.md 4.1), as the Python
    client keeps it: every acquisition and release a newer seq, from one
    counter for every owner id of the process; a renewal that a newer
    request of its owner overtook is asked again, not a loss; a request
    answered stale raises StaleRequestError and changes nothing; a copy of
    a request that already ran (sent again by the Redis library) counts as
    a lost answer."""
    port = r.connection_pool.connection_kwargs["port"]
    c = rw.Client(r, lease=0.6)
    name = "cross-seq"
    key = rw.lock_keys("rwlock", name)[0]

    def seq_of(owner):
        v = r.hget(key, "s:" + owner)
        return None if v is None else int(v)
    a = c.write_lock(name)
    seen = []
    for _ in range(3):
        a.acquire(1)
        seen.append(seq_of(a.owner))
        a.release()
        seen.append(seq_of(a.owner))
    res.check("each acquisition and release of an owner records a newer seq %s" % seen,
              all(y > x for x, y in zip(seen, seen[1:])) and seen[0] >= 1)
    b = c.read_lock(name)
    b.owner = a.owner                   # two Lock objects, one owner id
    ok = b.try_acquire() and b.release()
    a.acquire(1)
    res.check("two Lock objects of one owner id go on from each other's seq",
              ok and seq_of(a.owner) > seen[-1])

    # A renewal that a newer request of the owner's overtook: asked again.
    old = rw._protocol.SEQ.now()
    newer = rw._protocol.SEQ.next()     # as an upgrade sent meanwhile
    r.hset(key, "s:" + a.owner, newer)
    res.check("a renewal overtaken by a newer request of its owner is asked again "
              "as of it, and holds", c._renew(name, a.owner, 600, old) == 1)
    lost = []
    a.on_lost = lost.append
    r.hset(key, "s:" + a.owner, 2 ** 52)    # another process runs the owner id
    before = r.hgetall(key)
    try:
        a.renew()
        res.check("a renewal older than a request this process never sent raises "
                  "StaleRequestError", False, "no error")
    except rw.StaleRequestError as e:
        res.check("a renewal older than a request this process never sent raises "
                  "StaleRequestError (%s)" % e, isinstance(e, rw.RWLockError))
    res.check("  and changes nothing", {k: v for k, v in r.hgetall(key).items()} == before)
    t0 = time.monotonic()
    while not lost and time.monotonic() - t0 < 2:
        time.sleep(0.05)
    res.check("  the renewal thread takes it for a loss (on_lost, lost)",
              lost == [a] and a.lost)
    try:
        a.release()
        res.check("its release raises StaleRequestError", False, "no error")
    except rw.StaleRequestError:
        res.check("its release raises StaleRequestError, and changes nothing",
                  r.hget(key, "w") == a.owner.encode() and not c._owed)
    r.delete(key)

    # A copy of an acquisition sent again after it ran: the answer is lost.
    rr = Resending(port=port)
    c2 = rw.Client(rr)
    lk = c2.write_lock(name)
    rr.script_load(c2._bodies["acquire"])     # EVALSHA runs it (no NOSCRIPT)
    rr.sha = c2._shas["acquire"]
    try:
        lk.acquire(1)
        res.check("an acquisition sent twice (the first ran) is a lost answer", False,
                  "no error")
    except redis.exceptions.ConnectionError as e:
        res.check("an acquisition sent twice (the first ran) is a lost answer: "
                  "ConnectionError (%s)" % e, "sent again" in str(e))
    rr.sha = None
    res.check("  what it may have granted is released (the lock is free)",
              c2.info(name)["state"] == "free" and not lk.held, str(c2.info(name)))
    res.check("  and it is taken again at once", lk.try_acquire() and lk.release())


def read_lost(r, res):
    """An upgrade whose read lock Redis lost raises ReadLockLost (the lock is
    lost, nothing granted), in the synchronous and the asyncio client."""
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
        passed, failed, _ = run_clients(["python", "python-async"], srv, acl=True)
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
