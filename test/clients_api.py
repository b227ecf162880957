#!/usr/bin/python3
"""clients_api.py: what both clients offer a service beyond the protocol,
against real servers on 127.0.0.1 (no PostgreSQL needed):

- scoped use that reports a lost lock: Python's `with` / `async with`
  raising LockLost at its end (a warning with raise_on_lost=False; the
  block's own error wins), Node's using() with its AbortSignal (also when
  the renewals hang: Redis paused past the lease);
- several names at once (write_locks / read_locks of Client, AsyncClient,
  QuorumClient, AsyncQuorumClient; Node's writeLocks in clients_api.js):
  the canonical order whatever the caller's (seen in Redis while the call
  waits), duplicates, all or none on a timeout, an error and a cancel,
  a timeout that bounds the whole call;
- one error hierarchy, the same names in both (compared), misuse typed
  (AlreadyHeld, NotHeld, still RuntimeErrors in Python), release_all;
- from_url / Locks.fromUrl on every form of rwlock.redis_url, each with a
  hand-off that waits: redis://, unix://, redis+cluster:// (three masters),
  redis+sentinel:// (a sentinel in front of a master), and three URLs (a
  quorum: Python's QuorumClient and AsyncQuorumClient; refused by Node);
- a Node process on a Cluster (whose subscriber socket is not ours to
  unref) that waited ends by itself once the subscriber's idle second is
  over;
- the Node client's bounded waits, process life, AbortSignal and owner
  option (test/node_client.js, on the plain Redis).

Needs `npm ci` in clients/node. Starts its servers on free ports from 6440
on; prints "clients_api: N passed, N failed".

    python3 test/clients_api.py
"""
import asyncio
import json
import logging
import os
import re
import subprocess
import sys
import tempfile
import threading
import time

import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, HERE)
import rwlock_client as rw  # noqa: E402
from rwlock_client.aio import AsyncClient  # noqa: E402
from rwtest import REDIS_SERVER, RedisCluster, RedisServer, free_port  # noqa: E402


class Results:
    def __init__(self):
        self.passed = self.failed = 0

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
        print("%s python: %s%s" % ("ok" if ok else "FAIL", what,
                                   "" if ok or not detail else ": %s" % detail), flush=True)


def lose(r, name):
    """Redis forgets the lock (as after a restart without persistence)."""
    r.delete(rw.lock_keys("rwlock", name)[0])


class Warnings(logging.Handler):
    def __init__(self):
        super().__init__()
        self.messages = []

    def emit(self, record):
        self.messages.append(record.getMessage())


def scoped(res, r):
    locks = rw.Client(r)
    with locks.write_lock("api:py") as lk:
        res.check("with: held inside", lk.held)
    res.check("with: released at the end", locks.info("api:py")["state"] == "free")
    try:
        with locks.write_lock("api:py-lost"):
            lose(r, "api:py-lost")
        res.check("with: a lost lock raises LockLost at its end", False, "no error")
    except rw.LockLost as e:
        res.check("with: a lost lock raises LockLost at its end (%s)" % e, isinstance(e, rw.RWLockError))
    w = Warnings()
    logging.getLogger("rwlock_client").addHandler(w)
    try:
        with locks.write_lock("api:py-lost2", raise_on_lost=False):
            lose(r, "api:py-lost2")
        res.check("with raise_on_lost=False: no error, a warning",
                  any("lost" in m for m in w.messages), w.messages)
    except rw.LockLost as e:
        res.check("with raise_on_lost=False: no error, a warning", False, e)
    finally:
        logging.getLogger("rwlock_client").removeHandler(w)
    try:
        with locks.write_lock("api:py-lost3"):
            lose(r, "api:py-lost3")
            raise KeyError("mine")
    except KeyError:
        res.check("with: the block's own error wins over LockLost", True)
    except rw.LockLost:
        res.check("with: the block's own error wins over LockLost", False, "LockLost")

    async def aio():
        ar = __import__("redis.asyncio", fromlist=["Redis"]).Redis(port=r.connection_pool.connection_kwargs["port"])
        alocks = AsyncClient(ar)
        try:
            async with alocks.write_lock("api:aio-lost"):
                lose(r, "api:aio-lost")
            res.check("async with: a lost lock raises LockLost at its end", False, "no error")
        except rw.LockLost:
            res.check("async with: a lost lock raises LockLost at its end", True)
        async with alocks.write_lock("api:aio-lost2", raise_on_lost=False):
            lose(r, "api:aio-lost2")
        res.check("async with raise_on_lost=False: no error", True)
        a = alocks.write_lock("api:aio-all")
        await a.acquire()
        n = await alocks.release_all()
        res.check("AsyncClient.release_all()", n == 1 and not a.held)
        await ar.close()
    asyncio.run(aio())


def unreachable(res):
    """Redis gone past the lease's end: the with block ends in LockLost (its
    cause the connection error), sync and asyncio."""
    srv = RedisServer(6470, prefix="rwlock-api-gone-")
    kw = dict(port=srv.port, socket_connect_timeout=0.5, socket_timeout=0.5)
    locks = rw.Client(redis.Redis(**kw))
    logging.getLogger("rwlock_client").setLevel(logging.CRITICAL)   # the renewals' failures
    try:
        try:
            with locks.write_lock("api:gone", lease=0.6):
                srv.stop()
                time.sleep(0.9)
            res.check("with: Redis gone past the lease: LockLost", False, "no error")
        except rw.LockLost as e:
            res.check("with: Redis gone past the lease: LockLost (cause: %r)" % e.__cause__,
                      isinstance(e.__cause__, redis.exceptions.ConnectionError))
        except redis.exceptions.RedisError as e:
            res.check("with: Redis gone past the lease: LockLost", False, repr(e))
        srv2 = RedisServer(6470, prefix="rwlock-api-gone-")

        async def aio():
            alocks = AsyncClient(__import__("redis.asyncio", fromlist=["Redis"]).Redis(
                port=srv2.port, socket_connect_timeout=0.5, socket_timeout=0.5))
            try:
                async with alocks.write_lock("api:agone", lease=0.6):
                    srv2.stop()
                    await asyncio.sleep(0.9)
                res.check("async with: Redis gone past the lease: LockLost", False, "no error")
            except rw.LockLost as e:
                res.check("async with: Redis gone past the lease: LockLost",
                          isinstance(e.__cause__, redis.exceptions.ConnectionError))
            except redis.exceptions.RedisError as e:
                res.check("async with: Redis gone past the lease: LockLost", False, repr(e))
        asyncio.run(aio())
    finally:
        logging.getLogger("rwlock_client").setLevel(logging.NOTSET)


def issue39(res, r):
    """lost stays true after the block; upgrade() returns the token; the
    factories' types."""
    locks = rw.Client(r)
    try:
        with locks.write_lock("api:py-lost-after", raise_on_lost=False) as lk:
            lose(r, "api:py-lost-after")
            lk.renew()
        res.check("with: lk.lost stays true after the block", lk.lost and not lk.held)
    except Exception as e:      # noqa: BLE001
        res.check("with: lk.lost stays true after the block", False, repr(e))
    with locks.write_lock("api:py-kept") as kept:
        pass
    res.check("with: lk.lost false after a block that kept its lock", not kept.lost)
    kept.acquire()
    res.check("lost false again once acquired anew", not kept.lost)
    kept.release()
    rd = locks.read_lock("api:py-upgrade")
    rd.acquire()
    tok = rd.upgrade(timeout=1)
    res.check("upgrade() returns the write lock's token (%r), as acquire() does" % (tok,),
              type(tok) is int and tok > 0 and tok == rd.token and rd.mode == "w")
    other = locks.read_lock("api:py-upgrade")
    rd.downgrade()
    other.acquire()
    res.check("upgrade() on timeout: False", rd.upgrade(timeout=0.2) is False)
    other.release()
    rd.release()

    async def aio():
        a = AsyncClient(__import__("redis.asyncio", fromlist=["Redis"]).Redis(
            port=r.connection_pool.connection_kwargs["port"]))
        ard = a.read_lock("api:aio-upgrade")
        await ard.acquire()
        t = await ard.upgrade(timeout=1)
        res.check("AsyncLock.upgrade() returns the token (%r)" % (t,), type(t) is int and t == ard.token)
        await ard.release()
        async with a.write_lock("api:aio-lost-after", raise_on_lost=False) as alk:
            lose(r, "api:aio-lost-after")
            await alk.renew()
        res.check("async with: lk.lost stays true after the block", alk.lost)
    asyncio.run(aio())


def quorum_young(res):
    """Masters up for less than max_lease: the error names the restart
    rule and how long is left."""
    young = [RedisServer(6480 + i, prefix="rwlock-api-y-") for i in range(3)]
    try:
        q = rw.QuorumClient.from_urls(" ".join(s.url for s in young), max_lease=40.0)
        try:
            q.write_lock("api:young").acquire(timeout=1)
            res.check("quorum of masters just started: refused", False, "granted")
        except redis.exceptions.ConnectionError as e:
            res.check("quorum of masters just started: the error names the restart rule and "
                      "how long is left: %s" % e,
                      "restart rule" in str(e) and "max_lease (40 s" in str(e)
                      and re.search(r"counts in (3\d|4[01]) s", str(e)) is not None, str(e))
    finally:
        for s in young:
            s.stop()


async def aio_cycle(res, port, linked_by):
    """Two asyncio tasks of one process, each holding one lock through one
    AsyncLock and waiting for the other's through another: one cycle,
    broken (linked by the task, or by the owner option)."""
    import redis.asyncio as aredis
    a = AsyncClient(aredis.Redis(port=port), deadlock_timeout=0.5)
    outcome = {}

    async def task(first, second, delay):
        held = a.write_lock(first)
        await held.acquire(timeout=2)
        await asyncio.sleep(delay)
        if linked_by == "task":
            wanted = a.write_lock(second)
            coro = wanted.acquire(timeout=8)
        else:
            # The wait in a task of its own (not the holder's): the owner option links it.
            wanted = a.write_lock(second, owner=held.owner)
            coro = asyncio.ensure_future(wanted.acquire(timeout=8))
        t0 = time.monotonic()
        try:
            await coro
            outcome[first] = ("granted", time.monotonic() - t0, held.owner)
            await wanted.release()
        except rw.DeadlockDetected as e:
            outcome[first] = ("deadlock", time.monotonic() - t0, held.owner, e.cycle)
        except Exception as e:      # noqa: BLE001
            outcome[first] = (repr(e), time.monotonic() - t0, held.owner)
        finally:
            await held.release()
    x, y = "api:aio-cyc-%s-x" % linked_by, "api:aio-cyc-%s-y" % linked_by
    await asyncio.gather(task(x, y, 0.1), task(y, x, 0.4))
    got = sorted(v[0] for v in outcome.values())
    res.check("asyncio: a cycle of two tasks (held under one AsyncLock, waited under "
              "another, linked by %s) is broken: %s" % (linked_by, got),
              got == ["deadlock", "granted"], repr(outcome))
    victim = [v for v in outcome.values() if v[0] == "deadlock"]
    if victim:
        res.check("asyncio (%s): the victim is the greater owner id, within "
                  "deadlock_timeout + 1 s (%.2f s)" % (linked_by, victim[0][1]),
                  victim[0][2] == max(v[2] for v in outcome.values()) and victim[0][1] < 2.5)
    await a.redis.close()


def misuse(res, r):
    locks = rw.Client(r)
    lk = locks.write_lock("api:misuse")
    lk.acquire()
    try:
        lk.acquire()
        res.check("acquire() of a held Lock: AlreadyHeld", False, "no error")
    except rw.AlreadyHeld as e:
        res.check("acquire() of a held Lock: AlreadyHeld (a RuntimeError too)",
                  isinstance(e, RuntimeError) and isinstance(e, rw.RWLockError))
    res.check("release(): True", lk.release() is True)
    try:
        lk.release()
        res.check("a second release(): NotHeld", False, "no error")
    except rw.NotHeld as e:
        res.check("a second release(): NotHeld (a RuntimeError too)",
                  isinstance(e, RuntimeError) and isinstance(e, rw.RWLockError))
    try:
        locks.write_lock("")
        res.check("an empty name: ValueError", False, "no error")
    except ValueError:
        res.check("an empty name: ValueError", True)
    res.check("UpgradeConflict is a Deadlock", issubclass(rw.UpgradeConflict, rw.Deadlock))
    a, b = locks.write_lock("api:all1"), locks.read_lock("api:all2")
    a.acquire()
    b.acquire()
    n = locks.release_all()
    res.check("release_all() releases every hold", n == 2 and not a.held and not b.held
              and locks.info("api:all1")["state"] == "free" and not locks.held_locks())


# -- several names at once (docs/protocol.md 19) ---------------------------------------

MULTI_ODD = ("x\U0001F600", "x\uFF5E")   # UTF-8: \uFF5E first; UTF-16 (JS <): the emoji first


def wait_for(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.02)
    return cond()


def multi(res, r, locks, label):
    """write_locks / read_locks of a synchronous client (a Client or a
    QuorumClient): the canonical order whatever the caller's, duplicates,
    all or none (a timeout, an error on the second name), a timeout that
    bounds the whole call, tokens in the caller's order, with."""
    other = locks                       # holds names in the way (another owner)
    p = "api:m%s:" % label
    a, b, c = p + "a", p + "b", p + "c"

    def state(n):
        i = locks.info(n)
        return i["state"], i["writer"]

    # The order: with b held by another, a call on [c, b, a] or [b, c, a]
    # holds a (before b) while it waits for b, and never c.
    for given in ([c, b, a], [b, c, a], [a, c, b]):
        blocker = other.write_lock(b)
        blocker.acquire(timeout=5)
        ml = locks.write_locks(given)
        bg = threading.Thread(target=lambda: ml.acquire(timeout=10))
        bg.start()
        waited = wait_for(lambda: ml.owner in locks.info(b)["waiting"])
        sa, sc = state(a), state(c)
        res.check("%s write_locks(%s): holds %s and not %s while it waits for %s"
                  % (label, [n[len(p):] for n in given], a[len(p):], c[len(p):], b[len(p):]),
                  waited and sa == ("write", ml.owner) and sc == ("free", None),
                  "waited %s, a %s, c %s" % (waited, sa, sc))
        blocker.release()
        bg.join(10)
        toks = [locks.info(n)["token"] for n in given]
        res.check("%s write_locks(%s): then all, tokens in the caller's order %s"
                  % (label, [n[len(p):] for n in given], ml.tokens),
                  ml.held and ml.tokens == toks and all(state(n)[1] == ml.owner for n in given),
                  "held %s, tokens %s, redis %s" % (ml.held, ml.tokens, toks))
        res.check("%s: one owner id, one Lock per name in the canonical order" % label,
                  [lk.name for lk in ml.locks] == [a, b, c]
                  and {lk.owner for lk in ml.locks} == {ml.owner})
        res.check("%s: release() gives every name back" % label,
                  ml.release() is True and all(state(n)[0] == "free" for n in given))
    # UTF-8 bytes, not UTF-16 code units (JavaScript's < on strings).
    odd = [p + n for n in MULTI_ODD]
    blocker = other.write_lock(odd[0])
    blocker.acquire(timeout=5)
    ml = locks.write_locks(odd)
    res.check("%s: the canonical order is the UTF-8 bytes' (%r first)" % (label, MULTI_ODD[1]),
              [lk.name for lk in ml.locks] == [odd[1], odd[0]]
              and rw.canonical_order(odd) == [odd[1], odd[0]])
    got = ml.try_acquire(0.2)
    res.check("%s: try_acquire(0.2) with its last name busy: False, the first given back"
              % label, got is False and state(odd[1])[0] == "free" and not ml.held)
    blocker.release()
    # Duplicates are one name; its token at each place.
    ml = locks.write_locks([b, a, b])
    toks = ml.acquire(timeout=5)
    res.check("%s: a name given twice is one hold (%d locks), its token at each place"
              % (label, len(ml.locks)), len(ml.locks) == 2 and len(toks) == 3
              and toks[0] == toks[2] == locks.info(b)["token"] and toks[1] == locks.info(a)["token"])
    ml.release()
    # All or none: a timeout on the second name gives the first back; the
    # timeout bounds the whole call (a then c held, a let go after 0.3 s).
    blocker = other.write_lock(b)
    blocker.acquire(timeout=5)
    ml = locks.write_locks([a, b], timeout=0.4)
    t0 = time.monotonic()
    try:
        ml.acquire(0.4)
        res.check("%s: a timeout on the second name: LockTimeout" % label, False, "acquired")
    except rw.LockTimeout as e:
        el = time.monotonic() - t0
        res.check("%s: a timeout on the second name: LockTimeout after %.2f s (%s), the "
                  "first given back" % (label, el, e), 0.35 < el < 1.5
                  and state(a)[0] == "free" and not any(lk.held for lk in ml.locks))
    blocker.release()
    ha, hc = other.write_lock(a), other.write_lock(c)
    ha.acquire(timeout=5)
    hc.acquire(timeout=5)
    threading.Timer(0.3, ha.release).start()
    ml = locks.write_locks([c, a, b])
    t0 = time.monotonic()
    try:
        ml.acquire(timeout=0.6)
        res.check("%s: the timeout bounds the whole call" % label, False, "acquired")
    except rw.LockTimeout:
        el = time.monotonic() - t0
        res.check("%s: the timeout bounds the whole call (0.6 s: %.2f s), a and b given back"
                  % (label, el), 0.55 < el < 1.2 and state(a)[0] == "free"
                  and state(b)[0] == "free", "%.2f s" % el)
    hc.release()
    # An error on the second name (its key is not a hash): the first given back.
    r_b = [x for x in (r if isinstance(r, list) else [r])]
    for x in r_b:
        x.set(rw.lock_keys("rwlock", b)[0], "not a hash")
    ml = locks.write_locks([b, a])
    try:
        ml.acquire(timeout=2)
        res.check("%s: an error on the second name is raised" % label, False, "acquired")
    except Exception as e:      # noqa: BLE001
        res.check("%s: an error on the second name is raised (%s), the first given back"
                  % (label, type(e).__name__), state(a)[0] == "free" and not ml.locks[0].held,
                  str(e))
    for x in r_b:
        x.delete(rw.lock_keys("rwlock", b)[0])
    # with: held inside, all free after; read locks share.
    with locks.read_locks([c, a], timeout=5) as m1, locks.read_locks([a, c], timeout=5) as m2:
        res.check("%s: read_locks as context managers share the names" % label,
                  m1.held and m2.held and len(locks.info(a)["readers"]) == 2)
    res.check("%s: with: every name free at its end" % label,
              state(a)[0] == state(c)[0] == "free")
    try:
        locks.write_locks("ab")
        res.check("%s: write_locks(a str): TypeError" % label, False, "no error")
    except TypeError:
        res.check("%s: write_locks(a str): TypeError" % label, True)
    try:
        locks.write_locks([])
        res.check("%s: write_locks([]): ValueError" % label, False, "no error")
    except ValueError:
        res.check("%s: write_locks([]): ValueError" % label, True)


async def aio_multi(res, r, alocks, label):
    """write_locks of an asyncio client: the order, all or none on a
    timeout, on an error and on a cancelled task, async with."""
    p = "api:am%s:" % label
    a, b, c = p + "a", p + "b", p + "c"

    async def state(n):
        i = await alocks.info(n)
        return i["state"]

    async def until(cond, timeout=5.0):
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if await cond():
                return True
            await asyncio.sleep(0.02)
        return await cond()

    blocker = alocks.write_lock(b)
    await blocker.acquire(timeout=5)
    ml = alocks.write_locks([c, b, a])
    task = asyncio.ensure_future(ml.acquire(timeout=10))

    async def waiting():
        return ml.owner in (await alocks.info(b))["waiting"]
    waited = await until(waiting)
    sa, sc = await state(a), await state(c)
    res.check("%s write_locks([c, b, a]): holds a, not c, while it waits for b" % label,
              waited and sa == "write" and sc == "free", "%s %s %s" % (waited, sa, sc))
    task.cancel()
    try:
        await task
    except asyncio.CancelledError:
        pass

    async def a_free():
        return await state(a) == "free"
    res.check("%s: a cancelled acquisition gives back what it took" % label,
              await until(a_free) and not any(lk.held for lk in ml.locks))
    t0 = time.monotonic()
    try:
        await ml.acquire(timeout=0.3)
        res.check("%s: a timeout on the second name: LockTimeout" % label, False, "acquired")
    except rw.LockTimeout:
        el = time.monotonic() - t0
        res.check("%s: a timeout on the second name: LockTimeout after %.2f s, the first "
                  "given back" % (label, el), 0.25 < el < 1.5 and await state(a) == "free")
    await blocker.release()
    toks = await ml.acquire(timeout=5)
    want = [(await alocks.info(n))["token"] for n in (c, b, a)]
    res.check("%s: then all, tokens in the caller's order" % label, toks == want,
              "%s %s" % (toks, want))
    await ml.release()
    for x in (r if isinstance(r, list) else [r]):
        x.set(rw.lock_keys("rwlock", c)[0], "not a hash")
    try:
        await alocks.write_locks([c, a]).acquire(timeout=2)
        res.check("%s: an error on the second name is raised" % label, False, "acquired")
    except Exception as e:      # noqa: BLE001
        res.check("%s: an error on the second name is raised (%s), the first given back"
                  % (label, type(e).__name__), await state(a) == "free", str(e))
    for x in (r if isinstance(r, list) else [r]):
        x.delete(rw.lock_keys("rwlock", c)[0])
    async with alocks.write_locks([b, a, b], timeout=5) as m:
        res.check("%s: async with: held inside, tokens %s" % (label, m.tokens),
                  m.held and len(m.tokens) == 3 and m.tokens[0] == m.tokens[2])
    res.check("%s: async with: every name free at its end" % label,
              await state(a) == "free" and await state(b) == "free")


def handoff(res, label, client):
    """Two holders of one name on client: the second waits for the first."""
    name = "api:url{%s}" % label
    try:
        a, b = client.write_lock(name), client.write_lock(name)
        t1 = a.acquire(timeout=5)
        threading.Timer(0.1, a.release).start()
        t2 = b.acquire(timeout=5)
        res.check("%s: exclusion, a hand-off, tokens %d < %d" % (label, t1, t2),
                  t2 > t1 and b.release())
    except Exception as e:      # noqa: BLE001 - reported as a failure
        res.check(label, False, repr(e))


def quorum_seq(res, q, servers):
    """A quorum's request is one request: the same seq on every master
    (docs/protocol.md 4.1), for an acquisition and for a release."""
    name = "api:qseq"
    key = rw.lock_keys("rwlock", name)[0]
    lk = q.write_lock(name)

    def seqs():
        return [s.redis().hget(key, "s:" + lk.owner) for s in servers]
    lk.acquire(timeout=5)
    got = seqs()
    lk.release()
    rel = seqs()
    res.check("QuorumClient: one seq on every master for an acquisition (%s) and a "
              "release (%s)" % (got, rel), None not in got and len(set(got)) == 1 and
              len(set(rel)) == 1 and int(rel[0]) > int(got[0]))


async def aio_quorum(res, q, servers):
    """AsyncClient.from_url(three URLs): an AsyncQuorumClient that hands a
    lock over, lets go of what a cancelled wait gets, and reports a loss."""
    res.check("AsyncClient.from_url(three URLs) gives an AsyncQuorumClient",
              isinstance(q, rw.AsyncQuorumClient))
    a, b = q.write_lock("api:aq"), q.write_lock("api:aq")
    t1 = await a.acquire(timeout=5)
    asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(a.release()))
    t2 = await b.acquire(timeout=5)
    res.check("AsyncQuorumClient: a hand-off, tokens %d < %d" % (t1, t2), t2 > t1)
    c = q.write_lock("api:aq")
    waiter = asyncio.ensure_future(c.acquire(timeout=5))
    await asyncio.sleep(0.2)
    waiter.cancel()
    await b.release()       # the cancelled wait's thread gets it, and lets go
    free = False
    for _ in range(50):
        await asyncio.sleep(0.05)
        if (await q.info("api:aq"))["state"] == "free":
            free = True
            break
    res.check("AsyncQuorumClient: a cancelled wait lets go of what it gets", free and not c.held)
    try:
        async with q.write_lock("api:aq-lost"):
            for s in servers:
                lose(s.redis(), "api:aq-lost")
        res.check("AsyncQuorumClient: async with a lost lock raises LockLost", False, "no error")
    except rw.LockLost:
        res.check("AsyncQuorumClient: async with a lost lock raises LockLost", True)


NODE_EXITS = r"""
const path = require('path');
const rw = require(path.join(process.argv[1], 'clients', 'node'));
const Redis = require(path.join(process.argv[1], 'clients', 'node', 'node_modules', 'ioredis'));
(async () => {
  const nodes = process.argv[2].replace(/^redis\+cluster:\/\//, '').replace(/\/$/, '').split(',')
    .map((hp) => ({ host: hp.split(':')[0], port: Number(hp.split(':')[1]) }));
  const c = new Redis.Cluster(nodes);
  const locks = new rw.Locks(c);
  const a = locks.writeLock('api:exit'), b = locks.writeLock('api:exit');
  await a.acquire();
  setTimeout(() => a.release(), 200);
  await b.acquire(5000);                      // waits: the cluster subscriber
  await b.release();
  await c.quit();                             // its own connection; no locks.close()
  console.log('done');
})();
"""


def node_cluster_exits(res, url):
    """On a Cluster (whose subscriber socket cannot be unref'd) a Node
    process that waited ends once the subscriber's idle second is over."""
    p = subprocess.Popen(["node", "-e", NODE_EXITS, ROOT, url], stdout=subprocess.PIPE,
                         stderr=subprocess.STDOUT, text=True)
    first = p.stdout.readline()
    t = time.monotonic()
    try:
        rest = p.communicate(timeout=10)[0]
    except subprocess.TimeoutExpired:
        p.kill()
        rest = p.communicate()[0]
    took = time.monotonic() - t
    res.check("node on a Cluster: a process that waited ends by itself, %.1f s after "
              "its work, without close()" % took,
              first.strip() == "done" and p.returncode == 0 and took < 4.0, first + rest)


def error_names():
    return sorted(n for n in dir(rw) if isinstance(getattr(rw, n), type)
                  and issubclass(getattr(rw, n), rw.RWLockError))


def sentinel(port, master_port, d):
    conf = os.path.join(d, "sentinel.conf")
    with open(conf, "w") as f:
        f.write("port %d\nbind 127.0.0.1\ndir %s\n"
                "sentinel monitor mymaster 127.0.0.1 %d 1\n" % (port, d, master_port))
    p = subprocess.Popen([REDIS_SERVER, conf, "--sentinel"],
                         stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    s = redis.Redis(port=port)
    for _ in range(100):
        try:
            if s.sentinel_get_master_addr_by_name("mymaster"):
                return p
        except redis.exceptions.RedisError:
            pass
        time.sleep(0.05)
    p.kill()
    raise RuntimeError("the sentinel did not start")


def main():
    res = Results()
    d = tempfile.mkdtemp(prefix="rwlock-api-")
    sock = os.path.join(d, "redis.sock")
    srv = RedisServer(6440, "--unixsocket", sock, "--unixsocketperm", "700", prefix="rwlock-api-")
    # Masters that persist every write count toward a majority at once.
    quorum = [RedisServer(srv.port + 1 + i, "--appendonly", "yes", "--appendfsync", "always",
                          prefix="rwlock-api-q-") for i in range(3)]
    cluster = RedisCluster(6450, prefix="rwlock-api-c-")
    gone = RedisServer(6475, prefix="rwlock-api-gone-")   # clients_api.js shuts it down
    sport = free_port(6460)
    sent = sentinel(sport, srv.port, d)
    urls = {
        "redis": srv.url,
        "unix": "unix://%s?db=0" % sock,
        "cluster": cluster.url,
        "sentinel": "redis+sentinel://127.0.0.1:%d/mymaster/0" % sport,
        "quorum": " ".join(q.url for q in quorum),
        "gone": gone.url,
    }
    try:
        r = srv.redis()
        scoped(res, r)
        issue39(res, r)
        quorum_young(res)
        asyncio.run(aio_cycle(res, srv.port, "task"))
        asyncio.run(aio_cycle(res, srv.port, "owner"))
        unreachable(res)
        misuse(res, r)
        multi(res, r, rw.Client(r), "Client")

        async def aio_multi_main():
            import redis.asyncio as aredis
            ar = aredis.Redis(port=srv.port)
            await aio_multi(res, r, AsyncClient(ar), "AsyncClient")
            await ar.close()
        asyncio.run(aio_multi_main())
        for label in ("redis", "unix", "cluster", "sentinel"):
            c = rw.Client.from_url(urls[label])
            res.check("Client.from_url(%s) gives a Client" % label, type(c) is rw.Client)
            handoff(res, "Client.from_url(%s)" % label, c)
        q = rw.Client.from_url(urls["quorum"], max_lease=60.0)
        res.check("Client.from_url(three URLs) gives a QuorumClient", isinstance(q, rw.QuorumClient))
        handoff(res, "Client.from_url(quorum)", q)
        quorum_seq(res, q, quorum)
        multi(res, [s.redis() for s in quorum], q, "QuorumClient")

        async def aio_urls():
            for label in ("redis", "unix", "cluster", "sentinel"):
                c = AsyncClient.from_url(urls[label])
                name = "api:aurl{%s}" % label
                a, b = c.write_lock(name), c.write_lock(name)
                t1 = await a.acquire(timeout=5)
                asyncio.get_running_loop().call_later(0.1, lambda: asyncio.ensure_future(a.release()))
                t2 = await b.acquire(timeout=5)
                res.check("AsyncClient.from_url(%s): a hand-off, tokens %d < %d" % (label, t1, t2),
                          t2 > t1 and await b.release())
            await aio_quorum(res, AsyncClient.from_url(urls["quorum"], max_lease=60.0), quorum)
            await aio_multi(res, [s.redis() for s in quorum],
                            AsyncClient.from_url(urls["quorum"], max_lease=60.0),
                            "AsyncQuorumClient")
        try:
            asyncio.run(aio_urls())
        except Exception as e:      # noqa: BLE001
            res.check("AsyncClient.from_url", False, repr(e))

        node_cluster_exits(res, urls["cluster"])
        # Waits bounded (Redis unreachable), process life, AbortSignal, the owner option.
        p = subprocess.run(["node", os.path.join(HERE, "node_client.js"), urls["redis"]],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=180)
        for line in p.stdout.splitlines():
            print(line)
            res.passed += line.startswith("ok ")
            res.failed += line.startswith("FAIL ")
        res.check("test/node_client.js ran to its end (exit status %d)" % p.returncode,
                  p.returncode == 0 and "node_client: ok" in p.stdout, p.stdout[-2000:])
        p = subprocess.run(["node", os.path.join(HERE, "clients_api.js"), json.dumps(urls)],
                           stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=120)
        node_errors = None
        for line in p.stdout.splitlines():
            if line.startswith("errors "):
                node_errors = json.loads(line[len("errors "):])
                continue
            print(line)
            if line.startswith("ok "):
                res.passed += 1
            elif line.startswith("FAIL "):
                res.failed += 1
        res.check("the Node checks ran to the end (exit status %d)" % p.returncode,
                  p.returncode == 0 and node_errors is not None, p.stdout[-2000:])
        res.check("the same error classes in both clients: %s" % error_names(),
                  node_errors == error_names(), "node: %s" % node_errors)
    finally:
        sent.kill()
        gone.stop()
        cluster.stop()
        for q in quorum:
            q.stop()
        srv.stop()
        subprocess.run(["rm", "-rf", d])
    print("clients_api: %d passed, %d failed" % (res.passed, res.failed))
    return 1 if res.failed else 0


if __name__ == "__main__":
    sys.exit(main())
