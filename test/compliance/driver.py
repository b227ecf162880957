#!/usr/bin/python3
"""driver.py: the compliance suite every rwlock client runs against the real
extension: a real redis-server, SQL sessions (psycopg2) of a real PostgreSQL
with rwlock installed, and the client under test driven through its agent
process (agent.py, agent.js; protocol in README.md), so each case is written
once for all clients.

Run under pg_virtualenv (PGHOST, PGPORT, ... set), the extension installed:

    pg_virtualenv -t /usr/bin/python3 test/compliance/driver.py [--cluster] node python python-async

Clients: python (rwlock_client), python-async (rwlock_client.aio), node
(clients/node; run `npm ci` there first). Starts its own redis-server (6393
if free; $RWLOCK_COMPLIANCE_REDIS_PORT). With --cluster, a Redis Cluster of
three masters instead (6420-6422, or the next free ports;
$RWLOCK_COMPLIANCE_CLUSTER_PORT for the first): SQL sessions on its
redis+cluster:// URL, the agents through their libraries' cluster classes,
lock names spread over the masters; the owed-release case, which needs a
proxy in front of the one server, is skipped. Prints ok/FAIL per check, the
hand-off latencies, "compliance[<client>]: N passed, M failed" per client
("compliance[<client>/cluster]" on the cluster); exits non-zero on a failure.

With --acl (or RWLOCK_COMPLIANCE_ACL=1; one server, not --cluster) the SQL
sessions and the agents reach Redis as docs/connecting.md's least-privilege
user, the ACL SETUSER line as documented (tools/acl_line.py) with a
password of the run: the sessions through a password file
(rwlock.password_file, mode 0600, the server's OS user's; their URL names
no user), the agents with the user and password in their URL. The test's
own checks of Redis stay the default user.
"""
import atexit
import hashlib
import json
import logging
import os
import queue
import random
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import threading
import time

import psycopg2
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "test"))
from rwtest import RedisCluster, RedisServer  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
import acl_line  # noqa: E402

# --acl: {"user", "password", "file"} once the server has the user
ACL = {}

ROUNDS = int(os.environ.get("RWLOCK_CROSS_ROUNDS", "50"))
HANDOFF_P50_MAX_MS = 5.0
PREFIX = "rwlock"

AGENTS = {
    "python": [sys.executable, os.path.join(HERE, "agent.py")],
    "python-async": [sys.executable, os.path.join(HERE, "agent.py"), "--async"],
    "node": ["node", os.path.join(HERE, "agent.js")],
}


# -- what the cases share ------------------------------------------------------------

class Results:
    def __init__(self, label):
        self.label, self.passed, self.failed, self.skipped = label, 0, 0, 0

    def check(self, what, ok, detail=""):
        if ok:
            self.passed += 1
            print("ok   [%s] %s" % (self.label, what))
        else:
            self.failed += 1
            print("FAIL [%s] %s %s" % (self.label, what, detail))
        sys.stdout.flush()
        return ok

    def skip(self, what, why):
        self.skipped += 1
        print("skip [%s] %s: %s" % (self.label, what, why))
        sys.stdout.flush()

    def note(self, text):
        print("     [%s] %s" % (self.label, text))
        sys.stdout.flush()


def encode_name(name):
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def lock_keys(name):
    base = "%s:{%s}" % (PREFIX, encode_name(name))
    return base, base + ":q", base + ":c"


def sql_session(url):
    conn = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    conn.autocommit = True
    cur = conn.cursor()
    cur.execute("SET rwlock.redis_url = %s", (url,))
    if ACL:
        cur.execute("SET rwlock.password_file = %s", (ACL["file"],))
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


def latency_line(what, lat):
    return ("hand-off %s, %d rounds: p50 %.2f ms, p99 %.2f ms, max %.2f ms"
            % (what, len(lat), statistics.median(lat), pct(lat, 99), max(lat)))


class Bg(threading.Thread):
    """Run fn in a thread; .result, .error, .done_ns (monotonic)."""

    def __init__(self, fn):
        super().__init__(daemon=True)
        self.fn, self.result, self.error, self.done_ns = fn, None, None, None
        self.start()

    def run(self):
        try:
            self.result = self.fn()
        except BaseException as e:  # noqa: B902
            self.error = e
        self.done_ns = time.monotonic_ns()


class AgentError(Exception):
    def __init__(self, reply):
        super().__init__("%s: %s" % (reply.get("error"), reply.get("message")))
        self.kind = reply.get("error")


class Pending:
    """A request in flight: wait() its reply."""

    def __init__(self):
        self.event = threading.Event()
        self.reply = None

    @property
    def done(self):
        return self.event.is_set()

    def wait(self, timeout=30.0):
        if not self.event.wait(timeout):
            raise TimeoutError("the agent did not answer in %.0f s" % timeout)
        return self.reply


class Agent:
    """A client's agent process: call() waits for the answer, start() does not."""

    def __init__(self, client, url, extra=()):
        self.client = client
        if ACL:
            url = url.replace("redis://", "redis://%s:%s@" % (ACL["user"], ACL["password"]), 1)
        self.proc = subprocess.Popen(AGENTS[client] + ["--redis", url, "--prefix", PREFIX]
                                     + list(extra),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                     text=True, bufsize=1)
        self.pending = {}
        self.events = queue.Queue()
        self.next_id = 0
        self.handles = 0
        self.mutex = threading.Lock()
        threading.Thread(target=self._read, daemon=True).start()
        self.call("hello")

    def _read(self):
        for line in self.proc.stdout:
            msg = json.loads(line)
            if "event" in msg:
                self.events.put(msg)
                continue
            p = self.pending.pop(msg["id"], None)
            if p is not None:
                p.reply = msg
                p.event.set()

    def start(self, op, **kw):
        with self.mutex:
            self.next_id += 1
            kw.update(id=self.next_id, op=op)
            p = Pending()
            self.pending[self.next_id] = p
            self.proc.stdin.write(json.dumps(kw) + "\n")
            self.proc.stdin.flush()
        return p

    def call(self, op, timeout=30.0, **kw):
        reply = self.start(op, **kw).wait(timeout)
        if not reply["ok"]:
            raise AgentError(reply)
        return reply

    def lock(self, name, mode, lease=None, owner=None):
        """A new lock object in the agent: a Handle (owner: that of another,
        so that one holder holds and waits)."""
        self.handles += 1
        h = "L%d" % self.handles
        owner = self.call("new", lock=h, name=name, mode=mode, lease=lease,
                          owner=owner)["owner"]
        return Handle(self, h, name, owner)

    def locks(self, names, mode, lease=None):
        """A lock object on several names, all or none, in the agent."""
        self.handles += 1
        h = "L%d" % self.handles
        owner = self.call("new", lock=h, names=names, mode=mode, lease=lease)["owner"]
        return Handle(self, h, names, owner)

    def kill(self):
        self.proc.send_signal(signal.SIGKILL)
        self.proc.wait()

    def close(self):
        try:
            self.proc.stdin.write(json.dumps({"op": "exit"}) + "\n")
            self.proc.stdin.flush()
            self.proc.wait(5)
        except Exception:  # noqa: BLE001
            self.kill()


class Handle:
    """One lock object in an agent."""

    def __init__(self, agent, h, name, owner):
        self.agent, self.h, self.name, self.owner = agent, h, name, owner

    def acquire(self, timeout=None):
        return self.agent.call("acquire", lock=self.h, timeout=timeout)["token"]

    def start_acquire(self, timeout=None):
        return self.agent.start("acquire", lock=self.h, timeout=timeout)

    def try_(self, wait=0):
        return self.agent.call("try", lock=self.h, wait=wait)["got"]

    def release(self):
        return self.agent.call("release", lock=self.h)["held"]

    def state(self):
        return self.agent.call("state", lock=self.h)


# -- a TCP proxy in front of Redis that can lose a release's answer ---------------

class Proxy:
    """127.0.0.1:<port> -> Redis. cut_release(owner): the next release.lua call
    by owner is dropped and its connection closed, so the client never gets an
    answer. Records what clients send after the cut, per connection."""

    def __init__(self, redis_port, release_sha):
        self.redis_port = redis_port
        self.release_sha = release_sha.encode()
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.cut_owner = None
        self.cut_done = threading.Event()
        self.after_cut = []                 # (connection number, bytes)
        self.conns = 0
        self.mutex = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def cut_release(self, owner):
        self.cut_owner = owner.encode()

    def _accept(self):
        while True:
            try:
                c, _ = self.listener.accept()
            except OSError:
                return
            s = socket.create_connection(("127.0.0.1", self.redis_port))
            with self.mutex:
                self.conns += 1
                n = self.conns
            threading.Thread(target=self._up, args=(n, c, s), daemon=True).start()
            threading.Thread(target=self._down, args=(c, s), daemon=True).start()

    def _up(self, n, c, s):
        try:
            while True:
                data = c.recv(65536)
                if not data:
                    break
                owner = self.cut_owner
                if owner and owner in data and self.release_sha in data:
                    self.cut_owner = None
                    self.cut_done.set()
                    break                   # dropped: never reaches Redis
                if self.cut_done.is_set():
                    with self.mutex:
                        self.after_cut.append((n, data))
                s.sendall(data)
        except OSError:
            pass
        for x in (c, s):
            try:
                x.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
            x.close()

    @staticmethod
    def _down(c, s):
        try:
            while True:
                data = s.recv(65536)
                if not data:
                    break
                c.sendall(data)
        except OSError:
            pass

    def close(self):
        self.listener.close()


# -- the cases -----------------------------------------------------------------------

class Suite:
    def __init__(self, client, srv):
        self.client = client
        self.srv = srv
        self.res = Results(client + ("/cluster" if srv.cluster else ""))
        self.check = self.res.check
        self.r = srv.redis()
        self.s1, self.s2 = sql_session(srv.url), sql_session(srv.url)
        self.a = Agent(client, srv.url)
        self.tokens = {}                    # name -> write tokens in order, both sides
        self.figures = {}
        self.names = set()                  # every lock name the cases used

    def name(self, what):
        """The lock name of a case; on a cluster with braces and '%' (keys
        {...%7B...%7D%25}, a slot each, spread over the masters)."""
        name = ("%s:{%s}%%" if self.srv.cluster else "%s:%s") % (self.client, what)
        self.names.add(name)
        return name

    def info(self, name):
        return self.a.call("info", name=name)["info"]

    def waiting(self, name):
        return self.info(name)["waiting"]

    def subscribers(self, name):
        """Subscribers to name's channels; on a cluster, on every node (a
        PUBLISH reaches them all, and each counts only its own)."""
        kw = {"target_nodes": "all"} if self.srv.cluster else {}
        chans = self.r.pubsub_channels(lock_keys(name)[2] + "*", **kw)
        return sum(n for _, n in self.r.pubsub_numsub(*chans, **kw)) if chans else 0

    def close(self):
        self.a.close()
        for c in (self.s1, self.s2):
            c.close()

    def run(self):
        for case in (self.exclusion, self.handoff_to_sql, self.handoff_from_sql,
                     self.sharing, self.upgrade_downgrade, self.fifo,
                     self.readers_turn, self.fencing,
                     self.killed_holder, self.renewal, self.lost, self.noscript,
                     self.version, self.stale, self.owed_release, self.deadlock,
                     self.multi):
            if self.srv.cluster and case == self.owed_release:
                self.res.skip("owed_release", "its TCP proxy stands in front of one "
                              "server, and a cluster's redirections name the real nodes, "
                              "bypassing it")
                continue
            try:
                case()
            except Exception as e:  # noqa: BLE001
                self.check("%s ran to its end" % case.__name__, False, repr(e))
        if self.srv.cluster:
            self.spread()
        return self.res

    # on a cluster: the names used landed on every master
    def spread(self):
        per = {}
        for name in self.names:
            slot = self.r.cluster_keyslot(lock_keys(name)[0])
            port = self.r.nodes_manager.get_node_from_slot(slot).port
            per[port] = per.get(port, 0) + 1
        self.res.note("lock names per master: %s" % ", ".join(
            "%d: %d" % kv for kv in sorted(per.items())))
        self.check("the lock names used landed on every master (%d)" % len(self.srv.ports),
                   sorted(per) == sorted(self.srv.ports), str(per))

    # exclusion both ways
    def exclusion(self):
        s1, check = self.s1, self.check
        name = self.name("excl")
        w = self.a.lock(name, "w")
        w.acquire()
        check("SQL try_wlock fails while the client holds the write lock",
              q(s1, "SELECT redis_try_wlock(%s)", name) is False)
        t0 = time.monotonic()
        got = q(s1, "SELECT redis_try_wlock(%s, '150ms')", name)
        el = time.monotonic() - t0
        check("SQL try_wlock with a wait gives up after the wait",
              got is False and 0.14 < el < 1.0, "(%s after %.3fs)" % (got, el))
        check("SQL try_rlock fails while the client holds the write lock",
              q(s1, "SELECT redis_try_rlock(%s)", name) is False)
        check("release() answers true", w.release() is True)
        check("SQL try_wlock succeeds once the client released",
              q(s1, "SELECT redis_try_wlock(%s)", name) is True)
        p = self.a.lock(name, "w")
        check("client try fails while SQL holds the write lock", p.try_() is False)
        t0 = time.monotonic()
        got = p.try_(0.1)
        el = time.monotonic() - t0
        check("client try with a wait gives up after the wait",
              got is False and 0.09 < el < 1.0, "(%s after %.3fs)" % (got, el))
        rd = self.a.lock(name, "r")
        check("client read try fails while SQL holds the write lock", rd.try_() is False)
        check("nothing left behind by the failed tries", self.waiting(name) == {})
        q(s1, "SELECT redis_unlock(%s)", name)
        check("client acquires once SQL unlocked", p.try_() is True)
        p.release()

    # a deadlock between a client and a SQL session (docs/protocol.md 18): the
    # client holds n1 and waits for n2, the session holds n2 and waits for n1;
    # the member with the greatest owner id fails (the client with
    # DeadlockDetected, or the session with 40P01), the other goes on
    def deadlock(self):
        s1, check = self.s1, self.check
        n1, n2 = self.name("dl1"), self.name("dl2")
        held = self.a.lock(n1, "w")
        held.acquire(5)
        q(s1, "SELECT redis_wlock(%s)", n2)
        sql_owner = q(s1, "SELECT owner FROM redis_connection_info() WHERE current")
        waiter = self.a.lock(n2, "w", owner=held.owner)
        pend = waiter.start_acquire(20)
        time.sleep(0.3)
        t0 = time.monotonic()
        bg = Bg(lambda: q(s1, "SELECT redis_wlock(%s)", n1))
        client_victim = held.owner > sql_owner
        wait_until(lambda: pend.done or bg.done_ns is not None, 15)
        el = time.monotonic() - t0
        if client_victim:
            reply = pend.wait(1) if pend.done else {"ok": None}
            check("the cycle is broken: the client (greatest owner id) raises its "
                  "deadlock error", reply.get("ok") is False and reply.get("error") == "deadlock",
                  str(reply))
            check("naming the cycle", "deadlock detected" in str(reply.get("message")),
                  str(reply.get("message")))
            check("within a few seconds", el < 5.0, "%.2f s" % el)
            held.release()
            bg.join(10)
            check("the SQL session then gets its lock", bg.error is None and bg.result,
                  repr(bg.error))
            q(s1, "SELECT redis_unlock(%s)", n1)
        else:
            bg.join(1)
            code = getattr(bg.error, "pgcode", None)
            check("the cycle is broken: the SQL session (greatest owner id) fails "
                  "with 40P01", code == "40P01", repr(bg.error))
            check("within a few seconds", el < 5.0, "%.2f s" % el)
            q(s1, "SELECT redis_unlock(%s)", n2)
            reply = pend.wait(10)
            check("the client then gets its lock", reply.get("ok") is True, str(reply))
            waiter.release()
            held.release()
        kw = {"target_nodes": "all"} if self.srv.cluster else {}
        check("no wait key left behind", wait_until(
            lambda: not self.r.keys(PREFIX + ":wait:*", **kw), 5),
            str(self.r.keys(PREFIX + ":wait:*", **kw)))

    # several names at once (docs/protocol.md 19): two SQL sessions and the
    # client lock overlapping sets, each written in another order, round
    # after round, all at once; taken in the canonical order there is no
    # cycle: no deadlock error anywhere, every round ends within ROUND_S,
    # and no one is inside while another holds one of its names. A client
    # that took its names in its caller's order (reversed here), or sorted
    # them by JavaScript's < (n3 before n2), would close a cycle with s1.
    def multi(self, rounds=45, hold=0.02, round_s=5.0):
        n = sorted((self.name("multi-a"), self.name("multi-b"), self.name("multi-x\uff5e"),
                    self.name("multi-x\U0001f600")), key=lambda x: x.encode("utf-8"))
        sets = {"s1": [n[1], n[2], n[3]],     # in the canonical order
                "client": [n[3], n[2]],        # reversed (and by JavaScript's <)
                "s2": [n[3], n[1], n[0]]}      # reversed
        ml = self.a.locks(sets["client"], "w")
        mutex = threading.Lock()
        inside = {}                         # name -> who is inside holding it
        overlaps, errors, slow = [], [], []

        # s1 starts ahead of the client or after it by a few ms, another
        # offset each round (s2 at random), so that the client gets to n3
        # first in some rounds, and s1 to n2 before the client's next try
        # (a window of about one round trip): a client out of order then
        # closes a cycle with s1.
        rnd = random.Random(40)
        jitter = {}

        def critical(who):
            with mutex:
                for x in sets[who]:
                    if x in inside:
                        overlaps.append("%s and %s on %s" % (who, inside[x], x))
                    inside[x] = who
            time.sleep(hold)
            with mutex:
                for x in sets[who]:
                    if inside.get(x) == who:
                        del inside[x]

        def sql(sess, who):
            def run_it():
                time.sleep(jitter[who])
                toks = q(sess, "SELECT redis_wlock(%s::text[])", sets[who])
                try:
                    critical(who)
                finally:
                    q(sess, "SELECT count(redis_unlock(x)) FROM unnest(%s::text[]) x", sets[who])
                return toks
            return run_it

        def client():
            time.sleep(jitter["client"])
            toks = ml.acquire(20)
            try:
                critical("client")
            finally:
                ml.release()
            return toks

        t_all = time.monotonic()
        for i in range(rounds):
            offset = ((i % 15) - 7) * 0.0006
            jitter.update(client=max(0.0, -offset), s1=max(0.0, offset), s2=rnd.uniform(0, 0.008))
            t0 = time.monotonic()
            bgs = {"s1": Bg(sql(self.s1, "s1")), "client": Bg(client), "s2": Bg(sql(self.s2, "s2"))}
            for who, bg in bgs.items():
                bg.join(30)
                if bg.is_alive():
                    errors.append("round %d: %s still waiting after 30 s" % (i, who))
                elif bg.error is not None:
                    errors.append("round %d: %s: %s %r" % (i, who, getattr(bg.error, "pgcode", None)
                                                          or getattr(bg.error, "kind", None), bg.error))
            el = time.monotonic() - t0
            if el > round_s:
                slow.append("round %d: %.2f s" % (i, el))
            if any(bg.is_alive() for bg in bgs.values()):
                break
        self.res.note("multi-name rounds: %d in %.1f s" % (rounds, time.monotonic() - t_all))
        self.check("several names, opposite orders, %d rounds with SQL sessions: no deadlock "
                   "error on any side (no 40P01)" % rounds, not errors, "; ".join(errors[:5]))
        self.check("every round ended within %.0f s" % round_s, not slow, "; ".join(slow[:5]))
        self.check("no overlap: nobody was inside while another held one of its names",
                   not overlaps, "; ".join(overlaps[:5]))
        self.multi_queued(n, sets, ml)
        st = ml.state()
        free = all(self.info(x)["state"] == "free" for x in n)
        self.check("all released afterwards, the client's tokens one per name given",
                   free and not st["held"] and isinstance(st["token"], list)
                   and len(st["token"]) == 2, str(st))

    # The same cycle made certain: s2 holds n2; s1 (n1, n2, n3) queues for
    # it; then the client ([n3, n2]) queues behind s1. In the canonical
    # order the client holds nothing while it waits (n3 stays free); out of
    # order it would hold n3, and s1, served first, would wait for it.
    def multi_queued(self, n, sets, ml):
        s1, s2, check = self.s1, self.s2, self.check
        q(s2, "SELECT redis_wlock(%s)", n[2])
        bg = Bg(lambda: q(s1, "SELECT redis_wlock(%s::text[])", sets["s1"]))
        wait_until(lambda: len(self.waiting(n[2])) == 1, 5)
        pend = ml.agent.start("acquire", lock=ml.h, timeout=10)
        queued = wait_until(lambda: len(self.waiting(n[2])) == 2, 5)
        n3 = self.info(n[3])
        check("a client queued for %r behind a SQL session holds nothing of its names "
              "after it (%r: %s)" % (n[2], n[3], n3["state"]),
              queued and n3["state"] == "free", "queued %s, %s" % (queued, n3))
        t0 = time.monotonic()
        q(s2, "SELECT redis_unlock(%s)", n[2])
        bg.join(10)
        el = time.monotonic() - t0
        if bg.done_ns and bg.error is None:
            q(s1, "SELECT count(redis_unlock(x)) FROM unnest(%s::text[]) x", sets["s1"])
        got = pend.wait(15)
        check("then the session gets its names at once (%.2f s, under deadlock_timeout), "
              "and the client after it, without a deadlock error" % el,
              bg.error is None and bg.done_ns and el < 0.9 and got.get("ok") is True,
              "%r %s" % (bg.error, got))
        if got.get("ok"):
            ml.release()

    # wake-up latency, client -> SQL
    def handoff_to_sql(self):
        s1 = self.s1
        name = self.name("handoff")
        toks = self.tokens.setdefault(name, [])
        w = self.a.lock(name, "w")
        lat, after, bad = [], [], 0
        for _ in range(ROUNDS):
            toks.append(w.acquire(5))
            bg = Bg(lambda: q(s1, "SELECT redis_wlock(%s)", name))
            if not wait_until(lambda: self.subscribers(name) >= 1 and self.waiting(name)):
                bad += 1
            time.sleep(0.003)       # let it go to sleep after its retry
            released = w.agent.start("release", lock=w.h).wait()
            bg.join(10)
            if bg.error or bg.result is None or not released["ok"]:
                bad += 1
                continue
            lat.append((bg.done_ns - released["start"]) / 1e6)
            after.append((bg.done_ns - released["mono"]) / 1e6)
            toks.append(bg.result)
            q(s1, "SELECT redis_unlock(%s)", name)
        self._handoff_report("to_sql", "SQL waiters", "client release() called -> SQL "
                             "redis_wlock returns", "client -> SQL", lat, after, bad)

    def _handoff_report(self, key, waiters, what, short, lat, after, bad):
        """lat: from the releaser's call, printed; after: from its return,
        checked (the waiter's part of it, as the SQL side's own tests)."""
        self.check("%s all woke and got the lock" % waiters,
                   bad == 0 and len(lat) == ROUNDS, "(%d problems)" % bad)
        if lat:
            self.res.note(latency_line(what, lat))
            self.figures[key] = lat
            p50 = statistics.median(after)
            self.check("hand-off %s p50 <= %.0f ms after the release returned"
                       % (short, HANDOFF_P50_MAX_MS),
                       p50 <= HANDOFF_P50_MAX_MS, "(p50 %.2f ms)" % p50)

    # wake-up latency, SQL -> client
    def handoff_from_sql(self):
        s1 = self.s1
        name = self.name("handoff2")
        toks = self.tokens.setdefault(name, [])
        w = self.a.lock(name, "w")
        lat, after, bad = [], [], 0
        for _ in range(ROUNDS):
            toks.append(q(s1, "SELECT redis_wlock(%s)", name))
            pend = w.start_acquire(5)
            if not wait_until(lambda: self.subscribers(name) >= 1 and self.waiting(name)):
                bad += 1
            time.sleep(0.003)
            unlocked = time.monotonic_ns()
            q(s1, "SELECT redis_unlock(%s)", name)
            unlocked_end = time.monotonic_ns()
            reply = pend.wait(10)
            if not reply["ok"]:
                bad += 1
                continue
            lat.append((reply["mono"] - unlocked) / 1e6)
            after.append((reply["mono"] - unlocked_end) / 1e6)
            toks.append(reply["token"])
            w.release()
        self._handoff_report("from_sql", "client waiters", "SQL redis_unlock() called -> "
                             "client acquire() returns", "SQL -> client", lat, after, bad)

    # sharing both ways; writer preference both ways
    def sharing(self):
        s1, s2, check = self.s1, self.s2, self.check
        name = self.name("share")
        pr = self.a.lock(name, "r")
        pr.acquire(1)
        check("SQL reader shares with a client reader",
              q(s1, "SELECT redis_try_rlock(%s)", name) is True)
        pr2 = self.a.lock(name, "r")
        check("second client reader shares with both", pr2.try_() is True)
        check("SQL writer cannot join readers",
              q(s2, "SELECT redis_try_wlock(%s)", name) is False)
        pw = self.a.lock(name, "w")
        check("client writer cannot join readers", pw.try_() is False)
        info = self.info(name)
        check("info shows three readers",
              info["state"] == "read" and len(info["readers"]) == 3, str(info))
        bgw = Bg(lambda: q(s2, "SELECT redis_wlock(%s)", name))
        check("a waiting SQL writer registers its intent",
              wait_until(lambda: len(self.waiting(name)) == 1))
        pr3 = self.a.lock(name, "r")
        check("new client reader queues behind the waiting SQL writer "
              "(writer preference)", pr3.try_() is False)
        pr.release()
        pr2.release()
        time.sleep(0.05)
        check("SQL writer still waits for the SQL reader", bgw.done_ns is None)
        q(s1, "SELECT redis_unlock(%s)", name)
        bgw.join(5)
        check("SQL writer gets the lock when the last reader leaves",
              bgw.error is None and bgw.result is not None, repr(bgw.error))
        check("a client reader waits while the SQL writer holds", pr3.try_(0.05) is False)
        q(s2, "SELECT redis_unlock(%s)", name)
        check("client reader gets in after the SQL writer", pr3.try_(2) is True)
        check("read token is the last write token", pr3.state()["token"] == bgw.result,
              "(%s vs %s)" % (pr3.state()["token"], bgw.result))
        # the other way: a waiting client writer holds new SQL readers back
        # (once the readers' turn pr3 got in by, 100 ms, is over)
        time.sleep(0.15)
        pw2 = self.a.lock(name, "w")
        pend = pw2.start_acquire(10)
        check("a waiting client writer registers its intent",
              wait_until(lambda: len(self.waiting(name)) == 1))
        check("new SQL reader queues behind the waiting client writer "
              "(writer preference)", q(s1, "SELECT redis_try_rlock(%s)", name) is False)
        pr3.release()
        reply = pend.wait(5)
        check("the client writer gets the lock when the last reader leaves",
              reply["ok"] and reply.get("token", 0) > bgw.result, str(reply))
        check("SQL reader gets in once the client writer released",
              pw2.release() is True and q(s1, "SELECT redis_try_rlock(%s, '2s')", name) is True)
        q(s1, "SELECT redis_unlock(%s)", name)

    # a client reader upgrades past a SQL reader, and downgrades
    def upgrade_downgrade(self):
        s1, s2, check = self.s1, self.s2, self.check
        name = self.name("upgrade")
        rd = self.a.lock(name, "r")
        t0 = rd.acquire(1)
        q(s1, "SELECT redis_rlock(%s)", name)
        pend = self.a.start("upgrade", lock=rd.h, timeout=5)
        check("a client upgrading waits for the SQL reader",
              wait_until(lambda: len(self.waiting(name)) == 1) and not pend.done)
        check("and holds new SQL readers back",
              q(s2, "SELECT redis_try_rlock(%s)", name) is False)
        q(s1, "SELECT redis_unlock(%s)", name)
        reply = pend.wait(5)
        st = rd.state()
        got = reply.get("got")
        check("the upgrade completes when the SQL reader leaves, answering the "
              "write lock's token as acquire does",
              reply["ok"] and type(got) is int and got == st["token"], "%s %s" % (reply, st))
        check("it holds the write lock, with a new token",
              st["mode"] == "w" and st["token"] > t0, str(st))
        check("SQL cannot read meanwhile", q(s2, "SELECT redis_try_rlock(%s)", name) is False)
        check("downgrade() answers true",
              self.a.call("downgrade", lock=rd.h)["held"] is True)
        check("after it SQL readers share the lock, SQL writers wait",
              q(s2, "SELECT redis_try_rlock(%s)", name) is True and
              q(s1, "SELECT redis_try_wlock(%s)", name) is False)
        q(s2, "SELECT redis_unlock(%s)", name)
        check("release() of the downgraded lock answers true", rd.release() is True)

    # waiting writers are served in their order of arrival, across clients
    def fifo(self):
        name = self.name("fifo")
        holder = self.a.lock(name, "w")
        holder.acquire(1)
        order = []

        def sql_writer(sess, label):
            def run_it():
                tok = q(sess, "SELECT redis_wlock(%s)", name)
                order.append((label, tok))
                time.sleep(0.02)
                q(sess, "SELECT redis_unlock(%s)", name)
            return run_it

        lk = self.a.lock(name, "w")

        def client_writer():
            tok = lk.acquire(10)
            order.append(("client", tok))
            time.sleep(0.02)
            lk.release()

        waiters = []
        for fn in (sql_writer(self.s1, "sql1"), client_writer, sql_writer(self.s2, "sql2")):
            waiters.append(Bg(fn))
            n = len(waiters)
            wait_until(lambda: len(self.waiting(name)) == n, 5)
        kinds = [w.split(":")[0] for w in self.waiting(name)]
        self.check("three writers queue, in order", kinds[0] == "pg" and kinds[2] == "pg"
                   and kinds[1] != "pg" and len(kinds) == 3, str(kinds))
        holder.release()
        for w in waiters:
            w.join(10)
        self.check("they get the lock in the order they came",
                   [o[0] for o in order] == ["sql1", "client", "sql2"], str(order))
        self.check("with increasing tokens",
                   all(b[1] > a[1] for a, b in zip(order, order[1:])), str(order))

    # readers who waited get a turn before the next writer
    def readers_turn(self):
        s1, s2 = self.s1, self.s2
        name = self.name("turn")
        hkey = lock_keys(name)[0]
        q(s1, "SELECT redis_wlock(%s)", name)
        pr = self.a.lock(name, "r")
        pend = pr.start_acquire(5)
        self.check("a waiting client reader leaves its mark",
                   wait_until(lambda: self.r.hexists(hkey, "rw")))
        bgw = Bg(lambda: q(s2, "SELECT redis_wlock(%s)", name))
        self.check("a waiting SQL writer registers its intent",
                   wait_until(lambda: len(self.waiting(name)) == 1 and self.subscribers(name) >= 2))
        q(s1, "SELECT redis_unlock(%s)", name)
        reply = pend.wait(5)
        time.sleep(0.05)
        self.check("the client reader goes before the waiting SQL writer",
                   reply["ok"] and bgw.done_ns is None, "(%s %s)" % (reply, bgw.done_ns))
        pr.release()
        bgw.join(5)
        self.check("then the SQL writer", bgw.error is None and bgw.result is not None,
                   repr(bgw.error))
        q(s2, "SELECT redis_unlock(%s)", name)

    # fencing tokens: one strictly increasing sequence across clients
    def fencing(self):
        s1 = self.s1
        name = self.name("fence")
        toks = self.tokens.setdefault(name, [])
        pw = self.a.lock(name, "w")
        mism = []
        for i in range(30):
            if i % 3 == 0:
                t = q(s1, "SELECT redis_wlock(%s)", name)
                toks.append(t)
                q(s1, "SELECT redis_unlock(%s)", name)
                rt = self.a.lock(name, "r")
                got = rt.acquire(1)
                if got != t:
                    mism.append(("client read", got, "sql write", t))
                rt.release()
            else:
                wt = pw.acquire(1)
                toks.append(wt)
                pw.release()
                t = q(s1, "SELECT redis_rlock(%s)", name)
                if t != wt:
                    mism.append(("sql read", t, "client write", wt))
                q(s1, "SELECT redis_unlock(%s)", name)
        self.check("a read token from either side is the other side's last write token",
                   not mism, str(mism[:3]))
        for k, seq in self.tokens.items():
            inc = all(b > a for a, b in zip(seq, seq[1:]))
            self.check("write tokens of %s from both sides strictly increase (%d tokens)"
                       % (k, len(seq)), inc and len(seq) > 2, str(seq[:6]))

    # a holder killed with SIGKILL is freed by its lease
    def killed_holder(self):
        name = self.name("dead")
        lease = 1.5
        other = Agent(self.client, self.srv.url)
        try:
            tok0 = other.lock(name, "w", lease=lease).acquire(5)
            time.sleep(lease)            # it has renewed at least once by now
            other.kill()
        except BaseException:
            other.kill()
            raise
        killed = time.monotonic()
        self.check("dead holder's lock is still held at first",
                   q(self.s1, "SELECT redis_try_wlock(%s)", name) is False)
        tok = q(self.s1, "SELECT redis_wlock(%s)", name)
        el = time.monotonic() - killed
        self.res.note("SQL got the killed holder's lock %.3f s after SIGKILL (lease %.1f s)"
                      % (el, lease))
        self.check("SQL gets a killed client's lock within lease + 1 s", el <= lease + 1.0,
                   "(%.3f s)" % el)
        self.check("and a larger token", tok > tok0)
        q(self.s1, "SELECT redis_unlock(%s)", name)

    # renewal keeps a hold past several leases
    def renewal(self):
        name = self.name("renew")
        lease = 0.5
        w = self.a.lock(name, "w", lease=lease)
        w.acquire(1)
        rd = self.a.lock(name + ":r", "r", lease=lease)
        rd.acquire(1)
        time.sleep(lease * 5)
        self.check("a write lock held for 5 leases still excludes SQL",
                   q(self.s1, "SELECT redis_try_rlock(%s)", name) is False)
        self.check("a read lock held for 5 leases still excludes SQL writers",
                   q(self.s1, "SELECT redis_try_wlock(%s)", name + ":r") is False)
        st = w.state()
        self.check("and is neither lost nor reported lost",
                   st["held"] and not st["lost"] and st["lost_events"] == 0, str(st))
        self.check("release() after 5 leases answers true",
                   w.release() is True and rd.release() is True)

    # a lost lock is reported
    def lost(self):
        name = self.name("lost")
        lk = self.a.lock(name, "w", lease=0.6)
        lk.acquire(1)
        self.r.delete(*lock_keys(name)[:2])        # Redis lost the data
        self.check("a lost event when a renewal finds the lock gone",
                   wait_until(lambda: lk.state()["lost_events"] == 1, 2.0))
        self.check("lost is set", lk.state()["lost"] is True)
        self.check("release() of a lost lock answers false", lk.release() is False)

    # scripts flushed from Redis: loaded again
    def noscript(self):
        where = " on every master" if self.srv.cluster else ""
        self.check("SCRIPT FLUSH%s" % where, self.r.script_flush() is True)
        lk = self.a.lock(self.name("noscript"), "w")
        self.check("acquire after SCRIPT FLUSH%s (NOSCRIPT fallback)" % where, lk.try_() is True)
        self.check("release after SCRIPT FLUSH", lk.release() is True)

    # protocol-version clash refused, both ways (docs/protocol.md 2, 2.1): a
    # lock held by a protocol 2 client (its own scripts, test/fixtures/
    # protocol2) is refused to the client and to SQL, the client's lock is
    # refused to protocol 2's scripts, held or free; a free protocol 2 lock
    # is taken over, its token carried on; a protocol 1 client is refused too
    def version(self):
        fixtures = os.path.join(ROOT, "test", "fixtures")
        v2 = {s: open(os.path.join(fixtures, "protocol2", s + ".lua")).read()
              for s in ("acquire", "release")}
        v1 = open(os.path.join(fixtures, "protocol1", "acquire.lua")).read()

        def v2_acquire(name, mode, owner="v2-client"):
            # protocol 2's arguments: version, owner, mode, lease, mark, keep, held
            base = lock_keys(name)[0]
            return self.r.eval(v2["acquire"], 2, base, base + ":q",
                               "2", owner, mode, 30000, 0, 600000, "-")

        def v2_release(name, owner="v2-client"):
            base = lock_keys(name)[0]
            return self.r.eval(v2["release"], 2, base, base + ":q", "2", owner, "", 0, 600000)

        def refused(call, *args, speaks="2", keys="3"):
            try:
                call(*args)
                return False, "(no error)"
            except redis.exceptions.ResponseError as e:
                msg = str(e)
                return (msg.startswith("RWLOCK_VERSION") and "protocol %s" % keys in msg
                        and "speaks %s" % speaks in msg), msg

        name = self.name("version")
        lk = self.a.lock(name, "w")
        lk.acquire(1)
        self.check("a protocol 2 client is refused on the client's lock",
                   *refused(v2_acquire, name, "w"))
        self.check("  and cannot release it", *refused(v2_release, name))
        lk.release()
        self.check("  also once the lock is free (its token is kept)",
                   *refused(v2_acquire, name, "r"))
        self.check("a protocol 1 client is refused too",
                   *refused(lambda: self.r.eval(
                       v1, 3, lock_keys(name)[0], lock_keys(name)[0] + ":r",
                       lock_keys(name)[1], "1", "v1-client", "w", 30000, 0, 600000),
                       speaks="1"))
        name = self.name("version2")
        hkey = lock_keys(name)[0]
        t2 = v2_acquire(name, "w")
        self.check("a protocol 2 client holds a lock (v 2)",
                   t2 > 0 and self.r.hget(hkey, "v") == b"2", str(self.r.hgetall(hkey)))
        for mode in ("w", "r"):
            try:
                self.a.lock(name, mode).try_()
                self.check("the client refuses a held protocol 2 lock (%s)" % mode, False,
                           "(no error)")
            except AgentError as e:
                self.check("the client refuses a held protocol 2 lock (%s) with its version "
                           "error" % mode, e.kind == "version" and "RWLOCK_VERSION" in str(e)
                           and "protocol 2" in str(e) and "speaks 3" in str(e), str(e))
        try:
            q(self.s1, "SELECT redis_try_wlock(%s)", name)
            self.check("SQL refuses a held protocol 2 lock", False)
        except psycopg2.Error as e:
            text = "%s %s %s" % (e.pgcode, e.pgerror, e.diag.message_detail)
            self.check("SQL refuses a held protocol 2 lock, 55000 and Redis's message in the "
                       "detail", e.pgcode == "55000" and "another rwlock protocol version"
                       in e.pgerror and "RWLOCK_VERSION" in (e.diag.message_detail or ""), text)
        self.check("the protocol 2 lock is as it was",
                   self.r.hget(hkey, "v") == b"2" and self.r.hget(hkey, "w") == b"v2-client",
                   str(self.r.hgetall(hkey)))
        v2_release(name)
        lk = self.a.lock(name, "w")
        t3 = lk.acquire(1)
        self.check("once free, the client takes the protocol 2 lock over (v 3), its token "
                   "carried on", t3 > t2 and self.r.hget(hkey, "v") == b"3",
                   "(%s then %s, %s)" % (t2, t3, self.r.hgetall(hkey)))
        lk.release()
        self.check("  and SQL shares it", q(self.s1, "SELECT redis_try_wlock(%s)", name) is True)
        q(self.s1, "SELECT redis_unlock(%s)", name)

    # a late request changes nothing (protocol 3, docs/protocol.md 4.1): an
    # acquisition or release of an owner sent, on another connection, after
    # a newer one of the same owner ran is answered RWLOCK_STALE and leaves
    # the lock as it was; a client whose owner id another process uses (that
    # process's requests newer) gets its stale error, and nothing changes
    def stale(self):
        check = self.check
        acquire, release, renew = (open(os.path.join(ROOT, "lua", s + ".lua")).read()
                                   for s in ("acquire", "release", "renew"))
        name = self.name("stale")
        hkey, qkey = lock_keys(name)[:2]
        r1, r2 = self.srv.redis(), self.srv.redis()       # two connections
        owner = "late:%s:%d" % (self.client, os.getpid())

        def state():
            h = self.r.hgetall(hkey)
            return {k: v for k, v in h.items() if k not in (b"x",)}

        def stale_reply(call):
            try:
                return "(no error: %r)" % (call(),)
            except redis.exceptions.ResponseError as e:
                return str(e)

        t1 = r1.eval(acquire, 2, hkey, qkey, owner, 10, "w", 30000)
        check("a raw acquisition (seq 10) is granted", t1 > 0)
        check("its release (seq 12) frees the lock", r1.eval(
            release, 2, hkey, qkey, owner, 12) == 1)
        before = state()
        msg = stale_reply(lambda: r2.eval(acquire, 2, hkey, qkey, owner, 11, "w",
                                          30000))
        check("an acquisition with an older seq (11), arriving late on another connection, "
              "is answered RWLOCK_STALE", msg.startswith("RWLOCK_STALE") and
              "request 11" in msg and "not newer than 12" in msg, msg)
        check("  and changes nothing", state() == before and self.r.zcard(qkey) == 0,
              "%s -> %s" % (before, state()))
        msg = stale_reply(lambda: r2.eval(acquire, 2, hkey, qkey, owner, 12, "r",
                                          30000))
        check("  the same seq again too", msg.startswith("RWLOCK_STALE") and state() == before,
              msg)
        msg = stale_reply(lambda: r2.eval(renew, 2, hkey, qkey, owner, 11, 30000))
        check("a renewal as of an older seq is answered RWLOCK_STALE",
              msg.startswith("RWLOCK_STALE") and state() == before, msg)
        check("SQL gets the lock", q(self.s1, "SELECT redis_try_wlock(%s)", name) is True)
        before = state()
        msg = stale_reply(lambda: r2.eval(release, 2, hkey, qkey, owner, 11))
        check("a late release changes nothing either (SQL still holds)",
              msg.startswith("RWLOCK_STALE") and state() == before and
              q(self.s2, "SELECT redis_try_rlock(%s)", name) is False, msg)
        q(self.s1, "SELECT redis_unlock(%s)", name)

        # The client: another process runs newer requests of its owner id.
        lk = self.a.lock(name, "w")
        big = 2 ** 52
        t2 = r1.eval(acquire, 2, hkey, qkey, lk.owner, big, "w", 30000)
        before = state()
        try:
            lk.try_()
            check("the client's acquisition, older than its owner's newest, raises its stale "
                  "error", False, "(no error)")
        except AgentError as e:
            check("the client's acquisition, older than its owner's newest, raises its stale "
                  "error", e.kind == "stale" and "RWLOCK_STALE" in str(e), str(e))
        check("  and changes nothing", state() == before and self.info(name)["token"] == t2,
              "%s -> %s" % (before, state()))
        r1.eval(release, 2, hkey, qkey, lk.owner, big + 1)
        name2 = self.name("stale2")
        hkey2, qkey2 = lock_keys(name2)[:2]
        held = self.a.lock(name2, "r")
        held.acquire(1)
        r1.eval(release, 2, hkey2, qkey2, held.owner, big)
        try:
            held.release()
            check("the client's release, older than its owner's newest, raises its stale "
                  "error", False, "(no error)")
        except AgentError as e:
            check("the client's release, older than its owner's newest, raises its stale "
                  "error", e.kind == "stale" and "RWLOCK_STALE" in str(e), str(e))
        other = self.a.lock(name2, "w")
        check("  and the name is free for the next holder", other.try_() is True)
        other.release()
        for c in (r1, r2):
            c.close()

    # a release whose answer was lost is sent again before the name is taken again
    def owed_release(self):
        self._owed_release([])
        if self.client == "node":
            # ioredis sends a command cut off in flight again by itself after
            # reconnecting; without that, the client's own bookkeeping must.
            self._owed_release(["--no-resend"])

    def _owed_release(self, extra):
        sha = hashlib.sha1(open(os.path.join(ROOT, "lua", "release.lua"), "rb").read()).hexdigest()
        acquire_sha = hashlib.sha1(
            open(os.path.join(ROOT, "lua", "acquire.lua"), "rb").read()).hexdigest().encode()
        proxy = Proxy(self.srv.port, sha)
        other = Agent(self.client, "redis://127.0.0.1:%d/0" % proxy.port, extra)
        try:
            name = self.name("owed" + "".join(extra))
            if extra:
                self.res.note("the owed release again, agent %s" % " ".join(extra))
            lk = other.lock(name, "w")
            t1 = lk.acquire(5)
            proxy.cut_release(lk.owner)
            rel = other.start("release", lock=lk.h).wait(30)
            self.check("the release was cut off on its way", proxy.cut_done.is_set())
            self.res.note("release() whose answer was lost: %s" % (
                "answered %s" % rel.get("held") if rel["ok"] else "error %s" % rel["error"]))
            self.check("the hold is still in Redis (the release never arrived)",
                       self.info(name)["writer"] == lk.owner or rel["ok"],
                       str(self.info(name)))
            t2 = lk.acquire(5)
            self.check("acquiring the name again is a new grant (new token), not a "
                       "repeat of the old hold", t2 > t1, "(%s then %s)" % (t1, t2))
            streams = {}
            for n, data in proxy.after_cut:
                streams[n] = streams.get(n, b"") + data
            rel_sha = sha.encode()
            ok = any(acquire_sha in s for s in streams.values()) and all(
                s.find(acquire_sha) < 0 or 0 <= s.find(rel_sha) < s.find(acquire_sha)
                for s in streams.values())
            self.check("the owed release went ahead of the acquisition, on the same "
                       "connection", ok, str({n: (s.find(rel_sha), s.find(acquire_sha))
                                             for n, s in streams.items()}))
            self.check("the new hold is released and SQL gets the name",
                       lk.release() is True and
                       q(self.s1, "SELECT redis_try_wlock(%s)", name) is True)
            q(self.s1, "SELECT redis_unlock(%s)", name)
        finally:
            other.close()
            proxy.close()


def skipped(n):
    return ", %d skipped" % n if n else ""


def acl_user(srv):
    """docs/connecting.md's user on srv, and its password file."""
    password = os.urandom(16).hex()
    srv.redis().execute_command(*acl_line.setuser_args(password=password, prefix=PREFIX))
    d = tempfile.mkdtemp(prefix="rwlock-compliance-acl-")
    os.chmod(d, 0o755)
    path = os.path.join(d, "rwlock.pass")
    with open(path, "w") as f:
        f.write("# host:port:user:password\n127.0.0.1:%d:rwlock:%s\n" % (srv.port, password))
    os.chmod(path, 0o600)
    try:
        shutil.chown(path, "postgres")      # the server reads it (as root, under pg_virtualenv)
    except (LookupError, PermissionError):
        pass
    atexit.register(shutil.rmtree, d, True)
    ACL.update(user="rwlock", password=password, file=path)
    print("compliance: as the ACL user of docs/connecting.md (password file %s)" % path)


def run_clients(clients, srv=None, cluster=False, acl=False):
    """Run the suite for each client, on srv or on a server (a cluster) of
    its own; (passed, failed, {client: Results})."""
    own = srv is None
    if (srv.cluster if srv else cluster):
        # redis-py logs every error answer with a traceback (the version case expects some)
        logging.getLogger("redis.cluster").setLevel(logging.CRITICAL)
    if own and cluster:
        srv = RedisCluster(int(os.environ.get("RWLOCK_COMPLIANCE_CLUSTER_PORT", "6420")),
                           prefix="rwlock-compliance-cluster-")
    elif own:
        srv = RedisServer(int(os.environ.get("RWLOCK_COMPLIANCE_REDIS_PORT", "6393")),
                          prefix="rwlock-compliance-")
    if acl:
        acl_user(srv)
    admin = psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
    admin.autocommit = True
    q(admin, "CREATE EXTENSION IF NOT EXISTS rwlock")
    admin.close()
    out = {}
    try:
        for client in clients:
            t0 = time.monotonic()
            suite = Suite(client, srv)
            try:
                res = suite.run()
            finally:
                suite.close()
            out[client] = res
            print("compliance[%s]: %d passed, %d failed%s (%.1f s)"
                  % (res.label, res.passed, res.failed, skipped(res.skipped),
                     time.monotonic() - t0))
            sys.stdout.flush()
    finally:
        if own:
            srv.stop()
    return (sum(r.passed for r in out.values()), sum(r.failed for r in out.values()), out)


def main(argv):
    cluster = "--cluster" in argv
    acl = "--acl" in argv or os.environ.get("RWLOCK_COMPLIANCE_ACL") == "1"
    if acl and cluster:
        sys.exit("--acl runs on one server, not --cluster")
    clients = [a for a in argv if a not in ("--cluster", "--acl")] or \
        ["python", "python-async", "node"]
    for c in clients:
        if c not in AGENTS:
            sys.exit("unknown client %r (known: %s)" % (c, ", ".join(AGENTS)))
    passed, failed, out = run_clients(clients, cluster=cluster, acl=acl)
    print("compliance: %d passed, %d failed%s"
          % (passed, failed, skipped(sum(r.skipped for r in out.values()))))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
