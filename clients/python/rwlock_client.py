"""rwlock_client: distributed read/write locks in Redis, compatible with the
rwlock PostgreSQL extension (protocol version 2, docs/protocol.md).

    import redis
    from rwlock_client import Client

    locks = Client(redis.Redis(host="127.0.0.1", port=6379))
    with locks.write_lock("invoice:42") as lk:      # waits as long as it takes
        store.write(data, fencing_token=lk.token)

    lk = locks.read_lock("invoice:42")
    if lk.try_acquire(wait=2.5):                    # waits up to 2.5 s
        try:
            ...
        finally:
            lk.release()                            # False if the lock was lost

Behind Redis Sentinel, give the sentinels and the master's name; the client
follows failovers (redis-py's Sentinel: the master is looked up for every new
connection, and a READONLY reply drops the connection):

    locks = Client.from_url("redis+sentinel://s1:26379,s2:26379,s3:26379/mymaster",
                            wait_replicas=1)

With wait_replicas=k, a grant counts only once k replicas acknowledged it
(WAIT, in the same round trip); otherwise it is undone and acquire() raises
ReplicasNotAcknowledged (try_acquire() returns False). A renewal too few
acknowledged still counts (the master has it) and is logged.

The Lua scripts are read at run time from the repository's lua/ directory
(found relative to this file; override with lua_dir= or $RWLOCK_LUA_DIR) and
run with EVALSHA, loaded again when Redis answers NOSCRIPT.

Quorum mode (experimental; the repository's README says what it promises and
under which timing assumptions): a lock held on a majority of an odd number
of independent masters, sharing locks with SQL sessions whose
rwlock.redis_url lists the same masters:

    locks = QuorumClient.from_urls("redis://a:6379/0 redis://b:6379/0 redis://c:6379/0",
                                   max_lease=60.0)      # = rwlock.quorum_max_lease

A Lock object is one holder (one owner id) and is meant for one thread at a
time; give each thread its own Lock object. Leases are renewed by a background
thread per held lock, every third of the lease, until release().
"""

import logging
import os
import random
import re
import secrets
import socket
import threading
import time

import redis

__all__ = [
    "PROTOCOL_VERSION", "Client", "Lock", "RWLockError", "ProtocolVersionError",
    "LockTimeout", "UpgradeConflict", "ReplicasNotAcknowledged", "lock_keys",
    "encode_name", "sentinel_redis", "QuorumClient",
]

# The protocol this client speaks; sent as ARGV[1] of every script and checked
# against the header ("-- rwlock protocol N: ...") of each script loaded.
PROTOCOL_VERSION = "2"

INTENT_MS = 2000          # lease of a waiting caller's mark (as the SQL side)
KEEP_TOKEN_MS = 600000    # how long a free lock keeps its last write token
NAME_MAX = 1024           # bytes: the longest name the SQL side accepts
SCRIPTS = ("acquire", "release", "renew", "info", "fence")
SPLIT_PAUSE_MS = (10, 100)  # quorum mode: the random pause after a split vote

log = logging.getLogger("rwlock_client")


class RWLockError(Exception):
    """Base class of this module's errors."""


class ProtocolVersionError(RWLockError):
    """The lock's keys in Redis, or the scripts, speak another protocol version."""


class LockTimeout(RWLockError, TimeoutError):
    """A blocking acquire ran out of time."""


class UpgradeConflict(RWLockError):
    """Two read holders both wait to upgrade to the write lock: this one gives up."""

    def __init__(self, name, other):
        super().__init__(
            "deadlock: this holder and %s both hold the read lock on %r and wait "
            "for its write lock; release the read lock and retry" % (other, name))
        self.other = other


class ReplicasNotAcknowledged(RWLockError, ConnectionError):
    """A grant fewer replicas than wait_replicas acknowledged; it was undone."""

    def __init__(self, name, acks, wanted):
        super().__init__("lock %r was granted but only %d of the %d replicas "
                         "asked for acknowledged it; the grant was undone"
                         % (name, acks, wanted))
        self.name, self.acks, self.wanted = name, acks, wanted


def sentinel_redis(url, **kwargs):
    """A redis.Redis for the master of a redis+sentinel:// (or
    rediss+sentinel://) URL: [user[:password]@]h1:p1[,h2:p2...]/name[/db].
    The URL's user and password are the master's; pass the sentinels' own
    with sentinel_kwargs={"password": ...}. Other kwargs go to the master's
    connections."""
    from urllib.parse import unquote
    from redis.sentinel import Sentinel
    m = re.match(r"^(rediss?)\+sentinel://(?:([^@/]*)@)?([^/]+)/([^/]+)(?:/(\d+))?/?$", url)
    if not m:
        raise ValueError("not a redis+sentinel://[user[:password]@]host1:port1[,host2:port2...]/master-name[/db] URL")
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
    sentinel_kwargs = conn.pop("sentinel_kwargs", {}) or {}
    if userinfo:
        user, _, password = userinfo.partition(":")
        if user:
            conn.setdefault("username", unquote(user))
        conn.setdefault("password", unquote(password))
    if db:
        conn.setdefault("db", int(db))
    if scheme == "rediss":
        conn.setdefault("ssl", True)
        sentinel_kwargs = dict(sentinel_kwargs)
        sentinel_kwargs.setdefault("ssl", True)
    return Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **conn).master_for(
        unquote(name))


def encode_name(name):
    """The name as it appears in keys: '%', '{', '}' percent-encoded."""
    return name.replace("%", "%25").replace("{", "%7B").replace("}", "%7D")


def lock_keys(prefix, name):
    """(hash, queue, channel) of lock `name` under `prefix`: the scripts take
    the first two as KEYS. Waiting readers are woken on the channel, a
    waiting writer on its own, channel + ":" + its owner id."""
    base = "%s:{%s}" % (prefix, encode_name(name))
    return base, base + ":q", base + ":c"


def default_lua_dir():
    env = os.environ.get("RWLOCK_LUA_DIR")
    if env:
        return env
    here = os.path.dirname(os.path.abspath(__file__))
    return os.path.normpath(os.path.join(here, "..", "..", "lua"))


def load_scripts(lua_dir=None):
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


def _text(v):
    return v.decode("utf-8", "replace") if isinstance(v, bytes) else v


def _ms(seconds):
    return max(1, int(round(seconds * 1000)))


class Client:
    """Locks on one Redis server (any redis.Redis; thread-safe)."""

    def __init__(self, redis_client, prefix="rwlock", lease=30.0, lua_dir=None,
                 subscribe_timeout=2.0, wait_replicas=0, wait_replicas_timeout=0.1):
        if not prefix or "{" in prefix or "}" in prefix:
            raise ValueError("prefix must be non-empty and contain no braces")
        if lease <= 0:
            raise ValueError("lease must be positive")
        self.redis = redis_client
        self.prefix = prefix
        self.lease = float(lease)
        self.subscribe_timeout = subscribe_timeout
        self.wait_replicas = int(wait_replicas)
        self.wait_replicas_timeout = float(wait_replicas_timeout)
        self._unacked_logged = 0.0
        self.owner_prefix = "py:%s:%d" % (socket.gethostname()[:40], os.getpid())
        self._scripts = {name: redis_client.register_script(body)
                         for name, body in load_scripts(lua_dir).items()}

    @classmethod
    def from_url(cls, url, redis_kwargs=None, **kwargs):
        """redis://, rediss://, unix:// (redis-py's from_url) or
        redis+sentinel:// / rediss+sentinel:// (sentinel_redis)."""
        if "+sentinel://" in url.split("/", 3)[0] + "//":
            return cls(sentinel_redis(url, **(redis_kwargs or {})), **kwargs)
        return cls(redis.Redis.from_url(url, **(redis_kwargs or {})), **kwargs)

    def new_owner(self):
        """A fresh owner id: py:<hostname>:<pid>:<random>."""
        return "%s:%s" % (self.owner_prefix, secrets.token_hex(6))

    def write_lock(self, name, lease=None, timeout=None, on_lost=None):
        """A Lock object for the write lock of `name` (not yet acquired)."""
        return Lock(self, name, "w", lease, timeout, on_lost)

    def read_lock(self, name, lease=None, timeout=None, on_lost=None):
        """A Lock object for the read lock of `name` (not yet acquired)."""
        return Lock(self, name, "r", lease, timeout, on_lost)

    def info(self, name):
        """The state of lock `name` as Redis has it now."""
        state, token, writer, writer_ms, readers, waiting = self._run(
            "info", name, [PROTOCOL_VERSION])

        def pairs(flat):
            return {_text(flat[i]): int(flat[i + 1]) for i in range(0, len(flat), 2)}
        return {"state": _text(state), "token": int(token),
                "writer": _text(writer) or None, "writer_ms": int(writer_ms),
                "readers": pairs(readers), "waiting": pairs(waiting)}

    # -- the protocol's calls -------------------------------------------------

    def _run(self, script, name, args, acked=False):
        """Run a script; with acked and wait_replicas > 0, (reply, acks): a
        WAIT follows the script in the same round trip."""
        keys = lock_keys(self.prefix, name)[:2]
        try:
            if acked and self.wait_replicas > 0:
                pipe = self.redis.pipeline(transaction=False)
                self._scripts[script](keys=keys, args=args, client=pipe)
                pipe.execute_command("WAIT", self.wait_replicas,
                                     max(1, int(self.wait_replicas_timeout * 1000)))
                reply, acks = pipe.execute()
                return reply, int(acks)
            return self._scripts[script](keys=keys, args=args)
        except redis.exceptions.ResponseError as e:
            msg = str(e)
            if "RWLOCK_VERSION" in msg:
                raise ProtocolVersionError(
                    "lock %r is kept in another rwlock protocol version than "
                    "this client's (%s): %s" % (name, PROTOCOL_VERSION, msg)) from e
            raise

    def _acquire(self, name, owner, mode, lease_ms, intent_ms, held=""):
        """(1, token) granted; (0, ms) busy, sleep at most ms; (-1, other)
        upgrade conflict; (-2, acks) granted but fewer than wait_replicas
        replicas acknowledged it (the caller undoes it). The script answers
        the token (>= 0), -ms, or other. held: "r" in an upgrade (what a
        quorum keeps when it undoes a grant without a majority)."""
        args = [PROTOCOL_VERSION, owner, mode, lease_ms, intent_ms, KEEP_TOKEN_MS]
        acks = None
        if self.wait_replicas > 0:
            r, acks = self._run("acquire", name, args, acked=True)
        else:
            r = self._run("acquire", name, args)
        if isinstance(r, bytes):
            return -1, r
        r = int(r)
        if r >= 0 and acks is not None and acks < self.wait_replicas:
            return -2, acks
        return (1, r) if r >= 0 else (0, -r)

    def _release(self, name, owner, keep, lease_ms=0):
        return int(self._run("release", name, [
            PROTOCOL_VERSION, owner, keep, lease_ms, KEEP_TOKEN_MS]))

    def _renew(self, name, owner, lease_ms):
        args = [PROTOCOL_VERSION, owner, lease_ms, KEEP_TOKEN_MS]
        if self.wait_replicas > 0:
            held, acks = self._run("renew", name, args, acked=True)
            if acks < self.wait_replicas and time.monotonic() - self._unacked_logged > 10:
                # Not a loss: the master has the renewal; the next asks again.
                self._unacked_logged = time.monotonic()
                log.warning("rwlock: a renewal of %r was acknowledged by %d of "
                            "the %d replicas asked for", name, acks, self.wait_replicas)
            return int(held)
        return int(self._run("renew", name, args))

    def _subscribe(self, channel):
        """A PubSub listening on channel once Redis confirmed it, or None."""
        ps = self.redis.pubsub()
        try:
            ps.subscribe(channel)
            end = time.monotonic() + self.subscribe_timeout
            while True:
                left = end - time.monotonic()
                if left <= 0:
                    break
                m = ps.get_message(timeout=left)
                if m and m["type"] in ("subscribe", b"subscribe") and \
                        _text(m["channel"]) == channel:
                    return ps
        except redis.exceptions.RedisError as e:
            log.debug("rwlock: subscribing to %s failed: %s", channel, e)
        ps.close()
        return None


def _wait_message(ps, channel, timeout):
    """Wait up to timeout s for a message on channel. False on timeout."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        m = ps.get_message(timeout=left)
        if m and m["type"] in ("message", b"message") and _text(m["channel"]) == channel:
            return True


class Lock:
    """One holder's read or write lock on one name.

    Properties: name, mode ("r"/"w"), owner, token (fencing token of the hold),
    held (acquired and not released), lost (the lease ran out or Redis lost it
    while held: the hold no longer excludes others).
    """

    def __init__(self, client, name, mode, lease=None, timeout=None, on_lost=None):
        if not isinstance(name, str) or not name:
            raise ValueError("lock name must be a non-empty string")
        if len(name.encode("utf-8")) > NAME_MAX:
            raise ValueError("lock name is longer than %d bytes" % NAME_MAX)
        if mode not in ("r", "w"):
            raise ValueError("mode must be 'r' or 'w'")
        self.client = client
        self.name = name
        self.mode = mode
        self.lease = float(lease if lease is not None else client.lease)
        if self.lease <= 0:
            raise ValueError("lease must be positive")
        self.timeout = timeout              # for the context manager
        self.on_lost = on_lost              # called as on_lost(lock), renewal thread
        self.owner = client.new_owner()
        self.token = None
        self._channel = lock_keys(client.prefix, name)[2]
        self._held = False
        self._lost = False
        self._valid_until = 0.0             # monotonic; lease end as we know it
        self._mutex = threading.Lock()
        self._stop = threading.Event()
        self._thread = None

    def __repr__(self):
        return "<rwlock %s %r owner=%s held=%s lost=%s token=%s>" % (
            "write" if self.mode == "w" else "read", self.name, self.owner,
            self._held, self.lost, self.token)

    @property
    def held(self):
        return self._held

    @property
    def lost(self):
        """True once the hold is known or presumed lost: Redis said so at a
        renewal, or the lease has run out by our clock without a renewal."""
        return self._held and (self._lost or time.monotonic() > self._valid_until)

    # -- acquiring ----------------------------------------------------------

    def acquire(self, timeout=None):
        """Wait for the lock (forever, or up to timeout s); the fencing token.
        Raises LockTimeout when the time runs out."""
        if not self._take(self.mode, timeout, upgrade=False):
            raise LockTimeout("timed out after %ss waiting for the %s lock %r"
                              % (timeout, "write" if self.mode == "w" else "read",
                                 self.name))
        return self.token

    def try_acquire(self, wait=0.0):
        """Take the lock if it is free within `wait` s; True if taken."""
        return self._take(self.mode, wait, upgrade=False, is_try=True)

    def upgrade(self, timeout=None):
        """Holding the read lock, wait for the write lock too (until this
        holder is the only reader). True if upgraded, False on timeout (the
        read lock is kept). Raises UpgradeConflict if another reader already
        waits to upgrade."""
        if not self._held or self.mode != "r":
            raise RuntimeError("upgrade() needs a held read lock")
        return self._take("w", timeout, upgrade=True)

    def _take(self, mode, timeout, upgrade, is_try=False):
        if self._held and not upgrade:
            raise RuntimeError("%r is already held" % self)
        c = self.client
        lease_ms = _ms(self.lease)
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        # A caller that will wait leaves a mark: a writer's intent (new
        # readers queue behind it), a reader's claim to a turn after the
        # current writer. It lasts INTENT_MS and is renewed at each try.
        intent = INTENT_MS if timeout is None or timeout > 0 else 0
        withdraw = intent and mode == "w"
        # Readers are woken on the lock's channel, a writer on its own.
        channel = self._channel if mode == "r" else "%s:%s" % (self._channel, self.owner)
        ps = None
        done = False
        try:
            while True:
                sent = time.monotonic()
                status, value = c._acquire(self.name, self.owner, mode, lease_ms,
                                           intent, "r" if upgrade else "")
                if status == 1:
                    done = True
                    self._granted(mode, int(value), sent)
                    return True
                if status == -2:
                    # Granted, but too few replicas acknowledged it: undo.
                    done = True
                    try:
                        c._release(self.name, self.owner, "r" if upgrade else "",
                                   lease_ms)
                    except redis.exceptions.RedisError:
                        pass
                    if is_try:
                        log.warning("rwlock: %s", ReplicasNotAcknowledged(
                            self.name, int(value), c.wait_replicas))
                        return False
                    raise ReplicasNotAcknowledged(self.name, int(value),
                                                  c.wait_replicas)
                if status == -1:
                    done = True
                    if withdraw:
                        c._release(self.name, self.owner, "q")
                    raise UpgradeConflict(self.name, _text(value))
                now = time.monotonic()
                if deadline is not None and now >= deadline:
                    done = True
                    if withdraw:
                        c._release(self.name, self.owner, "q")
                    return False
                if ps is None:
                    # Listen first, then try again before any sleep, so a
                    # release published in between cannot be missed.
                    ps = c._subscribe(channel)
                    if ps is not None:
                        continue
                wait_ms = int(value)                    # never past the hint
                if intent:
                    wait_ms = min(wait_ms, intent // 2)  # keep our mark alive
                wait = wait_ms / 1000.0
                if deadline is not None:
                    wait = min(wait, deadline - now)
                if ps is None:
                    time.sleep(min(wait, 0.05))         # no subscription: poll
                    continue
                try:
                    _wait_message(ps, channel, wait)
                except redis.exceptions.RedisError:
                    ps.close()
                    ps = None
        except BaseException:
            if not done:
                # Interrupted, or the connection failed with a call in flight:
                # undo whatever may have been granted, withdraw the intent.
                try:
                    c._release(self.name, self.owner, "r" if upgrade else "",
                               lease_ms)
                except Exception:
                    pass
            raise
        finally:
            if ps is not None:
                try:
                    ps.close()
                except Exception:
                    pass

    def _granted(self, mode, token, sent):
        with self._mutex:
            self.mode = mode
            self.token = token
            self._lost = False
            self._valid_until = sent + self.lease
            self._stop.clear()
            self._held = True
        if self._thread is None or not self._thread.is_alive():
            self._thread = threading.Thread(target=self._renew_loop, daemon=True,
                                            name="rwlock-renew %s" % self.name)
            self._thread.start()

    # -- renewing -----------------------------------------------------------

    def renew(self):
        """Renew the lease now; True if still held (the background thread
        does this every third of the lease)."""
        with self._mutex:
            if not self._held:
                raise RuntimeError("%r is not held" % self)
            return self._renew_locked()

    def _renew_locked(self):
        if self._lost:
            return False
        sent = time.monotonic()
        if self.client._renew(self.name, self.owner, _ms(self.lease)) == 1:
            self._valid_until = sent + self.lease
            return True
        self._lost = True
        return False

    def _renew_loop(self):
        interval = self.lease / 3.0
        wait = interval
        while not self._stop.wait(wait):
            with self._mutex:
                if self._stop.is_set() or not self._held:
                    return
                try:
                    ok = self._renew_locked()
                    wait = interval
                except ProtocolVersionError as e:
                    log.warning("rwlock: renewing %r failed: %s", self.name, e)
                    self._lost, ok = True, False
                except redis.exceptions.RedisError as e:
                    # Keep trying, sooner; `lost` turns true by itself once the
                    # lease has run out by our clock.
                    log.warning("rwlock: renewing %r failed: %s", self.name, e)
                    ok = True
                    wait = min(interval, 1.0)
            if not ok:
                log.warning("rwlock: lock %r (owner %s) was lost", self.name, self.owner)
                if self.on_lost is not None:
                    try:
                        self.on_lost(self)
                    except Exception:
                        log.exception("rwlock: on_lost callback failed")
                return

    # -- releasing ----------------------------------------------------------

    def release(self):
        """Release the hold. True if it was still held, False if it had been
        lost (then others may have held the lock meanwhile)."""
        return self._drop("")

    def downgrade(self):
        """Holding the write lock, keep only a read lock (no other writer can
        get in between). True if the write lock was still held; False if it
        was lost (then nothing is held)."""
        if not self._held or self.mode != "w":
            raise RuntimeError("downgrade() needs a held write lock")
        return self._drop("r")

    def _drop(self, keep):
        if not self._held:
            raise RuntimeError("%r is not held" % self)
        if not keep:
            self._stop.set()
        with self._mutex:
            lost = self._lost
            sent = time.monotonic()
            try:
                held = self.client._release(self.name, self.owner, keep, _ms(self.lease))
            except BaseException:
                # The lease is the backstop: stop renewing, forget the hold.
                self._stop.set()
                self._held = False
                raise
            if keep and held == 1:
                self.mode = "r"
                self._valid_until = sent + self.lease
            else:
                self._stop.set()
                self._held = False
        t = self._thread
        if not self._held and t is not None and t is not threading.current_thread():
            t.join()
        return held == 1 and not lost

    # -- context manager ------------------------------------------------------

    def __enter__(self):
        self.acquire(self.timeout)
        return self

    def __exit__(self, *exc):
        if self._held and not self.release():
            log.warning("rwlock: lock %r was lost before it was released", self.name)
        return False


class _QuorumPubSub:
    """The subscriptions on several masters as one: get_message polls each."""

    POLL = 0.005

    def __init__(self, pubsubs):
        self.pubsubs = pubsubs

    def get_message(self, timeout=0.0):
        end = time.monotonic() + timeout
        while True:
            for ps in self.pubsubs:
                m = ps.get_message(timeout=0)
                if m:
                    return m
            left = end - time.monotonic()
            if left <= 0:
                return None
            time.sleep(min(left, self.POLL))

    def close(self):
        for ps in self.pubsubs:
            ps.close()


class QuorumClient(Client):
    """Quorum mode (experimental): locks held on a majority of an odd number
    (3 or more) of independent Redis masters, as the SQL extension holds
    them when rwlock.redis_url lists several URLs (docs/protocol.md 13.3).

    A grant needs a majority of the masters that count, within the lease
    less the time spent less drift * lease less 2 ms; a write grant's token
    is raised on a majority to the largest any master returned (fence.lua)
    before it is returned; renewals and releases go to every master. A master
    counts once it has been up for max_lease (INFO uptime, read in the same
    round trip as each acquisition), or at once if it persists every write
    (appendonly yes, appendfsync always). Leases are capped at max_lease.
    drift and max_lease must be the SQL side's rwlock.quorum_drift and
    rwlock.quorum_max_lease. The masters are asked one after the other."""

    def __init__(self, redis_clients, prefix="rwlock", lease=30.0, lua_dir=None,
                 subscribe_timeout=2.0, drift=0.01, max_lease=60.0):
        redis_clients = list(redis_clients)
        if len(redis_clients) < 3 or len(redis_clients) % 2 == 0:
            raise ValueError("a quorum is an odd number of masters, at least 3")
        self.max_lease = float(max_lease)
        self.drift = float(drift)
        lease = min(float(lease), self.max_lease)
        super().__init__(redis_clients[0], prefix, lease, lua_dir, subscribe_timeout)
        self.members = [Client(r, prefix, lease, lua_dir, subscribe_timeout)
                        for r in redis_clients]
        self.majority = len(self.members) // 2 + 1
        self._persists = {}     # (member, run_id) -> whether it fsyncs every write

    @classmethod
    def from_urls(cls, urls, redis_kwargs=None, **kwargs):
        """The masters' redis://, rediss:// or unix:// URLs, a list or one
        string separated by white space (as rwlock.redis_url)."""
        if isinstance(urls, str):
            urls = urls.split()
        return cls([redis.Redis.from_url(u, **(redis_kwargs or {})) for u in urls], **kwargs)

    def write_lock(self, name, lease=None, timeout=None, on_lost=None):
        return Lock(self, name, "w", min(lease or self.lease, self.max_lease), timeout, on_lost)

    def read_lock(self, name, lease=None, timeout=None, on_lost=None):
        return Lock(self, name, "r", min(lease or self.lease, self.max_lease), timeout, on_lost)

    def info(self, name):
        """The lock as the first master that answers has it."""
        for m in self.members[:-1]:
            try:
                return m.info(name)
            except redis.exceptions.ConnectionError:
                pass
        return self.members[-1].info(name)

    def _counts(self, i, info):
        """Whether member i, whose INFO server is info, counts toward a majority."""
        key = (i, info.get("run_id"))
        if key not in self._persists:
            try:
                r = self.members[i].redis
                self._persists[key] = (
                    _text(r.config_get("appendonly").get("appendonly")) == "yes" and
                    _text(r.config_get("appendfsync").get("appendfsync")) == "always")
            except redis.exceptions.RedisError:
                self._persists[key] = False
        return self._persists[key] or int(info.get("uptime_in_seconds", 0)) >= self.max_lease + 1

    def _vote(self, i, name, owner, mode, lease_ms, intent_ms, held):
        """Member i's answer: (status, value, counts), status None if it
        could not be asked (value: the error)."""
        m = self.members[i]
        args = [PROTOCOL_VERSION, owner, mode, lease_ms, intent_ms, KEEP_TOKEN_MS,
                held or "-"]
        try:
            pipe = m.redis.pipeline(transaction=False)
            m._scripts["acquire"](keys=lock_keys(self.prefix, name)[:2], args=args,
                                  client=pipe)
            pipe.info("server")
            r, info = pipe.execute()
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
            return None, e, False
        if isinstance(r, bytes):
            return -1, r, True
        r = int(r)
        return (1, r, self._counts(i, info)) if r >= 0 else (0, -r, self._counts(i, info))

    def _each(self, call):
        """call(member) on every member: [result, or the exception]."""
        out = []
        for m in self.members:
            try:
                out.append(call(m))
            except redis.exceptions.RedisError as e:
                out.append(e)
        return out

    def _undo(self, name, owner, votes, held, split, mode):
        """Release what members granted (or may have); after a split vote a
        writer gives up its places in every queue (they may disagree in a
        cycle)."""
        for i, (status, _, _) in enumerate(votes):
            keep = None
            if status in (1, None):
                keep = held
            elif status == 0 and split and mode == "w":
                keep = "q"
            if keep is not None:
                try:
                    self.members[i]._release(name, owner, keep, _ms(self.lease))
                except redis.exceptions.RedisError:
                    pass    # the member's lease frees it

    def _acquire(self, name, owner, mode, lease_ms, intent_ms, held=""):
        lease_ms = min(lease_ms, _ms(self.max_lease))
        start = time.monotonic()
        votes = [self._vote(i, name, owner, mode, lease_ms, intent_ms, held)
                 for i in range(len(self.members))]

        def in_time():
            return lease_ms / 1000.0 * (1 - self.drift) - (time.monotonic() - start) - 0.002 > 0
        granted = [i for i, v in enumerate(votes) if v[0] == 1]
        counted = [i for i in granted if votes[i][2]]
        conflict = next((v[1] for v in votes if v[0] == -1), None)
        if conflict is None and len(counted) >= self.majority and in_time():
            token = max(votes[i][1] for i in granted)
            if mode == "r" or (self._fence(name, owner, token, votes, granted) >= self.majority
                               and in_time()):
                return 1, token
        self._undo(name, owner, votes, held, bool(granted), mode)
        if conflict is not None:
            return -1, conflict
        answered = sum(1 for v in votes if v[0] is not None and v[2])
        if answered < self.majority:
            raise redis.exceptions.ConnectionError(
                "only %d of the %d Redis masters of the quorum answered and count "
                "toward a majority (%d needed)" % (answered, len(votes), self.majority))
        if granted:
            return 0, random.randint(*SPLIT_PAUSE_MS)
        return 0, min(v[1] for v in votes if v[0] == 0)

    def _fence(self, name, owner, token, votes, granted):
        """Raise the token on the granting members below it; how many of
        those that count have it now."""
        have = 0
        for i in granted:
            ok = votes[i][1] >= token
            if not ok:
                try:
                    ok = int(self.members[i]._run(
                        "fence", name, [PROTOCOL_VERSION, owner, str(token)])) == 1
                except redis.exceptions.RedisError:
                    pass
            have += ok and votes[i][2]
        return have

    def _count(self, answers, what):
        """1 if a majority answered 1, 0 if no majority can, else raise."""
        yes = sum(1 for a in answers if a == 1)
        no = sum(1 for a in answers if a == 0)
        if yes >= self.majority:
            return 1
        if len(answers) - no < self.majority:
            return 0
        raise redis.exceptions.ConnectionError(
            "too few of the %d Redis masters of the quorum answered the %s"
            % (len(answers), what))

    def _release(self, name, owner, keep, lease_ms=0):
        return self._count(self._each(lambda m: m._release(name, owner, keep, lease_ms)),
                           "release")

    def _renew(self, name, owner, lease_ms):
        lease_ms = min(lease_ms, _ms(self.max_lease))
        return self._count(self._each(lambda m: m._renew(name, owner, lease_ms)), "renewal")

    def _subscribe(self, channel):
        subs = [ps for ps in (m._subscribe(channel) for m in self.members) if ps]
        return _QuorumPubSub(subs) if subs else None
