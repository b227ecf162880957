"""Quorum mode (experimental; the repository's docs/topologies.md says what it promises
and under which timing assumptions): a lock held on a majority of an odd
number of independent masters, sharing locks with SQL sessions whose
rwlock.redis_url lists the same masters (docs/protocol.md 13.3).

    from rwlock_client import QuorumClient

    locks = QuorumClient.from_urls("redis://a:6379/0 redis://b:6379/0 redis://c:6379/0",
                                   max_lease=60.0)      # = rwlock.quorum_max_lease

AsyncQuorumClient is the same for asyncio (each call in a thread). The
Lock objects are the package's Lock: the waiting
algorithm, renewal thread and owed releases are those of Client; the
quorum's members are each a Client of one master.
"""
from __future__ import annotations

import asyncio
import functools
import random
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any, Callable, Dict, Iterable, List, Optional, Tuple

import redis

from . import _protocol as p
from ._protocol import BUSY, CONFLICT, GRANTED, READ_LOST
from ._multi import AsyncMultiLock
from ._sync import Client, Lock, Run

__all__ = ["QuorumClient", "AsyncQuorumClient", "SPLIT_PAUSE_MS"]

SPLIT_PAUSE_MS = (10, 100)  # the random pause after a split vote

# A member's vote: (GRANTED|BUSY|CONFLICT, token|ms|other owner, counts), or
# (None, the error, False) when it could not be asked.
Vote = Tuple[Optional[int], Any, bool]


class _QuorumPubSub:
    """The subscriptions on several masters as one: get_message polls each."""

    POLL = 0.005

    def __init__(self, pubsubs: List[Any]) -> None:
        self.pubsubs = pubsubs

    def get_message(self, timeout: float = 0.0) -> Any:
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

    def close(self) -> None:
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
    rwlock.quorum_max_lease. The masters are asked all at once (a thread
    each), so masters that do not answer cost one socket timeout, not one
    each: asked in turn, k silent masters would take k timeouts per round,
    and a renewal could reach the others after their lease ran out."""

    # Deadlock detection's walk (docs/protocol.md 18, "Quorum mode": values
    # and edges by majority) is not implemented: no walk.
    _walks = False

    def __init__(self, redis_clients: Iterable[Any], prefix: str = "rwlock",
                 lease: float = 30.0, lua_dir: Optional[str] = None,
                 subscribe_timeout: float = 2.0, drift: float = 0.01,
                 max_lease: float = 60.0) -> None:
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
        self._persists: Dict[Tuple[int, Any], bool] = {}  # (member, run_id) -> fsyncs every write
        self._young: Dict[int, float] = {}  # member -> s until it has been up long enough to count
        # One thread per member: a round asks them all at once (renewals
        # run on the renewal thread while the user's thread may acquire:
        # each round waits only for its own tasks).
        self._pool = ThreadPoolExecutor(max_workers=2 * len(self.members),
                                        thread_name_prefix="rwlock-quorum")

    def _all(self, call: Callable[[int], Any], which: Optional[Iterable[int]] = None) -> List[Any]:
        """call(i) for every member i (or those in which), all at once: the
        results in that order. call must not raise."""
        ixs = list(range(len(self.members)) if which is None else which)
        return list(self._pool.map(call, ixs))

    @classmethod
    def from_urls(cls, urls: Any, redis_kwargs: Optional[dict] = None,
                  **kwargs: Any) -> "QuorumClient":
        """The masters' redis://, rediss:// or unix:// URLs, a list or one
        string separated by white space (as rwlock.redis_url)."""
        if isinstance(urls, str):
            urls = urls.split()
        return cls([cls._redis_class.from_url(u, **(redis_kwargs or {})) for u in urls],
                   **kwargs)

    def write_lock(self, name: str, lease: Optional[float] = None,
                   timeout: Optional[float] = None, on_lost: Optional[Callable[[Lock], Any]] = None,
                   raise_on_lost: bool = True, owner: Optional[str] = None) -> Lock:
        """A Lock for the write lock of `name`; its lease capped at max_lease."""
        return super().write_lock(name, min(lease or self.lease, self.max_lease),
                                  timeout, on_lost, raise_on_lost, owner)

    def read_lock(self, name: str, lease: Optional[float] = None,
                  timeout: Optional[float] = None, on_lost: Optional[Callable[[Lock], Any]] = None,
                  raise_on_lost: bool = True, owner: Optional[str] = None) -> Lock:
        """A Lock for the read lock of `name`; its lease capped at max_lease."""
        return super().read_lock(name, min(lease or self.lease, self.max_lease),
                                 timeout, on_lost, raise_on_lost, owner)

    def info(self, name: str) -> Dict[str, Any]:
        """The lock as a majority of the masters has it (docs/protocol.md
        13.3), every master asked at once: the writer, readers and waiting
        writers that a majority of the masters that count list, each with
        the time until fewer would (the majority-th longest of the times
        they give); the token is the largest any master has. Raises
        ConnectionError if fewer than a majority answered and count."""
        def view(i: int) -> Tuple[Any, bool]:
            try:
                server = self.members[i].redis.info("server")
                return self.members[i].info(name), self._counts(i, server)
            except redis.exceptions.RedisError as e:
                return e, False
        views = self._all(view)
        use = [v for v, counts in views if counts]
        if len(use) < self.majority:
            first = next((v for v, _ in views if not isinstance(v, dict)), None)
            raise redis.exceptions.ConnectionError(
                "only %d of the %d Redis masters of the quorum answered and count "
                "toward a majority (%d needed)%s" % (
                    len(use), len(views), self.majority,
                    "; first failure: %s" % first if first is not None else ""))

        def agreed(role: Callable[[Dict[str, Any]], Dict[str, int]]) -> Dict[str, int]:
            out: Dict[str, int] = {}
            for v in use:
                for owner in role(v):
                    times = sorted((role(u)[owner] for u in use if owner in role(u)),
                                   reverse=True)
                    if owner not in out and len(times) >= self.majority:
                        out[owner] = times[self.majority - 1]
            return out
        writers = agreed(lambda v: {v["writer"]: v["writer_ms"]} if v["writer"] else {})
        readers = agreed(lambda v: v["readers"])
        writer, writer_ms = next(iter(writers.items()), (None, 0))
        return {"state": "write" if writer else "read" if readers else "free",
                "token": max(v["token"] for v, _ in views if isinstance(v, dict)),
                "writer": writer, "writer_ms": writer_ms, "readers": readers,
                "waiting": agreed(lambda v: v["waiting"])}

    # -- acquiring: a vote of the members -----------------------------------------

    def _counts(self, i: int, info: Dict[str, Any]) -> bool:
        """Whether member i, whose INFO server is info, counts toward a majority."""
        key = (i, info.get("run_id"))
        if key not in self._persists:
            try:
                r = self.members[i].redis
                self._persists[key] = (
                    p.text(r.config_get("appendonly").get("appendonly")) == "yes" and
                    p.text(r.config_get("appendfsync").get("appendfsync")) == "always")
            except redis.exceptions.RedisError:
                self._persists[key] = False
        if self._persists[key]:
            return True
        # The restart rule: a master that restarted may have lost the locks
        # it granted, so it counts once every such lock's lease has run out.
        left = self.max_lease + 1 - int(info.get("uptime_in_seconds", 0))
        if left > 0:
            self._young[i] = left
            return False
        self._young.pop(i, None)
        return True

    def _vote(self, i: int, name: str, owner: str, mode: str, lease_ms: int,
              intent_ms: int, upgrade: bool, seq: int, owed_seq: int) -> Vote:
        """Member i's answer, its INFO server read in the same round trip
        (behind the releases it owes for name, as any acquisition). seq:
        the acquisition's, the same on every member; owed_seq: that of the
        owed releases, below it."""
        try:
            (status, value), (info,) = self.members[i]._acquire(
                name, owner, mode, lease_ms, intent_ms, upgrade, (("INFO", "server"),),
                seq, owed_seq)
        except (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError) as e:
            return None, e, False
        return status, value, status == CONFLICT or self._counts(i, info)

    def _undo(self, name: str, owner: str, votes: List[Vote], held: str, split: bool,
              mode: str, lease_ms: int) -> None:
        """Release what members granted (or may have); after a split vote a
        writer gives up its places in every queue (they may disagree in a
        cycle). One request, the same seq on every member."""
        keeps: Dict[int, str] = {}
        for i, (status, _, _) in enumerate(votes):
            if status in (GRANTED, None):
                keeps[i] = held
            elif status == BUSY and split and mode == "w":
                keeps[i] = "q"

        seq = p.SEQ.next()

        def undo(i: int) -> None:
            try:
                self.members[i]._release(name, owner, keeps[i], lease_ms, seq)
            except redis.exceptions.RedisError:
                pass    # owed to that member; its lease frees it meanwhile
        self._all(undo, keeps)

    def _acquire(self, name: str, owner: str, mode: str, lease_ms: int,
                 intent_ms: int, upgrade: bool = False) -> Tuple[int, Any]:
        lease_ms = min(lease_ms, p.ms(self.max_lease))
        # One request, one seq on every member (docs/protocol.md 4.1); the
        # releases members owe for name go before it, with one below it.
        owed_seq = p.SEQ.next()
        seq = p.SEQ.next()
        start = time.monotonic()
        votes = self._all(lambda i: self._vote(i, name, owner, mode, lease_ms,
                                               intent_ms, upgrade, seq, owed_seq))

        def in_time() -> bool:
            return lease_ms / 1000.0 * (1 - self.drift) - (time.monotonic() - start) - 0.002 > 0
        granted = [i for i, v in enumerate(votes) if v[0] == GRANTED]
        counted = [i for i in granted if votes[i][2]]
        conflict = next((v[1] for v in votes if v[0] == CONFLICT), None)
        if conflict is None and len(counted) >= self.majority and in_time():
            token = max(votes[i][1] for i in granted)
            if mode == "r" or (self._fence(name, owner, seq, token, votes, granted)
                               >= self.majority and in_time()):
                return GRANTED, token
        self._undo(name, owner, votes, "r" if upgrade else "", bool(granted), mode, lease_ms)
        if conflict is not None:
            return CONFLICT, conflict
        # An upgrade: too many members no longer have the read lock for a
        # majority to have it.
        if sum(1 for v in votes if v[0] == READ_LOST) > len(votes) - self.majority:
            return READ_LOST, None
        answered = sum(1 for v in votes if v[0] is not None and v[2])
        if answered < self.majority:
            young = sorted(self._young[i] for i, v in enumerate(votes)
                           if v[0] is not None and not v[2] and i in self._young)
            why = ""
            if young and answered + len(young) >= self.majority:
                why = ("; %d answered but do not count yet, by the restart rule: a master "
                       "counts once it has been up for max_lease (%g s, the SQL side's "
                       "rwlock.quorum_max_lease) + 1 s, as it may have lost the locks it "
                       "granted before a restart (or at once if it persists every write: "
                       "appendonly yes, appendfsync always); a majority counts in %.0f s"
                       % (len(young), self.max_lease,
                          young[self.majority - answered - 1]))
            raise redis.exceptions.ConnectionError(
                "only %d of the %d Redis masters of the quorum answered and count "
                "toward a majority (%d needed)%s" % (answered, len(votes), self.majority, why))
        if granted:
            return BUSY, random.randint(*SPLIT_PAUSE_MS)
        return BUSY, min((v[1] for v in votes if v[0] == BUSY), default=1)

    def _fence(self, name: str, owner: str, seq: int, token: int, votes: List[Vote],
               granted: List[int]) -> int:
        """Raise the token on the granting members below it (fence.lua, as
        of the acquisition's seq); how many of those that count have it now."""
        def has(i: int) -> bool:
            if votes[i][1] >= token:
                return True
            try:
                return int(self.members[i]._io(Run(
                    "fence", name, p.fence_args(owner, seq, token)))) == 1
            except (redis.exceptions.RedisError, p.RWLockError):
                return False        # stale: a newer request of the owner's ran there
        return sum(1 for i, ok in zip(granted, self._all(has, granted))
                   if ok and votes[i][2])

    # -- renewing, releasing, waiting: every member -----------------------------------

    def _each(self, call: Callable[[Client], int]) -> List[Any]:
        """call(member) on every member, all at once: [result, or the
        exception]."""
        def one(i: int) -> Any:
            try:
                return call(self.members[i])
            except redis.exceptions.RedisError as e:
                return e
        return self._all(one)

    def _count(self, answers: List[Any], what: str) -> int:
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

    def _release(self, name: str, owner: str, keep: str, lease_ms: int = 0) -> int:
        seq = p.SEQ.next()          # one request: the same seq on every member
        return self._count(self._each(lambda m: m._release(name, owner, keep, lease_ms, seq)),
                           "release")

    def _renew(self, name: str, owner: str, lease_ms: int) -> int:
        lease_ms = min(lease_ms, p.ms(self.max_lease))
        seq = p.SEQ.now()           # each member asks again as of a newer one if stale
        return self._count(self._each(lambda m: m._renew(name, owner, lease_ms, seq)),
                           "renewal")

    def _subscribe(self, channel: str) -> Optional[_QuorumPubSub]:
        subs = [ps for ps in (m._subscribe(channel) for m in self.members) if ps]
        return _QuorumPubSub(subs) if subs else None


# -- asyncio -------------------------------------------------------------------------

class AsyncQuorumLock:
    """An AsyncLock-like face, for asyncio, of a QuorumClient's Lock: each
    call runs the synchronous quorum lock in a thread of the client's pool
    (the quorum asks its masters from threads anyway); renewal is the
    synchronous client's renewal thread. Same properties as Lock."""

    def __init__(self, client: "AsyncQuorumClient", lock: Any) -> None:
        self.client = client
        self.sync = lock

    def __getattr__(self, attr: str) -> Any:
        # name, mode, owner, token, held, lost, lease, timeout, raise_on_lost
        return getattr(self.sync, attr)

    def __setattr__(self, attr: str, value: Any) -> None:
        if attr in ("client", "sync"):
            object.__setattr__(self, attr, value)
        else:
            setattr(self.sync, attr, value)

    def __repr__(self) -> str:
        return repr(self.sync)

    async def _call(self, fn: Callable[..., Any], *args: Any, takes: bool = False) -> Any:
        loop = asyncio.get_running_loop()
        fut = loop.run_in_executor(self.client._threads, functools.partial(fn, *args))
        try:
            return await asyncio.shield(fut)
        except asyncio.CancelledError:
            if takes:
                # The thread goes on: what it takes is let go of once it has it.
                def let_go(f: "asyncio.Future[Any]") -> None:
                    if not f.cancelled() and f.exception() is None and self.sync.held:
                        self.client._threads.submit(self._release_quietly)
                fut.add_done_callback(let_go)
            raise

    def _release_quietly(self) -> None:
        try:
            self.sync.release()
        except Exception:       # noqa: BLE001 - owed; its lease frees it meanwhile
            pass

    async def acquire(self, timeout: Optional[float] = None) -> int:
        """As AsyncLock.acquire(); a cancelled wait lets go of the lock as
        soon as the thread still waiting for it gets it."""
        return await self._call(self.sync.acquire, timeout, takes=True)

    async def try_acquire(self, wait: float = 0.0) -> bool:
        return await self._call(self.sync.try_acquire, wait, takes=True)

    async def upgrade(self, timeout: Optional[float] = None) -> bool:
        return await self._call(self.sync.upgrade, timeout)

    async def downgrade(self) -> bool:
        return await self._call(self.sync.downgrade)

    async def renew(self) -> bool:
        return await self._call(self.sync.renew)

    async def release(self) -> bool:
        return await self._call(self.sync.release)

    async def __aenter__(self) -> "AsyncQuorumLock":
        await self.acquire(self.sync.timeout)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        return await self._call(self.sync.__exit__, exc_type, exc, tb)


class AsyncQuorumClient:
    """Quorum mode for asyncio (experimental): a QuorumClient (arguments as
    QuorumClient's, or from_urls / from_url) whose locks are awaited. Each
    call runs in a thread of a pool of max_threads (default 32): a waiting
    acquisition holds one of them while it waits. on_lost may be a
    coroutine function: it is run on the loop that made the lock."""

    def __init__(self, redis_clients: Iterable[Any], max_threads: int = 32,
                 **kwargs: Any) -> None:
        self.sync = QuorumClient(redis_clients, **kwargs)
        self._threads = ThreadPoolExecutor(max_workers=max_threads,
                                           thread_name_prefix="rwlock-aquorum")

    @classmethod
    def from_urls(cls, urls: Any, redis_kwargs: Optional[dict] = None,
                  max_threads: int = 32, **kwargs: Any) -> "AsyncQuorumClient":
        """As QuorumClient.from_urls."""
        if isinstance(urls, str):
            urls = urls.split()
        return cls([redis.Redis.from_url(u, **(redis_kwargs or {})) for u in urls],
                   max_threads=max_threads, **kwargs)

    from_url = from_urls

    def __getattr__(self, attr: str) -> Any:
        # prefix, lease, max_lease, drift, members, majority
        return getattr(self.sync, attr)

    def _lock(self, mode: str, name: str, lease: Optional[float], timeout: Optional[float],
              on_lost: Optional[Callable], raise_on_lost: bool,
              owner: Optional[str] = None) -> AsyncQuorumLock:
        box: List[AsyncQuorumLock] = []
        cb = None
        if on_lost is not None:
            loop = asyncio.get_running_loop()

            def cb(_lock: Any) -> None:
                r = on_lost(box[0])
                if asyncio.iscoroutine(r):
                    loop.call_soon_threadsafe(asyncio.ensure_future, r)
        make = self.sync.write_lock if mode == "w" else self.sync.read_lock
        box.append(AsyncQuorumLock(self, make(name, lease, timeout, cb, raise_on_lost, owner)))
        return box[0]

    def write_lock(self, name: str, lease: Optional[float] = None,
                   timeout: Optional[float] = None, on_lost: Optional[Callable] = None,
                   raise_on_lost: bool = True) -> AsyncQuorumLock:
        return self._lock("w", name, lease, timeout, on_lost, raise_on_lost)

    def read_lock(self, name: str, lease: Optional[float] = None,
                  timeout: Optional[float] = None, on_lost: Optional[Callable] = None,
                  raise_on_lost: bool = True) -> AsyncQuorumLock:
        return self._lock("r", name, lease, timeout, on_lost, raise_on_lost)

    def write_locks(self, names: Iterable[str], lease: Optional[float] = None,
                    timeout: Optional[float] = None, on_lost: Optional[Callable] = None,
                    raise_on_lost: bool = True) -> "AsyncMultiLock[AsyncQuorumLock]":
        """Write locks on several names, all or none (as AsyncClient.write_locks)."""
        return AsyncMultiLock(names, "w", lambda n, o: self._lock(
            "w", n, lease, None, on_lost, raise_on_lost, o), timeout, None)

    def read_locks(self, names: Iterable[str], lease: Optional[float] = None,
                   timeout: Optional[float] = None, on_lost: Optional[Callable] = None,
                   raise_on_lost: bool = True) -> "AsyncMultiLock[AsyncQuorumLock]":
        """Read locks on several names, all or none (as AsyncClient.read_locks)."""
        return AsyncMultiLock(names, "r", lambda n, o: self._lock(
            "r", n, lease, None, on_lost, raise_on_lost, o), timeout, None)

    async def info(self, name: str) -> Dict[str, Any]:
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, self.sync.info, name)

    async def release_all(self) -> int:
        return await asyncio.get_running_loop().run_in_executor(
            self._threads, self.sync.release_all)
