"""Several names at once, all or none (docs/protocol.md section 19):
MultiLock (Client, QuorumClient) and AsyncMultiLock (AsyncClient,
AsyncQuorumClient) over one lock object per name.

The names are taken in the canonical order (their UTF-8 bytes, duplicates
once), one after another, keeping those taken while waiting for the next
(ordered locking: two callers never wait for each other in a cycle,
whatever order they wrote the names in, SQL sessions included); on any
failure (time out, an error, KeyboardInterrupt, a cancelled task) the names
this call took are released before it returns. Each name is a hold of its
own (its own Lock, token, renewal); they share one owner id, as a SQL
session's holds do.
"""
from __future__ import annotations

import logging
import time
from typing import Any, Callable, Generic, Iterable, List, Optional, TypeVar

from ._protocol import AlreadyHeld, LockTimeout, NotHeld
from ._sync import lost_at_exit, release_failed_at_exit

log = logging.getLogger("rwlock_client")

L = TypeVar("L")


def canonical_order(names: Iterable[str]) -> List[str]:
    """The names in the canonical order of docs/protocol.md section 19:
    duplicates once, sorted by their UTF-8 bytes (unsigned, a prefix first)."""
    if isinstance(names, (str, bytes)):
        raise TypeError("names must be a list of names, not one %s"
                        % type(names).__name__)
    return sorted(set(names), key=lambda n: n.encode("utf-8"))


class _MultiBase(Generic[L]):
    def __init__(self, names: Iterable[str], mode: str,
                 make: Callable[[str, Optional[str]], L], timeout: Optional[float],
                 owner: Optional[str]) -> None:
        if isinstance(names, (str, bytes)):
            canonical_order(names)          # raises TypeError
        self.names: List[str] = list(names)     # once: names may be an iterator
        order = canonical_order(self.names)
        if not order:
            raise ValueError("no lock names given")
        self.mode = mode
        self.timeout = timeout              # for the context manager
        first = make(order[0], owner)
        self.owner: str = getattr(first, "owner")
        # One lock object per name, in the canonical order, one owner id.
        self.locks: List[L] = [first] + [make(n, self.owner) for n in order[1:]]
        self._by_name = dict(zip(order, self.locks))

    def __repr__(self) -> str:
        return "<rwlock %s locks %r owner=%s held=%s>" % (
            "write" if self.mode == "w" else "read", self.names, self.owner, self.held)

    @property
    def held(self) -> bool:
        """Every name acquired and not released."""
        return all(getattr(lk, "held") for lk in self.locks)

    @property
    def lost(self) -> bool:
        """Some name's hold is known or presumed lost."""
        return any(getattr(lk, "lost") for lk in self.locks)

    @property
    def tokens(self) -> List[Optional[int]]:
        """The fencing tokens in the caller's order (a name given twice: its
        token at each place)."""
        return [getattr(self._by_name[n], "token") for n in self.names]

    def _setup(self) -> None:
        if any(getattr(lk, "held") for lk in self.locks):
            raise AlreadyHeld("%r is already held (in part)" % self)

    def _timeout_error(self, timeout: Optional[float], at: str) -> LockTimeout:
        return LockTimeout("timed out after %ss waiting for the %s locks %r (at %r)"
                           % (timeout, "write" if self.mode == "w" else "read",
                              self.names, at))

    def _lost_one(self) -> Any:
        return next((lk for lk in self.locks if getattr(lk, "lost")), self.locks[0])


def _left(deadline: Optional[float]) -> Optional[float]:
    return None if deadline is None else max(0.0, deadline - time.monotonic())


class MultiLock(_MultiBase[L]):
    """Read or write locks on several names, all or none (Client.write_locks,
    read_locks). locks: one Lock per name, in the canonical order; names:
    as given; tokens: theirs in that order. One thread at a time."""

    def acquire(self, timeout: Optional[float] = None) -> List[int]:
        """Take every name, in the canonical order, waiting for each (up to
        timeout s for the whole call; forever by default); the tokens in the
        caller's order. Raises LockTimeout (or the error that stopped it)
        holding none of the names."""
        self._take(timeout, False)
        return [t for t in self.tokens if t is not None]

    def try_acquire(self, wait: float = 0.0) -> bool:
        """Take every name within `wait` s for the whole call; True if taken,
        False holding none of them."""
        return self._take(wait, True)

    def _take(self, timeout: Optional[float], is_try: bool) -> bool:
        self._setup()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        taken: List[Any] = []
        try:
            for lk in self.locks:
                left = _left(deadline)
                if is_try:
                    ok = lk.try_acquire(left)  # type: ignore[attr-defined]
                elif left is None:
                    lk.acquire(None)  # type: ignore[attr-defined]
                    ok = True
                else:
                    try:
                        lk.acquire(left)  # type: ignore[attr-defined]
                        ok = True
                    except LockTimeout:
                        ok = False
                if not ok:
                    self._give_back(taken, True)
                    if is_try:
                        return False
                    raise self._timeout_error(timeout, getattr(lk, "name"))
                taken.append(lk)
        except BaseException:
            self._give_back(taken, False)
            raise
        return True

    @staticmethod
    def _give_back(taken: List[Any], raise_first: bool) -> None:
        """Release what this call took, last first; every release is tried
        (one that fails is owed, its lease the backstop)."""
        first: Optional[BaseException] = None
        for lk in reversed(taken):
            if not lk.held:
                continue
            try:
                lk.release()
            except Exception as e:      # noqa: BLE001 - tried all
                log.warning("rwlock: giving back %r failed: %s", lk.name, e)
                first = first or e
        taken.clear()
        if first is not None and raise_first:
            raise first

    def release(self) -> bool:
        """Release every name held; True if none had been lost. Every
        release is tried; the first error is raised after."""
        first: Optional[BaseException] = None
        ok = True
        for lk in reversed(self.locks):
            if not getattr(lk, "held"):
                continue
            try:
                ok = lk.release() and ok  # type: ignore[attr-defined]
            except Exception as e:      # noqa: BLE001 - tried all
                first = first or e
        if first is not None:
            raise first
        return ok

    def __enter__(self) -> "MultiLock[L]":
        self.acquire(self.timeout)
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if any(getattr(lk, "held") for lk in self.locks):
            presumed_lost = self.lost
            try:
                held = self.release()
            except BaseException as e:
                return release_failed_at_exit(self._lost_one(), exc_type, presumed_lost, e)
            if not held:
                lost_at_exit(self._lost_one(), exc_type)
        return False


class AsyncMultiLock(_MultiBase[L]):
    """MultiLock for asyncio (AsyncClient.write_locks, read_locks; the
    AsyncQuorumClient's too). A cancelled acquisition gives back what it
    took before the CancelledError goes on."""

    async def acquire(self, timeout: Optional[float] = None) -> List[int]:
        """As MultiLock.acquire()."""
        await self._take(timeout, False)
        return [t for t in self.tokens if t is not None]

    async def try_acquire(self, wait: float = 0.0) -> bool:
        """As MultiLock.try_acquire()."""
        return await self._take(wait, True)

    async def _take(self, timeout: Optional[float], is_try: bool) -> bool:
        self._setup()
        deadline = None if timeout is None else time.monotonic() + max(0.0, timeout)
        taken: List[Any] = []
        try:
            for lk in self.locks:
                left = _left(deadline)
                if is_try:
                    ok = await lk.try_acquire(left)  # type: ignore[attr-defined]
                elif left is None:
                    await lk.acquire(None)  # type: ignore[attr-defined]
                    ok = True
                else:
                    try:
                        await lk.acquire(left)  # type: ignore[attr-defined]
                        ok = True
                    except LockTimeout:
                        ok = False
                if not ok:
                    await self._give_back(taken, True)
                    if is_try:
                        return False
                    raise self._timeout_error(timeout, getattr(lk, "name"))
                taken.append(lk)
        except BaseException:
            await self._give_back(taken, False)
            raise
        return True

    @staticmethod
    async def _give_back(taken: List[Any], raise_first: bool) -> None:
        first: Optional[BaseException] = None
        for lk in reversed(taken):
            if not lk.held:
                continue
            try:
                await lk.release()
            except Exception as e:      # noqa: BLE001 - tried all
                log.warning("rwlock: giving back %r failed: %s", lk.name, e)
                first = first or e
        taken.clear()
        if first is not None and raise_first:
            raise first

    async def release(self) -> bool:
        """As MultiLock.release()."""
        first: Optional[BaseException] = None
        ok = True
        for lk in reversed(self.locks):
            if not getattr(lk, "held"):
                continue
            try:
                ok = await lk.release() and ok  # type: ignore[attr-defined]
            except Exception as e:      # noqa: BLE001 - tried all
                first = first or e
        if first is not None:
            raise first
        return ok

    async def __aenter__(self) -> "AsyncMultiLock[L]":
        await self.acquire(self.timeout)
        return self

    async def __aexit__(self, exc_type: Any, exc: Any, tb: Any) -> bool:
        if any(getattr(lk, "held") for lk in self.locks):
            presumed_lost = self.lost
            try:
                held = await self.release()
            except BaseException as e:
                return release_failed_at_exit(self._lost_one(), exc_type, presumed_lost, e)
            if not held:
                lost_at_exit(self._lost_one(), exc_type)
        return False
