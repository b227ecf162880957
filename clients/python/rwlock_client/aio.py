"""The asyncio client: AsyncClient and AsyncLock on redis.asyncio (Redis,
Sentinel(...).master_for(...)). Same protocol, same waiting algorithm
(rwlock_client._protocol.take_plan) and the same owed-release rule as the
synchronous client; renewal is an asyncio task per held lock.

    import redis.asyncio as aredis
    from rwlock_client.aio import AsyncClient

    locks = AsyncClient(aredis.Redis())
    async with locks.write_lock("invoice:42", timeout=10) as lk:
        await save(data, fencing_token=lk.token)
"""
from __future__ import annotations

import asyncio
import inspect
import logging
import time
import weakref
from typing import (TYPE_CHECKING, Any, Awaitable, Callable, Dict, Iterable, List, Literal,
                    Optional, Union, cast)

import redis
import redis.asyncio as aredis

from . import _protocol as p
from ._protocol import Acquire, NotHeld, ProtocolVersionError, Release, Sleep, Subscribe
from ._multi import AsyncMultiLock
from ._sync import BaseClient, LockState, Run, lost_at_exit, release_failed_at_exit

if TYPE_CHECKING:
    from .quorum import AsyncQuorumClient

log = logging.getLogger("rwlock_client")

OnLost = Callable[["AsyncLock"], Union[None, Awaitable[None]]]

__all__ = ["AsyncClient", "AsyncLock", "sentinel_redis"]


def sentinel_redis(url: str, **kwargs: Any) -> "aredis.Redis":
    """redis.asyncio's master of a redis+sentinel:// URL (see
    rwlock_client.sentinel_redis)."""
    from redis.asyncio.sentinel import Sentinel
    sentinels, sentinel_kwargs, conn, name = p.parse_sentinel_url(url, kwargs)
    return Sentinel(sentinels, sentinel_kwargs=sentinel_kwargs, **conn).master_for(name)


class AsyncClient(BaseClient):
    """Locks on one Redis service through a redis.asyncio client (Redis,
    Sentinel(...).master_for(...), RedisCluster). Arguments as
    rwlock_client.Client."""

    _redis_class = aredis.Redis
    _sentinel_redis = staticmethod(sentinel_redis)

    def __init__(self, redis_client: Any, prefix: str = "rwlock", lease: float = 30.0,
                 lua_dir: Optional[str] = None, subscribe_timeout: float = 2.0,
                 wait_replicas: int = 0, wait_replicas_timeout: float = 0.1,
                 deadlock_timeout: Optional[float] = 1.0) -> None:
        super().__init__(redis_client, prefix, lease, lua_dir, subscribe_timeout,
                         wait_replicas, wait_replicas_timeout, deadlock_timeout)
        # The holds each asyncio task took: a task that waits waits for
        # them all (deadlock detection: their owners' wait keys say so too),
        # as a thread's in Client.
        self._task_holds: "weakref.WeakKeyDictionary[asyncio.Task[Any], weakref.WeakSet[AsyncLock]]" = \
            weakref.WeakKeyDictionary()

    def _holds_of_task(self) -> "weakref.WeakSet[AsyncLock]":
        task = asyncio.current_task()
        if task is None:
            return weakref.WeakSet()
        holds = self._task_holds.get(task)
        if holds is None:
            holds = self._task_holds[task] = weakref.WeakSet()
        return holds

    @classmethod
    def from_url(cls, url: str, redis_kwargs: Optional[Dict[str, Any]] = None,
                 **kwargs: Any) -> "Union[AsyncClient, AsyncQuorumClient]":
        """As Client.from_url, on redis.asyncio; several URLs (a quorum)
        give an AsyncQuorumClient."""
        return cast("Union[AsyncClient, AsyncQuorumClient]",
                    cls._from_url(url, redis_kwargs, **kwargs))

    def write_lock(self, name: str, lease: Optional[float] = None,
                   timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
                   raise_on_lost: bool = True, owner: Optional[str] = None) -> "AsyncLock":
        """An AsyncLock for the write lock of `name` (as Client.write_lock)."""
        return cast("AsyncLock", self._make_lock(name, "w", lease, timeout, on_lost,
                                                 raise_on_lost, owner))

    def read_lock(self, name: str, lease: Optional[float] = None,
                  timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
                  raise_on_lost: bool = True, owner: Optional[str] = None) -> "AsyncLock":
        """An AsyncLock for the read lock of `name` (as Client.read_lock)."""
        return cast("AsyncLock", self._make_lock(name, "r", lease, timeout, on_lost,
                                                 raise_on_lost, owner))

    def write_locks(self, names: Iterable[str], lease: Optional[float] = None,
                    timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
                    raise_on_lost: bool = True,
                    owner: Optional[str] = None) -> "AsyncMultiLock[AsyncLock]":
        """An AsyncMultiLock for the write locks of several names, all or
        none (as Client.write_locks)."""
        return AsyncMultiLock(names, "w", lambda n, o: self.write_lock(
            n, lease, None, on_lost, raise_on_lost, o), timeout, owner)

    def read_locks(self, names: Iterable[str], lease: Optional[float] = None,
                   timeout: Optional[float] = None, on_lost: Optional[OnLost] = None,
                   raise_on_lost: bool = True,
                   owner: Optional[str] = None) -> "AsyncMultiLock[AsyncLock]":
        """An AsyncMultiLock for the read locks of several names (as write_locks)."""
        return AsyncMultiLock(names, "r", lambda n, o: self.read_lock(
            n, lease, None, on_lost, raise_on_lost, o), timeout, owner)

    @classmethod
    def _quorum_class(cls) -> Any:
        from .quorum import AsyncQuorumClient
        return AsyncQuorumClient

    @staticmethod
    def _cluster_redis(url: str, **kwargs: Any) -> Any:
        from redis.asyncio.cluster import ClusterNode, RedisCluster
        nodes, conn = p.parse_cluster_url(url, kwargs)
        return RedisCluster(startup_nodes=[ClusterNode(h, port) for h, port in nodes], **conn)

    async def release_all(self) -> int:
        """Release every hold of this client (lost ones too), e.g. at exit:
        a hold outlives its process until its lease ends otherwise. Returns
        how many were released; raises the first error once all were tried."""
        locks = self.held_locks()
        results = await asyncio.gather(*(lk.release() for lk in locks), return_exceptions=True)
        for r in results:
            if isinstance(r, BaseException):
                raise r
        return len(locks)

    async def info(self, name: str) -> Dict[str, Any]:
        return await adrive(self._info_g(name), self._io)

    async def _acquire(self, *args: Any):
        return await adrive(self._acquire_g(*args), self._io)

    async def _release(self, *args: Any) -> int:
        return await adrive(self._release_g(*args), self._io)

    async def _renew(self, *args: Any) -> int:
        return await adrive(self._renew_g(*args), self._io)

    async def _io(self, step: Any) -> Any:
        """Run a Run or a Pipe (as Client._io, with await)."""
        keys = getattr(step, "keys", None) or self._keys(step.name)
        if self._preload:
            self._preload = False
            try:
                for body in self._bodies.values():
                    await self.redis.script_load(body)
            except redis.exceptions.NoPermissionError:
                pass        # no SCRIPT LOAD (least privilege): EVAL after NOSCRIPT
        if isinstance(step, Run):
            try:
                try:
                    return await self.redis.evalsha(self._shas[step.script], len(keys),
                                                    *keys, *step.args)
                except redis.exceptions.NoScriptError:
                    return await self.redis.eval(self._bodies[step.script], len(keys),
                                                 *keys, *step.args)
            except redis.exceptions.ResponseError as e:
                raise self._reply_error(step.name, e)
        for attempt in (0, 1):
            pipe = self.redis.pipeline(transaction=False)
            self._fill(pipe, step.calls, keys, step.wait, (), attempt == 1)
            replies = await pipe.execute(raise_on_error=False)
            if attempt == 0 and self._noscript(replies):
                continue
            break
        return self._checked(step.name, replies, step.wait, 0, step.owed)


    _node_redis: Optional["aredis.Redis"] = None

    def _pubsub(self) -> Any:
        """A PubSub. redis.asyncio's RedisCluster has none (redis-py 4.x): then
        one on a plain connection to its default node, as PUBLISH reaches
        every node of a cluster."""
        if hasattr(self.redis, "pubsub"):
            return self.redis.pubsub()
        return self._node().pubsub()

    async def _publish(self, channel: str, message: str) -> None:
        """PUBLISH; redis.asyncio's RedisCluster has no publish (redis-py
        4.x): then on its default node's plain connection, as _pubsub."""
        if hasattr(self.redis, "publish"):
            await self.redis.publish(channel, message)
        else:
            await self._node().publish(channel, message)

    def _node(self) -> Any:
        """A plain connection to a RedisCluster's default node."""
        if self._node_redis is None:
            node = self.redis.get_default_node()
            kw = {k: v for k, v in node.connection_kwargs.items()
                  if k != "redis_connect_func"}      # the cluster's own handshake
            self._node_redis = aredis.Redis(connection_pool=aredis.ConnectionPool(
                connection_class=node.connection_class, **kw))
        return self._node_redis

    async def _subscribe(self, channel: str):
        ps = self._pubsub()
        try:
            await ps.subscribe(channel)
            end = time.monotonic() + self.subscribe_timeout
            while time.monotonic() < end:
                m = await ps.get_message(timeout=end - time.monotonic())
                if m and p.text(m["type"]) == "subscribe" and p.text(m["channel"]) == channel:
                    return ps
        except redis.exceptions.RedisError as e:
            log.debug("rwlock: subscribing to %s failed: %s", channel, e)
        await _close(ps)
        return None


async def _close(ps: Any) -> None:
    try:
        await ps.reset()
    except Exception:
        pass


async def _wait_message(ps: Any, channel: str, timeout: float) -> bool:
    end = time.monotonic() + timeout
    while True:
        left = end - time.monotonic()
        if left <= 0:
            return False
        m = await ps.get_message(timeout=left)
        if m and p.text(m["type"]) == "message" and p.text(m["channel"]) == channel:
            return True


class AsyncLock(LockState):
    """One holder's read or write lock on one name, for asyncio. Same
    properties as rwlock_client.Lock; one task at a time."""

    def __init__(self, client: AsyncClient, name: str, mode: str,
                 lease: Optional[float] = None, timeout: Optional[float] = None,
                 on_lost: Optional[OnLost] = None, owner: Optional[str] = None) -> None:
        super().__init__(client, name, mode, lease, timeout, on_lost, owner)
        self._mutex_obj: Optional[asyncio.Lock] = None
        self._timer: Optional[asyncio.TimerHandle] = None   # the next renewal
        self._renewing: Optional[asyncio.Task] = None

    @property
    def _mutex(self) -> asyncio.Lock:
        # Made in the running loop (Python < 3.10 binds a Lock to the loop
        # current when it is made).
        if self._mutex_obj is None:
            self._mutex_obj = asyncio.Lock()
        return self._mutex_obj

    async def acquire(self, timeout: Optional[float] = None) -> int:
        """Wait for the lock (forever, or up to timeout s); the fencing token.
        Raises LockTimeout when the time runs out."""
        if not await self._take(self.mode, timeout, upgrade=False):
            raise self._timeout_error(timeout)
        assert self.token is not None
        return self.token

    async def try_acquire(self, wait: float = 0.0) -> bool:
        return await self._take(self.mode, wait, upgrade=False, is_try=True)

    async def upgrade(self, timeout: Optional[float] = None) -> Union[int, Literal[False]]:
        """As Lock.upgrade(): the write lock's fencing token, or False on timeout."""
        try:
            if not await self._take("w", timeout, upgrade=True):
                return False
        except p.ReadLockLost as e:
            e.owner = self.owner
            self._lost = True       # as Lock.upgrade
            raise
        assert self.token is not None
        return self.token

    async def _take(self, mode: str, timeout: Optional[float], upgrade: bool,
                    is_try: bool = False) -> bool:
        c, lease_ms, intent_ms, channel = self._take_setup(mode, timeout, upgrade)
        ps = None

        def granted(token: int, sent: float) -> None:
            c._holds_of_task().add(self)
            self._set_granted(mode, token, sent)
            self._schedule(self.lease / 3.0)

        def aliases() -> List[str]:
            # The owner ids of the other locks this task holds: this wait
            # is theirs too (docs/protocol.md 18, "<nonce>@<owner>").
            return sorted({lk.owner for lk in list(c._holds_of_task())
                           if lk._held and lk.owner != self.owner})

        async def step(s: p.Step) -> Any:
            nonlocal ps
            if isinstance(s, Acquire):
                return await c._acquire(self.name, self.owner, mode, lease_ms,
                                        intent_ms, upgrade)
            if isinstance(s, Release):
                return await c._release(self.name, self.owner, s.keep, lease_ms)
            if isinstance(s, Subscribe):
                ps = await c._subscribe(channel)
                return ps is not None
            if isinstance(s, p.CheckIn):
                # This owner's wait, and the same wait for each owner id that
                # holds a lock in this task ("<nonce>@<this owner>").
                cycle = None
                for owner, value in p.wait_values(self.owner, aliases(), mode, s.nonce,
                                                  c._keys(self.name)[0]).items():
                    # checkin.lua, not SET ... GET (as the sync client)
                    wk = p.wait_key(c.prefix, owner)
                    old = await c._io(Run("checkin", wk,
                                          [p.PROTOCOL_VERSION, value, s.ttl_ms], [wk]))
                    cycle = cycle or p.marked_cycle(old, value)
                return cycle
            if isinstance(s, p.DropWait):
                await c.redis.delete(*[p.wait_key(c.prefix, o) for o in [self.owner] + aliases()])
                return None
            if isinstance(s, p.Get):            # the walk (docs/protocol.md 18)
                return await c.redis.get(s.key)
            if isinstance(s, p.Ends):           # a member's sign of life
                end = await c.redis.hget(s.key, s.field)
                if s.channel is not None:
                    try:
                        await c._publish(s.channel, s.message)
                    except redis.exceptions.RedisError:
                        pass    # a wake-up only hastens: a live waiter renews anyway
                return 0 if end is None else int(end)
            if isinstance(s, p.Script):
                return await c._io(c._walk_run(s))
            assert isinstance(s, Sleep)
            if not s.subscribed:
                await asyncio.sleep(max(0.0, s.seconds))
                return True
            try:
                await _wait_message(ps, channel, s.seconds)
                return True
            except redis.exceptions.RedisError:
                await _close(ps)
                ps = None
                return False

        try:
            return await adrive(p.take_plan(self.name, mode, timeout, upgrade, is_try,
                                            c.wait_replicas, granted, c.deadlock_timeout,
                                            c._walker(self.owner, self.name, mode, aliases)),
                                step)
        finally:
            if ps is not None:
                await _close(ps)

    async def renew(self) -> bool:
        async with self._mutex:
            if not self._held:
                raise NotHeld("%r is not held" % self)
            return await self._renew_locked()

    async def _renew_locked(self) -> bool:
        if self._lost:
            return False
        sent = time.monotonic()
        if await self.client._renew(self.name, self.owner, p.ms(self.lease)) == 1:
            self._valid_until = sent + self.lease
            return True
        self._lost = True
        return False

    def _schedule(self, delay: float) -> None:
        """Renew in `delay` s (a timer, not a task per hold: cheaper)."""
        self._cancel_renewal()
        loop = asyncio.get_running_loop()
        self._timer = loop.call_later(delay, self._start_renewal)

    def _start_renewal(self) -> None:
        # Referenced until done: the loop keeps only weak references to tasks.
        self._renewing = asyncio.get_running_loop().create_task(self._renew_due())

    def _cancel_renewal(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None

    async def _renew_due(self) -> None:
        interval = self.lease / 3.0
        async with self._mutex:
            if not self._held:
                return
            try:
                ok = await self._renew_locked()
                if ok:
                    self._schedule(interval)
            except (ProtocolVersionError, p.StaleRequestError) as e:
                # Not ours to renew: keys of another version, or another
                # user of this owner id ran newer requests on the lock.
                log.warning("rwlock: renewing %r failed: %s", self.name, e)
                self._lost, ok = True, False
            except redis.exceptions.RedisError as e:
                # Keep trying, sooner; `lost` turns true by itself once the
                # lease has run out by our clock.
                log.warning("rwlock: renewing %r failed: %s", self.name, e)
                self._schedule(min(interval, 1.0))
                return
        if not ok:
            log.warning("rwlock: lock %r (owner %s) was lost", self.name, self.owner)
            if self.on_lost is not None:
                try:
                    r = self.on_lost(self)
                    if inspect.isawaitable(r):
                        await r
                except Exception:
                    log.exception("rwlock: on_lost callback failed")

    async def release(self) -> bool:
        """As Lock.release()."""
        return await self._drop("")

    async def downgrade(self) -> bool:
        """As Lock.downgrade()."""
        return await self._drop("r")

    async def _drop(self, keep: str) -> bool:
        self._check_drop(keep)
        self._cancel_renewal()
        async with self._mutex:     # a renewal in flight ends first; none after
            lost = self._lost
            sent = time.monotonic()
            try:
                held = await self.client._release(self.name, self.owner, keep,
                                                  p.ms(self.lease))
            except BaseException:
                # Owed now; the lease is the backstop: stop renewing, forget it.
                self._lost = self._lost or time.monotonic() > self._valid_until
                self._held = False
                self.client._holds.discard(self)
                raise
            self._set_released(keep, held, sent)
            if self._held:
                self._schedule(self.lease / 3.0)
        return held == 1 and not lost

    async def __aenter__(self) -> "AsyncLock":
        await self.acquire(self.timeout)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if self._held:
            presumed_lost = self.lost       # the lease ran out by our clock
            try:
                held = await self.release()
            except BaseException as e:
                return release_failed_at_exit(self, exc_type, presumed_lost, e)
            if not held:
                lost_at_exit(self, exc_type)
        return False


async def adrive(gen, step: Callable[[Any], Awaitable[Any]]) -> Any:
    """Run a take_plan generator with the asynchronous step()."""
    try:
        s = next(gen)
        while True:
            try:
                r = await step(s)
            except BaseException as e:
                s = gen.throw(e)
            else:
                s = gen.send(r)
    except StopIteration as stop:
        return stop.value


AsyncClient._lock_class = AsyncLock
