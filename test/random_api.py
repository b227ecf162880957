#!/usr/bin/python3
"""random_api.py: the SQL API of rwlock against an executable model
(test/api_model.py), on random sequences of calls.

Several SQL sessions (SESSIONS, 4) and a holder of the Python client
(clients/python) run a random sequence of steps: every lock function
(redis_wlock, redis_rlock, the try forms with and without a wait, the _xact
forms; each also on an array of names, all or none), redis_unlock (on a
name, and on an array of names), redis_unlock_all, stacked calls (several in one
statement, some 100 to 150 deep), BEGIN / COMMIT / ROLLBACK / SAVEPOINT /
ROLLBACK TO / RELEASE, errors inside transactions (then 25P02 until the
rollback), DISCARD ALL, bad arguments (22004, 22023), PREPARE TRANSACTION
(refused with xact holds, 0A000) and sessions terminated with
pg_terminate_backend and connected again. The model says what each call
answers (the value, the token: write tokens increase, a read gets the last
write token, a stacked call the token of its hold; the WARNINGs; the
SQLSTATE), and after each step the test compares what redis_held_locks
shows to the acting session (every session every CHECK_ALL steps), what
redis_locks shows for every session (with the library preloaded), and what
Redis has: the writer and readers of each lock by owner id, the last token,
the protocol version (3) and each holder's s:<owner> record, no waiting
writer left behind.

A lock the model says is busy is asked for only by the try forms (false)
or by the blocking forms under lock_timeout = 100ms (55P03), so the single
thread never hangs.

Run under pg_virtualenv, with the extension installed:

    pg_virtualenv -t -o shared_preload_libraries=rwlock /usr/bin/python3 test/random_api.py
    ... test/random_api.py --seed 7 --steps 100000        # a long run

Seeded: the same --seed replays the same sequence (default: a random seed,
printed). A failure prints the seed, the step and the last steps, and exits
1. --no-deep keeps stacks shallow; --skip-known ID avoids the sequences of a
known bug (see KNOWN). Prints "random_api: N passed, N failed" (checks).
Starts its own redis-server (6393 if free; $RWLOCK_RANDOM_REDIS_PORT).
"""
import argparse
import collections
import os
import random
import sys
import threading
import time
import traceback

import psycopg2
import redis

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.normpath(os.path.join(HERE, ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
sys.path.insert(0, HERE)
import rwlock_client as rw  # noqa: E402
from api_model import R, W, Outcome, PyHolder, Redis, Session  # noqa: E402
from rwtest import RedisServer  # noqa: E402

# Known bugs of the extension whose sequences --skip-known can avoid.
KNOWN = {
    "EXITLATE": "before the keeper took over exits' releases (fixed; t/039 reproduces "
                "it): after pg_terminate_backend a hold of the session stayed in Redis "
                "until its lease when the exit's release did not get through (its "
                "connection dropped, and no new one within the exit's 0.5 s); with this "
                "flag such a hold is waited out until its lease ends (40 s at most) and "
                "counted; for testing older builds",
    "LOSTWARN": "held_release_xact before ac70ab1 (fixed): COMMIT, ROLLBACK and "
                "ROLLBACK TO repeated the WARNING of a lost lock once per run of its xact "
                "holds between other names' (with this flag identical \"was lost\" "
                "warnings of one statement count once); for testing older builds",
    "STACK": "held.c before held_reserve (fixed): a stacked hold (no Redis call) was "
             "pushed without reserving room: more than 8 session holds of a name, or an "
             "xact hold beyond the room the last Redis call reserved (none before the "
             "first), overflowed memory (signal 11); for testing older builds",
}

SESSIONS = 4
CHECK_ALL = 25           # every so many steps, every session's view
LOCK_TIMEOUT = "100ms"
NAMES = ["a", "b", "c{x}%", "d\u00e9\u00fc", "L" * 1024]
NAME_WEIGHTS = [6, 4, 3, 2, 1]
TOO_LONG = "X" * 1025
PREFIX = b"rwlock"


class Failure(Exception):
    pass


class CrashFailure(Failure):
    pass


def encode_name(name):
    b = name.encode("utf-8")
    return b.replace(b"%", b"%25").replace(b"{", b"%7B").replace(b"}", b"%7D")


def hash_key(name):
    return PREFIX + b":{" + encode_name(name) + b"}"


def short(name):
    return name if len(name) <= 12 else "%s..(%d)" % (name[:4], len(name.encode()))


class Driver:
    def __init__(self, args, srv):
        self.args = args
        self.seed = args.seed
        self.rnd = random.Random(args.seed)
        self.srv = srv
        self.r = redis.Redis(port=srv.port)
        self.model = Redis(NAMES)
        known = set(args.skip_known)
        self.sessions = [Session(i, self.model, known) for i in range(SESSIONS)]
        self.conns = [None] * SESSIONS
        self.py = PyHolder(self.model)
        self.pyclient = rw.Client(redis.Redis(port=srv.port), lease=30.0)
        self.history = []
        self.passed = 0
        self.failed = 0
        self.step_no = 0
        self.stats = {}
        self.max_depth = 0
        self.redis_retries = 0
        self.exit_late = 0
        self.sp_counter = 0
        self.control = psycopg2.connect("", application_name="random_api control",
                                        options="-c rwlock.redis_url=%s" % srv.url)
        self.control.autocommit = True
        cur = self.control.cursor()
        cur.execute("CREATE EXTENSION IF NOT EXISTS rwlock")
        cur.execute("SELECT current_setting('shared_preload_libraries') ~ 'rwlock', "
                    "current_setting('max_prepared_transactions')::int")
        self.preloaded, max_prepared = cur.fetchone()
        self.prepared_disabled = max_prepared == 0
        for i in range(SESSIONS):
            self.connect(i)

    # ---- plumbing ----
    def connect(self, i):
        conn = psycopg2.connect(
            "", application_name="random_api S%d" % i,
            options="-c rwlock.redis_url=%s -c lock_timeout=%s" % (self.srv.url, LOCK_TIMEOUT))
        conn.autocommit = True
        # Every notice of a statement: a list would keep only the last 50
        # (psycopg2), and a statement of 150 calls may warn 150 times.
        conn.notices = collections.deque()
        cur = conn.cursor()
        cur.execute("SELECT pg_backend_pid()")
        pid = cur.fetchone()[0]
        cur.execute("SELECT owner FROM redis_connection_info() WHERE current")
        row = cur.fetchone()
        owner = row[0] if row else None
        self.conns[i] = conn
        self.sessions[i].reset(pid, owner)

    def note(self, who, what, expected, observed):
        self.history.append((self.step_no, who, what, repr(expected), observed))
        if self.args.log:
            self.args.log.write("%5d %-3s %s\n        expected %s, got %s\n"
                                % self.history[-1])
        if len(self.history) > 60:
            del self.history[:-40]

    def check(self, ok, msg):
        if ok:
            self.passed += 1
        else:
            self.failed += 1
            raise Failure(msg)

    def sql(self, i, query, params=None):
        """Run query in session i: (rows or None, sqlstate or None, notices)."""
        conn = self.conns[i]
        cur = conn.cursor()
        conn.notices.clear()
        text = cur.mogrify(query, params).decode("utf-8", "replace")
        try:
            cur.execute(query, params)
            rows = cur.fetchall() if cur.description else None
            state = None
        except psycopg2.Error as e:
            if e.pgcode is None:         # the connection is gone
                raise CrashFailure("session S%d (pid %d) lost its connection on %s: %s"
                                   % (i, self.sessions[i].pid, short_sql(text), e))
            rows, state = None, e.pgcode
        notices = list(conn.notices)
        conn.notices.clear()
        return text, rows, state, notices

    def compare(self, who, text, out, rows, state, notices):
        """The answer of a call against the model's Outcome; returns the
        token seen (for a grant) or None."""
        obs = "ERROR %s" % state if state else repr(rows)
        warns = [n for n in notices if n.startswith("WARNING")]
        if warns:
            obs += " + %d WARNING(s)" % len(warns)
        self.note(who, short_sql(text), out, obs)
        others = [n for n in notices if not n.startswith("WARNING")]
        self.check(not others, "unexpected notices %s" % others)
        self.check(state == out.sqlstate,
                   "%s: expected %r, got %s" % (short_sql(text), out, obs))
        expected = out.warnings
        if "LOSTWARN" in self.args.skip_known:
            warns = [w for k, w in enumerate(warns)
                     if "was lost" not in w or w not in warns[:k]]
            expected = [w for k, w in enumerate(expected)
                        if "was lost" not in w or w not in expected[:k]]
        left = list(warns)
        for w in expected:
            match = [n for n in left if w in n]
            if match:
                left.remove(match[0])
            else:
                left = None
                break
        self.check(left == [], "%s: expected warnings %s, got %s"
                   % (short_sql(text), expected, warns))

    def check_token(self, what, out, token):
        if out.token_above is not None:
            self.check(token > out.token_above,
                       "%s: write token %s not above the last write token %d"
                       % (what, token, out.token_above))
        elif out.tokens is not None:
            self.check(token in out.tokens,
                       "%s: read token %s, expected the last write token %s"
                       % (what, token, sorted(out.tokens)))
        else:
            self.check(token == out.stacked_token,
                       "%s: stacked call returned token %s, its hold's is %s"
                       % (what, token, out.stacked_token))

    # ---- checks of views and Redis ----
    def check_held(self, i):
        s = self.sessions[i]
        if s.aborted or self.conns[i] is None:
            return
        text, rows, state, notices = self.sql(
            i, "SELECT name, mode, level, depth, token, lease_state, acquired "
               "FROM redis_held_locks")
        self.check(state is None and not notices,
                   "S%d: redis_held_locks: %s %s" % (i, state, notices))
        got = {}
        for name, mode, level, depth, token, lease, acquired in rows:
            got[(name, mode[0], level)] = (depth, token, lease)
            # acquired: when Redis granted the record, the same in all its
            # rows and for as long as it is held (stacking, upgrades and
            # downgrades keep it).
            r = s.recs.get(name)
            if r is not None:
                if r.acquired is None:
                    r.acquired = acquired
                self.check(acquired == r.acquired, "S%d: %s acquired %s, before %s"
                           % (i, short(name), acquired, r.acquired))
        want = s.holds_rows()
        self.check(got == want, "S%d: redis_held_locks shows %s, the model %s"
                   % (i, fmt_rows(got), fmt_rows(want)))
        for (_, _, _), (depth, _, _) in got.items():
            self.max_depth = max(self.max_depth, depth)

    def check_locks(self):
        if not self.preloaded:
            return
        cur = self.control.cursor()
        pids = [s.pid for s in self.sessions]
        cur.execute("SELECT pid, name, mode, level, token, lease_state FROM redis_locks "
                    "WHERE granted AND pid = ANY(%s)", (pids,))
        got = {}
        for pid, name, mode, level, token, lease in cur.fetchall():
            got[(pid, name, mode[0], level)] = (token, lease)
        want = {}
        for s in self.sessions:
            for (name, mode, level), token in s.locks_rows().items():
                want[(s.pid, name, mode, level)] = token
        self.check(got == want, "redis_locks shows %s, the model %s"
                   % (fmt_rows(got), fmt_rows(want)))

    def redis_state(self):
        pipe = self.r.pipeline(transaction=False)
        for n in NAMES:
            pipe.hgetall(hash_key(n))
            pipe.zcard(hash_key(n) + b":q")
        pipe.time()
        res = pipe.execute()
        sec, us = res[-1]
        now_ms = sec * 1000 + us // 1000
        problems = []
        for k, n in enumerate(NAMES):
            h, qlen = res[2 * k], res[2 * k + 1]
            ls = self.model.locks[n]
            writer = h.get(b"w")
            writer = writer.decode() if writer else None
            readers = set()
            for f, v in h.items():
                if f.startswith(b"r:") and int(v) > now_ms:
                    readers.add(f[2:].decode())
            mw = [o for o, m in ls.holders.items() if m == W]
            mr = {o for o, m in ls.holders.items() if m == R}
            if writer != (mw[0] if mw else None) or readers != mr:
                problems.append("%s: Redis has writer %s readers %s, the model writer %s "
                                "readers %s" % (short(n), writer, sorted(readers),
                                                mw[0] if mw else None, sorted(mr)))
            if h and h.get(b"v") != rw.PROTOCOL_VERSION.encode():
                problems.append("%s: field v is %r" % (short(n), h.get(b"v")))
            if b"f" in h and ls.token_known and int(h[b"f"]) != ls.last_token:
                problems.append("%s: Redis's last token %s, the model's %d"
                                % (short(n), h[b"f"].decode(), ls.last_token))
            if qlen or any(f.startswith(b"i:") for f in h) or b"u" in h:
                problems.append("%s: a waiting writer left behind (queue %d, fields %s)"
                                % (short(n), qlen, sorted(f.decode() for f in h
                                                          if f[:2] in (b"i:", b"u"))))
            # Protocol 3: a holder's newest request is recorded (s:<owner>,
            # docs/protocol.md 4.1); without it renew.lua answers 0.
            unrecorded = sorted(o for o in ls.holders if b"s:" + o.encode() not in h)
            if unrecorded:
                problems.append("%s: holders without an s: field: %s" % (short(n), unrecorded))
        return problems

    def check_lock_info(self):
        """redis_lock_info(name) of every name, as the model has them."""
        cur = self.control.cursor()
        for n in NAMES:
            ls = self.model.locks[n]
            cur.execute("SELECT state, token, writer, readers, waiting "
                        "FROM redis_lock_info(%s)", (n,))
            state, token, writer, readers, waiting = cur.fetchone()
            mw = [o for o, m in ls.holders.items() if m == W]
            mr = sorted(o for o, m in ls.holders.items() if m == R)
            want = ("write" if mw else "read" if mr else "free", mw[0] if mw else None, mr)
            got = (state, writer, sorted(readers or []))
            self.check(got == want, "redis_lock_info(%s) is %s, the model %s"
                       % (short(n), got, want))
            self.check(not waiting, "redis_lock_info(%s) shows waiting %s" % (short(n), waiting))
            if ls.token_kept and ls.token_known and (ls.holders or token):
                self.check(token == ls.last_token, "redis_lock_info(%s): token %s, the "
                           "model's %d" % (short(n), token, ls.last_token))

    def check_redis(self, gone_owner=None):
        """Releases at transaction end, redis_unlock_all and exit are sent
        without waiting for their answers: give Redis a moment. gone_owner:
        a session just terminated (see KNOWN EXITLATE)."""
        deadline = time.monotonic() + 3.0
        tries = 0
        while True:
            problems = self.redis_state()
            if not problems or time.monotonic() > deadline:
                break
            tries += 1
            time.sleep(0.01 if tries < 10 else 0.05)
        if tries:
            self.redis_retries += 1
        if (problems and gone_owner and "EXITLATE" in self.args.skip_known and
                all(gone_owner in p for p in problems)):
            print("random_api: step %d: EXITLATE: the terminated session %s still holds "
                  "in Redis after 3 s: %s; waiting for its lease" % (
                      self.step_no, gone_owner, "; ".join(problems)), flush=True)
            self.exit_late += 1
            deadline = time.monotonic() + 40
            while problems and time.monotonic() < deadline:
                time.sleep(0.5)
                problems = self.redis_state()
        self.check(not problems, "Redis: " + "; ".join(problems))
        self.model.confirmed(time.time())

    def after_step(self, i):
        if i is not None and self.conns[i] is not None:
            self.check_held(i)
        self.check_locks()
        self.check_redis()
        if self.step_no % CHECK_ALL == 0:
            for j in range(SESSIONS):
                self.check_held(j)
            self.check_lock_info()

    # ---- the steps ----
    def pick_name(self):
        return self.rnd.choices(NAMES, NAME_WEIGHTS)[0]

    def wait_turn(self, name):
        """A write lock is not asked for while the readers' turn may run."""
        left = self.model.locks[name].turn_until - time.time()
        if left > 0:
            time.sleep(left)

    def count(self, kind):
        self.stats[kind] = self.stats.get(kind, 0) + 1

    def step_lock(self, i):
        s, rnd = self.sessions[i], self.rnd
        name = self.pick_name()
        mode = W if rnd.random() < 0.4 else R
        level = "session" if rnd.random() < (0.35 if s.in_block else 0.6) else "xact"
        is_try = rnd.random() < 0.5
        wait = None
        if is_try and rnd.random() < 0.3:
            wait = rnd.choice(["20ms", "50ms"])
        x = rnd.random()
        k = 1 if x < 0.8 else rnd.randint(2, 6) if x < 0.95 or not self.args.deep \
            else rnd.randint(100, 150)
        if "STACK" in s.known and not s.safe_to_stack(name, mode, level, k):
            k = 1
            if not s.safe_to_stack(name, mode, level, k):
                return self.step_unlock(i)
        busy = not s.aborted and not s.grantable(name, mode)
        if busy and wait is not None:
            k = 1                  # each busy call waits
        if s.want(name, mode) == W and not s.aborted:
            self.wait_turn(name)
        fn = "redis_%s%slock%s" % ("try_" if is_try else "", mode,
                                   "_xact" if level == "xact" else "")
        args = [name] + ([wait] if wait else [])
        call = "%s(%s)" % (fn, ", ".join(["%s"] * len(args)))
        if is_try:
            # The token of a try's grant, from the view in the same statement
            # (an xact hold outside a block is gone after it).
            q = ("WITH c AS MATERIALIZED (SELECT %s t FROM generate_series(1, %d)) "
                 "SELECT count(*) FILTER (WHERE t), (SELECT max(token) FROM "
                 "redis_held_locks WHERE name = %%s) FROM c" % (call, k))
            params = args + [name]
        elif k == 1:
            q, params = "SELECT %s" % call, args
        else:
            q = "SELECT count(*), min(t), max(t) FROM (SELECT %s t FROM generate_series(1, %d)) s" \
                % (call, k)
            params = args
        t0 = time.time()
        waits = not is_try or wait is not None
        out = s.lock(name, mode, level, is_try, waits, k, t0)
        self.count("%s%s %s%s" % ("try " if is_try else "", mode, level,
                                  " busy" if busy else ""))
        text, rows, state, notices = self.sql(i, q, params)
        if out.reader_mark:
            self.model.reader_waited(name, time.time() + 2.05)
        self.compare("S%d" % i, text, out, rows, state, notices)
        if state:
            return
        if is_try:
            granted, token = rows[0]
            want = k if out.value is True or (k > 1 and out.value) else 0
            self.check(granted == want, "%s: %d of %d granted, expected %d"
                       % (short_sql(text), granted, k, want))
            if granted:
                self.check_token(short_sql(text), out, token)
        else:
            if k == 1:
                token = rows[0][0]
            else:
                n, lo, hi = rows[0]
                self.check(n == k and lo == hi, "%s: %d calls, tokens %s..%s"
                           % (short_sql(text), n, lo, hi))
                token = lo
            self.check_token(short_sql(text), out, token)
        if out.token_above is not None or out.tokens is not None:
            s.granted(name, token, W if out.token_above is not None else R)

    def step_lock_many(self, i):
        """A multi-name call (SPEC 16): 1 to 4 names, duplicates possible;
        the tokens in the array's order (a try's from the view, in the same
        statement), each checked as a single call's."""
        s, rnd = self.sessions[i], self.rnd
        names = [self.pick_name() for _ in range(rnd.randint(1, 4))]
        mode = W if rnd.random() < 0.4 else R
        level = "session" if rnd.random() < (0.35 if s.in_block else 0.6) else "xact"
        is_try = rnd.random() < 0.5
        wait = rnd.choice(["20ms", "50ms"]) if is_try and rnd.random() < 0.3 else None
        if "STACK" in s.known and not all(s.safe_to_stack(n, mode, level, 1) for n in names):
            return self.step_unlock(i)
        if not s.aborted:
            for n in set(names):
                if s.want(n, mode) == W:
                    self.wait_turn(n)
        fn = "redis_%s%slock%s" % ("try_" if is_try else "", mode,
                                   "_xact" if level == "xact" else "")
        call = "%s(%%s::text[]%s)" % (fn, ", %s" if wait else "")
        args = [names] + ([wait] if wait else [])
        if is_try:
            q = ("WITH c AS MATERIALIZED (SELECT %s t) SELECT t, ARRAY(SELECT (SELECT "
                 "max(token) FROM redis_held_locks h WHERE h.name = n) FROM "
                 "unnest(%%s::text[]) WITH ORDINALITY u(n, o) ORDER BY o) FROM c" % call)
            params = args + [names]
        else:
            q, params = "SELECT %s" % call, args
        out, per = s.lock_many(names, mode, level, is_try, not is_try or wait is not None,
                               time.time())
        self.count("many %s%s %s%s" % ("try " if is_try else "", mode, level,
                                       " busy" if out.value is False or out.sqlstate
                                       else ""))
        text, rows, state, notices = self.sql(i, q, params)
        if out.reader_mark:
            self.model.reader_waited(out.busy_name, time.time() + 2.05)
        for n in getattr(out, "maybe_bumped", []):
            # granted and given back in the first round: a new last token
            f = self.r.hget(hash_key(n), "f")
            if f is not None:
                self.check(int(f) >= self.model.locks[n].last_token,
                           "%s: last token of %s went back to %s"
                           % (short_sql(text), short(n), f.decode()))
                self.model.wrote(n, int(f))
        for n in getattr(out, "retaken", []):
            f = self.r.hget(hash_key(n), "f")
            s.recs[n].token = int(f) if f is not None else 0
        self.compare("S%d" % i, text, out, rows, state, notices)
        if state:
            return
        if is_try:
            got, tokens = rows[0]
            self.check(got == out.value, "%s: returned %s, expected %s"
                       % (short_sql(text), got, out.value))
            if not got:
                return
        else:
            tokens = rows[0][0]
        self.check(len(tokens) == len(names), "%s: %d tokens for %d names"
                   % (short_sql(text), len(tokens), len(names)))
        seen = {}
        for name, token in zip(names, tokens):
            self.check(seen.setdefault(name, token) == token,
                       "%s: %s has two tokens, %s and %s"
                       % (short_sql(text), short(name), seen[name], token))
        for name, token in seen.items():
            o = per[name]
            self.check_token(short_sql(text), o, token)
            if o.token_above is not None or o.tokens is not None:
                s.granted(name, token, W if o.token_above is not None else R)

    def step_partial(self, i):
        """A statement that takes k holds and then fails (22012): session
        holds stay, xact holds go with the (sub)transaction, as advisory
        locks do."""
        s, rnd = self.sessions[i], self.rnd
        name = self.pick_name()
        mode = R if rnd.random() < 0.7 else W
        level = "session" if rnd.random() < 0.5 else "xact"
        k = rnd.randint(1, 4)
        if (s.aborted or not s.grantable(name, mode) or
                (name in s.recs and s.recs[name].lost) or
                ("STACK" in s.known and not s.safe_to_stack(name, mode, level, k)) or
                (mode == W and (level == "xact" or s.in_block)) or
                len(self.model.locks[name].expected_read_tokens(time.time())) > 1):
            return self.step_lock(i)     # its token could not be seen
        if s.want(name, mode) == W:
            self.wait_turn(name)
        fn = "redis_%slock%s" % (mode, "_xact" if level == "xact" else "")
        q = ("SELECT CASE WHEN g <= %d THEN %s(%%s) ELSE 1 / (g - g) END "
             "FROM generate_series(1, %d) g" % (k, fn, k + 1))
        now = time.time()
        out = s.lock(name, mode, level, False, True, k, now)
        grant = out
        out = s.error(now)
        out.warnings = grant.warnings + out.warnings
        self.count("partial %s %s" % (mode, level))
        text, rows, state, notices = self.sql(i, q, (name,))
        self.compare("S%d" % i, text, out, rows, state, notices)
        if grant.token_above is not None:
            # A session-level write outside a block: its token, from the view.
            text, rows, state, notices = self.sql(
                i, "SELECT max(token) FROM redis_held_locks WHERE name = %s", (name,))
            self.check_token(short_sql(text), grant, rows[0][0])
            s.granted(name, rows[0][0], W)
        elif grant.tokens is not None:
            s.granted(name, max(grant.tokens), R)    # the read token, unseen

    def step_do(self, i):
        """A PL/pgSQL block takes k holds in its own subtransaction and then
        raises and catches division_by_zero (its xact holds go, its session
        holds stay) or ends (its xact holds move to the enclosing level)."""
        s, rnd = self.sessions[i], self.rnd
        name = self.pick_name()
        mode = R if rnd.random() < 0.6 else W
        level = "session" if rnd.random() < 0.4 else "xact"
        k = rnd.randint(1, 5)
        fails = rnd.random() < 0.6
        if (s.aborted or not s.grantable(name, mode) or
                (name in s.recs and s.recs[name].lost) or
                ("STACK" in s.known and not s.safe_to_stack(name, mode, level, k)) or
                len(self.model.locks[name].expected_read_tokens(time.time())) > 1):
            return self.step_lock(i)
        if s.want(name, mode) == W:
            self.wait_turn(name)
        fn = "redis_%slock%s" % (mode, "_xact" if level == "xact" else "")
        body = "PERFORM %s('%s') FROM generate_series(1, %d);" % (
            fn, name.replace("'", "''"), k)
        if fails:
            body += " PERFORM 1 / 0; EXCEPTION WHEN division_by_zero THEN NULL;"
        q = "DO $$ BEGIN %s END $$" % body
        now = time.time()
        in_block = s.in_block
        s.in_block = True                 # the block's own subtransaction
        s.savepoints.append("<DO>")
        j = len(s.savepoints) - 1
        out = s.lock(name, mode, level, False, True, k, now)
        if fails:
            s.rollback_to(j, now)
            s.savepoints.pop()
        else:
            s.release_sp(j)
        s.in_block = in_block
        s.statement_end(now)
        out.warnings += s.notes
        s.notes = []
        self.count("DO %s %s%s" % (mode, level, " failing" if fails else ""))
        text, rows, state, notices = self.sql(i, q)
        res = Outcome(value=None, warnings=out.warnings)
        self.compare("S%d" % i, text, res, rows, state, notices)
        if out.token_above is not None:
            # The write token: from the view if held still, else from Redis.
            if name in s.recs:
                text, rows, _, _ = self.sql(
                    i, "SELECT max(token) FROM redis_held_locks WHERE name = %s", (name,))
                token = rows[0][0]
            else:
                token = int(self.r.hget(hash_key(name), "f"))
            self.check_token(short_sql(text), out, token)
            s.granted(name, token, W)
        elif out.tokens is not None:
            s.granted(name, max(out.tokens), R)

    def step_cursor(self, i):
        """A cursor of lock calls in a block: each FETCH takes its holds at
        the (sub)transaction level of the FETCH, not of the DECLARE."""
        s, rnd = self.sessions[i], self.rnd
        c = s.cursor
        if c is None:
            name = self.pick_name()
            mode = R if rnd.random() < 0.6 else W
            level = "session" if rnd.random() < 0.4 else "xact"
            n = rnd.randint(3, 10)
            fn = "redis_%slock%s" % (mode, "_xact" if level == "xact" else "")
            q = "DECLARE rc CURSOR FOR SELECT %s(%%s) FROM generate_series(1, %d)" % (fn, n)
            s.cursor = {"name": name, "mode": mode, "level": s.level(), "lock_level": level,
                        "left": n}
            self.count("DECLARE")
            text, rows, state, notices = self.sql(i, q, (name,))
            self.compare("S%d" % i, text, Outcome(value=None), rows, state, notices)
            return
        name, mode, level = c["name"], c["mode"], c["lock_level"]
        k = rnd.randint(1, c["left"]) if c["left"] else 0
        if k and not (s.grantable(name, mode) and
                      not (name in s.recs and s.recs[name].lost) and
                      ("STACK" not in s.known or s.safe_to_stack(name, mode, level, k)) and
                      len(self.model.locks[name].expected_read_tokens(time.time())) == 1):
            return self.step_lock(i)    # a FETCH that would fail or is unsure: later
        if not k or rnd.random() < 0.15:
            s.cursor = None
            self.count("CLOSE")
            text, rows, state, notices = self.sql(i, "CLOSE rc")
            self.compare("S%d" % i, text, Outcome(value=None), rows, state, notices)
            return
        if s.want(name, mode) == W:
            self.wait_turn(name)
        out = s.lock(name, mode, level, False, True, k, time.time())
        c["left"] -= k
        self.count("FETCH")
        text, rows, state, notices = self.sql(i, "FETCH %d FROM rc" % k)
        self.compare("S%d" % i, text, out, rows, state, notices)
        tokens = {t for (t,) in rows}
        self.check(len(rows) == k and len(tokens) == 1, "%s: %d rows, tokens %s"
                   % (text, len(rows), tokens))
        token = tokens.pop()
        self.check_token(text, out, token)
        if out.token_above is not None or out.tokens is not None:
            s.granted(name, token, W if out.token_above is not None else R)

    def step_unlock(self, i):
        s, rnd = self.sessions[i], self.rnd
        held = [n for n, r in s.recs.items() if r.stack]
        name = rnd.choice(held) if held and rnd.random() < 0.85 else self.pick_name()
        depth = len(s.recs[name].stack) if name in s.recs else 0
        k = 1 if rnd.random() < 0.75 else rnd.randint(1, depth + 2)
        if k == 1:
            q = "SELECT redis_unlock(%s)"
        else:
            q = ("SELECT count(*) FILTER (WHERE u) FROM (SELECT redis_unlock(%%s) u "
                 "FROM generate_series(1, %d)) s" % k)
        out = s.unlock(name, k, time.time())
        self.count("unlock")
        text, rows, state, notices = self.sql(i, q, (name,))
        self.compare("S%d" % i, text, out, rows, state, notices)
        if not state:
            self.check(rows[0][0] == out.value, "%s: returned %s, expected %s"
                       % (short_sql(text), rows[0][0], out.value))

    def step_unlock_many(self, i):
        """redis_unlock(text[]): 1 to 4 names, mostly held, duplicates
        possible; a boolean per element of the array."""
        s, rnd = self.sessions[i], self.rnd
        held = [n for n, r in s.recs.items() if r.stack]
        names = [rnd.choice(held) if held and rnd.random() < 0.8 else self.pick_name()
                 for _ in range(rnd.randint(1, 4))]
        out = s.unlock_many(names, time.time())
        self.count("unlock many")
        text, rows, state, notices = self.sql(i, "SELECT redis_unlock(%s::text[])", (names,))
        self.compare("S%d" % i, text, out, rows, state, notices)
        if not state:
            self.check(rows[0][0] == out.value, "%s: returned %s, expected %s"
                       % (short_sql(text), rows[0][0], out.value))

    def step_simple(self, i, q, out_fn, kind, value=False):
        out = out_fn()
        self.count(kind)
        text, rows, state, notices = self.sql(i, q)
        self.compare("S%d" % i, text, out, rows, state, notices)
        if value and not state:
            self.check(rows[0][0] == out.value, "%s: returned %s, expected %s"
                       % (q, rows[0][0], out.value))

    def step_bad_arg(self, i):
        s, rnd = self.sessions[i], self.rnd
        fn = rnd.choice(["redis_wlock", "redis_rlock_xact", "redis_try_wlock",
                         "redis_try_rlock_xact", "redis_unlock"])
        cases = [("NULL", "22004"), ("''", "22023"), ("'%s'" % TOO_LONG, "22023")]
        if fn.startswith("redis_try"):
            cases += [("'a', NULL", "22004"), ("'a', '-1 s'", "22023")]
        # the multi-name forms (redis_unlock's too): a NULL array or
        # element, an empty array
        cases += [("NULL::text[]", "22004"), ("ARRAY['a', NULL]", "22004"),
                  ("'{}'::text[]", "22023"), ("ARRAY['a', '']", "22023")]
        arg, state = rnd.choice(cases)
        q = "SELECT %s(%s)" % (fn, arg)
        self.step_simple(i, q, lambda: s.error(time.time(), state), "bad argument")

    def step_sql(self, i):
        s, rnd = self.sessions[i], self.rnd
        now = time.time
        if s.cursor and not s.aborted and rnd.random() < 0.5:
            return self.step_cursor(i)
        if s.aborted:
            ch = rnd.choices(["rollback", "commit", "rollback_to", "lock", "unlock",
                              "savepoint", "error"], [3, 1, 4 if s.savepoints else 0,
                                                      2, 1, 1, 1])[0]
        else:
            kinds = ["lock", "unlock", "unlock_all", "begin", "commit", "rollback",
                     "savepoint", "rollback_to", "release", "prepare", "error", "bad",
                     "discard"]
            if not s.in_block:
                weights = [40, 14, 2, 10, 0, 0, 0, 0, 0, 0, 1, 2, 1]
            else:
                # Long enough blocks, with savepoints released and rolled back to.
                sp = 1 if s.savepoints else 0
                weights = [25, 6, 1, 0, 2, 1.5, 8, 7 * sp, 6 * sp,
                           0.5 if s.n_xact() or self.prepared_disabled else 0,
                           1.5, 1, 0.5]
            ch = rnd.choices(kinds, weights)[0]
        if ch == "lock":
            x = rnd.random()
            if x < 0.05:
                return self.step_partial(i)
            if x < 0.10:
                return self.step_do(i)
            if x < 0.16 and s.in_block and not s.aborted:
                return self.step_cursor(i)
            if x < 0.30:
                return self.step_lock_many(i)
            return self.step_lock(i)
        if ch == "unlock":
            if rnd.random() < 0.25:
                return self.step_unlock_many(i)
            return self.step_unlock(i)
        if ch == "unlock_all":
            return self.step_simple(i, "SELECT redis_unlock_all()",
                                    lambda: s.unlock_all(now()), "unlock_all", value=True)
        if ch == "begin":
            return self.step_simple(i, "BEGIN", s.begin, "BEGIN")
        if ch in ("commit", "rollback"):
            return self.step_simple(i, ch.upper(), lambda: s.end_block(now()), ch.upper())
        if ch == "savepoint":
            self.sp_counter += 1
            sp = "sp%d" % self.sp_counter
            return self.step_simple(i, "SAVEPOINT " + sp, lambda: s.savepoint(sp),
                                    "SAVEPOINT")
        if ch == "rollback_to":
            j = rnd.randrange(len(s.savepoints))
            return self.step_simple(i, "ROLLBACK TO SAVEPOINT " + s.savepoints[j],
                                    lambda: s.rollback_to(j, now()), "ROLLBACK TO")
        if ch == "release":
            j = rnd.randrange(len(s.savepoints))
            return self.step_simple(i, "RELEASE SAVEPOINT " + s.savepoints[j],
                                    lambda: s.release_sp(j), "RELEASE")
        if ch == "prepare":
            return self.step_simple(i, "PREPARE TRANSACTION 'random_api'",
                                    lambda: s.prepare(now(), self.prepared_disabled),
                                    "PREPARE")
        if ch == "error":
            return self.step_simple(i, "SELECT 1/0", lambda: s.error(now()), "error")
        if ch == "bad":
            return self.step_bad_arg(i)
        if ch == "discard":
            return self.step_simple(i, "DISCARD ALL", lambda: s.discard_all(now()),
                                    "DISCARD ALL")
        raise AssertionError(ch)

    def step_terminate(self):
        i = self.rnd.randrange(SESSIONS)
        s = self.sessions[i]
        old_owner = s.owner
        cur = self.control.cursor()
        cur.execute("SELECT pg_terminate_backend(%s)", (s.pid,))
        self.count("terminate")
        deadline = time.monotonic() + 10
        while True:
            cur.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = %s", (s.pid,))
            if cur.fetchone()[0] == 0:
                break
            self.check(time.monotonic() < deadline,
                       "S%d (pid %d) still there 10 s after pg_terminate_backend" % (i, s.pid))
            time.sleep(0.01)
        try:
            self.conns[i].close()
        except psycopg2.Error:
            pass
        s.terminated(time.time())
        self.note("ctl", "pg_terminate_backend(S%d pid %d)" % (i, s.pid), "gone", "gone")
        self.check_redis(old_owner)  # every hold of the session is gone from Redis
        self.connect(i)
        self.check(s.owner is not None and s.owner != old_owner,
                   "S%d: owner id %s after reconnecting (was %s)" % (i, s.owner, old_owner))

    def step_forget(self):
        """Redis loses a lock (an eviction, a restart that lost the data
        set): its holders are told at their next call on it; redis_renew()
        tells each SQL session at once."""
        name = self.pick_name()
        holders = [i for i, s in enumerate(self.sessions) if name in s.recs]
        if any(self.sessions[i].aborted for i in holders):
            return
        self.count("Redis loses a lock")
        self.r.delete(hash_key(name), hash_key(name) + b":q")
        self.model.forget(name)
        self.note("ctl", "DEL %s" % short(name), "", "")
        for i in holders:
            self.sessions[i].lose(name)
        if name in self.py.locks:
            lk, mode, _ = self.py.locks[name]
            self.py.locks[name] = (lk, mode, True)
        for i in holders:
            s = self.sessions[i]
            out = s.renew()
            text, rows, state, notices = self.sql(i, "SELECT redis_renew()")
            self.compare("S%d" % i, text, out, rows, state, notices)
            self.check(rows[0][0] == out.value, "%s: returned %s, expected %s"
                       % (text, rows[0][0], out.value))

    def step_upgrade_conflict(self):
        """Two sessions that hold the read lock both ask for the write lock:
        A with redis_try_wlock(name, '1s') (in a thread), B once A waits.
        B is the second to ask: 40P01 at once (false from a try form); A
        then gets the lock if B's error let go of B's read holds and nobody
        else holds the name, else false when its second has run out."""
        rnd = self.rnd
        cands = []
        for n in NAMES:
            readers = [i for i, s in enumerate(self.sessions)
                       if not s.aborted and n in s.recs and s.recs[n].redis_mode == R
                       and not s.recs[n].lost]
            if len(readers) >= 2:
                cands.append((n, readers))
        if not cands:
            return False
        name, readers = rnd.choice(cands)
        a, b = rnd.sample(readers, 2)
        sa, sb = self.sessions[a], self.sessions[b]
        a_level = rnd.choice(["session", "xact"])
        b_level = rnd.choice(["session", "xact"])
        b_try = rnd.random() < 0.3
        self.count("upgrade conflict")
        self.wait_turn(name)
        qa = ("WITH c AS MATERIALIZED (SELECT redis_try_wlock%s(%%s, '1s') t) SELECT t, "
              "(SELECT max(token) FROM redis_held_locks WHERE name = %%s) FROM c"
              % ("_xact" if a_level == "xact" else ""))
        res = {}

        def run_a():
            t = time.monotonic()
            res["a"] = self.sql(a, qa, (name, name))
            res["a_s"] = time.monotonic() - t

        th = threading.Thread(target=run_a)
        th.start()
        # B asks once A waits (its first try made it the upgrader).
        cur = self.control.cursor()
        deadline = time.monotonic() + 0.8
        while time.monotonic() < deadline:
            cur.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s",
                        (sa.pid,))
            if cur.fetchone()[0] == "Extension":
                break
            time.sleep(0.005)
        fb = "redis_%swlock%s" % ("try_" if b_try else "", "_xact" if b_level == "xact" else "")
        qb = "SELECT %s(%%s%s)" % (fb, ", '50ms'" if b_try else "")
        out_b = sb.lock(name, W, b_level, b_try, True, 1, time.time())
        if not b_try:
            out_b.sqlstate = "40P01"            # not 55P03: it does not wait
        text_b, rows_b, state_b, notices_b = self.sql(b, qb, (name,))
        th.join(10)
        self.check(not th.is_alive(), "S%d: redis_try_wlock(%s, '1s') still running after "
                   "10 s" % (a, short(name)))
        text_a, rows_a, state_a, notices_a = res["a"]
        if state_b == "55P03" and res["a_s"] < 0.15:
            # A's first try came after B's: A was the second (false at once).
            self.count("upgrade conflict, order swapped")
            state_b = "40P01"
        self.compare("S%d" % b, text_b, out_b, rows_b, state_b, notices_b)
        if b_try:
            self.check(rows_b[0][0] is False, "%s: %s, expected false" % (text_b, rows_b))
        out_a = sa.lock(name, W, a_level, True, True, 1, time.time())
        self.compare("S%d" % a, text_a, out_a, rows_a, state_a, notices_a)
        got, token = rows_a[0]
        self.check(got == out_a.value, "%s: %s, expected %s" % (short_sql(text_a), got,
                                                                out_a.value))
        if got:
            self.check_token(short_sql(text_a), out_a, token)
            sa.granted(name, token, W)
        return True

    def step_python(self):
        rnd, py = self.rnd, self.py
        if py.locks and rnd.random() < 0.5:
            name = rnd.choice(sorted(py.locks))
            lk, mode, lost = py.locks[name]
            if lost:
                out = Outcome(value=False)
                got = lk.release()
                del py.locks[name]
                what = "py release(%s) of a lost lock" % short(name)
            elif mode == W and rnd.random() < 0.25:
                out = py.release(name, lk.owner, time.time(), keep_read=True)
                got = lk.downgrade()
                py.locks[name] = (lk, R, False)
                what = "py downgrade(%s)" % short(name)
            else:
                out = py.release(name, lk.owner, time.time())
                got = lk.release()
                del py.locks[name]
                what = "py release(%s)" % short(name)
            self.count(what.split("(")[0])
            self.note("py", what, out, got)
            self.check(got is out.value, "%s returned %s" % (what, got))
            return
        name = self.pick_name()
        if name in py.locks:
            return
        mode = W if rnd.random() < 0.4 else R
        lk = (self.pyclient.write_lock if mode == W else self.pyclient.read_lock)(name)
        how = rnd.choices(["try0", "try", "acquire"], [5, 2, 3])[0]
        wait = {"try0": 0.0, "try": 0.03, "acquire": 0.1}[how]
        if mode == W:
            self.wait_turn(name)
        out = py.acquire(name, lk.owner, mode, time.time(), wait)
        self.count("py %s %s%s" % (how, mode, "" if out.value else " busy"))
        if how == "acquire":
            try:
                lk.acquire(timeout=wait)
                got = True
            except rw.LockTimeout:
                got = False
        else:
            got = lk.try_acquire(wait)
        if out.reader_mark:
            self.model.reader_waited(name, time.time() + 2.05)
        what = "py %s %s(%s)" % (how, mode, short(name))
        self.note("py", what, out, "%s token %s" % (got, lk.token))
        self.check(got == out.value, "%s: %s, expected %s" % (what, got, out.value))
        if got:
            py.locks[name] = (lk, mode, False)
            self.check_token(what, out, lk.token)
            if mode == W:
                self.model.wrote(name, lk.token)

    def step(self):
        self.step_no += 1
        x = self.rnd.random()
        if x < 0.004:
            self.step_terminate()
            i = None
        elif x < 0.004 + self.args.forget:
            self.step_forget()
            i = None
        elif x < 0.019 + self.args.forget and self.step_upgrade_conflict():
            i = None
        elif x < 0.10:
            self.step_python()
            i = None
        else:
            i = self.rnd.randrange(SESSIONS)
            self.step_sql(i)
        self.after_step(i)

    def finish(self):
        """Everything released at the end: the holds go, Redis is empty of holders."""
        for lk, _, _ in list(self.py.locks.values()):
            lk.release()
        for name, (lk, _, lost) in list(self.py.locks.items()):
            if not lost:
                self.model.set_mode(name, lk.owner, None, time.time())
        self.py.locks.clear()
        for i, s in enumerate(self.sessions):
            if s.in_block:
                self.sql(i, "ROLLBACK")
                s.end_block(time.time())
            out = s.unlock_all(time.time())
            text, rows, state, notices = self.sql(i, "SELECT redis_unlock_all()")
            self.compare("S%d" % i, text, out, rows, state, notices)
            for name in list(s.recs):      # lost xact-free records are gone too
                self.check(False, "S%d still has %s at the end" % (i, short(name)))
        self.check_redis()
        for ls in self.model.locks.values():
            self.check(not ls.holders, "the model still has holders of %s" % short(ls.name))
        for c in self.conns + [self.control]:
            c.close()
        self.pyclient.close() if hasattr(self.pyclient, "close") else None


def short_sql(text):
    return text if len(text) < 160 else text[:100] + "...(%d chars)" % len(text)


def fmt_rows(d):
    return "{%s}" % ", ".join("%s: %s" % (tuple(short(x) if isinstance(x, str) else x
                                               for x in k), v)
                              for k, v in sorted(d.items(), key=repr))


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--seed", type=int, default=None)
    ap.add_argument("--steps", type=int, default=int(os.environ.get("RANDOM_API_STEPS", "3000")))
    ap.add_argument("--log", type=argparse.FileType("w"), metavar="FILE",
                    help="write every step to FILE")
    ap.add_argument("--progress", type=int, default=0, metavar="N",
                    help="print a line every N steps")
    ap.add_argument("--no-deep", dest="deep", action="store_false",
                    help="no statements of 100-150 stacked calls")
    ap.add_argument("--forget", type=float, default=0.005,
                    help="share of steps where Redis loses a lock (0: never)")
    ap.add_argument("--skip-known", action="append", default=[], choices=sorted(KNOWN),
                    help="avoid the sequences of a known bug")
    args = ap.parse_args()
    if args.seed is None:
        args.seed = random.SystemRandom().randrange(1, 10 ** 6)
    for k in args.skip_known:
        print("random_api: avoiding known bug %s: %s" % (k, KNOWN[k]))
    print("random_api: seed %d, %d steps%s" % (args.seed, args.steps,
                                               "" if args.deep else ", no deep stacks"))
    srv = RedisServer(int(os.environ.get("RWLOCK_RANDOM_REDIS_PORT", "6393")),
                      prefix="rwlock-random-")
    t0 = time.monotonic()
    d = None
    rc = 0
    try:
        d = Driver(args, srv)
        if not d.preloaded:
            print("random_api: rwlock is not in shared_preload_libraries: redis_locks "
                  "is not checked")
        while d.step_no < args.steps:
            d.step()
            if args.progress and d.step_no % args.progress == 0:
                print("random_api: step %d, %.0f s, %d passed" % (
                    d.step_no, time.monotonic() - t0, d.passed), flush=True)
        d.finish()
    except Failure as e:
        rc = 1
        print("random_api: FAILED at step %d (seed %d): %s" % (d.step_no, args.seed, e))
        print("random_api: replay: test/random_api.py --seed %d --steps %d%s%s"
              % (args.seed, d.step_no, "" if args.deep else " --no-deep",
                 "".join(" --skip-known " + k for k in args.skip_known)))
        print("random_api: the last steps (step, who, what, expected, observed):")
        for h in d.history[-30:]:
            print("  %5d %-3s %s\n        expected %s, got %s" % h)
        if isinstance(e, CrashFailure):
            print("random_api: a backend died: the server log says why")
    except Exception:
        rc = 1
        traceback.print_exc()
        if d is not None:
            print("random_api: error at step %d (seed %d)" % (d.step_no, args.seed))
    finally:
        srv.stop()
    if d is not None:
        el = time.monotonic() - t0
        print("random_api: %d steps in %.1f s (%.0f/s), deepest stack %d, %d Redis checks "
              "waited for a release" % (d.step_no, el, d.step_no / max(el, 1e-9),
                                        d.max_depth, d.redis_retries))
        print("random_api: steps: " + ", ".join("%s %d" % kv for kv in sorted(d.stats.items())))
        if d.exit_late:
            print("random_api: EXITLATE: %d terminated sessions' holds outlived them "
                  "(released by their leases)" % d.exit_late)
        print("random_api: %d passed, %d failed" % (d.passed, d.failed))
    return rc


if __name__ == "__main__":
    sys.exit(main())
