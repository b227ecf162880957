#!/usr/bin/python3
"""cross_test.py: the Python client (clients/python) and SQL sessions of the
rwlock extension on the same locks, against a real redis-server and
PostgreSQL.

Run under pg_virtualenv (it sets PGHOST, PGPORT, PGUSER, PGPASSWORD), with
the extension installed:

    pg_virtualenv -s /usr/bin/python3 test/cross_test.py

Starts its own redis-server on a free port (6392 if free, else one the OS
picks; $RWLOCK_CROSS_REDIS_PORT to choose) and stops it at the end. Every SQL
connection sets rwlock.redis_url to it. Prints "N passed, N failed" and the
measured hand-off latencies; exits non-zero on a failure.
"""
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
import redis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import rwlock_client as rw  # noqa: E402
from rwtest import RedisServer  # noqa: E402

ROUNDS = int(os.environ.get("RWLOCK_CROSS_ROUNDS", "50"))
HANDOFF_P50_MAX_MS = 5.0

passed = failed = 0


def check(what, ok, detail=""):
    global passed, failed
    if ok:
        passed += 1
        print("ok   %s" % what)
    else:
        failed += 1
        print("FAIL %s %s" % (what, detail))


def sql_session(url):
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET rwlock.redis_url = %s", (url,))
    cur.execute("SET lock_timeout = '20s'")
    return conn


def q(conn, sql, *args):
    cur = conn.cursor()
    cur.execute(sql, args)
    return cur.fetchone()[0] if cur.description else None


def wait_until(cond, timeout=5.0):
    end = time.monotonic() + timeout
    while time.monotonic() < end:
        if cond():
            return True
        time.sleep(0.0005)
    return False


def pct(values, p):
    s = sorted(values)
    return s[min(len(s) - 1, int(round(p / 100.0 * (len(s) - 1))))]


class Bg(threading.Thread):
    """Run fn in a thread; .result, .error, .done_at (perf_counter)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error, self.done_at = fn, None, None, None
        self.start()

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: B902
            self.error = e
        self.done_at = time.perf_counter()


def main():
    srv = RedisServer(6392, prefix="rwlock-cross-")
    try:
        run(srv)
    finally:
        srv.stop()
    print("cross: %d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


def run(srv):
    r = redis.Redis(port=srv.port)
    admin = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    admin.autocommit = True
    q(admin, "CREATE EXTENSION IF NOT EXISTS rwlock")
    s1, s2 = sql_session(srv.url), sql_session(srv.url)
    py = rw.Client(r)

    def subscribers(name):
        # waiting readers listen on the lock's channel, a writer on its own
        chans = r.pubsub_channels(rw.lock_keys("rwlock", name)[2] + "*")
        return sum(n for _, n in r.pubsub_numsub(*chans)) if chans else 0

    # -- a Python writer blocks SQL, and the reverse ---------------------------
    name = "cross:excl"
    w = py.write_lock(name)
    w.acquire()
    check("SQL try_wlock fails while Python holds the write lock",
          q(s1, "SELECT redis_try_wlock(%s)", name) is False)
    t0 = time.monotonic()
    got = q(s1, "SELECT redis_try_wlock(%s, '150ms')", name)
    el = time.monotonic() - t0
    check("SQL try_wlock with a wait gives up after the wait", got is False and 0.14 < el < 1.0,
          "(%s after %.3fs)" % (got, el))
    check("SQL try_rlock fails while Python holds the write lock",
          q(s1, "SELECT redis_try_rlock(%s)", name) is False)
    w.release()
    check("SQL try_wlock succeeds once Python released",
          q(s1, "SELECT redis_try_wlock(%s)", name) is True)
    p = py.write_lock(name)
    check("Python try_acquire fails while SQL holds the write lock", p.try_acquire() is False)
    check("Python try_acquire(wait) gives up", p.try_acquire(0.1) is False)
    check("nothing left behind by the failed tries", py.info(name)["waiting"] == {})
    q(s1, "SELECT redis_unlock(%s)", name)
    check("Python acquires once SQL unlocked", p.try_acquire() is True)
    p.release()

    # -- hand-off: Python release -> waiting SQL redis_wlock -------------------
    name = "cross:handoff"
    w = py.write_lock(name)
    tokens = {"cross:handoff": [], "cross:handoff2": [], "cross:fence": []}
    lat, bad = [], 0
    for _ in range(ROUNDS):
        w.acquire(5)
        tokens[name].append(w.token)
        bg = Bg(lambda: q(s1, "SELECT redis_wlock(%s)", name))
        if not wait_until(lambda: subscribers(name) >= 1 and
                          py.info(name)["waiting"]):
            bad += 1
        time.sleep(0.003)       # let it go to sleep after its retry
        w.release()
        released = time.perf_counter()
        bg.join(10)
        if bg.error or bg.result is None:
            bad += 1
            continue
        lat.append((bg.done_at - released) * 1000)
        tokens[name].append(bg.result)
        q(s1, "SELECT redis_unlock(%s)", name)
    check("SQL waiters all woke and got the lock", bad == 0 and len(lat) == ROUNDS,
          "(%d problems)" % bad)
    if lat:
        p50, p99 = statistics.median(lat), pct(lat, 99)
        print("     hand-off Python release() -> SQL redis_wlock returns, %d rounds: "
              "p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (len(lat), p50, p99, max(lat)))
        check("hand-off Python -> SQL p50 <= %.0f ms" % HANDOFF_P50_MAX_MS,
              p50 <= HANDOFF_P50_MAX_MS, "(p50 %.2f ms)" % p50)

    # -- hand-off: SQL redis_unlock -> waiting Python acquire ------------------
    name = "cross:handoff2"
    w = py.write_lock(name)
    lat2, bad = [], 0
    for _ in range(ROUNDS):
        tokens[name].append(q(s1, "SELECT redis_wlock(%s)", name))
        bg = Bg(lambda: w.acquire(5))
        if not wait_until(lambda: subscribers(name) >= 1 and py.info(name)["waiting"]):
            bad += 1
        time.sleep(0.003)
        q(s1, "SELECT redis_unlock(%s)", name)
        unlocked = time.perf_counter()
        bg.join(10)
        if bg.error or not w.held:
            bad += 1
            continue
        lat2.append((bg.done_at - unlocked) * 1000)
        tokens[name].append(w.token)
        w.release()
    check("Python waiters all woke and got the lock", bad == 0 and len(lat2) == ROUNDS,
          "(%d problems)" % bad)
    if lat2:
        p50, p99 = statistics.median(lat2), pct(lat2, 99)
        print("     hand-off SQL redis_unlock() -> Python acquire() returns, %d rounds: "
              "p50 %.2f ms, p99 %.2f ms, max %.2f ms" % (len(lat2), p50, p99, max(lat2)))
        check("hand-off SQL -> Python p50 <= %.0f ms" % HANDOFF_P50_MAX_MS,
              p50 <= HANDOFF_P50_MAX_MS, "(p50 %.2f ms)" % p50)

    # -- readers from both sides share; writers wait; writer preference --------
    name = "cross:share"
    pr = py.read_lock(name)
    pr.acquire(1)
    check("SQL reader shares with a Python reader",
          q(s1, "SELECT redis_try_rlock(%s)", name) is True)
    pr2 = py.read_lock(name)
    check("second Python reader shares with both", pr2.try_acquire() is True)
    check("SQL writer cannot join readers", q(s2, "SELECT redis_try_wlock(%s)", name) is False)
    pw = py.write_lock(name)
    check("Python writer cannot join readers", pw.try_acquire() is False)
    info = py.info(name)
    check("info shows three readers", info["state"] == "read" and len(info["readers"]) == 3,
          str(info))
    bgw = Bg(lambda: q(s2, "SELECT redis_wlock(%s)", name))
    check("a waiting SQL writer registers its intent",
          wait_until(lambda: len(py.info(name)["waiting"]) == 1))
    pr3 = py.read_lock(name)
    check("new Python reader queues behind the waiting SQL writer",
          pr3.try_acquire() is False)
    pr.release()
    pr2.release()
    time.sleep(0.05)
    check("SQL writer still waits for the SQL reader", bgw.done_at is None)
    q(s1, "SELECT redis_unlock(%s)", name)
    bgw.join(5)
    check("SQL writer gets the lock when the last reader leaves",
          bgw.error is None and bgw.result is not None, repr(bgw.error))
    check("a Python reader waits while the SQL writer holds",
          pr3.try_acquire(0.05) is False)
    q(s2, "SELECT redis_unlock(%s)", name)
    check("Python reader gets in after the SQL writer", pr3.try_acquire(2) is True)
    check("read token is the last write token", pr3.token == bgw.result,
          "(%s vs %s)" % (pr3.token, bgw.result))
    pr3.release()

    # -- waiting writers are served in their order of arrival, across clients -
    name = "cross:fifo"
    holder = py.write_lock(name)
    holder.acquire(1)
    order, waiters = [], []

    def sql_writer(sess, label):
        def run_it():
            tok = q(sess, "SELECT redis_wlock(%s)", name)
            order.append((label, tok))
            time.sleep(0.02)
            q(sess, "SELECT redis_unlock(%s)", name)
        return run_it

    def py_writer(label):
        lk = py.write_lock(name)

        def run_it():
            lk.acquire(10)
            order.append((label, lk.token))
            time.sleep(0.02)
            lk.release()
        return run_it

    for label, fn in (("sql1", sql_writer(s1, "sql1")), ("py1", py_writer("py1")),
                      ("sql2", sql_writer(s2, "sql2"))):
        waiters.append(Bg(fn))
        n = len(waiters)
        wait_until(lambda: len(py.info(name)["waiting"]) == n, 5)
    check("three writers queue, in order",
          [w.split(":")[0] for w in py.info(name)["waiting"]] == ["pg", "py", "pg"],
          str(py.info(name)["waiting"]))
    holder.release()
    for w in waiters:
        w.join(10)
    check("they get the lock in the order they came", [o[0] for o in order] == ["sql1", "py1", "sql2"],
          str(order))
    check("with increasing tokens", all(b[1] > a[1] for a, b in zip(order, order[1:])), str(order))

    # -- readers who waited get a turn before the next writer ------------------
    name = "cross:turn"
    hkey = rw.lock_keys("rwlock", name)[0]
    q(s1, "SELECT redis_wlock(%s)", name)
    pr = py.read_lock(name)
    bgr = Bg(lambda: pr.acquire(5))
    check("a waiting Python reader leaves its mark",
          wait_until(lambda: r.hexists(hkey, "rw")))
    bgw = Bg(lambda: q(s2, "SELECT redis_wlock(%s)", name))
    check("a waiting SQL writer registers its intent",
          wait_until(lambda: len(py.info(name)["waiting"]) == 1 and subscribers(name) >= 2))
    q(s1, "SELECT redis_unlock(%s)", name)
    bgr.join(5)
    time.sleep(0.05)
    check("the Python reader goes before the waiting SQL writer",
          pr.held and bgw.done_at is None, "(%s %s)" % (pr, bgw.done_at))
    pr.release()
    bgw.join(5)
    check("then the SQL writer", bgw.error is None and bgw.result is not None, repr(bgw.error))
    q(s2, "SELECT redis_unlock(%s)", name)

    # -- fencing tokens: one strictly increasing sequence ----------------------
    name = "cross:fence"
    pw = py.write_lock(name)
    mism = []
    for i in range(30):
        if i % 3 == 0:
            t = q(s1, "SELECT redis_wlock(%s)", name)
            tokens[name].append(t)
            q(s1, "SELECT redis_unlock(%s)", name)
            rt = py.read_lock(name)
            rt.acquire(1)
            if rt.token != t:
                mism.append(("py read", rt.token, "sql write", t))
            rt.release()
        else:
            pw.acquire(1)
            tokens[name].append(pw.token)
            pw.release()
            t = q(s1, "SELECT redis_rlock(%s)", name)
            if t != pw.token:
                mism.append(("sql read", t, "py write", pw.token))
            q(s1, "SELECT redis_unlock(%s)", name)
    check("a read token from either side is the other side's last write token",
          not mism, str(mism[:3]))
    for k, seq in tokens.items():
        inc = all(b > a for a, b in zip(seq, seq[1:]))
        check("write tokens of %s from both sides strictly increase (%d tokens)"
              % (k, len(seq)), inc and len(seq) > 2, str(seq[:6]))

    # -- a Python holder killed with SIGKILL is released by its lease ----------
    name = "cross:dead"
    lease = 1.5
    child = subprocess.Popen([sys.executable, "-c", (
        "import sys, time, redis\n"
        "sys.path.insert(0, %r)\n"
        "import rwlock_client as rw\n"
        "c = rw.Client(redis.Redis(port=%d), lease=%r)\n"
        "l = c.write_lock(%r); l.acquire(5)\n"
        "print('held', l.token, flush=True)\n"
        "time.sleep(60)\n") % (os.path.join(ROOT, "clients", "python"), srv.port, lease, name)],
        stdout=subprocess.PIPE, text=True)
    line = child.stdout.readline().split()
    time.sleep(lease)            # it has renewed at least once by now
    child.send_signal(signal.SIGKILL)
    killed = time.monotonic()
    child.wait()
    check("dead holder's lock is still held at first",
          q(s1, "SELECT redis_try_wlock(%s)", name) is False)
    tok = q(s1, "SELECT redis_wlock(%s)", name)
    el = time.monotonic() - killed
    print("     SQL got the dead Python holder's lock %.3f s after SIGKILL (lease %.1f s)"
          % (el, lease))
    check("SQL gets a killed Python holder's lock within lease + 1 s",
          el <= lease + 1.0 and line[0] == "held", "(%.3f s)" % el)
    check("and a larger token", tok > int(line[1]))
    q(s1, "SELECT redis_unlock(%s)", name)

    # -- lost hold is reported -------------------------------------------------
    name = "cross:lost"
    seen = []
    l = py.write_lock(name, lease=0.6, on_lost=seen.append)
    l.acquire(1)
    r.delete(*rw.lock_keys("rwlock", name)[:2])      # Redis lost the data
    check("on_lost called when a renewal finds the lock gone",
          wait_until(lambda: seen == [l], 2.0))
    check("lost property is set", l.lost is True)
    check("release() of a lost lock returns False", l.release() is False)

    # -- NOSCRIPT: scripts reloaded --------------------------------------------
    r.script_flush()
    l = py.write_lock("cross:noscript")
    check("acquire after SCRIPT FLUSH (NOSCRIPT fallback)", l.try_acquire() is True)
    check("release after SCRIPT FLUSH", l.release() is True)

    # -- protocol version ------------------------------------------------------
    # A client of protocol 1 runs protocol 1's scripts (a copy of its
    # acquire.lua is kept in test/fixtures/protocol1) with its three keys.
    v1_acquire = open(os.path.join(ROOT, "test", "fixtures", "protocol1", "acquire.lua")).read()

    def v1_keys(name):
        base = rw.lock_keys("rwlock", name)[0]
        return (base, base + ":r", base + ":q")

    name = "cross:version"
    l = py.write_lock(name)
    l.acquire(1)
    try:
        r.eval(v1_acquire, 3, *v1_keys(name), "1", "v1-client", "w", 30000, 0, 600000)
        check("a protocol 1 client is refused on protocol 2 keys", False, "(no error)")
    except redis.exceptions.ResponseError as e:
        msg = str(e)
        print("     Redis says: %s" % msg)
        check("a protocol 1 client is refused on protocol 2 keys",
              msg.startswith("RWLOCK_VERSION") and "protocol 2" in msg and "speaks 1" in msg, msg)
    l.release()
    try:
        r.eval(v1_acquire, 3, *v1_keys(name), "1", "v1-client", "r", 30000, 0, 600000)
        check("  also once the lock is free (its token is kept)", False, "(no error)")
    except redis.exceptions.ResponseError as e:
        check("  also once the lock is free (its token is kept)",
              str(e).startswith("RWLOCK_VERSION"), str(e))
    name = "cross:version1"
    r.eval(v1_acquire, 3, *v1_keys(name), "1", "v1-client", "w", 30000, 0, 600000)
    try:
        py.write_lock(name).try_acquire()
        check("Python client raises ProtocolVersionError on protocol 1 keys", False)
    except rw.ProtocolVersionError as e:
        print("     Python says: %s" % e)
        check("Python client raises ProtocolVersionError on protocol 1 keys",
              "RWLOCK_VERSION" in str(e) and "protocol 1" in str(e))
    try:
        q(s1, "SELECT redis_try_wlock(%s)", name)
        check("SQL refuses protocol 1 keys", False)
    except psycopg2.Error as e:
        text = "%s %s" % (e.pgerror, e.diag.message_detail)
        check("SQL refuses protocol 1 keys", "RWLOCK_VERSION" in text, text)
    lua3 = tempfile.mkdtemp(prefix="rwlock-lua3-")
    try:
        for f in rw.SCRIPTS:
            body = open(os.path.join(ROOT, "lua", f + ".lua")).read()
            with open(os.path.join(lua3, f + ".lua"), "w") as out:
                out.write(body.replace("-- rwlock protocol 2:", "-- rwlock protocol 3:", 1))
        try:
            rw.Client(r, lua_dir=lua3)
            check("Python client refuses scripts of another version", False)
        except rw.ProtocolVersionError:
            check("Python client refuses scripts of another version", True)
    finally:
        shutil.rmtree(lua3, ignore_errors=True)

    for c in (s1, s2, admin):
        c.close()


if __name__ == "__main__":
    t0 = time.monotonic()
    rc = main()
    print("cross: took %.1f s" % (time.monotonic() - t0))
    sys.exit(rc)
