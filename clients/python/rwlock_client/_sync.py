"""The synchronous client: Client and Lock on any redis-py client (redis.Redis,
Sentinel(...).master_for(...), redis.cluster.RedisCluster)."""
from __future__ import annotations

import hashlib
import heapq
import logging
import threading
import time
import weakref
from typing import (TYPE_CHECKING, Any, Callable, Dict, Iterable, List, Literal, Optional,
                    Sequence, Tuple, Union, cast)

import redis

from . import _protocol as p
from ._protocol import (PROTOCOL_VERSION, Acquire, AlreadyHeld, LockLost, LockTimeout,
                        NotHeld, ProtocolVersionError, Release, Sleep, Subscribe)

if TYPE_CHECKING:
    from ._multi import MultiLock

log = logging.getLogger("rwlock_client")

Call = Tuple[str, Sequence[Any]]


def _is_cluster(client: Any) -> bool:
    try:
        from redis.asyncio.cluster import RedisCluster as AsyncRedisCluster
    except ImportError:                 # redis-py without it
        AsyncRedisCluster = ()
    from redis.cluster import RedisCluster
    return isinstance(client, (RedisCluster, AsyncRedisCluster))


def sentinel_redis(url: str, **kwargs: Any) -> "redis.Redis":
    """A redis.Redis for the master of a redis+sentinel:// (or
    rediss+sentinel://) URL: [user[:password]@]h1:p1[,h2:p2...]/name[/db].
    The URL's user and password are the master's; pass the sentinels' own
    with sentinel_kwargs={"password": ...}. Other kwargs go to the master's
    connections."""
    from redis.sentinel import Sentinel
    sentinels, sentinel_kwargs, conn, name = p.parse_sentinel_url(url, kwargs)
    return Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **conn).master_for(name)


class Run:
    """Run one script: the reply. keys: its KEYS, by default those of lock
    `name` (hash, queue)."""
    __slots__ = ("script", "name", "args", "keys")

    def __init__(self, script: str, name: str, args: Sequence[Any],
                 keys: Optional[List[str]] = None) -> None:
        self.script, self.name, self.args, self.keys = script, name, args, keys


class Pipe:
    """Several script calls (and WAIT) in one round trip, on one connection,
    in order: (replies, acks or None). tail: raw commands sent after them
    (as ("INFO", "server")), their replies then a third item. owed: how many
    of the first calls are owed releases, for which a stale answer
    (RWLOCK_STALE) is an answer, 0: a newer request of their owner ran, so
    nothing they were to release is left."""
    __slots__ = ("name", "calls", "wait", "tail", "owed")

    def __init__(self, name: str, calls: Sequence[Call], wait: bool,
                 tail: Sequence[Sequence[Any]] = (), owed: int = 0) -> None:
        self.name, self.calls, self.wait, self.tail = name, calls, wait, tail
        self.owed = owed


class BaseClient:
    """What Client and AsyncClient share: settings, scripts, keys, and the
    protocol's calls as generators yielding Run and Pipe, which each runs
    with its own I/O (drive, adrive)."""

    _lock_class: Any = None         # Lock, AsyncLock
    # Waiters walk the wait-for graph (docs/protocol.md 18). Not in quorum
    # mode, whose majority rules for the walk are not implemented here.
    _walks = True
    _redis_class: Any = None        # redis.Redis, redis.asyncio.Redis
    _sentinel_redis: Any = None     # sentinel_redis of each

    def __init__(self, redis_client: Any, prefix: str = "rwlock", lease: float = 30.0,
                 lua_dir: Optional[str] = None, subscribe_timeout: float = 2.0,
                 wait_replicas: int = 0, wait_replicas_timeout: float = 0.1,
                 deadlock_timeout: Optional[float] = 1.0) -> None:
        p.check_prefix(prefix)
        if lease <= 0:
            raise ValueError("lease must be positive")
        self.redis = redis_client
        self.prefix = prefix
        self.lease = float(lease)
        self.subscribe_timeout = subscribe_timeout
        self.owner_prefix = p.owner_prefix()
        self.wait_replicas = int(wait_replicas)
        self.wait_replicas_timeout = float(wait_replicas_timeout)
        # A wait this long says what it waits for (deadlock detection);
        # None: never (a cycle through this client is then not found).
        self.deadlock_timeout = deadlock_timeout
        self._bodies = p.load_scripts(lua_dir)
        # EVALSHA by our own SHA1s (not register_script: redis-py 4.3's
        # Script does not work on RedisCluster).
        self._shas = {n: hashlib.sha1(b.encode("utf-8")).hexdigest()
                      for n, b in self._bodies.items()}
        # RedisCluster's pipelines refuse EVALSHA (redis-py 4.3): owed
        # releases then go first, each waited for, and WAIT is not offered.
        self._pipelines = not _is_cluster(redis_client)
        if self.wait_replicas > 0 and not self._pipelines:
            raise ValueError("wait_replicas needs a client with pipelines (not RedisCluster)")
        # On a cluster, redis-py logs every NOSCRIPT with a traceback: load
        # the scripts on all primaries before the first call instead.
        self._preload = not self._pipelines
        self._owed = p.OwedReleases()
        self._holds: "weakref.WeakSet[Any]" = weakref.WeakSet()   # locks held
        self._unacked_logged = 0.0

    @classmethod
    def _from_url(cls, url: str, redis_kwargs: Optional[Dict[str, Any]] = None,
                  **kwargs: Any) -> Any:
        """A client on what a rwlock.redis_url names, every form the
        extension accepts: redis://, rediss://, unix:// (redis-py's
        from_url), redis+sentinel:// / rediss+sentinel:// (sentinel_redis),
        redis+cluster:// / rediss+cluster:// (redis-py's RedisCluster), or
        several URLs separated by spaces, a quorum: then a QuorumClient
        (AsyncQuorumClient from AsyncClient), whose options (max_lease,
        drift) kwargs may carry. redis_kwargs go to redis-py's clients."""
        rk = redis_kwargs or {}
        if len(url.split()) > 1:
            return cls._quorum_class().from_urls(url, redis_kwargs, **kwargs)
        if p.is_sentinel_url(url):
            return cls(cls._sentinel_redis(url, **rk), **kwargs)
        if p.is_cluster_url(url):
            return cls(cls._cluster_redis(url, **rk), **kwargs)
        return cls(cls._redis_class.from_url(url, **rk), **kwargs)

    @classmethod
    def _quorum_class(cls) -> Any:
        from .quorum import QuorumClient
        return QuorumClient

    @staticmethod
    def _cluster_redis(url: str, **kwargs: Any) -> Any:
        from redis.cluster import ClusterNode, RedisCluster
        nodes, conn = p.parse_cluster_url(url, kwargs)
        return RedisCluster(startup_nodes=[ClusterNode(h, port) for h, port in nodes], **conn)

    def held_locks(self) -> List[Any]:
        """The locks of this client held now (acquired, not released)."""
        return [lk for lk in list(self._holds) if lk.held]

    def new_owner(self) -> str:
        """A fresh owner id: py:<hostname>:<pid>:<random>."""
        return p.new_owner(self.owner_prefix)

    def _make_lock(self, name: str, mode: str, lease: Optional[float],
                   timeout: Optional[float], on_lost: Optional[Callable[..., Any]],
                   raise_on_lost: bool, owner: Optional[str]) -> Any:
        """A lock object for `mode` of `name` (not yet acquired). As a
        context manager, a hold lost inside the block raises LockLost at its
        end (raise_on_lost=False: a warning is logged instead). owner: the
        owner id (default a fresh one): another lock's, of another name held
        by the same thread or task, links them for deadlock detection."""
        lk = self._lock_class(self, name, mode, lease, timeout, on_lost, owner)
        lk.raise_on_lost = raise_on_lost
        return lk

    def _keys(self, name: str) -> List[str]:
        return list(p.lock_keys(self.prefix, name)[:2])

    def _fill(self, pipe: Any, calls: Sequence[Call], keys: List[str], wait: bool,
              tail: Sequence[Sequence[Any]] = (), bodies: bool = False) -> None:
        """Queue the calls on pipe: EVALSHA, or with bodies EVAL (after a
        NOSCRIPT: it caches the script too, and needs no SCRIPT LOAD, which
        the least-privilege user of docs/connecting.md lacks). Sent again,
        a call that ran the first time is stale (the same seq): nothing
        runs twice."""
        for script, args in calls:
            if bodies:
                pipe.eval(self._bodies[script], 2, *keys, *args)
            else:
                pipe.evalsha(self._shas[script], 2, *keys, *args)
        if wait:
            pipe.execute_command("WAIT", self.wait_replicas,
                                 max(1, int(self.wait_replicas_timeout * 1000)))
        for command in tail:
            pipe.execute_command(*command)

    @staticmethod
    def _noscript(replies: Sequence[Any]) -> bool:
        return any(isinstance(r, redis.exceptions.NoScriptError) for r in replies)

    @staticmethod
    def _reply_error(name: str, e: Exception) -> Exception:
        """What to raise for a script's error reply e: ProtocolVersionError,
        StaleRequestError, or a ConnectionError for a stale answer to a copy
        of our own request that ran already (its answer is lost), else e."""
        if p.is_repeat(e):
            return redis.exceptions.ConnectionError(
                "rwlock: a request on lock %r was sent again after it had run "
                "(its answer is lost): %s" % (name, e))
        return p.script_error(name, e) or e

    def _checked(self, name: str, replies: Sequence[Any], wait: bool, tail: int = 0,
                 owed: int = 0):
        """(script replies, acks or None), and with tail the last `tail`
        replies as a third item; raises the first error reply, but for a
        stale answer to one of the first `owed` calls (owed releases),
        which counts as 0."""
        replies = [0 if i < owed and isinstance(r, Exception) and p.is_stale(r) else r
                   for i, r in enumerate(replies)]
        for r in replies:
            if isinstance(r, Exception):
                raise self._reply_error(name, r)
        if tail:
            return self._checked(name, replies[:-tail], wait) + (list(replies[-tail:]),)
        if wait:
            return list(replies[:-1]), int(replies[-1])
        return list(replies), None

    # -- the protocol's calls, as generators ------------------------------------

    def _walk_run(self, s: Any) -> Run:
        """The Run of a walk's Script step (waits.lua, mark.lua), on its keys."""
        return Run(s.script, s.keys[0], s.args, list(s.keys))

    def _walker(self, owner: str, name: str, mode: str,
                aliases: Callable[[], List[str]]) -> Optional[Callable]:
        """take_plan's walker for a wait of owner on lock name, or None
        when this client does not walk (deadlock_timeout None, quorum)."""
        if not self._walks or not self.deadlock_timeout:
            return None
        hkey = self._keys(name)[0]
        life = p.Life()                 # this wait's look at a cycle's signs of life
        return lambda nonce: p.walk_plan(self.prefix, owner, mode, nonce, hkey, aliases(),
                                         life)

    def _info_g(self, name: str):
        return p.parse_info((yield Run("info", name, [PROTOCOL_VERSION])))

    def _acquire_g(self, name: str, owner: str, mode: str, lease_ms: int,
                   intent_ms: int, upgrade: bool = False, tail: Sequence[Sequence[Any]] = (),
                   seq: Optional[int] = None, owed_seq: Optional[int] = None):
        """acquire.lua: its outcome (acquire_outcome); with tail (raw commands
        sent after it in the same round trip), (outcome, their replies).
        seq: the request's (default: the next); owed_seq: that of the owed
        releases sent first, below seq (default: the next, before seq's)."""
        owed = self._owed.get(name)
        if owed:
            # New requests, older than the acquisition (an owed release may
            # be its owner's own).
            owed_seq = owed_seq or p.SEQ.next()
        if owed and not self._pipelines:
            for o, keep, lm in owed:
                # Each answered first; a stale one: nothing older is left.
                try:
                    yield from self._release_g(name, o, keep, lm, owed_seq)
                except p.StaleRequestError:
                    self._owed.done(name, [o])
            owed = []
        args = p.acquire_args(owner, seq or p.SEQ.next(), mode, lease_ms, intent_ms, upgrade)
        wait = self.wait_replicas > 0
        out: Any = None
        if owed or wait or tail:
            # Owed releases of this name go first, on the same connection.
            calls = [("release", p.release_args(o, owed_seq, k, lm)) for o, k, lm in owed]
            out = yield Pipe(name, calls + [("acquire", args)], wait, tail, len(calls))
            replies, acks = out[0], out[1]
            self._owed.done(name, [o for o, _, _ in owed])
            reply = replies[-1]
        else:
            reply, acks = (yield Run("acquire", name, args)), None
        outcome = p.acquire_outcome(reply, acks, self.wait_replicas)
        return (outcome, out[2]) if tail else outcome

    def _release_g(self, name: str, owner: str, keep: str, lease_ms: int = 0,
                   seq: Optional[int] = None):
        """release.lua (seq: the request's, default the next); one whose
        answer does not come is owed."""
        args = p.release_args(owner, seq or p.SEQ.next(), keep, lease_ms)
        try:
            held = int((yield Run("release", name, args)))
        except (GeneratorExit, ProtocolVersionError, p.StaleRequestError):
            raise
        except BaseException:
            self._owed.add(name, owner, keep, lease_ms)
            raise
        if keep == "":
            self._owed.done(name, [owner])
        return held

    def _renew_g(self, name: str, owner: str, lease_ms: int, seq: Optional[int] = None):
        """renew.lua, as of seq (default: the newest request sent, SEQ.now()).
        A stale answer is no loss: a request of the owner's sent since ran
        first (an upgrade, say), and the renewal is asked again as of it."""
        seq = seq or p.SEQ.now()
        while True:
            args = p.renew_args(owner, seq, lease_ms)
            try:
                if self.wait_replicas <= 0:
                    return int((yield Run("renew", name, args)))
                (held,), acks = yield Pipe(name, [("renew", args)], True)
            except p.StaleRequestError:
                newer = p.SEQ.now()
                if newer <= seq:
                    raise           # newer than any we sent: not ours
                seq = newer
                continue
            if acks < self.wait_replicas and time.monotonic() - self._unacked_logged > 10:
                # Not a loss: the master has the renewal; the next asks again.
                self._unacked_logged = time.monotonic()
                log.warning("rwlock: a renewal of %r was acknowledged by %d of "
                            "the %d replicas asked for", name, acks, self.wait_replicas)
            return int(held)


class Client(BaseClient):
    """Locks on one Redis service, through any synchronous redis-py client
    (redis.Redis, Sentinel(...).master_for(...), RedisCluster; thread-safe).

    prefix: the extension's rwlock.key_prefix; lease: seconds (the
    extension's rwlock.lease); lua_dir: where the scripts are (default: those
    shipped in the package); wait_replicas: replicas that must acknowledge a
    grant (WAIT)."""

    _redis_class = redis.Redis
    _sentinel_redis = staticmethod(sentinel_redis)

    def __init__(self, redis_client: Any, prefix: str = "rwlock", lease: float = 30.0,
                 lua_dir: Optional[str] = None, subscribe_timeout: float = 2.0,
                 wait_replicas: int = 0, wait_replicas_timeout: float = 0.1,
                 deadlock_timeout: Optional[float] = 1.0) -> None:
        super().__init__(redis_client, prefix, lease, lua_dir, subscribe_timeout,
                         wait_replicas, wait_replicas_timeout, deadlock_timeout)
        self._renewer = Renewer()
        # The holds each thread took: a thread that waits waits for them all
        # (deadlock detection: their owners' wait keys say so too).
        self._thread_holds = threading.local()

    @classmethod
    def from_url(cls, url: str, redis_kwargs: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> "Client":
        """A client on what a rwlock.redis_url names, every form the
        extension accepts: redis://, rediss://, unix:// (redis-py's
        from_url), redis+sentinel:// / rediss+sentinel:// (sentinel_redis),
        redis+cluster:// / rediss+cluster:// (redis-py's RedisCluster), or
        several URLs separated by spaces, a quorum: then a QuorumClient (a
        Client), whose options (max_lease, drift) kwargs may carry.
        redis_kwargs go to redis-py's clients."""
        return cast("Client", cls._from_url(url, redis_kwargs, **kwargs))

    def write_lock(self, name: str, lease: Optional[float] = None,
                   timeout: Optional[float] = None,
                   on_lost: Optional[Callable[["Lock"], Any]] = None,
                   raise_on_lost: bool = True, owner: Optional[str] = None) -> "Lock":
        """A Lock for the write lock of `name`, not yet acquired. As a
        context manager, a hold lost inside the block raises LockLost at its
        end (raise_on_lost=False: a warning is logged instead). owner: the
        owner id, default a fresh one (see README, deadlock_timeout)."""
        return cast("Lock", self._make_lock(name, "w", lease, timeout, on_lost,
                                            raise_on_lost, owner))

    def read_lock(self, name: str, lease: Optional[float] = None,
                  timeout: Optional[float] = None,
                  on_lost: Optional[Callable[["Lock"], Any]] = None,
                  raise_on_lost: bool = True, owner: Optional[str] = None) -> "Lock":
        """A Lock for the read lock of `name`, not yet acquired (as write_lock)."""
        return cast("Lock", self._make_lock(name, "r", lease, timeout, on_lost,
                                            raise_on_lost, owner))

    def write_locks(self, names: Iterable[str], lease: Optional[float] = None,
                    timeout: Optional[float] = None,
                    on_lost: Optional[Callable[["Lock"], Any]] = None,
                    raise_on_lost: bool = True,
                    owner: Optional[str] = None) -> "MultiLock[Lock]":
        """A MultiLock for the write locks of several names, all or none,
        not yet acquired: taken in the canonical order (docs/protocol.md
        19), one Lock each, one owner id. timeout bounds the whole call;
        on_lost is called with the Lock of the name lost."""
        from ._multi import MultiLock
        return MultiLock(names, "w", lambda n, o: self.write_lock(
            n, lease, None, on_lost, raise_on_lost, o), timeout, owner)

    def read_locks(self, names: Iterable[str], lease: Optional[float] = None,
                   timeout: Optional[float] = None,
                   on_lost: Optional[Callable[["Lock"], Any]] = None,
                   raise_on_lost: bool = True,
                   owner: Optional[str] = None) -> "MultiLock[Lock]":
        """A MultiLock for the read locks of several names (as write_locks)."""
        from ._multi import MultiLock
        return MultiLock(names, "r", lambda n, o: self.read_lock(
            n, lease, None, on_lost, raise_on_lost, o), timeout, owner)

    def _holds_of_thread(self) -> "weakref.WeakSet":
        holds = getattr(self._thread_holds, "locks", None)
        if holds is None:
            holds = self._thread_holds.locks = weakref.WeakSet()
        return holds

    def release_all(self) -> int:
        """Release every hold of this client (lost ones too), e.g. at exit:
        a hold outlives its process until its lease ends otherwise. Returns
        how many were released; raises the first error once all were tried."""
        first = None
        locks = self.held_locks()
        for lk in locks:
            try:
                lk.release()
            except Exception as e:      # noqa: BLE001 - tried all, first raised
                first = first or e
        if first is not None:
            raise first
        return len(locks)

    def info(self, name: str) -> Dict[str, Any]:
        """The state of lock `name` as Redis has it now."""
        return drive(self._info_g(name), self._io)

    def _acquire(self, *args: Any):
        return drive(self._acquire_g(*args), self._io)

    def _release(self, *args: Any) -> int:
        return drive(self._release_g(*args), self._io)

    def _renew(self, *args: Any) -> int:
        return drive(self._renew_g(*args), self._io)

    def _io(self, step: Any) -> Any:
        """Run a Run or a Pipe."""
        keys = getattr(step, "keys", None) or self._keys(step.name)
        if self._preload:
            self._preload = False
            try:
                for body in self._bodies.values():
                    self.redis.script_load(body)
            except redis.exceptions.NoPermissionError:
                pass        # no SCRIPT LOAD (least privilege): EVAL after NOSCRIPT
        if isinstance(step, Run):
            try:
                try:
                    return self.redis.evalsha(self._shas[step.script], len(keys), *keys,
                                              *step.args)
                except redis.exceptions.NoScriptError:
                    return self.redis.eval(self._bodies[step.script], len(keys), *keys,
                                           *step.args)
            except redis.exceptions.ResponseError as e:
                raise self._reply_error(step.name, e)
        for attempt in (0, 1):
            pipe = self.redis.pipeline(transaction=False)
            self._fill(pipe, step.calls, keys, step.wait, step.tail, attempt == 1)
            replies = pipe.execute(raise_on_error=False)
            if attempt == 0 and self._noscript(replies):
                continue
            break
        return self._checked(step.name, replies, step.wait, len(step.tail), step.owed)


    def _subscribe(self, channel: str):
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
                if m and p.text(m["type"]) == "subscribe" and p.text(m["channel"]) == channel:
                    return ps
        except redis.exceptions.RedisError as e:
            log.debug("rwlock: subscribing to %s failed: %s", channel, e)
        ps.close()
        return None


def _wait_message(ps: Any, channel: str, timeout: float) -> bool:
    """Wait up to timeout s for a message on channel. False on timeout."""
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        m = ps.get_message(timeout=left)
        if m and p.text(m["type"]) == "message" and p.text(m["channel"]) == channel:
            return True


class Renewer:
    """One daemon thread per Client renews every held Lock of it when due
    (a thread per hold would cost more than the lock itself)."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: List[Tuple[float, int, "Lock"]] = []
        self._seq = 0
        self._thread: Optional[threading.Thread] = None

    def schedule(self, lock: "Lock", delay: float) -> None:
        with self._cond:
            self._seq += 1
            lock._renew_seq = self._seq
            due = time.monotonic() + delay
            first = not self._heap or due < self._heap[0][0]
            heapq.heappush(self._heap, (due, self._seq, lock))
            if self._thread is None or not self._thread.is_alive():
                self._thread = threading.Thread(target=self._run, daemon=True,
                                                name="rwlock-renew")
                self._thread.start()
            if first:
                self._cond.notify()     # else it wakes up earlier anyway

    def _run(self) -> None:
        while True:
            with self._cond:
                while True:
                    now = time.monotonic()
                    if self._heap and self._heap[0][0] <= now:
                        _, seq, lock = heapq.heappop(self._heap)
                        if seq == lock._renew_seq:
                            break               # else: cancelled or rescheduled
                        continue
                    self._cond.wait(self._heap[0][0] - now if self._heap else None)
            lock._renew_due(self)


class LockState:
    """What a holder knows of its hold, shared by Lock and AsyncLock."""

    def __init__(self, client: Any, name: str, mode: str, lease: Optional[float],
                 timeout: Optional[float], on_lost: Optional[Callable[..., Any]],
                 owner: Optional[str] = None) -> None:
        p.check_name(name)
        if mode not in ("r", "w"):
            raise ValueError("mode must be 'r' or 'w'")
        self.client = client
        self.name = name
        self.mode = mode
        self.lease = float(lease if lease is not None else client.lease)
        if self.lease <= 0:
            raise ValueError("lease must be positive")
        self.timeout = timeout              # for the context manager
        self.on_lost = on_lost              # called as on_lost(lock)
        # One owner id per holder; a given one (another lock's, of another
        # name, held by the same thread or task) links them: what one holds,
        # the other's waits wait with (docs/protocol.md 18).
        self.owner: str = client.new_owner() if owner is None else p.check_owner(owner)
        self.token: Optional[int] = None
        self._channel = p.lock_keys(client.prefix, name)[2]
        self._held = False
        self._lost = False
        self._valid_until = 0.0             # monotonic; lease end as we know it
        self.raise_on_lost = True           # the context manager: LockLost at exit

    def __repr__(self) -> str:
        return "<rwlock %s %r owner=%s held=%s lost=%s token=%s>" % (
            "write" if self.mode == "w" else "read", self.name, self.owner,
            self._held, self.lost, self.token)

    @property
    def held(self) -> bool:
        """Acquired and not released (it may have been lost meanwhile)."""
        return self._held

    @property
    def lost(self) -> bool:
        """True once the hold is known or presumed lost: Redis said so at a
        renewal, or the lease has run out by our clock without a renewal."""
        return self._lost or (self._held and time.monotonic() > self._valid_until)

    def _channel_for(self, mode: str) -> str:
        # Readers are woken on the lock's channel, a writer on its own.
        return self._channel if mode == "r" else "%s:%s" % (self._channel, self.owner)

    def _timeout_error(self, timeout: Optional[float]) -> LockTimeout:
        return LockTimeout("timed out after %ss waiting for the %s lock %r"
                           % (timeout, "write" if self.mode == "w" else "read", self.name))

    def _take_setup(self, mode: str, timeout: Optional[float], upgrade: bool):
        """(client, lease ms, mark ms, channel) of an acquisition, checked."""
        if upgrade and (not self._held or self.mode != "r"):
            raise NotHeld("upgrade() needs a held read lock")
        if self._held and not upgrade:
            raise AlreadyHeld("%r is already held" % self)
        intent_ms = p.INTENT_MS if timeout is None or timeout > 0 else 0
        return self.client, p.ms(self.lease), intent_ms, self._channel_for(mode)

    def _check_drop(self, keep: str) -> None:
        if not self._held:
            raise NotHeld("%r is not held" % self)
        if keep == "r" and self.mode != "w":
            raise NotHeld("downgrade() needs a held write lock")

    def _set_granted(self, mode: str, token: int, sent: float) -> None:
        self.mode = mode
        self.token = token
        self._lost = False
        self._valid_until = sent + self.lease
        self._held = True
        self.client._holds.add(self)

    def _set_released(self, keep: str, held: int, sent: float) -> None:
        if keep and held == 1:
            self.mode = "r"
            self._valid_until = sent + self.lease
        else:
            # `lost` keeps saying whether the hold was lost before its
            # release (after a with block too), until the next acquisition.
            self._lost = self._lost or held != 1
            self._held = False
            self.client._holds.discard(self)


def lost_at_exit(lock: "LockState", exc_type: Any) -> None:
    """The end of a with block whose hold was lost: LockLost, unless the
    block raised (its error is the one to see) or raise_on_lost is False."""
    if exc_type is None and lock.raise_on_lost:
        raise LockLost(lock.name, lock.owner)
    log.warning("rwlock: lock %r (owner %s) was lost before it was released",
                lock.name, lock.owner)


def release_failed_at_exit(lock: "LockState", exc_type: Any, presumed_lost: bool,
                           e: BaseException) -> bool:
    """The end of a with block whose release raised e: what to raise, or
    False (the block's own error goes on; the release is owed)."""
    if exc_type is None:
        if (isinstance(e, redis.exceptions.RedisError) and presumed_lost
                and lock.raise_on_lost):
            # Redis unreachable past the lease's end: the hold is lost (and
            # its release owed), which is what to say.
            raise LockLost(lock.name, lock.owner) from e
        raise e
    log.warning("rwlock: releasing %r failed after an error in its block",
                lock.name, exc_info=e)
    return False


class Lock(LockState):
    """One holder's read or write lock on one name.

    Properties: name, mode ("r"/"w"), owner, token (fencing token of the hold),
    held (acquired and not released), lost (the lease ran out or Redis lost it
    while held: the hold no longer excludes others). One thread at a time.
    """

    def __init__(self, client: Client, name: str, mode: str, lease: Optional[float] = None,
                 timeout: Optional[float] = None,
                 on_lost: Optional[Callable[["Lock"], Any]] = None,
                 owner: Optional[str] = None) -> None:
        super().__init__(client, name, mode, lease, timeout, on_lost, owner)
        self._mutex = threading.Lock()
        self._renew_seq = 0     # the Renewer's entry for this hold; 0: none

    # -- acquiring ----------------------------------------------------------

    def acquire(self, timeout: Optional[float] = None) -> int:
        """Wait for the lock (forever, or up to timeout s); the fencing token.
        Raises LockTimeout when the time runs out."""
        if not self._take(self.mode, timeout, upgrade=False):
            raise self._timeout_error(timeout)
        assert self.token is not None
        return self.token

    def try_acquire(self, wait: float = 0.0) -> bool:
        """Take the lock if it is free within `wait` s; True if taken."""
        return self._take(self.mode, wait, upgrade=False, is_try=True)

    def upgrade(self, timeout: Optional[float] = None) -> Union[int, Literal[False]]:
        """Holding the read lock, wait for the write lock too (until this
        holder is the only reader). The fencing token of the write lock, as
        acquire() returns it, once upgraded; False on timeout (the read lock
        is kept). Raises UpgradeConflict if another reader already
        waits to upgrade, ReadLockLost if Redis no longer has the read lock
        (the lock is then lost: `lost` is True, release() returns False)."""
        try:
            if not self._take("w", timeout, upgrade=True):
                return False
        except p.ReadLockLost as e:
            e.owner = self.owner
            self._lost = True
            raise
        assert self.token is not None
        return self.token

    def _take(self, mode: str, timeout: Optional[float], upgrade: bool,
              is_try: bool = False) -> bool:
        c, lease_ms, intent_ms, channel = self._take_setup(mode, timeout, upgrade)
        ps = None

        def granted(token: int, sent: float) -> None:
            self._granted(mode, token, sent)

        def aliases() -> List[str]:
            return sorted({lk.owner for lk in list(c._holds_of_thread())
                           if lk._held and lk.owner != self.owner})

        def step(s: p.Step) -> Any:
            nonlocal ps
            if isinstance(s, Acquire):
                return c._acquire(self.name, self.owner, mode, lease_ms,
                                  intent_ms, upgrade)
            if isinstance(s, Release):
                return c._release(self.name, self.owner, s.keep, lease_ms)
            if isinstance(s, Subscribe):
                ps = c._subscribe(channel)
                return ps is not None
            if isinstance(s, p.CheckIn):
                # This owner's wait, and the same wait for each owner id that
                # holds a lock in this thread ("<nonce>@<this owner>").
                cycle = None
                for owner, value in p.wait_values(self.owner, aliases(), mode, s.nonce,
                                                  c._keys(self.name)[0]).items():
                    # checkin.lua, not SET ... GET: EVAL is all the
                    # documented ACL user needs (and no Redis 6.2 option).
                    wk = p.wait_key(c.prefix, owner)
                    old = c._io(Run("checkin", wk, [PROTOCOL_VERSION, value, s.ttl_ms], [wk]))
                    cycle = cycle or p.marked_cycle(old, value)
                return cycle
            if isinstance(s, p.Get):            # the walk (docs/protocol.md 18)
                return c.redis.get(s.key)
            if isinstance(s, p.Ends):           # a member's sign of life
                end = c.redis.hget(s.key, s.field)
                if s.channel is not None:
                    try:
                        c.redis.publish(s.channel, s.message)
                    except redis.exceptions.RedisError:
                        pass    # a wake-up only hastens: a live waiter renews anyway
                return 0 if end is None else int(end)
            if isinstance(s, p.Script):
                return c._io(c._walk_run(s))
            if isinstance(s, p.DropWait):
                c.redis.delete(*[p.wait_key(c.prefix, o) for o in [self.owner] + aliases()])
                return None
            assert isinstance(s, Sleep)
            if not s.subscribed:
                time.sleep(max(0.0, s.seconds))
                return True
            try:
                _wait_message(ps, channel, s.seconds)
                return True
            except redis.exceptions.RedisError:
                ps.close()
                ps = None
                return False

        try:
            return drive(p.take_plan(self.name, mode, timeout, upgrade, is_try,
                                     c.wait_replicas, granted, c.deadlock_timeout,
                                     c._walker(self.owner, self.name, mode, aliases)), step)
        finally:
            if ps is not None:
                try:
                    ps.close()
                except Exception:
                    pass

    def _granted(self, mode: str, token: int, sent: float) -> None:
        self.client._holds_of_thread().add(self)
        with self._mutex:
            self._set_granted(mode, token, sent)
            self.client._renewer.schedule(self, self.lease / 3.0)

    # -- renewing -----------------------------------------------------------

    def renew(self) -> bool:
        """Renew the lease now; True if still held (the background thread
        does this every third of the lease)."""
        with self._mutex:
            if not self._held:
                raise NotHeld("%r is not held" % self)
            return self._renew_locked()

    def _renew_locked(self) -> bool:
        if self._lost:
            return False
        sent = time.monotonic()
        if self.client._renew(self.name, self.owner, p.ms(self.lease)) == 1:
            self._valid_until = sent + self.lease
            return True
        self._lost = True
        return False

    def _renew_due(self, renewer: Renewer) -> None:
        """The Renewer's call, every third of the lease while held."""
        interval = self.lease / 3.0
        with self._mutex:
            if not self._held or self._renew_seq == 0:
                return
            try:
                ok = self._renew_locked()
                if ok:
                    renewer.schedule(self, interval)
            except (ProtocolVersionError, p.StaleRequestError) as e:
                # Not ours to renew: keys of another version, or another
                # user of this owner id ran newer requests on the lock.
                log.warning("rwlock: renewing %r failed: %s", self.name, e)
                self._lost, ok = True, False
            except redis.exceptions.RedisError as e:
                # Keep trying, sooner; `lost` turns true by itself once the
                # lease has run out by our clock.
                log.warning("rwlock: renewing %r failed: %s", self.name, e)
                renewer.schedule(self, min(interval, 1.0))
                return
        if not ok:
            log.warning("rwlock: lock %r (owner %s) was lost", self.name, self.owner)
            if self.on_lost is not None:
                try:
                    self.on_lost(self)
                except Exception:
                    log.exception("rwlock: on_lost callback failed")

    # -- releasing ----------------------------------------------------------

    def release(self) -> bool:
        """Release the hold. True if it was still held, False if it had been
        lost (then others may have held the lock meanwhile). If Redis's
        answer does not come, the error is raised and the release is owed:
        the client sends it again ahead of the next acquisition of the name."""
        return self._drop("")

    def downgrade(self) -> bool:
        """Holding the write lock, keep only a read lock (no other writer can
        get in between). True if the write lock was still held; False if it
        was lost (then nothing is held)."""
        return self._drop("r")

    def _drop(self, keep: str) -> bool:
        self._check_drop(keep)
        with self._mutex:     # a renewal in flight ends first; none after
            lost = self._lost
            sent = time.monotonic()
            try:
                held = self.client._release(self.name, self.owner, keep, p.ms(self.lease))
            except BaseException:
                # Owed now; the lease is the backstop: stop renewing, forget it.
                self._lost = self._lost or time.monotonic() > self._valid_until
                self._held = False
                self.client._holds.discard(self)
                self._renew_seq = 0
                raise
            self._set_released(keep, held, sent)
            if not self._held:
                self._renew_seq = 0
        return held == 1 and not lost

    # -- context manager ------------------------------------------------------

    def __enter__(self) -> "Lock":
        self.acquire(self.timeout)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self._held:
            presumed_lost = self.lost       # the lease ran out by our clock
            try:
                held = self.release()
            except BaseException as e:
                return release_failed_at_exit(self, exc_type, presumed_lost, e)
            if not held:
                lost_at_exit(self, exc_type)
        return False


def drive(gen, step: Callable[[Any], Any]) -> Any:
    """Run a take_plan generator with the synchronous step(): its return value."""
    try:
        s = next(gen)
        while True:
            try:
                r = step(s)
            except BaseException as e:
                s = gen.throw(e)
            else:
                s = gen.send(r)
    except StopIteration as stop:
        return stop.value


Client._lock_class = Lock
