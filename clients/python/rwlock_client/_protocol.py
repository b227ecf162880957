"""What the synchronous and the asyncio clients share: the protocol's values,
keys, scripts, errors, owed releases and the waiting algorithm
(docs/protocol.md), free of any I/O."""
from __future__ import annotations

import os
import re
import secrets
import socket
import random
import threading
import time
from typing import Callable, Dict, Generator, List, Optional, Tuple, Union
from urllib.parse import unquote

# The protocol this client speaks; checked against the header ("-- rwlock
# protocol N: ...") of each script loaded, and sent as ARGV[1] of info, waits,
# mark and checkin (acquire, release, renew and fence know their own).
PROTOCOL_VERSION = "3"

INTENT_MS = 2000          # lease of a waiting caller's mark (as the SQL side)
KEEP_TOKEN_MS = 600000    # how long a free lock keeps its last write token
                          # (the scripts' default: never sent)
NAME_MAX = 1024           # bytes: the longest name the SQL side accepts
POLL_S = 0.05             # sleep between tries when subscribing failed
# fence: quorum mode; waits, mark, checkin: deadlock detection (docs/protocol.md 18)
SCRIPTS = ("acquire", "release", "renew", "info", "fence", "waits", "mark",
           "checkin")

# acquire.lua ARGV[3], the mode, of a caller that holds the read lock and
# asks for the write lock (an upgrade); "r" and "w" say it holds nothing (a
# field of its own left in Redis is stale).
MODE_UPGRADE = "u"


class RWLockError(Exception):
    """Base class of this package's errors."""


class ProtocolVersionError(RWLockError):
    """The lock's keys in Redis, or the scripts, speak another protocol version."""


class StaleRequestError(RWLockError):
    """Redis had already run a newer request of this owner id on the lock
    (RWLOCK_STALE, docs/protocol.md 4.1): the request changed nothing. This
    client's requests of one owner id go one at a time and are numbered by
    one counter per process, so another process (or another copy of this
    one) uses the same owner id: a bug, never a reason to retry."""


class LockTimeout(RWLockError, TimeoutError):
    """A blocking acquire ran out of time."""


class Deadlock(RWLockError):
    """Waiting could never end: the waiters wait for each other
    (UpgradeConflict, DeadlockDetected)."""


class UpgradeConflict(Deadlock):
    """Two read holders both wait to upgrade to the write lock: this one gives up."""

    def __init__(self, name: str, other: str) -> None:
        super().__init__(
            "deadlock: this holder and %s both hold the read lock on %r and wait "
            "for its write lock; release the read lock and retry" % (other, name))
        self.other = other


class DeadlockDetected(Deadlock):
    """This holder's wait closed a cycle of waits (sessions of any server,
    clients) and was chosen to give up (docs/protocol.md 18). Its intent or
    mark is withdrawn; release what it holds and retry. `cycle`: one line
    per wait, "<owner> <r|w> <blocked by owner> <lock key>"."""

    def __init__(self, name: str, cycle: str) -> None:
        super().__init__("deadlock detected while waiting for lock %r: %s"
                         % (name, "; ".join(cycle.split("\n"))))
        self.name, self.cycle = name, cycle


class LockLost(RWLockError):
    """The hold was lost while it was meant to be held (its lease ran out,
    Redis lost it): others may have held the lock meanwhile. Raised at the
    end of a ``with`` / ``async with`` block that lost its lock."""

    def __init__(self, name: str, owner: str) -> None:
        super().__init__("lock %r (owner %s) was lost while held: others may "
                         "have held it meanwhile" % (name, owner))
        self.name, self.owner = name, owner


class ReadLockLost(LockLost):
    """An upgrade found that Redis no longer has this holder's read lock (its
    lease ran out, or Redis lost its data): the lock is lost, not upgraded."""

    def __init__(self, name: str, owner: Optional[str] = None) -> None:
        RWLockError.__init__(self, "lock %r was lost: Redis no longer had its read lock "
                             "when it was to be upgraded; acquire the lock anew" % (name,))
        self.name, self.owner = name, owner


class NotHeld(RWLockError, RuntimeError):
    """Misuse: release(), renew(), downgrade() or upgrade() of a hold not
    held (e.g. a second release). A RuntimeError too, as in version 1.1."""


class AlreadyHeld(RWLockError, RuntimeError):
    """Misuse: acquire() of a Lock already held (one Lock is one holder). A
    RuntimeError too, as in version 1.1."""


class ReplicasNotAcknowledged(RWLockError, ConnectionError):
    """A grant fewer replicas than wait_replicas acknowledged; it was undone."""

    def __init__(self, name: str, acks: int, wanted: int) -> None:
        super().__init__("lock %r was granted but only %d of the %d replicas "
                         "asked for acknowledged it; the grant was undone"
                         % (name, acks, wanted))
        self.name, self.acks, self.wanted = name, acks, wanted


def version_error(name: str, exc: Exception) -> Optional[ProtocolVersionError]:
    """The ProtocolVersionError for a Redis error reply RWLOCK_VERSION, else None."""
    msg = str(exc)
    if "RWLOCK_VERSION" not in msg:
        return None
    return ProtocolVersionError(
        "lock %r is kept in another rwlock protocol version than this "
        "client's (%s): %s" % (name, PROTOCOL_VERSION, msg))


# "RWLOCK_STALE <hash> request <seq> of <owner> is not newer than <s:owner>"
# (acquire.lua, release.lua); renew.lua and fence.lua say "renewal" or
# "fence" and "is older than".
_STALE = re.compile(r"RWLOCK_STALE .* (request|renewal|fence) (\d+) of .* "
                    r"is (?:not newer|older) than (\d+)\s*$", re.S)


def is_stale(exc: object) -> bool:
    """Whether an error reply is RWLOCK_STALE."""
    return "RWLOCK_STALE" in str(exc)


def is_repeat(exc: object) -> bool:
    """Whether an error reply says RWLOCK_STALE of an acquisition or release
    whose own seq is the newest Redis ran: the request ran already, and this
    is a copy of it sent again (redis-py's RedisCluster sends a command
    again after a connection error, though it may have run): what it
    answered is lost, as if the connection had failed."""
    m = _STALE.search(str(exc))
    return bool(m) and m.group(1) == "request" and m.group(2) == m.group(3)


def stale_error(name: str, exc: Exception) -> Optional[StaleRequestError]:
    """The StaleRequestError for a Redis error reply RWLOCK_STALE, else None."""
    if not is_stale(exc):
        return None
    return StaleRequestError(
        "lock %r: Redis had already run a newer request of this owner id; "
        "this one changed nothing. Another process uses the same owner id "
        "(owner ids must be unique): %s" % (name, exc))


def script_error(name: str, exc: Exception) -> Optional[RWLockError]:
    """This package's error for a script's error reply (RWLOCK_VERSION,
    RWLOCK_STALE), else None (Redis's own errors are raised as they are)."""
    return version_error(name, exc) or stale_error(name, exc)


def encode_name(name: str) -> str:
    """The name as it appears in keys: '%', '{', '}' percent-encoded."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def lock_keys(prefix: str, name: str) -> Tuple[str, str, str]:
    """(hash, queue, channel) of lock `name` under `prefix`: the scripts take
    the first two as KEYS. Waiting readers are woken on the channel, a
    waiting writer on its own, channel + ":" + its owner id."""
    base = "%s:{%s}" % (prefix, encode_name(name))
    return base, base + ":q", base + ":c"


def wait_key(prefix: str, owner: str) -> str:
    """<prefix>:wait:{<owner>}: what the owner waits for (docs/protocol.md 18)."""
    return "%s:wait:{%s}" % (prefix, encode_name(owner))


def wait_value(mode: str, nonce: str, hash_key: str) -> str:
    """The wait key's value: "<version> <r|w> <nonce> <lock's hash key>"."""
    return "%s %s %s %s" % (PROTOCOL_VERSION, mode, nonce, hash_key)


def wait_values(owner: str, aliases: List[str], mode: str, nonce: str,
                hash_key: str) -> Dict[str, str]:
    """{owner id: wait key value} of one wait: the waiting owner's own, then
    the same wait for each alias (an owner id holding a lock in the waiting
    task), nonce "<nonce>@<waiting owner>" (docs/protocol.md 18)."""
    out = {owner: wait_value(mode, nonce, hash_key)}
    for a in aliases:
        if a != owner:
            out[a] = wait_value(mode, "%s@%s" % (nonce, owner), hash_key)
    return out


def marked_cycle(old: object, value: str) -> Optional[str]:
    """The cycle a deadlock's finder left in our wait key (mark.lua), if the
    key's previous value was the mark of this wait; else None."""
    if old is None:
        return None
    old = text(old)
    head = "!" + value + "\n"
    return old[len(head):] if old.startswith(head) else None


def check_owner(owner: str) -> str:
    """An owner id given as an option (another lock's, to link them)."""
    if (not isinstance(owner, str) or not owner or len(owner.encode("utf-8")) > 256
            or any(c.isspace() for c in owner)):
        raise ValueError("owner must be a non-empty string of at most 256 bytes without "
                         "white space (another lock's owner, to link them)")
    return owner


def check_prefix(prefix: str) -> None:
    if not prefix or "{" in prefix or "}" in prefix or any(ord(c) < 32 for c in prefix):
        raise ValueError("prefix must be non-empty, without braces or control characters")


def check_name(name: str) -> None:
    if not isinstance(name, str) or not name:
        raise ValueError("lock name must be a non-empty string")
    if len(name.encode("utf-8")) > NAME_MAX:
        raise ValueError("lock name is longer than %d bytes" % NAME_MAX)


# -- the scripts ---------------------------------------------------------------

def _candidate_dirs() -> List[str]:
    here = os.path.dirname(os.path.abspath(__file__))
    # 1. copied into the package when it was built (pip install);
    # 2. the repository's lua/, when run from a checkout (clients/python).
    return [os.path.join(here, "lua"),
            os.path.normpath(os.path.join(here, "..", "..", "..", "lua"))]


def default_lua_dir() -> str:
    """$RWLOCK_LUA_DIR, else the scripts shipped in the package, else the
    repository's lua/ (when imported from a checkout)."""
    env = os.environ.get("RWLOCK_LUA_DIR")
    if env:
        return env
    for d in _candidate_dirs():
        if all(os.path.isfile(os.path.join(d, s + ".lua")) for s in SCRIPTS):
            return d
    raise RWLockError(
        "rwlock_client: the protocol's scripts were not found (looked in %s). "
        "Install the package with pip from the rwlock repository "
        "(pip install ./clients/python), which copies lua/*.lua into it, or "
        "pass lua_dir= / set RWLOCK_LUA_DIR to a copy of the repository's lua/."
        % " and ".join(_candidate_dirs()))


def load_scripts(lua_dir: Optional[str] = None) -> Dict[str, str]:
    """{name: source} of the protocol's scripts, checked to be PROTOCOL_VERSION."""
    lua_dir = lua_dir or default_lua_dir()
    out = {}
    for name in SCRIPTS:
        path = os.path.join(lua_dir, name + ".lua")
        with open(path, "rb") as f:
            body = f.read().decode("utf-8")
        m = re.match(r"-- rwlock protocol (\S+):", body)
        if not m:
            raise ProtocolVersionError("%s does not say which protocol it is" % path)
        if m.group(1) != PROTOCOL_VERSION:
            raise ProtocolVersionError(
                "%s is rwlock protocol %s; this client speaks %s"
                % (path, m.group(1), PROTOCOL_VERSION))
        out[name] = body
    return out


# -- owners, arguments, replies ---------------------------------------------------

def owner_prefix() -> str:
    return "py:%s:%d" % (socket.gethostname()[:40], os.getpid())


def new_owner(prefix: str) -> str:
    """A fresh owner id: py:<hostname>:<pid>:<random>."""
    return "%s:%s" % (prefix, secrets.token_hex(6))


def text(v: Union[bytes, str]) -> str:
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def ms(seconds: float) -> int:
    return max(1, int(round(seconds * 1000)))


# The four request scripts take what differs from their defaults only
# (docs/protocol.md 6: every argument costs Redis some 1 100 instructions a
# call): no version (theirs), no keep (KEEP_TOKEN_MS is their default), no
# mark when the caller will not wait.
def acquire_args(owner: str, seq: int, mode: str, lease_ms: int, intent_ms: int,
                 upgrade: bool) -> list:
    args = [owner, seq, MODE_UPGRADE if upgrade else mode, lease_ms]
    if intent_ms:
        args.append(intent_ms)
    return args


def release_args(owner: str, seq: int, keep: str, lease_ms: int = 0) -> list:
    # keep "": a plain release; "q": a withdrawal; "r": a downgrade to the
    # read lock, with its lease.
    if keep == "":
        return [owner, seq]
    if keep == "r":
        return [owner, seq, keep, lease_ms]
    return [owner, seq, keep]


def renew_args(owner: str, seq: int, lease_ms: int) -> list:
    return [owner, seq, lease_ms]


def fence_args(owner: str, seq: int, token: int) -> list:
    # The token as a decimal string: fence.lua stores it as sent.
    return [owner, seq, str(token)]


class Sequence:
    """The request sequence of this process's owner ids (docs/protocol.md
    4.1): every acquire.lua and release.lua call takes next(), a number
    larger than every one taken before, so that Redis can tell a request
    that arrives late (cut off in flight, held by a proxy, sent again) from
    the owner's newest, and runs it as a no-op. One counter for every owner
    id of the process: it never goes back for any of them, whichever Lock
    object (two may share an owner id), thread, event loop or quorum member
    sends the request. Renewals and fences carry now(): they are checked
    against the newest request Redis ran, never recorded."""

    def __init__(self) -> None:
        self._n = 0
        self._mutex = threading.Lock()

    def next(self) -> int:
        with self._mutex:
            self._n += 1
            return self._n

    def now(self) -> int:
        with self._mutex:
            return self._n


SEQ = Sequence()


# What _acquire answers: (GRANTED, token), (BUSY, ms to sleep at most),
# (CONFLICT, other owner), (UNACKED, acks: granted, too few replicas),
# (READ_LOST, None: an upgrade whose read lock Redis no longer has).
GRANTED, BUSY, CONFLICT, UNACKED, READ_LOST = 1, 0, -1, -2, -3


def acquire_outcome(reply, acks: Optional[int], wanted: int) -> Tuple[int, object]:
    if isinstance(reply, (bytes, str)):
        other = text(reply)
        return (CONFLICT, other) if other else (READ_LOST, None)
    r = int(reply)
    if r >= 0 and acks is not None and acks < wanted:
        return UNACKED, acks
    return (GRANTED, r) if r >= 0 else (BUSY, -r)


def parse_info(reply) -> dict:
    state, token, writer, writer_ms, readers, waiting = reply

    def pairs(flat):
        return {text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
    return {"state": text(state), "token": int(token),
            "writer": text(writer) or None, "writer_ms": int(writer_ms),
            "readers": pairs(readers), "waiting": pairs(waiting)}


def parse_sentinel_url(url: str, kwargs: dict):
    """(sentinels, sentinel_kwargs, master kwargs, master name) of a
    redis+sentinel:// (or rediss+sentinel://) URL:
    [user[:password]@]h1:p1[,h2:p2...]/name[/db]."""
    m = re.match(r"^(rediss?)\+sentinel://(?:([^@/]*)@)?([^/]+)/([^/]+)(?:/(\d+))?/?$", url)
    if not m:
        raise ValueError("not a redis+sentinel://[user[:password]@]host1:port1"
                         "[,host2:port2...]/master-name[/db] URL")
    scheme, userinfo, hosts, name, db = m.groups()
    sentinels = []
    for item in hosts.split(","):
        if item.startswith("["):
            h = item[1:item.index("]")]
            rest = item[item.index("]") + 1:]
            p = rest[1:] if rest.startswith(":") else ""
        else:
            h, _, p = item.partition(":")
        sentinels.append((h, int(p) if p else 26379))
    conn = dict(kwargs)
    sentinel_kwargs = dict(conn.pop("sentinel_kwargs", {}) or {})
    if userinfo:
        user, _, password = userinfo.partition(":")
        if user:
            conn.setdefault("username", unquote(user))
        conn.setdefault("password", unquote(password))
    if db:
        conn.setdefault("db", int(db))
    if scheme == "rediss":
        conn.setdefault("ssl", True)
        sentinel_kwargs.setdefault("ssl", True)
    return sentinels, sentinel_kwargs, conn, unquote(name)


def _host_ports(hosts: str, default_port: int) -> List[Tuple[str, int]]:
    out = []
    for item in hosts.split(","):
        if item.startswith("["):
            h = item[1:item.index("]")]
            rest = item[item.index("]") + 1:]
            port = rest[1:] if rest.startswith(":") else ""
        else:
            h, _, port = item.partition(":")
        out.append((h, int(port) if port else default_port))
    return out


def parse_cluster_url(url: str, kwargs: dict):
    """(startup nodes as (host, port), connection kwargs) of a
    redis+cluster:// (or rediss+cluster://) URL:
    [user[:password]@]h1:p1[,h2:p2...]/ (database 0 only)."""
    m = re.match(r"^(rediss?)\+cluster://(?:([^@/]*)@)?([^/]+)/?$", url)
    if not m:
        raise ValueError("not a redis+cluster://[user[:password]@]host1:port1"
                         "[,host2:port2...]/ URL (a Redis Cluster has only database 0)")
    scheme, userinfo, hosts = m.groups()
    conn = dict(kwargs)
    if userinfo:
        user, _, password = userinfo.partition(":")
        if user:
            conn.setdefault("username", unquote(user))
        conn.setdefault("password", unquote(password))
    if scheme == "rediss":
        conn.setdefault("ssl", True)
    return _host_ports(hosts, 6379), conn


def is_cluster_url(url: str) -> bool:
    return "+cluster://" in url.split("/", 3)[0] + "//"


def is_sentinel_url(url: str) -> bool:
    return "+sentinel://" in url.split("/", 3)[0] + "//"


# -- owed releases -----------------------------------------------------------------

class OwedReleases:
    """Releases whose answer was not received (docs/protocol.md 12): each is
    sent again, ahead of the next acquisition of its name, before that name is
    taken again, as a new request (a new seq: the one cut off, should it
    still arrive, is then stale). Keyed by name, then owner: (keep, lease ms)."""

    def __init__(self) -> None:
        self._owed: Dict[str, Dict[str, Tuple[str, int]]] = {}
        self._mutex = threading.Lock()

    def add(self, name: str, owner: str, keep: str, lease_ms: int) -> None:
        with self._mutex:
            self._owed.setdefault(name, {})[owner] = (keep, lease_ms)

    def get(self, name: str) -> List[Tuple[str, str, int]]:
        """[(owner, keep, lease ms)] owed for name."""
        with self._mutex:
            return [(o, k, lm) for o, (k, lm) in self._owed.get(name, {}).items()]

    def done(self, name: str, owners) -> None:
        with self._mutex:
            d = self._owed.get(name)
            if d is None:
                return
            for o in owners:
                d.pop(o, None)
            if not d:
                del self._owed[name]

    def __len__(self) -> int:
        with self._mutex:
            return sum(len(d) for d in self._owed.values())


# -- waiting (docs/protocol.md 12) -----------------------------------------------------
#
# take_plan is the waiting algorithm as a generator: it yields the I/O it
# needs and is sent the results (or thrown the exceptions); the synchronous
# and the asyncio locks each run it with their own I/O (drive / adrive).

class Acquire:
    """Run acquire.lua once; result: (GRANTED|BUSY|CONFLICT|UNACKED, value)."""


class Release:
    """Run release.lua with keep (the undo of a grant, a withdrawal)."""

    def __init__(self, keep: str) -> None:
        self.keep = keep


class Subscribe:
    """Listen on the waiter's channel; result: True if Redis confirmed it."""


class Sleep:
    """Sleep `seconds`, on the channel if subscribed (woken by a message),
    else polling; result: False if the subscription broke."""

    def __init__(self, seconds: float, subscribed: bool) -> None:
        self.seconds, self.subscribed = seconds, subscribed


class CheckIn:
    """Say in Redis what this waiter waits for (checkin.lua: the wait key's
    value for ttl_ms, its old value read in the same call); result: the cycle if a deadlock's finder marked this wait
    as its victim, else None."""

    def __init__(self, nonce: str, ttl_ms: int) -> None:
        self.nonce, self.ttl_ms = nonce, ttl_ms


class DropWait:
    """Delete the wait key (the wait ended)."""


class Get:
    """GET key (on the node that serves it); result: the value or None."""

    def __init__(self, key: str) -> None:
        self.key = key


class Script:
    """Run one of SCRIPTS with these KEYS and ARGV (on the node that serves
    the keys); result: the reply."""

    def __init__(self, script: str, keys: List[str], args: list) -> None:
        self.script, self.keys, self.args = script, keys, args


class Ends:
    """HGET key field (a member's intent or mark end, on the node that
    serves key), then, with channel, PUBLISH channel message (a wake-up);
    result: the end in ms, 0 when there is none."""

    def __init__(self, key: str, field: str, channel: Optional[str], message: str) -> None:
        self.key, self.field, self.channel, self.message = key, field, channel, message


Step = Union[Acquire, Release, Subscribe, Sleep, CheckIn, DropWait, Get, Script, Ends]


def take_plan(name: str, mode: str, timeout: Optional[float], upgrade: bool,
              is_try: bool, wanted_acks: int,
              granted, deadlock_timeout: Optional[float] = None,
              walker: Optional[Callable[[str], Generator[Step, object, Tuple[Optional[str], bool, bool]]]] = None
              ) -> Generator[Step, object, bool]:
    """Take the lock: True once granted (granted(token, sent) called), False
    when the time ran out. Raises UpgradeConflict, ReplicasNotAcknowledged,
    ReadLockLost, DeadlockDetected, StaleRequestError. With deadlock_timeout (s), a wait that
    lasts that long says in Redis what it waits for, again every
    deadlock_timeout, so that deadlocks through it are found
    (docs/protocol.md 18); with walker (walker(nonce): a walk_plan of this
    wait), it also walks the wait-for graph after its first check-in, and
    again at later ones while the last walk met an owner that is not a SQL
    session, as the SQL extension does; a walk whose cycle awaits its
    members' signs of life is made again WALK_CONFIRM_S later."""
    deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
    check_at = None                     # the next CheckIn, once waiting
    published = False
    walked = False                      # the first walk was made
    rewalk = False                      # the last walk met a client: again
    confirming = False                  # the last walk awaits signs of life
    nonce = "%08x" % random.getrandbits(32)
    # A caller that will wait leaves a mark: a writer's intent (new readers
    # queue behind it), a reader's claim to a turn after the current writer.
    # It lasts INTENT_MS and is renewed at each try, and is withdrawn
    # (release "q") when the wait ends without the lock: a reader that gave
    # up is owed no turn.
    intent = INTENT_MS if timeout is None or timeout > 0 else 0
    withdraw = bool(intent)
    subscribed = False
    done = False
    undo = "r" if upgrade else ""
    try:
        while True:
            sent = time.monotonic()
            status, value = yield Acquire()
            if status == GRANTED:
                done = True
                granted(int(value), sent)
                if published:
                    yield DropWait()
                return True
            if status == UNACKED:
                # Granted, but too few replicas acknowledged it: undo.
                done = True
                err = ReplicasNotAcknowledged(name, int(value), wanted_acks)
                try:
                    yield Release(undo)
                except Exception:
                    pass            # owed: sent again before the name is taken again
                if is_try:
                    return False
                raise err
            if status == CONFLICT:
                done = True
                if withdraw:
                    yield Release("q")
                raise UpgradeConflict(name, str(value))
            if status == READ_LOST:
                # Nothing changed in Redis; an intent of earlier tries goes.
                done = True
                if withdraw:
                    yield Release("q")
                raise ReadLockLost(name)
            now = time.monotonic()
            if deadline is not None and now >= deadline:
                done = True
                if withdraw:
                    yield Release("q")
                if published:
                    yield DropWait()
                return False
            if intent and deadlock_timeout:
                if check_at is None:
                    check_at = now + deadlock_timeout
                elif now >= check_at:
                    ttl_ms = max(int(3000 * deadlock_timeout), 2 * INTENT_MS)
                    cycle = yield CheckIn(nonce, ttl_ms)
                    published = True
                    # Marked a victim by another walker (cycle): with a
                    # walker, the cycle is walked again here before this wait
                    # fails (it may have broken meanwhile), as the SQL
                    # extension does; the mark itself is gone (checkin.lua).
                    if walker is not None and (cycle is not None or not walked
                                               or rewalk or confirming):
                        walked = True
                        cycle, rewalk, confirming = yield from walker(nonce)
                    check_at = time.monotonic() + (WALK_CONFIRM_S if confirming and cycle is None
                                                   else deadlock_timeout)
                    if cycle is not None:
                        done = True
                        yield Release("q")
                        yield DropWait()
                        raise DeadlockDetected(name, cycle)
            if not subscribed:
                # Listen first, then try again before any sleep, so a
                # release published in between cannot be missed.
                subscribed = bool((yield Subscribe()))
                if subscribed:
                    continue
            wait_ms = int(value)                        # never past the hint
            if intent:
                wait_ms = min(wait_ms, intent // 2)     # keep our mark alive
            wait = wait_ms / 1000.0
            if deadline is not None:
                wait = min(wait, deadline - now)
            if not subscribed:
                wait = min(wait, POLL_S)
            if check_at is not None:
                wait = max(0.0, min(wait, check_at - now))
            if (yield Sleep(wait, subscribed)) is False:
                subscribed = False          # the subscription broke: again
    except GeneratorExit:
        raise
    except BaseException as e:
        # A stale answer: another user of this owner id ran a newer request
        # here; ours changed nothing, and an undo would act on its behalf.
        if not done and not isinstance(e, StaleRequestError):
            # Interrupted, or the connection failed with a call in flight:
            # undo whatever may have been granted, withdraw the intent.
            try:
                yield Release(undo)
            except Exception:
                pass
        if published and not done:
            try:
                yield DropWait()
            except Exception:
                pass
        raise


# -- deadlock detection: the walk (docs/protocol.md 18) ----------------------------
#
# walk_plan is src/deadlock.c's dl_walk (dl_search, dl_recheck, dl_victim,
# dl_encode_cycle, dl_mark) as a generator yielding Get and Script steps,
# run by take_plan with the synchronous or the asyncio client's I/O. Any
# call that fails is no edge (the walk goes on without it), as in C.

WALK_MAX_OWNERS = 64      # owners a walk visits at most
WALK_MAX_DEPTH = 32       # the longest cycle looked for
WALK_CONFIRM_S = 0.1      # a cycle awaiting signs of life is walked again this soon
                          # (C's DL_CONFIRM_MS)
WALK_LIFE_STALE_S = INTENT_MS / 2000.0    # a look older than this is taken afresh


def parse_wait_value(value: str) -> Optional[Tuple[str, str, Optional[str]]]:
    """(mode, lock hash key, owner after '@' or None) of a wait key's value
    "<version> <r|w> <nonce>[@<owner>] <lock hash key>"; None when it is of
    another protocol version, marked, or malformed (no edge). As C's
    dl_parse_value."""
    head = PROTOCOL_VERSION + " "
    if not value.startswith(head):
        return None
    rest = value[len(head):]
    if len(rest) < 2 or rest[0] not in "rw" or rest[1] != " ":
        return None
    nonce, sp, key = rest[2:].partition(" ")
    if not sp or not key:
        return None
    at = nonce.find("@")
    return rest[0], key, (nonce[at + 1:] if at >= 0 else None)


class Hop:
    """One wait of a walk: `owner` waits (as the owner `as_`, the one whose
    intent or mark is in the lock) for lock `key` in `mode`; `value`: its
    wait key's value."""
    __slots__ = ("owner", "as_", "value", "mode", "key")

    def __init__(self, owner: str, as_: str, value: str, mode: str, key: str) -> None:
        self.owner, self.as_, self.value, self.mode, self.key = owner, as_, value, mode, key


def encode_cycle(path: List[Hop]) -> str:
    """The cycle as a mark carries it: one line per wait, "<owner> <r|w>
    <blocked by owner> <lock hash key>"."""
    return "\n".join("%s %s %s %s" % (h.owner, h.mode, path[(i + 1) % len(path)].owner, h.key)
                     for i, h in enumerate(path))


def victim_of(path: List[Hop]) -> int:
    """The member every finder picks: the greatest owner id in byte order
    (C's strcmp), the first of equals."""
    v = 0
    for i in range(1, len(path)):
        if path[i].owner.encode("utf-8") > path[v].owner.encode("utf-8"):
            v = i
    return v


class Life:
    """What the walks of one wait read of a cycle's signs of life (C's
    walk.c "Signs of life"): sig, the cycle's waits (owners, as, wait key
    values); at, when last looked at (monotonic s); per hop, its intent or
    mark end (-1 unread) and whether it was seen to move forward."""
    __slots__ = ("sig", "at", "ends", "alive")

    def __init__(self) -> None:
        self.sig: Optional[str] = None
        self.at = 0.0
        self.ends: List[int] = []
        self.alive: List[bool] = []


def walk_alive(path: List[Hop], life: Life) -> Generator[Step, object, bool]:
    """Whether every other member of the cycle path has shown a sign of
    life (docs/protocol.md 18): its intent (a writer hop, i:<as>) or mark
    (a reader hop, m:<as>) end moved forward since an earlier look at the
    same cycle. A wait cut off in a stall leaves its wait key and intent or
    mark, looking live until they lapse, but renews nothing; a live waiter
    renews at each try (at least every INTENT_MS / 2) and tries at once when
    woken, which the first look does. False: not yet (look again soon,
    never "no cycle"). As C's walk_alive."""
    sig = "".join("%s\t%s\t%s\n" % (h.owner, h.as_, h.value) for h in path)
    now = time.monotonic()
    same = life.sig == sig and now - life.at <= WALK_LIFE_STALE_S
    if not same:
        life.sig, life.ends, life.alive = sig, [-1] * len(path), [False] * len(path)
    alive = True
    for i in range(1, len(path)):
        hop = path[i]
        if life.alive[i]:
            continue
        channel = None if same else (
            "%s:c:%s" % (hop.key, hop.as_) if hop.mode == "w" else hop.key + ":c")
        try:
            end = yield Ends(hop.key, ("i:" if hop.mode == "w" else "m:") + hop.as_,
                             channel, hop.mode)
        except Exception:               # noqa: BLE001 - not seen: look again
            end = None
        if end is not None:
            end = int(end)              # type: ignore[call-overload]
            if 0 <= life.ends[i] < end:
                life.alive[i] = True
            life.ends[i] = end
        alive = alive and life.alive[i]
    life.at = now
    return alive


def walk_plan(prefix: str, owner: str, mode: str, nonce: str, hash_key: str,
              aliases: List[str], life: Optional[Life] = None
              ) -> Generator[Step, object, Tuple[Optional[str], bool, bool]]:
    """Walk the wait-for graph from this wait (`owner` waits for `hash_key`
    in `mode`, its wait key written with `nonce`; `aliases`: the other owner
    ids holding locks in the waiting task, whose wait keys say the same wait
    as "<nonce>@<owner>"). A cycle closes at a blocker that is `owner` or an
    alias; it is checked once more edge by edge, then every other member
    must show a sign of life (walk_alive, with `life`, this wait's record of
    them); then its victim (the greatest owner id) is marked (mark.lua),
    unless it is this waiter. Returns (cycle, foreign, confirming): the
    encoded cycle when this waiter is the victim (it must give up), else
    None; foreign: the walk met an owner that is not a SQL session (whose id
    does not start with "pg:"), so the walk is to be made again at the next
    check-in; confirming: a cycle awaits its members' signs of life, so the
    walk is to be made again soon (WALK_CONFIRM_S)."""
    if life is None:
        life = Life()
    values = wait_values(owner, aliases, mode, nonce, hash_key)
    path = [Hop(owner, owner, values[owner], mode, hash_key)]
    visited: set = set()
    foreign = False

    def blockers_of(hop: Hop) -> Generator[Step, object, Tuple[int, List[str]]]:
        """waits.lua: (live, blockers) of hop's wait; live -1 when Redis
        could not say. A writer's writers queued ahead are left out but
        this waiter (ARGV[4]; only `owner` waits in a queue, its aliases
        through it): whatever blocks them blocks the writer."""
        try:
            reply = yield Script("waits", [hop.key, hop.key + ":q"],
                                 [PROTOCOL_VERSION, hop.as_, hop.mode, owner])
            live = int(reply[0])        # type: ignore[index]
            blockers = [text(b) for b in reply[1:]  # type: ignore[index]
                        if isinstance(b, (bytes, str))]
        except Exception:               # noqa: BLE001 - no edge
            return -1, []
        return live, blockers

    def get_wait(who: str) -> Generator[Step, object, Optional[str]]:
        """The value of who's wait key, or None."""
        try:
            v = yield Get(wait_key(prefix, who))
        except Exception:               # noqa: BLE001 - no edge
            return None
        return None if v is None else text(v)   # type: ignore[arg-type]

    def search() -> Generator[Step, object, Optional[str]]:
        """Depth first from path[-1]: the blocker that closes a cycle (this
        waiter or an alias), the cycle then being path; else None."""
        nonlocal foreign
        live, blockers = yield from blockers_of(path[-1])
        if live <= 0:
            return None
        for b in blockers:
            if b in values:
                return b
            if b in visited or len(visited) >= WALK_MAX_OWNERS:
                continue
            visited.add(b)
            if not b.startswith("pg:"):
                foreign = True
            if len(path) >= WALK_MAX_DEPTH:
                continue
            value = yield from get_wait(b)
            parsed = parse_wait_value(value) if value is not None else None
            if parsed is None:
                continue
            m, key, as_ = parsed
            if as_ is None:
                as_ = b
            elif not as_.startswith("pg:"):
                foreign = True
            path.append(Hop(b, as_, value, m, key))   # type: ignore[arg-type]
            closer = yield from search()
            if closer is not None:
                return closer
            path.pop()
        return None

    closer = yield from search()
    if closer is None:
        return None, foreign, False
    # Our member of the cycle is the blocker that closed it, with the value
    # of its wait key: every finder then names the same members.
    path[0] = Hop(closer, owner, values[closer], mode, hash_key)
    # Every edge once more (a lock freed, a wait ended meanwhile: nothing).
    for i, hop in enumerate(path):
        nxt = path[(i + 1) % len(path)].owner
        if i > 0 and (yield from get_wait(hop.owner)) != hop.value:
            return None, foreign, False
        live, blockers = yield from blockers_of(hop)
        if live <= 0 or nxt not in blockers:
            return None, foreign, False
    if not (yield from walk_alive(path, life)):
        return None, foreign, True
    cycle = encode_cycle(path)
    v = victim_of(path)
    if v == 0:
        return cycle, foreign, False
    try:
        yield Script("mark", [wait_key(prefix, path[v].owner)],
                     [PROTOCOL_VERSION, path[v].value, cycle])
    except Exception:                   # noqa: BLE001 - its next walk, or another's
        pass
    return None, foreign, False
