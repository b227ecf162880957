"""api_model.py: the executable model of rwlock's SQL API that
test/random_api.py drives the extension against.

What it models (SPEC sections 2, 3, 5; README "Functions", docs/functions.md):
- each SQL session's holds: the session-level stack of modes per name
  (redis_unlock pops the most recent), the xact-level holds with the
  (sub)transaction nest level that took them, the token of the session's
  hold in Redis, and what Redis has for the session (the strongest mode
  held, at either level);
- the session's transaction state: autocommit, in a block, aborted (an
  error, 25P02 until ROLLBACK / ROLLBACK TO), the stack of savepoints;
- each lock in Redis: its holders by owner id (SQL sessions and the Python
  client's Lock objects) and mode, the last write token, and the readers'
  mark and turn of the protocol (docs/protocol.md 3.3: a reader waiting for
  a writer leaves a 2 s mark; if the writer leaves while it is live,
  writers wait up to 100 ms for the readers' turn). A reader that gives up
  withdraws its mark (MARKS_WITHDRAWN, the protocol since issue 27.18), so
  in this single-threaded driver no turn ever starts, and a write lock
  asked for just after a writer left (readers having given up meanwhile)
  must be granted. With MARKS_WITHDRAWN false (older builds) the turn is
  the only timing-dependent rule: the model knows when it may be running,
  and the driver does not ask for a write lock then.

Multi-name calls (lock_many): the distinct names in the canonical order,
each as a single call; at the first busy name the call's own holds are
given back and it fails (false or 55P03).

Rules: a read is granted when no other owner holds the write lock; a write
when no other owner holds anything; an acquisition covered by what Redis
has for the session (write covers read) is stacked: no Redis call, the
token of the session's hold. A write grant returns a token larger than every
earlier write token of the name; a read grant the last write token (0 if
none). Only changes of what Redis has for a session go to Redis: a release
keeps the read lock ("r") when read holds remain after the last write hold.

The model only predicts: Session.lock() and friends return what the call
must answer and apply the call's effect to the model's state.
"""

W, R = "w", "r"
RANK = {None: 0, R: 1, W: 2}
KEEP_TOKEN_S = 600.0     # a freed lock keeps its token that long at least
TURN_S = 0.100           # the readers' turn (release.lua READER_TURN_MS)
MARK_S = 2.0             # a waiting reader's mark (RW_INTENT_MS)
MARKS_WITHDRAWN = True   # a reader that gives up takes its mark back


def stronger(a, b):
    return a if RANK[a] >= RANK[b] else b


class LockState:
    """One name in Redis."""

    def __init__(self, name):
        self.name = name
        self.holders = {}        # owner id -> W or R
        self.last_token = 0      # f
        self.token_known = True  # False: the hash may have expired (idle > keep)
        self.token_kept = True   # False: Redis lost the hash (its field f) since
        self.touched = 0.0       # when a holder last left or came
        self.mark_until = None   # upper bound of a waiting reader's mark (rw)
        self.turn_pending = False  # a writer left while the mark may have been live
        self.turn_until = 0.0    # the readers' turn may run until then

    def others(self, owner):
        return {o: m for o, m in self.holders.items() if o != owner}

    def grantable(self, owner, mode):
        oth = self.others(owner)
        if mode == R:
            return W not in oth.values()
        return not oth

    def expected_read_tokens(self, now):
        if not self.token_kept:
            return {0}
        if self.token_known and now - self.touched < KEEP_TOKEN_S - 30:
            return {self.last_token}
        return {self.last_token, 0}


class Redis:
    """Every lock the run uses, as Redis must have them."""

    def __init__(self, names):
        self.locks = {n: LockState(n) for n in names}

    def set_mode(self, name, owner, mode, now):
        """owner now has mode (None: nothing) on name in Redis."""
        ls = self.locks[name]
        old = ls.holders.get(owner)
        if old == mode:
            return
        if old == W:
            # The writer leaves (a release or a downgrade): a live mark of a
            # waiting reader starts the readers' turn.
            if ls.mark_until is not None and now < ls.mark_until:
                ls.turn_pending = True
            ls.mark_until = None
        elif old == R and mode is None and W not in ls.others(owner).values():
            ls.mark_until = None     # release.lua: no writer holds or waits
        if mode is None:
            del ls.holders[owner]
        else:
            ls.holders[owner] = mode
        ls.touched = now

    def forget(self, name):
        """Redis lost the lock's keys (a restart that lost the data set, an
        eviction): its holders' holds are lost, a read gets token 0 until
        the next write, whose token is still above every earlier one."""
        ls = self.locks[name]
        lost = dict(ls.holders)
        ls.holders.clear()
        ls.token_kept = False
        ls.mark_until = None
        ls.turn_pending = False
        return lost

    def wrote(self, name, token):
        """A write grant's token, seen."""
        ls = self.locks[name]
        ls.last_token = max(ls.last_token, token)
        ls.token_kept = ls.token_known = True

    def reader_waited(self, name, until):
        """A reader waited for a writer and gave up (until: its mark's end
        at the latest)."""
        if MARKS_WITHDRAWN:
            return
        ls = self.locks[name]
        ls.mark_until = until if ls.mark_until is None else max(ls.mark_until, until)

    def confirmed(self, now):
        """Redis was seen to have every release sent so far."""
        for ls in self.locks.values():
            if ls.turn_pending:
                ls.turn_pending = False
                ls.turn_until = now + TURN_S + 0.05


class Outcome:
    """What one call answers: value (a token, true/false, a count) or the
    SQLSTATE of its error, and the WARNINGs it gives (substrings)."""

    def __init__(self, value=None, sqlstate=None, warnings=(), token_above=None,
                 tokens=None, sleeps=0.0):
        self.value = value
        self.sqlstate = sqlstate
        self.warnings = list(warnings)
        self.token_above = token_above   # a new write token must exceed it
        self.tokens = tokens             # a read token: one of these
        self.sleeps = sleeps
        self.reader_mark = False         # a reader waited: it left a mark
        self.stacked_token = None        # a stacked call: its hold's token

    def __repr__(self):
        if self.sqlstate:
            return "ERROR %s" % self.sqlstate
        s = repr(self.value)
        if self.token_above is not None:
            s = "token > %d" % self.token_above
        elif self.tokens is not None:
            s = "token in %s" % sorted(self.tokens)
        if self.warnings:
            s += " + %d WARNING(s)" % len(self.warnings)
        return s


class Rec:
    """A session's holds of one name."""

    def __init__(self):
        self.stack = []          # session-level modes, oldest first
        self.xact = []           # (mode, nest level)
        self.token = 0
        self.redis_mode = None
        self.lost = False        # Redis lost it; the session was told
        self.acquired = None     # as redis_held_locks showed it: kept while held

    def level_mode(self, level):
        modes = self.stack if level == "session" else [m for m, _ in self.xact]
        return W if W in modes else R if R in modes else None

    def wanted(self):
        return stronger(self.level_mode("session"), self.level_mode("xact"))

    def empty(self):
        return not self.stack and not self.xact


NOT_HELD = "you don't own a session-level hold of Redis lock"


def LOST(name):
    return 'Redis lock "%s" was lost' % name


class Session:
    """One SQL session as the model has it."""

    def __init__(self, idx, redis, known_bugs=()):
        self.idx = idx
        self.redis = redis
        self.known = set(known_bugs)
        self.reset(None, None)

    def reset(self, pid, owner):
        self.pid = pid
        self.owner = owner
        self.recs = {}
        self.in_block = False
        self.aborted = False
        self.savepoints = []
        # For avoiding the known crash STACK (held.c before its fix): the
        # room reserved for xact holds, as held_reserve_xact grows it.
        self.cap_xact = 0
        self.notes = []          # warnings of the call in progress
        self.cursor = None       # an open cursor of lock calls: its dict

    # ---- state ----
    def level(self):
        return 1 + len(self.savepoints)

    def n_xact(self):
        return sum(len(r.xact) for r in self.recs.values())

    def rec(self, name):
        return self.recs.get(name)

    def holds_rows(self):
        """redis_held_locks: {(name, mode, level): (depth, token, lease_state)}."""
        rows = {}
        for name, r in self.recs.items():
            for level, modes in (("session", r.stack), ("xact", [m for m, _ in r.xact])):
                for m in (W, R):
                    c = modes.count(m)
                    if c:
                        rows[(name, m, level)] = (c, r.token, "lost" if r.lost else "held")
        return rows

    def locks_rows(self):
        """redis_locks for this session: {(name, mode, level): (token,
        lease_state)}: every record was published when Redis granted it."""
        rows = {}
        for name, r in self.recs.items():
            for level in ("session", "xact"):
                m = r.level_mode(level)
                if m:
                    rows[(name, m, level)] = (r.token, "lost" if r.lost else "held")
        return rows

    def outcome(self, **kw):
        """An Outcome with the warnings noted meanwhile."""
        out = Outcome(**kw)
        out.warnings = self.notes + out.warnings
        self.notes = []
        return out

    def _sync(self, name, now):
        """Bring Redis in line with the holds left; forget an empty record."""
        r = self.recs[name]
        want = r.wanted()
        if r.lost:
            self.notes.append(LOST(name))    # Redis has nothing of it to release
        elif RANK[want] < RANK[r.redis_mode]:
            self.redis.set_mode(name, self.owner, want, now)
            r.redis_mode = want
        if r.empty():
            del self.recs[name]

    # ---- what a call would do, for the generator ----
    def would_go_to_redis(self, name, mode):
        r = self.recs.get(name)
        return r is None or r.lost or RANK[r.redis_mode] < RANK[mode]

    def want(self, name, mode):
        """The mode asked of Redis for a call of mode: what the record will
        hold (a lost record takes again all it holds)."""
        r = self.recs.get(name)
        return stronger(mode, r.wanted()) if r is not None else mode

    def grantable(self, name, mode):
        if not self.would_go_to_redis(name, mode):
            return True
        return self.redis.locks[name].grantable(self.owner, self.want(name, mode))

    def safe_to_stack(self, name, mode, level, k):
        """Whether k holds of name at level in one statement stay clear of
        the known crash STACK (held.c before its fix: room is reserved only
        by a call that goes to Redis: 8 session holds per record, then 16,
        32... xact holds per backend, none before the first such call)."""
        r = self.recs.get(name)
        go = self.would_go_to_redis(name, mode)
        if level == "session":
            return (len(r.stack) if r else 0) + k <= 8
        cap, n = self.cap_xact, self.n_xact()
        if go and n >= cap:
            cap = max(16, 2 * cap)
        return n + k <= cap

    # ---- calls ----
    def abort(self, now):
        """An error: the (sub)transaction of the current level aborts and its
        xact holds go; outside a block, the statement's."""
        lvl = self.level() if self.in_block else 1
        self._release_xact(lvl, now)
        if self.in_block:
            self.aborted = True

    def _release_xact(self, level, now):
        for name in list(self.recs):
            r = self.recs[name]
            kept = [(m, lv) for m, lv in r.xact if lv < level]
            if len(kept) < len(r.xact):
                r.xact = kept
                self._sync(name, now)

    def statement_end(self, now):
        """Outside a block a statement is its own transaction."""
        if not self.in_block:
            self._release_xact(1, now)

    def lock(self, name, mode, level, is_try, waits, k, now):
        """k calls of one lock function in one statement. Returns the
        Outcome (for k > 1: the count granted, with the token of each)."""
        if self.aborted:
            return Outcome(sqlstate="25P02")
        r = self.recs.get(name)
        out = None
        if r is not None and r.lost:
            # Told once more, and taken again in Redis.
            self.notes.append(LOST(name))
            r.redis_mode = None
            r.acquired = None        # a new hold, a new time
        if self.would_go_to_redis(name, mode):
            # held_reserve_xact, for the STACK avoidance
            if self.n_xact() >= self.cap_xact:
                self.cap_xact = max(16, 2 * self.cap_xact)
            ls = self.redis.locks[name]
            want = self.want(name, mode)
            if not ls.grantable(self.owner, want):
                if r is not None and r.lost and is_try:
                    self.notes += [LOST(name)] * (k - 1)   # each call is told
                if is_try:
                    self.statement_end(now)
                    out = self.outcome(value=False if k == 1 else 0)
                else:
                    self.abort(now)
                    out = self.outcome(sqlstate="55P03")
                # A reader that waits leaves a mark (the driver dates it).
                out.reader_mark = want == R and waits
                return out
            if r is None:
                r = self.recs[name] = Rec()
            if want == W:
                out = self.outcome(value=True if is_try else None, token_above=ls.last_token)
            else:
                out = self.outcome(value=True if is_try else None,
                                   tokens=ls.expected_read_tokens(now))
            self.redis.set_mode(name, self.owner, want, now)
            r.redis_mode = want
            r.lost = False
            # r.token is set by granted() once the driver has the token.
        else:
            out = self.outcome(value=True if is_try else r.token)
            out.stacked_token = r.token
        for _ in range(k):
            if level == "session":
                r.stack.append(mode)
            else:
                r.xact.append((mode, self.level() if self.in_block else 1))
        if k > 1:
            out.value = k
        self.statement_end(now)
        out.warnings += self.notes
        self.notes = []
        return out

    def lock_many(self, names, mode, level, is_try, waits, now):
        """One call of a multi-name form (SPEC 16: redis_wlock(text[]) and
        friends). The distinct names are taken in the canonical order (their
        UTF-8 bytes, docs/protocol.md 19), each exactly as lock() takes one
        (stacking, a lost record taken again); at the first busy one, the
        holds this call took are given back (popped, Redis brought in line:
        the session's earlier holds stay) and the call answers false (a
        try) or 55P03. Returns (Outcome, {name: the name's Outcome}) with an
        Outcome per name taken (token_above, tokens or stacked_token)."""
        if self.aborted:
            return Outcome(sqlstate="25P02"), {}
        lvl = self.level() if self.in_block else 1
        per, taken = {}, []
        busy = None
        order = sorted(set(names), key=lambda n: n.encode("utf-8"))
        for name in order:
            r = self.recs.get(name)
            if r is not None and r.lost:
                self.notes.append(LOST(name))
                r.redis_mode = None
                r.acquired = None
            if self.would_go_to_redis(name, mode):
                if self.n_xact() >= self.cap_xact:
                    self.cap_xact = max(16, 2 * self.cap_xact)
                ls = self.redis.locks[name]
                want = self.want(name, mode)
                if not ls.grantable(self.owner, want):
                    busy = (name, want)
                    break
                if r is None:
                    r = self.recs[name] = Rec()
                if want == W:
                    per[name] = Outcome(value=True, token_above=ls.last_token)
                else:
                    per[name] = Outcome(value=True, tokens=ls.expected_read_tokens(now))
                self.redis.set_mode(name, self.owner, want, now)
                r.redis_mode = want
                r.lost = False
            else:
                per[name] = Outcome(value=True)
                per[name].stacked_token = r.token
            if level == "session":
                r.stack.append(mode)
            else:
                r.xact.append((mode, lvl))
            taken.append(name)
        if busy is None:
            out = self.outcome(value=True if is_try else None)
            self.statement_end(now)
            out.warnings += self.notes
            self.notes = []
            return out, per
        # A write grant that is given back raised its name's last token all
        # the same (the driver reads it from Redis): the names this call took
        # in Redis before the busy one, and those after it that the first
        # round (held.c: every name tried at once) was granted and gave back.
        bumped = [n for n in taken if per[n].token_above is not None]
        bumped += [n for n in order[order.index(busy[0]) + 1:]
                   if mode == W and self.redis.locks[n].grantable(self.owner, W)]
        # All or none: what this call took goes back, most recent first.
        for name in reversed(taken):
            r = self.recs[name]
            if level == "session":
                r.stack.pop()
            else:
                r.xact.pop()
            self._sync(name, now)
        if is_try:
            self.statement_end(now)
            out = self.outcome(value=False)
        else:
            self.abort(now)
            out = self.outcome(sqlstate="55P03")
        out.reader_mark = busy[1] == R and waits
        out.busy_name = busy[0]
        out.maybe_bumped = bumped
        # A name held before the call that the call took in Redis (an
        # upgrade, a lost hold taken again) keeps its earlier holds, with
        # the token of that grant: the name's last token in Redis.
        out.retaken = [n for n in taken if n in self.recs and
                       (per[n].token_above is not None or per[n].tokens is not None)]
        return out, {}

    def granted(self, name, token, mode):
        """The driver saw the token of a Redis grant (checked by then)."""
        r = self.recs.get(name)
        if r is not None:
            r.token = token
        if mode == W:
            self.redis.wrote(name, token)

    def unlock(self, name, k, now):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        ok, warnings = 0, []
        for _ in range(k):
            r = self.recs.get(name)
            if r is None or not r.stack:
                warnings.append(NOT_HELD)
                continue
            r.stack.pop()
            if not r.lost:
                ok += 1
            self._sync(name, now)
        self.statement_end(now)
        return self.outcome(value=(ok == 1) if k == 1 else ok, warnings=warnings)

    def unlock_many(self, names, now):
        """redis_unlock(text[]): each distinct name once, as unlock(name, 1),
        in the reverse canonical order (the warnings for names not held
        first); the answer per element of the array."""
        if self.aborted:
            return Outcome(sqlstate="25P02")
        order = sorted(set(names), key=lambda n: n.encode("utf-8"), reverse=True)
        warnings = [NOT_HELD for n in order
                    if self.recs.get(n) is None or not self.recs[n].stack]
        ok = {}
        for name in order:
            r = self.recs.get(name)
            ok[name] = False
            if r is None or not r.stack:
                continue
            r.stack.pop()
            ok[name] = not r.lost
            self._sync(name, now)
        self.statement_end(now)
        return self.outcome(value=[ok[n] for n in names], warnings=warnings)

    def unlock_all(self, now):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        n = 0
        for name in list(self.recs):
            n += len(self.recs[name].stack)
            if self.recs[name].stack:
                self.recs[name].stack = []
                self._sync(name, now)
        self.statement_end(now)
        return self.outcome(value=n)

    def discard_all(self, now):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        if self.in_block:
            self.abort(now)
            return self.outcome(sqlstate="25001")
        out = self.unlock_all(now)
        out.value = None
        return out

    def begin(self):
        self.in_block, self.aborted, self.savepoints = True, False, []
        return Outcome(value=None)

    def end_block(self, now):
        """COMMIT, ROLLBACK (and COMMIT of an aborted block)."""
        self.cursor = None
        self._release_xact(1, now)
        self.in_block, self.aborted, self.savepoints = False, False, []
        return self.outcome(value=None)

    def savepoint(self, sp):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        self.savepoints.append(sp)
        return Outcome(value=None)

    def rollback_to(self, j, now):
        """ROLLBACK TO the j-th savepoint: its level and deeper abort, it
        stays (restarted)."""
        self._release_xact(j + 2, now)
        if self.cursor and self.cursor["level"] >= j + 2:
            self.cursor = None               # declared in what rolled back
        del self.savepoints[j + 1:]
        self.aborted = False
        return self.outcome(value=None)

    def release_sp(self, j):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        for r in self.recs.values():
            r.xact = [(m, min(lv, j + 1)) for m, lv in r.xact]
        if self.cursor:
            self.cursor["level"] = min(self.cursor["level"], j + 1)
        del self.savepoints[j:]
        return Outcome(value=None)

    def error(self, now, sqlstate="22012"):
        if self.aborted:
            return Outcome(sqlstate="25P02")
        self.abort(now)
        return self.outcome(sqlstate=sqlstate)

    def prepare(self, now, prepared_disabled):
        """PREPARE TRANSACTION: refused with xact holds (0A000); else, with
        max_prepared_transactions = 0, 55000. Either way the block ends."""
        assert self.in_block and not self.aborted
        state = "0A000" if self.n_xact() else "55000"
        out = self.end_block(now)
        out.sqlstate, out.value = state, None
        return out

    def terminated(self, now):
        for name in list(self.recs):
            r = self.recs[name]
            r.stack, r.xact = [], []
            self._sync(name, now)
        self.notes = []
        self.cursor = None
        self.in_block, self.aborted, self.savepoints = False, False, []


    def lose(self, name):
        """Redis lost name: the session's record of it is lost."""
        r = self.recs.get(name)
        if r is not None and r.redis_mode is not None:
            r.lost = True

    def renew(self):
        """redis_renew(): every record held in Redis renewed, the lost
        ones reported."""
        if self.aborted:
            return Outcome(sqlstate="25P02")
        n, warnings = 0, []
        for name, r in self.recs.items():
            if r.redis_mode is None:
                continue
            if r.lost:
                warnings.append(LOST(name))
            else:
                n += 1
        return Outcome(value=n, warnings=warnings)


class PyHolder:
    """The Python client: at most one Lock object per name."""

    def __init__(self, redis):
        self.redis = redis
        self.locks = {}          # name -> (Lock object, mode)

    def acquire(self, name, owner, mode, now, wait):
        ls = self.redis.locks[name]
        if not ls.grantable(owner, mode):
            out = Outcome(value=False)
            out.reader_mark = mode == R and wait
            return out
        if mode == W:
            out = Outcome(value=True, token_above=ls.last_token)
        else:
            out = Outcome(value=True, tokens=ls.expected_read_tokens(now))
        self.redis.set_mode(name, owner, mode, now)
        return out

    def release(self, name, owner, now, keep_read=False):
        self.redis.set_mode(name, owner, R if keep_read else None, now)
        return Outcome(value=True)
