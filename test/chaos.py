#!/usr/bin/python3
"""chaos.py: one Redis write lock keeps a counter right while Redis misbehaves.

Several SQL sessions (8 by default, at least 6), each its own connection,
increment a counter row non-atomically: read it, pause 1-4 ms, write the
value read + 1 (computed here, in the client). Each does so only while it
holds the write lock "c", for CHAOS_DURATION seconds (default 30), while a
fault injector disturbs Redis every 250 ms with, in turn:

    SCRIPT FLUSH                 the next EVALSHA of each script gets NOSCRIPT
    CLIENT KILL TYPE normal      every command connection drops
    CLIENT PAUSE <150-250> WRITE the scripts stall
    DEBUG SLEEP 0.2              Redis stalls altogether

and the sessions reach Redis through a fault proxy (test/faultproxy.py, a
thread of this process) that, at random moments (on average every 0.3 s,
--cut-every or $CHAOS_CUT_EVERY; seeded), cuts off an acquire or a release in flight: it keeps its bytes
and closes the client's side (or leaves it to time out) but keeps the
upstream connection, and delivers the request to Redis late: when the
owner's next grant of that lock has gone through (into the critical
section it opened), on the old connection and, duplicated, on a new one,
in random order across connections (faultproxy.py's header has the
details). Protocol 3 must answer each such request RWLOCK_STALE and change
nothing (docs/protocol.md 4.1); a late release that ran would free the
owner's new hold under it. The sessions connect as the documented
least-privilege ACL user: docs/connecting.md's ACL SETUSER rwlock line as it
is there (a new password in the URL), with the rights its topology table
adds (Sentinel +role, Cluster +cluster|slots +asking; quorum mode +info,
which it needs to read each master's uptime). The fault injector, the
observer and the end checks use the default user, directly.

The sessions use every form of the write lock (SPEC section 2):

    xact      BEGIN; redis_wlock_xact('c'); read; write; COMMIT
    try_xact  BEGIN; redis_try_wlock_xact('c', '200ms'); read; write; COMMIT
    session   redis_wlock('c'); read; write; redis_unlock('c')      (autocommit)
    try       redis_try_wlock('c', '200ms'); read; write; redis_unlock('c')
    mixed     a session that rotates through the four: a transaction is
              followed by a session-level acquisition in the same session

and, to press on the release paths:
  - chain (--chain, default half the transactions): the COMMIT goes in one
    message with the next round's acquisition ("COMMIT; BEGIN; SELECT
    redis_wlock_xact('c')", "COMMIT; SELECT redis_wlock('c')"), as a
    procedure looping over COMMIT does: the release sent at that COMMIT is
    still unanswered when the acquisition starts;
  - nested (--nested, default half the rounds): inside the critical section
    the session takes a second lock, on a name of its own (released with the
    first), as code holding several locks does;
  - command timeouts (--command-timeout, default 1s and 150ms in turn): in a
    200 ms stall the 1 s sessions never time out, the 150 ms ones do, in the
    middle of acquisitions and releases;
  - several names at once (--multi, default a third of the rounds; SPEC 16):
    the round's acquisition, in its form, is the multi-name call on "c" and
    1 to 3 of a1, a2, m1, m2 (shared by all sessions; "c" sorts between
    them, so a call may hold a1 while it waits for "c", or hold "c" while
    it waits for m1), the array in random order: redis_wlock_xact(text[]),
    redis_try_wlock_xact(text[], '200ms'), redis_wlock(text[]),
    redis_try_wlock(text[], '200ms'); a session-level round lets go with
    redis_unlock(text[]) (its per-name answers counted as unlock false).
    The checks below cover these rounds as any other: their critical
    section is the hold of "c" they took.
rwlock.lease is 10 s, so no lease lapses during a fault: every lost update
is a hold shared by mistake (SPEC 8).

The counter is a plain row, read by SELECT and written by UPDATE with the
value computed here, READ COMMITTED, no FOR UPDATE: only the Redis lock can
prevent a lost update. The statement that writes it also inserts a line into
chaos_log, so the committed increments are counted by PostgreSQL itself,
whatever the client saw (a COMMIT chained to an acquisition that failed has
committed). A lock call that fails (class 08 is expected under these faults,
57014 and 55P03 possible) is counted by SQLSTATE and the session goes on: it
rolls back, and makes sure it holds nothing (redis_held_locks,
redis_unlock_all()) before its next round.

Exclusion is also checked as it happens:
  - overlap: a session's lock call returned while another session was inside
    its critical section (from its lock call's return to the start of the
    message that releases);
  - stale token: the token of the hold a session enters with
    (redis_held_locks) must be above every token entered with before: equal
    means Redis granted the session a hold it had never released;
  - observer: a thread reads the lock's hash in Redis (field w, the writer)
    while a session stays inside its critical section; the writer must be
    that session's owner id.
In a transaction, a statement that fails is a message that releases: the
transaction aborts there and its _xact hold goes at the abort (SPEC 2.2, as
PostgreSQL's own locks do), before the client's call returns with the
error. So what is found while a session is inside is judged when it leaves:
an overlap whose grant (its token: Redis's clock, in µs) came after the
failing statement was sent, or a mismatch read by then, is a hand-off at an
abort, counted as such, not a violation; a grant from before that stands.
Each violation is reported with the last steps of the sessions involved and
the faults before it; CHAOS_REPORTS (default 3) says how many are printed.
$CHAOS_MONITOR=<path> (diagnostics) records, with MONITOR, every command
each master runs on the lock's keys, in the order it runs them, in
<path>.<pid>.<port>; the run prints the Unix time of its 0 ms.

After the faults stop, every session must make progress: one more increment
in its own form and a final redis_wlock + redis_unlock, within a few tries,
and hold nothing at the end.

At the end the lock must be free in Redis (in quorum mode: on a majority of
the masters, and on every master within 3 s of the sessions disconnecting:
a release owed to a master left alone after a failure goes at exit).

What the proxy still holds when the sessions are done is delivered then,
before that end check.

One summary line gives the counts: increments per form, faults per kind,
errors per SQLSTATE, warnings, violations, lost updates (committed
increments less the counter; the values written twice are listed), late
requests and stale answers; a line before it gives the proxy's counts (cuts,
late requests, their answers). Exits 1 on a lost update, a violation, a
session that made no progress, or a run in which no late request was
answered RWLOCK_STALE (it would prove nothing) or in which the proxy read a
request's ARGV in another convention than the scripts'; 2 if a session is stuck
(still in a call 90 s after the end). The proxy knows the scripts by their
SHA1, from the lua/ of this tree ($CHAOS_TREE=<tree> for another's, e.g.
the tree of an older protocol whose extension is installed).

Run under pg_virtualenv with the extension installed (as test/run.sh does):

    pg_virtualenv -t -s /usr/bin/python3 test/chaos.py [--duration S]
        [--sessions N] [--forms xact,session,...] [--nested P] [--chain P]
        [--command-timeout 1s,150ms] [--seed N] [--cut-every S]
        [--quorum N | --cluster | --sentinel]

It starts its own redis-server (6393 if free, else a port the OS picks;
$CHAOS_REDIS_PORT to choose) with the DEBUG command enabled, and the proxy
(ports the OS picks), and stops them at the end however the test ends.

With --quorum N (odd, at least 3; $CHAOS_QUORUM) the same runs in quorum
mode: N redis-servers, rwlock.redis_url lists them all, and each fault
strikes one master, drawn at random, so a majority always stays; the
observer wants the session inside to be the writer on a majority of the
masters, and the lock must be free on all of them at the end.
rwlock.quorum_max_lease is set to the lease (10 s, with ALTER SYSTEM, reset
at the end), and the sessions start once the masters have been up that
long (they count toward a majority only then).

With --cluster ($CHAOS_CLUSTER=1) it runs on a Redis Cluster of three
masters (rwlock.redis_url redis+cluster://): each fault strikes one master
drawn at random, and a fifth kind joins them, slot_move: the lock's slot is
migrated to another master under the sessions (SETSLOT IMPORTING and
MIGRATING, MIGRATE of its keys until none is left, SETSLOT NODE on every
master), so that they meet ASK, TRYAGAIN and MOVED. The observer and the
end check read the lock where its slot is. Each master announces its
proxy's port (cluster-announce-port), so the slot map and the redirections
name the proxy.

With --sentinel ($CHAOS_SENTINEL=1) it runs on a Sentinel set: a master
(the faults strike it), two replicas and three sentinels (26450-26452 if
free), rwlock.redis_url redis+sentinel://. The proxy is in front of the
master: the sentinels monitor it at the proxy's address and the replicas
replicate through it, so the sentinels hand out the proxy's address (no
failover is meant to happen: down-after is 30 s).
"""
import argparse
import collections
import os
import random
import re
import secrets
import signal
import subprocess
import sys
import threading
import time

import psycopg2
import psycopg2.extensions
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)
import faultproxy  # noqa: E402
from rwtest import REDIS_CLI, RedisCluster, RedisSentinel, RedisServer  # noqa: E402

sys.path.insert(0, os.path.join(ROOT, "tools"))
import acl_line  # noqa: E402

LOCK = "c"
MULTI_NAMES = ("a1", "a2", "m1", "m2")    # with LOCK, in multi-name rounds
MULTI_SQL = {"xact": "SELECT redis_wlock_xact(%s::text[])",
             "try_xact": "SELECT redis_try_wlock_xact(%s::text[], '200ms')",
             "session": "SELECT redis_wlock(%s::text[])",
             "try": "SELECT redis_try_wlock(%s::text[], '200ms')"}
KEY = "rwlock:{c}"             # the lock's hash (default rwlock.key_prefix)
FAULT_EVERY = 0.25
QUORUM_MAX_LEASE = 10          # s: rwlock.quorum_max_lease in quorum mode
SENTINEL_NAME = "chaos"
SENTINEL_REPLICAS = 2
SENTINEL_PORT = 26450          # the first sentinel's, if free (test/run.sh's TAP
                               # sentinels are on 26392-26397)
FAULTS = ("script_flush", "client_kill", "client_pause", "debug_sleep")
CLUSTER_FAULTS = FAULTS + ("slot_move",)
SETTINGS = (
    ("rwlock.lease", "10s"),
    ("rwlock.connect_timeout", "1s"),
    ("lock_timeout", "10s"),
    ("statement_timeout", "20s"),   # a hang fails the test, not stalls it
)
FORMS = ("xact", "session", "try", "try_xact")
XACT_FORMS = ("xact", "try_xact")
DEFAULT_PLAN = "xact,session,try,try_xact,xact,mixed,mixed,mixed"
FINAL_TRIES = 10               # after the faults: tries of each final step,
FINAL_SECONDS = 20             # within this time

T0 = time.monotonic()


def now_ms():
    return (time.monotonic() - T0) * 1000.0


# ---- shared state -------------------------------------------------------------

class Shared:
    def __init__(self):
        self.mx = threading.Lock()
        self.proxy = None
        self.inside = {}            # wid -> (entry number, form, ms)
        self.overlaps = []          # reports
        self.mismatches = []        # observer reports
        # Overlaps and mismatches found while the session they name is
        # inside: judged when it leaves (Session.leave), since a statement
        # that fails in a transaction ends the critical section it was
        # sent in. (wid, entry) -> [(kind, ms, Redis-clock µs, report)]
        self.pending = collections.defaultdict(list)
        self.abort_handoffs = 0     # excused: the holder's transaction had aborted
        self.stale_tokens = []      # entries whose token is not above the last
        self.after_fault = collections.Counter()  # (violation, last fault kind)
        self.last_token = 0
        self.fault_log = collections.deque(maxlen=24)   # (ms, kind, detail)
        self.faults = collections.Counter()
        self.fault_errors = collections.Counter()
        self.stop = threading.Event()        # end of the chaos phase
        self.faults_over = threading.Event()  # the injector has stopped
        self.sessions = {}
        self.samples = 0
        self.sample_errors = 0


shared = Shared()


def recent_faults(ms_from):
    with shared.mx:
        return [f for f in shared.fault_log if f[0] >= ms_from]


def last_fault(ms):
    """The kind of the last fault injected before ms, and how long before."""
    with shared.mx:
        before = [f for f in shared.fault_log if f[0] <= ms]
    if not before:
        return None
    return before[-1][1], ms - before[-1][0]


def note_violation(kind, ms):
    lf = last_fault(ms)
    with shared.mx:
        shared.after_fault[kind, lf[0] if lf else "none"] += 1


def suspect(kind, victims, us, ms, report):
    """An overlap or a mismatch with the sessions victims ({wid: entry}) inside
    their critical sections: confirmed or excused when they leave (at us, on
    the clock Redis's tokens use, the event happened: a grant's token, an
    observer's read)."""
    with shared.mx:
        for wid, entry in victims.items():
            shared.pending[wid, entry].append((kind, ms, us, report))


def judge(wid, entry, aborted_us):
    """Session wid leaves critical section entry: what was found while it was
    inside is a violation unless the section had ended by then: a statement
    of its transaction failed (sent at aborted_us), and the transaction's
    abort released its _xact hold (SPEC 2.2), as PostgreSQL's own locks go at
    the abort, before the client's ROLLBACK. Redis saw that release only
    after the failing statement was sent: what happened before that is
    judged a violation still."""
    with shared.mx:
        found = shared.pending.pop((wid, entry), [])
    for kind, ms, us, report in found:
        if aborted_us is not None and us > aborted_us:
            with shared.mx:
                shared.abort_handoffs += 1
            continue
        with shared.mx:
            (shared.overlaps if kind == "overlap" else shared.mismatches).append(report)
        note_violation(kind, ms)


def describe(wids, since_ms):
    lines = []
    for wid in wids:
        s = shared.sessions.get(wid)
        if s is None:
            continue
        lines.append("    session %d (%s, pid %s, owner %s), last steps:"
                     % (wid, s.plan, s.pid, s.owner))
        for ms, what in list(s.history):
            lines.append("      %9.1f ms  %s" % (ms, what))
    lines.append("    faults since %.1f ms:" % since_ms)
    for ms, kind, detail in recent_faults(since_ms):
        lines.append("      %9.1f ms  %s%s" % (ms, kind, detail))
    return "\n".join(lines)


# ---- a session ----------------------------------------------------------------

WARN_KINDS = (
    (re.compile(r"was lost"), "lost"),
    (re.compile(r"could not release"), "release-failed"),
    (re.compile(r"don't own"), "not-owned"),
)


class Session:
    def __init__(self, wid, plan, url, seed, nested, chain, command_timeout, multi):
        self.wid = wid
        self.multi = multi
        self.multi_rounds = collections.Counter()    # per form, committed
        self.command_timeout = command_timeout
        self.plan = plan
        self.nested = nested
        self.chain = chain
        self.inner = "n%d" % wid
        self.nested_rounds = 0
        self.chained = 0
        self.owed = None            # form of a round whose COMMIT is not sent yet
        self.seq = 0
        self.url = url
        self.rnd = random.Random(seed * 1000 + wid)
        self.history = collections.deque(maxlen=16)
        self.increments = collections.Counter()      # per form, committed
        self.busy = collections.Counter()            # try forms that gave up
        self.errors = collections.Counter()          # SQLSTATE
        self.messages = collections.Counter()        # (SQLSTATE, message: detail)
        self.warnings = collections.Counter()
        self.unlock_false = 0
        self.ambiguous = 0                            # COMMIT failed: unknown
        self.reconnects = 0
        self.failures = []
        self.final_ok = False
        self.entries = 0
        self.pid = None
        self.owner = None
        self.conn = None
        self.cur = None
        self.rot = 0
        self.phase = ""             # "final:" after the faults, for the error counts
        self.connect()

    def log(self, what):
        self.history.append((now_ms(), what))

    def connect(self):
        if self.conn is not None:
            try:
                self.conn.close()
            except psycopg2.Error:
                pass
        self.conn = psycopg2.connect("")
        self.conn.autocommit = True
        self.cur = self.conn.cursor()
        self.cur.execute("SET rwlock.redis_url = %s", (self.url,))
        for name, value in SETTINGS + (("rwlock.command_timeout", self.command_timeout),):
            self.cur.execute("SELECT set_config(%s, %s, false)", (name, value))
        self.cur.execute("SELECT pg_backend_pid()")
        self.pid = self.cur.fetchone()[0]
        self.owner = None

    def one(self, sql, args=None):
        self.log(sql if args is None else sql % tuple(repr(a) for a in args))
        self.sent_us = time.time() * 1e6    # Redis's clock (same host)
        try:
            self.cur.execute(sql, args)
            row = self.cur.fetchone() if self.cur.description else None
        finally:
            self.take_notices()
        if row is not None:
            self.history[-1] = (self.history[-1][0],
                                self.history[-1][1] + " -> " + ", ".join(map(str, row)))
        return row

    def take_notices(self):
        if not self.conn.notices:
            return
        for n in self.conn.notices:
            text = n.strip()
            self.log("  " + text)
            for rx, kind in WARN_KINDS:
                if rx.search(text):
                    self.warnings[kind] += 1
                    break
            else:
                if text.startswith("WARNING"):
                    self.warnings["other: " + text.splitlines()[0][:80]] += 1
        del self.conn.notices[:]

    # The critical section: entered when the lock call has returned, left
    # before the release is sent (redis_unlock, COMMIT).
    def enter(self, form):
        if self.owner is None:
            try:
                row = self.one("SELECT owner FROM redis_connection_info() WHERE current")
                self.owner = row[0] if row else None
            except psycopg2.Error:
                pass
        row = self.one("SELECT max(token) FROM redis_held_locks WHERE name = %s "
                       "AND mode = 'write'", (LOCK,))
        token = row[0] if row and row[0] is not None else 0
        if token == 0:
            self.failures.append("session %d: inside its critical section (%s) without a "
                                 "write hold of %r in redis_held_locks" % (self.wid, form, LOCK))
        with shared.mx:
            self.entries += 1
            others = dict(shared.inside)
            shared.inside[self.wid] = (self.entries, form, now_ms())
            last = shared.last_token
            shared.last_token = max(last, token)
        if token <= last:
            report = ("token at %.1f ms: session %d (%s) entered its critical section with "
                      "token %d, not above the last one seen (%d)\n%s"
                      % (now_ms(), self.wid, form, token, last,
                         describe([self.wid], now_ms() - 2000)))
            with shared.mx:
                shared.stale_tokens.append(report)
            note_violation("stale token", now_ms())
        if others:
            since = min(v[2] for v in others.values()) - 2000
            report = ("overlap at %.1f ms: session %d (%s) got the write lock while "
                      "session(s) %s were inside their critical section\n%s"
                      % (now_ms(), self.wid, form,
                         ", ".join("%d (%s, since %.1f ms)" % (w, v[1], v[2])
                                   for w, v in others.items()),
                         describe([self.wid] + list(others), since)))
            # The token is the grant's time on Redis's clock, in µs.
            suspect("overlap", {w: v[0] for w, v in others.items()}, token, now_ms(), report)
        self.log("inside (%s)" % form)

    def leave(self, aborted_us=None):
        """Out of the critical section: before the release is sent, or, with
        aborted_us, by a statement of the transaction that failed (sent at
        aborted_us)."""
        with shared.mx:
            v = shared.inside.pop(self.wid, None)
        if v is not None:
            judge(self.wid, v[0], aborted_us)

    def increment(self, form):
        """Read, pause, write read + 1 (and its line in chaos_log, in the same
        statement). Some rounds take a second lock, on a name private to the
        session, inside the critical section. Returns whether a session-level
        second lock is to be released."""
        xact = form in XACT_FORMS
        nested = self.rnd.random() < self.nested
        n = self.one("SELECT n FROM chaos_counter WHERE id = 1")[0]
        if nested:
            self.nested_rounds += 1
            self.one("SELECT redis_wlock_xact(%s)" if xact else "SELECT redis_wlock(%s)",
                     (self.inner,))
        time.sleep(self.rnd.uniform(0.001, 0.004))
        self.seq += 1
        self.one("WITH u AS (UPDATE chaos_counter SET n = %s WHERE id = 1 RETURNING n) "
                 "INSERT INTO chaos_log (wid, seq, form, n) SELECT %s, %s, %s, n FROM u",
                 (n + 1, self.wid, self.seq, form))
        return nested and not xact

    def round(self, form, last=False):
        """One locked increment. Returns True if it made one (committed, or,
        for a chained COMMIT, to be committed by the next round's message)."""
        xact = form in XACT_FORMS
        owed, self.owed = self.owed, None
        names = None
        if not last and self.rnd.random() < self.multi:
            names = [LOCK] + self.rnd.sample(MULTI_NAMES, self.rnd.randint(1, 3))
            self.rnd.shuffle(names)
        sql = {"xact": "SELECT redis_wlock_xact(%s)",
               "try_xact": "SELECT redis_try_wlock_xact(%s, '200ms')",
               "session": "SELECT redis_wlock(%s)",
               "try": "SELECT redis_try_wlock(%s, '200ms')"}[form] \
            if names is None else MULTI_SQL[form]
        if xact:
            sql = "BEGIN; " + sql
        if owed:
            # The previous round's COMMIT goes in the same message as this
            # round's acquisition: the release sent at that COMMIT is still
            # unanswered when the acquisition starts.
            sql = "COMMIT; " + sql
        try:
            row = self.one(sql, (LOCK,) if names is None else (names,))
        except psycopg2.Error:
            if owed:
                self.ambiguous += 1     # chaos_log says whether it committed
            raise
        if owed:
            self.increments[owed] += 1
            self.chained += 1
        if names is not None and not form.startswith("try") and len(row[0]) != len(names):
            self.failures.append("session %d: %d tokens for the %d names %s"
                                 % (self.wid, len(row[0]), len(names), names))
        if form.startswith("try") and not row[0]:
            self.busy[form] += 1
            if xact:
                self.one("ROLLBACK")
            return False
        self.enter(form)
        try:
            inner = self.increment(form)
        except psycopg2.Error:
            # The transaction aborted when the statement failed, and let go
            # of its _xact hold then: the section ended as it was sent.
            self.leave(self.sent_us if xact else None)
            raise
        finally:
            self.leave()        # before the release is sent
        self.multi_rounds[form] += names is not None    # written, inside
        if xact:
            if not last and self.rnd.random() < self.chain:
                self.owed = form
                return True
            try:
                self.one("COMMIT")
            except psycopg2.Error:
                self.ambiguous += 1
                raise
            self.increments[form] += 1
            return True
        self.increments[form] += 1        # the statement committed (autocommit)
        if inner and not self.one("SELECT redis_unlock(%s)", (self.inner,))[0]:
            self.unlock_false += 1
        if names is not None:
            self.unlock_false += self.one("SELECT redis_unlock(%s::text[])",
                                          (names,))[0].count(False)
        elif not self.one("SELECT redis_unlock(%s)", (LOCK,))[0]:
            self.unlock_false += 1
        return True

    def settle_owed(self):
        """A COMMIT owed by the last round, sent alone."""
        if self.owed:
            form, self.owed = self.owed, None
            try:
                self.one("COMMIT")
            except psycopg2.Error:
                self.ambiguous += 1
                raise
            self.increments[form] += 1

    def recover(self, err):
        """After an error: nothing held, no transaction open."""
        self.leave()
        self.owed = None
        code = getattr(err, "pgcode", None)
        if code is None or self.conn.closed:
            # The PostgreSQL connection itself is gone: rwlock must never
            # cause that.
            self.failures.append("session %d: lost its PostgreSQL connection: %s"
                                 % (self.wid, str(err).strip()))
            self.reconnects += 1
            self.connect()
            return
        for _ in range(5):
            try:
                if self.conn.info.transaction_status != psycopg2.extensions.TRANSACTION_STATUS_IDLE:
                    self.one("ROLLBACK")
                held = self.one("SELECT count(*) FROM redis_held_locks")[0]
                if held:
                    self.one("SELECT redis_unlock_all()")
                    held = self.one("SELECT count(*) FROM redis_held_locks")[0]
                if held == 0:
                    return
            except psycopg2.Error as e:
                self.errors["recover:" + (e.pgcode or "none")] += 1
                if self.conn.closed:
                    break
            time.sleep(0.05)
        self.failures.append("session %d: could not get rid of its holds after an error"
                             % self.wid)

    def count_message(self, e):
        """Count the error's message and detail, numbers left out."""
        diag = getattr(e, "diag", None)
        text = "%s: %s" % (getattr(diag, "message_primary", None) or str(e).strip(),
                           getattr(diag, "message_detail", None) or "")
        self.messages[e.pgcode or "none", re.sub(r"[0-9]+", "N", text)[:200]] += 1

    def next_form(self):
        if self.plan != "mixed":
            return self.plan
        self.rot += 1
        return FORMS[(self.rot - 1) % len(FORMS)]

    def attempt(self, form, last=False):
        try:
            return self.round(form, last)
        except psycopg2.Error as e:
            self.errors[self.phase + (e.pgcode or "none")] += 1
            self.log("ERROR %s: %s" % (e.pgcode, str(e).strip().splitlines()[0]))
            self.count_message(e)
            self.recover(e)
            return False

    def run(self, deadline):
        try:
            while not shared.stop.is_set() and time.monotonic() < deadline:
                self.attempt(self.next_form())
            try:
                self.settle_owed()
            except psycopg2.Error as e:
                self.errors[e.pgcode or "none"] += 1
                self.recover(e)
            # Progress after the faults: one more increment in its own form,
            # then a plain lock + unlock.
            if not shared.faults_over.wait(60):
                self.failures.append("session %d: the fault injector did not stop" % self.wid)
                return
            # A try may find the lock busy, and the first call may meet a
            # connection killed by the last fault: a few tries, bounded.
            self.phase = "final:"
            form = self.plan if self.plan != "mixed" else "xact"
            done = False
            until = time.monotonic() + FINAL_SECONDS
            for _ in range(FINAL_TRIES):
                if self.attempt(form, last=True):
                    done = True
                    break
                if time.monotonic() > until:
                    break
                time.sleep(0.1)
            if not done:
                self.failures.append("session %d: no increment (%s) in %d tries after the "
                                     "faults stopped" % (self.wid, form, FINAL_TRIES))
            ok = False
            for _ in range(FINAL_TRIES):
                try:
                    tok = self.one("SELECT redis_wlock(%s)", (LOCK,))[0]
                    if self.one("SELECT redis_unlock(%s)", (LOCK,))[0] and tok > 0:
                        ok = True
                        break
                except psycopg2.Error as e:
                    self.errors["final:" + (e.pgcode or "none")] += 1
                    self.recover(e)
                if time.monotonic() > until:
                    break
                time.sleep(0.1)
            if not ok:
                self.failures.append("session %d: no redis_wlock + redis_unlock in %d tries "
                                     "after the faults stopped" % (self.wid, FINAL_TRIES))
            left = self.one("SELECT count(*) FROM redis_held_locks")[0]
            if left:
                self.failures.append("session %d: still holds %d locks at the end"
                                     % (self.wid, left))
            self.final_ok = done and ok and not left
        except Exception as e:          # noqa: BLE001 - anything else fails the test
            self.failures.append("session %d: %s: %s" % (self.wid, type(e).__name__,
                                                         str(e).strip()))
            # Let the others go on.
            try:
                self.one("ROLLBACK")
                self.one("SELECT redis_unlock_all()")
            except psycopg2.Error:
                pass
        finally:
            self.leave()


# ---- the fault injector and the observer --------------------------------------

def clients(ports):
    return [redis.Redis(host="127.0.0.1", port=port, socket_timeout=2,
                        socket_connect_timeout=2) for port in ports]


def lock_readers(ports, cluster):
    """Clients to read the lock's hash with: one per Redis (a quorum's
    masters), or, on a cluster, one that goes where the slot is."""
    if not cluster:
        return clients(ports)
    from redis.cluster import RedisCluster as Client
    return [Client(host="127.0.0.1", port=ports[0], socket_timeout=2,
                   socket_connect_timeout=2)]


def slot_move(rs, rnd):
    """Migrate the lock's slot from the master that has it to another one,
    keys and all, as redis-cli --cluster reshard does."""
    slot = rs[0].execute_command("CLUSTER", "KEYSLOT", KEY)
    ids = [r.execute_command("CLUSTER", "MYID").decode() for r in rs]
    src = None
    for i, r in enumerate(rs):
        try:
            r.execute_command("EXISTS", KEY)    # the others answer MOVED
            src = i
            break
        except redis.exceptions.ResponseError:
            pass
    if src is None:
        raise redis.exceptions.RedisError("no master has slot %d" % slot)
    dst = rnd.choice([i for i in range(len(rs)) if i != src])
    rs[dst].execute_command("CLUSTER", "SETSLOT", slot, "IMPORTING", ids[src])
    rs[src].execute_command("CLUSTER", "SETSLOT", slot, "MIGRATING", ids[dst])
    port = rs[dst].connection_pool.connection_kwargs["port"]
    moved = 0
    while True:
        keys = rs[src].execute_command("CLUSTER", "GETKEYSINSLOT", slot, 100)
        if not keys:
            break
        rs[src].execute_command("MIGRATE", "127.0.0.1", port, "", 0, 5000, "KEYS", *keys)
        moved += len(keys)
    for r in (rs[dst], rs[src]) + tuple(r for i, r in enumerate(rs) if i not in (src, dst)):
        r.execute_command("CLUSTER", "SETSLOT", slot, "NODE", ids[dst])
    return " slot %d from master %d to %d (%d keys)" % (slot, src, dst, moved)


def injector(ports, deadline, seed, kinds):
    """A fault every FAULT_EVERY s, the kinds in turn, each on one Redis
    (in quorum mode one master drawn at random)."""
    rnd = random.Random(seed)
    rs = clients(ports)
    i = 0
    tick = time.monotonic() + FAULT_EVERY
    try:
        while not shared.stop.is_set() and tick < deadline:
            delay = tick - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            if not kinds:
                tick += FAULT_EVERY
                continue
            kind = kinds[i % len(kinds)]
            i += 1
            tick += FAULT_EVERY
            m = rnd.randrange(len(rs))
            r = rs[m]
            detail = " on master %d" % m if len(rs) > 1 else ""
            # Logged before it is sent: its effects come after.
            entry = [now_ms(), kind, ""]
            with shared.mx:
                shared.fault_log.append(entry)
            try:
                if kind == "script_flush":
                    r.execute_command("SCRIPT", "FLUSH")
                elif kind == "client_kill":
                    # SKIPME yes (the default of the filter form): not this one.
                    detail += " (%s killed)" % r.execute_command("CLIENT", "KILL", "TYPE", "normal")
                elif kind == "client_pause":
                    ms = rnd.randint(150, 250)
                    detail += " %d ms" % ms
                    r.execute_command("CLIENT", "PAUSE", ms, "WRITE")
                elif kind == "slot_move":
                    detail = slot_move(rs, rnd)
                else:
                    r.execute_command("DEBUG", "SLEEP", "0.2")
                with shared.mx:
                    shared.faults[kind] += 1
                    entry[2] = detail
            except redis.exceptions.RedisError as e:
                with shared.mx:
                    shared.fault_errors[kind] += 1
                    entry[2] = " failed: %s" % e
    finally:
        shared.proxy.stop_cutting()
        for r in rs:
            try:
                r.execute_command("CLIENT", "UNPAUSE")
            except redis.exceptions.RedisError:
                pass
        time.sleep(0.3)         # the last stall is over
        shared.faults_over.set()


def observer(ports, cluster):
    """Between faults, a session inside its critical section must be the
    writer Redis has for the lock (in quorum mode: a majority of the
    masters have)."""
    rs = lock_readers(ports, cluster)
    majority = len(rs) // 2 + 1
    while not shared.faults_over.is_set():
        time.sleep(0.02)
        with shared.mx:
            before = dict(shared.inside)
        if not before:
            continue
        writers = collections.Counter()
        failed = 0
        for r in rs:
            try:
                w = r.hget(KEY, "w")
                writers[w.decode() if w is not None else None] += 1
            except redis.exceptions.RedisError:
                failed += 1
        if failed == len(rs):
            shared.sample_errors += 1
            continue
        # Read by then. (A grant to another session before an abort ended
        # the section is an overlap, by its token, whenever it is read.)
        read_us = time.time() * 1e6
        with shared.mx:
            after = dict(shared.inside)
        shared.samples += 1
        writer = writers.most_common(1)[0][0]
        for wid, v in before.items():
            s = shared.sessions[wid]
            if after.get(wid) != v or s.owner is None:
                continue        # not inside for the whole read
            # A master that could not be read may have it.
            if writers[s.owner] + failed < majority:
                report = ("observer at %.1f ms: session %d (%s) was inside its critical "
                          "section (since %.1f ms) while Redis's writer of %r was %s\n%s"
                          % (now_ms(), wid, v[1], v[2], LOCK,
                             (writer or "nobody") if len(rs) == 1 else
                             "per master %s (%d not read)" % (dict(writers), failed),
                             describe([wid], v[2] - 2000)))
                suspect("mismatch", {wid: v[0]}, read_us, now_ms(), report)


# ---- main -------------------------------------------------------------------------

def parse():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--duration", type=float,
                   default=float(os.environ.get("CHAOS_DURATION", "30")),
                   help="seconds of faults (default 30, or $CHAOS_DURATION)")
    p.add_argument("--sessions", type=int,
                   default=int(os.environ.get("CHAOS_SESSIONS", "0")) or None,
                   help="how many sessions (default: one per entry of --forms, at least 6)")
    p.add_argument("--forms", default=os.environ.get("CHAOS_FORMS", DEFAULT_PLAN),
                   help="comma-separated form of each session, repeated as needed: "
                        "xact, session, try, try_xact, mixed")
    p.add_argument("--nested", type=float,
                   default=float(os.environ.get("CHAOS_NESTED", "0.5")),
                   help="share of rounds that take a second lock inside the critical "
                        "section (default 0.5)")
    p.add_argument("--chain", type=float,
                   default=float(os.environ.get("CHAOS_CHAIN", "0.5")),
                   help="share of transaction rounds whose COMMIT is sent in one message "
                        "with the next round's acquisition (default 0.5)")
    p.add_argument("--multi", type=float,
                   default=float(os.environ.get("CHAOS_MULTI", "0.33")),
                   help="share of rounds whose acquisition is a multi-name call on the "
                        "lock and 1 to 3 other names (default 0.33)")
    p.add_argument("--command-timeout",
                   default=os.environ.get("CHAOS_COMMAND_TIMEOUT", "1s,150ms"),
                   help="rwlock.command_timeout of the sessions, comma-separated, taken in "
                        "turn (default 1s,150ms: in a 200 ms stall the first never times "
                        "out, the second does)")
    p.add_argument("--faults", default=os.environ.get("CHAOS_FAULTS"),
                   help="the faults injected in turn, comma-separated (default: %s; on a "
                        "cluster, and slot_move); 'none' for a run without faults"
                        % ",".join(FAULTS))
    p.add_argument("--quorum", type=int, default=int(os.environ.get("CHAOS_QUORUM", "0")),
                   help="quorum mode over that many masters (odd, at least 3; default 0: "
                        "one Redis)")
    p.add_argument("--cluster", action="store_true",
                   default=os.environ.get("CHAOS_CLUSTER", "") not in ("", "0"),
                   help="on a Redis Cluster of three masters, with slot moves among the "
                        "faults")
    p.add_argument("--cut-every", type=float,
                   default=float(os.environ.get("CHAOS_CUT_EVERY", "0.3")),
                   help="mean time between the proxy's cuts, s (default 0.3)")
    p.add_argument("--sentinel", action="store_true",
                   default=os.environ.get("CHAOS_SENTINEL", "") not in ("", "0"),
                   help="on a Sentinel set (a master, %d replicas, three sentinels), the "
                        "proxy in front of the master" % SENTINEL_REPLICAS)
    p.add_argument("--seed", type=int, default=int(os.environ.get("CHAOS_SEED", "0")) or
                   int(time.time()) % 100000,
                   help="seed of the sessions' choices and pauses (printed; the faults' "
                        "timing makes no two runs alike anyway)")
    a = p.parse_args()
    a.plan = [f.strip() for f in a.forms.split(",") if f.strip()]
    a.timeouts = [t.strip() for t in a.command_timeout.split(",") if t.strip()]
    if a.faults is None:
        a.faults = ",".join(CLUSTER_FAULTS if a.cluster else FAULTS)
    a.kinds = [f.strip() for f in a.faults.split(",") if f.strip() and f.strip() != "none"]
    for f in a.kinds:
        if f not in (CLUSTER_FAULTS if a.cluster else FAULTS):
            p.error("unknown fault %r" % f)
    for f in a.plan:
        if f not in FORMS + ("mixed",):
            p.error("unknown form %r" % f)
    if a.sessions is None:
        a.sessions = max(6, len(a.plan))
    if a.sessions < 6:
        p.error("at least 6 sessions")
    if a.quorum and (a.quorum < 3 or a.quorum % 2 == 0):
        p.error("--quorum: an odd number, at least 3")
    if (a.quorum > 0) + a.cluster + a.sentinel > 1:
        p.error("one of --quorum, --cluster and --sentinel")
    return a


class Topology:
    """The Redis servers of a run, the fault proxy in front of them, and the
    sessions' URL (through the proxy, as the documented ACL user).
    ports: the data ports the injector, the observer and the end check use
    (directly, as the default user): every master, or a Sentinel set's
    master."""

    def __init__(self):
        self.srvs = []
        self.ports = []
        self.url = None
        self.proxy = None

    def stop(self):
        if self.proxy is not None:
            self.proxy.close()
        for srv in reversed(self.srvs):
            srv.stop()


def acl_user(extra):
    """docs/connecting.md's ACL SETUSER line (tools/acl_line.py: its default
    key prefix, that of chaos.py's keys), a new password in place of the
    example's, and the rights its topology table adds (extra). Returns
    (argv, user, password)."""
    password = secrets.token_hex(16)
    argv = acl_line.setuser_args(password=password, extra=extra)
    return argv, argv[2], password


def wait_for(what, ok, timeout=20):
    until = time.monotonic() + timeout
    while time.monotonic() < until:
        try:
            if ok():
                return
        except redis.exceptions.RedisError:
            pass
        time.sleep(0.1)
    raise RuntimeError("%s: not within %d s" % (what, timeout))


def setup(topo, args):
    """Start the servers, the proxy and the ACL user of the run's topology."""
    first = int(os.environ.get("CHAOS_REDIS_PORT", "6393"))
    debug = ("--enable-debug-command", "local")
    # Quorum mode reads each master's INFO server (uptime, run_id,
    # persistence: src/quorum.c); the doc has +info as recommended.
    extra = ("+role",) if args.sentinel else ("+cluster|slots", "+asking") if args.cluster \
        else ("+info",) if args.quorum else ()
    acl, user, password = acl_user(extra)
    cred = "%s:%s@" % (user, password)
    scripts = faultproxy.FaultProxy.scripts_of(os.environ.get("CHAOS_TREE", ROOT))
    if args.cluster:
        cl = RedisCluster(first, 3, prefix="rwlock-chaos-", options=debug)
        topo.srvs.append(cl)
        topo.ports = list(cl.ports)
    else:
        for _ in range(max(args.quorum, 1)):
            topo.srvs.append(RedisServer(topo.srvs[-1].port + 1 if topo.srvs else first,
                                         *debug, prefix="rwlock-chaos-"))
        topo.ports = [srv.port for srv in topo.srvs]
    data = list(topo.ports)            # and the replicas, in a Sentinel set
    topo.proxy = proxy = faultproxy.FaultProxy(data, scripts, args.seed, cut_user=user,
                                               cut_every=args.cut_every)
    proxy.start()
    pp = [proxy.ports[p] for p in data]
    if args.sentinel:
        # The replicas follow the master through the proxy, and the
        # sentinels monitor it there: the proxy's address is the master's
        # for everyone (a sentinel's get-master-addr-by-name, the master's
        # INFO of its replicas).
        for _ in range(SENTINEL_REPLICAS):
            topo.srvs.append(RedisServer(topo.srvs[-1].port + 1, "--replicaof", "127.0.0.1",
                                         str(pp[0]), prefix="rwlock-chaos-"))
            data.append(topo.srvs[-1].port)
        sentinels = []
        for _ in range(3):
            sentinels.append(RedisSentinel(sentinels[-1].port + 1 if sentinels else
                                           SENTINEL_PORT, SENTINEL_NAME, pp[0]))
            topo.srvs.append(sentinels[-1])
        for port in data[1:]:
            r = redis.Redis(port=port, socket_timeout=2)
            wait_for("replica %d in sync" % port,
                     lambda: r.info("replication").get("master_link_status") == "up")
        for s in sentinels:
            r = s.redis()
            wait_for("sentinel %d settled" % s.port,
                     lambda: (lambda m: int(m["num-slaves"]) == SENTINEL_REPLICAS and
                              int(m["num-other-sentinels"]) == 2 and int(m["port"]) == pp[0])(
                         r.sentinel_master(SENTINEL_NAME)))
        topo.url = "redis+sentinel://%s%s/%s" % (
            cred, ",".join("127.0.0.1:%d" % s.port for s in sentinels), SENTINEL_NAME)
    elif args.cluster:
        # Each master announces its proxy's port (CLUSTER SLOTS, MOVED, ASK),
        # its bus stays where it is.
        for port, pport in zip(data, pp):
            redis.Redis(port=port).config_set("cluster-announce-port", pport)

        def announced():
            for port in data:
                slots = redis.Redis(port=port, socket_timeout=2).execute_command(
                    "CLUSTER", "SLOTS")
                if sorted(int(s[2][1]) for s in slots) != sorted(pp):
                    return False
            return True
        wait_for("the masters announce the proxy's ports", announced)
        topo.url = "redis+cluster://%s%s/" % (cred, ",".join("127.0.0.1:%d" % p for p in pp))
    else:
        topo.url = " ".join("redis://%s127.0.0.1:%d/0" % (cred, p) for p in pp)
    for port in data:
        redis.Redis(port=port, socket_timeout=2).execute_command(*acl)
    topo.user = "%s (docs/connecting.md's line%s)" % (
        user, (" " + " ".join(extra)) if extra else "")


def main():
    args = parse()
    topo = Topology()

    def on_signal(signum, frame):
        topo.stop()
        os._exit(3)
    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        setup(topo, args)
        return run(topo, args)
    finally:
        topo.stop()


def writers_at_end(ports, cluster):
    """The writer each Redis has for the lock (None: none; an exception:
    could not be read)."""
    out = []
    for r in lock_readers(ports, cluster):
        try:
            w = r.hget(KEY, "w")
            out.append(w.decode() if w is not None else None)
        except redis.exceptions.RedisError as e:
            out.append(e)
    return out


def check_free(ports, cluster, sessions, stuck):
    """At the end the lock is free: in Redis (on a majority of a quorum's
    masters) while the sessions are still connected, and on every master
    once they have disconnected (a release owed to a master that failed a
    moment ago goes at the latest at exit)."""
    verdict = []
    writers = writers_at_end(ports, cluster)
    held = [(m, w) for m, w in enumerate(writers) if w is not None]
    if len(held) > len(writers) - (len(writers) // 2 + 1):
        verdict.append("the lock is still held at the end: %s"
                       % ", ".join("master %d: %s" % mw for mw in held))
    if stuck:
        return verdict
    for s in sessions:
        try:
            s.conn.close()
        except psycopg2.Error:
            pass
    until = time.monotonic() + 3
    while held and time.monotonic() < until:
        time.sleep(0.1)
        held = [(m, w) for m, w in enumerate(writers_at_end(ports, cluster))
                if w is not None]
    if held:
        verdict.append("the lock is still held 3 s after the sessions disconnected: %s"
                       % ", ".join("master %d: %s" % mw for mw in held))
    return verdict


def run(topo, args):
    ports, url, proxy = topo.ports, topo.url, topo.proxy
    shared.proxy = proxy
    admin = psycopg2.connect("")
    admin.autocommit = True
    cur = admin.cursor()
    cur.execute("CREATE EXTENSION IF NOT EXISTS rwlock")
    if args.quorum:
        cur.execute("ALTER SYSTEM SET rwlock.quorum_max_lease = '%ds'" % QUORUM_MAX_LEASE)
        cur.execute("SELECT pg_reload_conf()")
        # The masters count toward a majority once up that long (and a second).
        time.sleep(QUORUM_MAX_LEASE + 1.5)
    cur.execute("DROP TABLE IF EXISTS chaos_counter")
    cur.execute("CREATE TABLE chaos_counter (id int PRIMARY KEY, n bigint NOT NULL)")
    cur.execute("INSERT INTO chaos_counter VALUES (1, 0)")
    cur.execute("DROP TABLE IF EXISTS chaos_log")
    cur.execute("CREATE TABLE chaos_log (wid int, seq int, form text, n bigint, "
                "at timestamptz DEFAULT clock_timestamp(), PRIMARY KEY (wid, seq))")

    sessions = [Session(i, args.plan[i % len(args.plan)], url, args.seed, args.nested,
                        args.chain, args.timeouts[i % len(args.timeouts)], args.multi)
                for i in range(args.sessions)]
    for s in sessions:
        shared.sessions[s.wid] = s
    start = time.monotonic()
    deadline = start + args.duration
    threads = [threading.Thread(target=s.run, args=(deadline,), daemon=True)
               for s in sessions]
    inj = threading.Thread(target=injector, args=(ports, deadline, args.seed, args.kinds),
                           daemon=True)
    obs = threading.Thread(target=observer, args=(ports, args.cluster), daemon=True)
    monitors = []
    if os.environ.get("CHAOS_MONITOR"):
        # Diagnostics: every command each master runs on the lock's keys, in
        # the order it runs them (MONITOR; restarted after CLIENT KILL, until
        # the master is gone).
        path = "%s.%d" % (os.environ["CHAOS_MONITOR"], os.getpid())
        print("chaos: 0 ms is Unix time %.6f; MONITOR in %s.<port>"
              % (time.time() - now_ms() / 1000.0, path), flush=True)
        for port in ports:
            monitors.append(subprocess.Popen(
                ["bash", "-c", "while :; do %s -p %d monitor; "
                 "%s -p %d ping >/dev/null 2>&1 || break; sleep 0.01; done | "
                 "grep --line-buffered -F '{c}' > %s.%d"
                 % (REDIS_CLI, port, REDIS_CLI, port, path, port)],
                start_new_session=True))
    if args.kinds:
        proxy.start_cutting()
    for t in threads + [inj, obs]:
        t.start()
    verdict = []
    inj.join(args.duration + 30)
    shared.stop.set()
    stuck = []
    end_by = time.monotonic() + 90
    for s, t in zip(sessions, threads):
        t.join(max(0.1, end_by - time.monotonic()))
        if t.is_alive():
            stuck.append(s)
    obs.join(5)
    # What the proxy still holds goes now; the lock must be free after it.
    if not proxy.settle():
        verdict.append("the proxy's late requests were not all answered within 5 s")
    # A session still inside (stuck): what was found meanwhile stands.
    for wid, entry in list(shared.pending):
        judge(wid, entry, None)
    elapsed = time.monotonic() - start
    for m in monitors:
        os.killpg(m.pid, signal.SIGTERM)

    counter = committed = None
    per_form = collections.Counter()
    collisions = []
    try:
        cur.execute("SELECT n FROM chaos_counter WHERE id = 1")
        counter = cur.fetchone()[0]
        cur.execute("SELECT form, count(*) FROM chaos_log GROUP BY form")
        per_form.update(dict(cur.fetchall()))
        committed = sum(per_form.values())
        # Two committed increments that wrote the same value: one overwrote
        # the other's.
        cur.execute("SELECT n, string_agg(format('session %s (%s) at %s', wid, form, "
                    "to_char(at, 'HH24:MI:SS.MS')), ', ' ORDER BY at) FROM chaos_log "
                    "GROUP BY n HAVING count(*) > 1 ORDER BY n")
        collisions = cur.fetchall()
    except psycopg2.Error as e:
        verdict.append("could not read the counter: %s" % e)

    inc = collections.Counter()
    busy = collections.Counter()
    errors = collections.Counter()
    warnings = collections.Counter()
    unlock_false = ambiguous = 0
    failures = []
    for s in sessions:
        inc.update(s.increments)
        busy.update(s.busy)
        errors.update(s.errors)
        warnings.update(s.warnings)
        unlock_false += s.unlock_false
        ambiguous += s.ambiguous
        failures.extend(s.failures)
    total = sum(inc.values())
    lost = None if counter is None else committed - counter
    if lost is not None and lost > 0:
        verdict.append("lost updates: the counter is %d after %d committed increments "
                       "(%d lost)" % (counter, committed, lost))
        for n, who in collisions[:10]:
            verdict.append("  value %d written by %s" % (n, who))
    if lost is not None and lost < 0:
        verdict.append("the counter is %d, more than the %d committed increments"
                       % (counter, committed))
    if committed is not None and not total <= committed <= total + ambiguous:
        verdict.append("chaos_log has %d committed increments; the sessions counted %d, "
                       "and %d of unknown outcome" % (committed, total, ambiguous))
    for s in stuck:
        verdict.append("session %d (%s, pid %s) is stuck: still running 90 s after the end"
                       % (s.wid, s.plan, s.pid))
    for s in sessions:
        if sum(s.increments.values()) == 0:
            verdict.append("session %d (%s) made no increment at all" % (s.wid, s.plan))
    if shared.overlaps:
        verdict.append("%d overlaps: a session got the write lock while another was "
                       "inside its critical section" % len(shared.overlaps))
    if shared.stale_tokens:
        verdict.append("%d entries with a token not above the last one: a write "
                       "acquisition was granted on a hold Redis had not released"
                       % len(shared.stale_tokens))
    if shared.mismatches:
        verdict.append("%d observer mismatches: Redis's writer was not the session "
                       "inside its critical section" % len(shared.mismatches))
    verdict.extend(failures)
    verdict.extend(check_free(ports, args.cluster, sessions, stuck))
    ps = proxy.stats
    if proxy.errors:
        verdict.append("the fault proxy failed: %s" % "; ".join(proxy.errors))
    if args.kinds and not ps["seen acquire"]:
        verdict.append("the proxy saw no acquire.lua (are the scripts of %s the "
                       "extension's? $CHAOS_TREE)" % os.environ.get("CHAOS_TREE", ROOT))
    elif args.kinds and not ps["late stale"]:
        verdict.append("no late request of the proxy's was answered RWLOCK_STALE: the run "
                       "proves nothing about stale requests")
    if ps["seen without seq"]:
        # Every acquire.lua and release.lua call carries its seq in ARGV[2]
        # (owner ARGV[1]): a request read otherwise is matched to no owner's
        # next grant, and its late delivery waits for the deadline.
        verdict.append("the proxy read %d protocol requests without a seq in ARGV[2]: it "
                       "parses the scripts' ARGV in another convention than the extension "
                       "sends (faultproxy.py, classify)" % ps["seen without seq"])
    if args.quorum:
        cur.execute("ALTER SYSTEM RESET rwlock.quorum_max_lease")
        cur.execute("SELECT pg_reload_conf()")
    if not stuck:
        try:
            cur.execute("DROP TABLE chaos_counter, chaos_log")
        except psycopg2.Error:
            pass
    admin.close()

    def fmt(counter_):
        return ", ".join("%s %d" % kv for kv in sorted(counter_.items())) or "none"

    print("chaos: sessions through the fault proxy as ACL user %s" % topo.user)
    print("chaos: proxy: " + proxy.summary())
    print("chaos%s: %d sessions (%s), %.1f s, seed %d: increments %s (%s; %d with a nested "
          "lock, %d COMMITs chained to the next acquisition, %d multi-name (%s)); "
          "try busy %s; "
          "faults %d (%s%s); errors %d (%s); warnings %s; unlock false %d; "
          "overlaps %d (%d hand-offs at an abort); stale tokens %d; observer %d samples, "
          "%d mismatches; counter %s; lost updates %s; late requests %d, stale %d"
          % (" (quorum of %d)" % args.quorum if args.quorum else
             " (cluster of 3)" if args.cluster else
             " (sentinel, %d replicas)" % SENTINEL_REPLICAS if args.sentinel else "",
             len(sessions), ",".join(s.plan for s in sessions), elapsed, args.seed,
             committed, fmt(per_form), sum(s.nested_rounds for s in sessions),
             sum(s.chained for s in sessions),
             sum(sum(s.multi_rounds.values()) for s in sessions),
             fmt(sum((s.multi_rounds for s in sessions), collections.Counter())), fmt(busy),
             sum(shared.faults.values()), fmt(shared.faults),
             ("; failed " + fmt(shared.fault_errors)) if shared.fault_errors else "",
             sum(errors.values()), fmt(errors), fmt(warnings), unlock_false,
             len(shared.overlaps), shared.abort_handoffs, len(shared.stale_tokens),
             shared.samples,
             len(shared.mismatches),
             counter, lost, ps["late deliveries"], ps["late stale"]))
    if shared.after_fault:
        print("  violations by the last fault before them: %s"
              % ", ".join("%s after %s %d" % (k[0], k[1], v)
                          for k, v in sorted(shared.after_fault.items())))
    messages = collections.Counter()
    for s in sessions:
        messages.update(s.messages)
    for (code, text), n in messages.most_common(6):
        print("  %6d x %s %s" % (n, code, text))
    for s in sessions:
        print("  session %d (%s, command_timeout %s, pid %s): %s; errors %s; final %s"
              % (s.wid, s.plan, s.command_timeout, s.pid, fmt(s.increments), fmt(s.errors),
                 "ok" if s.final_ok else "FAILED"))
    if verdict:
        print("chaos: FAILED", file=sys.stderr)
        for v in verdict[:30]:
            print("  " + v, file=sys.stderr)
        k = int(os.environ.get("CHAOS_REPORTS", "3"))
        for rep in shared.overlaps[:k] + shared.mismatches[:k] + shared.stale_tokens[:k]:
            print("  " + rep, file=sys.stderr)
        sys.stderr.flush()
        if stuck:
            sys.stdout.flush()
            return 2
        return 1
    print("chaos: ok")
    return 0


if __name__ == "__main__":
    rc = main()
    sys.stdout.flush()
    sys.stderr.flush()
    # A stuck session's thread must not keep the process alive.
    os._exit(rc)
