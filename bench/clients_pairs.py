#!/usr/bin/python3
"""Acquire + release of a free write lock in a loop, one client, from
Python: rwlock_client (sync and asyncio) beside redis-py's own Lock and a
plain lock (SET NX PX + a compare-and-delete script), same Redis, same run,
interleaved repetitions; prints µs per pair (median of the repetitions) and
each rwlock figure as a ratio of the others. Part of bench/clients.sh."""
import argparse
import asyncio
import os
import statistics
import sys
import time
import uuid

import redis
import redis.asyncio as aredis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import rwlock_client as rw  # noqa: E402
from rwlock_client.aio import AsyncClient  # noqa: E402

# The usual single-instance lock: SET key token NX PX ttl; release only if
# the key still holds our token.
CAD = """if redis.call('get', KEYS[1]) == ARGV[1] then
  return redis.call('del', KEYS[1]) else return 0 end"""


async def timed_async(pair, seconds):
    """timed() with await."""
    for _ in range(200):
        await pair()
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(100):
            await pair()
        n += 100
        t = time.perf_counter()
        if t - t0 >= seconds:
            return (t - t0) * 1e6 / n


def timed(pair, seconds):
    """µs per call of pair() over `seconds` (after a warm-up)."""
    for _ in range(200):
        pair()
    n, t0 = 0, time.perf_counter()
    while True:
        for _ in range(100):
            pair()
        n += 100
        t = time.perf_counter()
        if t - t0 >= seconds:
            return (t - t0) * 1e6 / n


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--seconds", type=float, default=2.0)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    r = redis.Redis(port=a.port)
    locks = rw.Client(r)
    lk = locks.write_lock("bench:py")

    def rwlock_pair():
        lk.acquire()
        lk.release()

    pylock = r.lock("bench:redispy", timeout=30)

    def redispy_pair():
        pylock.acquire()
        pylock.release()

    cad = r.register_script(CAD)

    def plain_pair():
        tok = uuid.uuid4().hex
        if not r.set("bench:plain", tok, nx=True, px=30000):
            raise RuntimeError("plain lock busy")
        cad(keys=["bench:plain"], args=[tok])

    loop = asyncio.new_event_loop()
    alocks = AsyncClient(aredis.Redis(port=a.port))
    alk = alocks.write_lock("bench:pyasync")

    async def async_timed(seconds):
        async def pair():
            await alk.acquire()
            await alk.release()
        return await timed_async(pair, seconds)

    apylock = aredis.Redis(port=a.port).lock("bench:aredispy", timeout=30)

    async def async_timed_redispy(seconds):
        async def pair():
            await apylock.acquire()
            await apylock.release()
        return await timed_async(pair, seconds)

    cases = [("rwlock_client (sync)", lambda s: timed(rwlock_pair, s)),
             ("rwlock_client.aio", lambda s: loop.run_until_complete(async_timed(s))),
             ("redis-py Lock", lambda s: timed(redispy_pair, s)),
             ("redis.asyncio Lock", lambda s: loop.run_until_complete(async_timed_redispy(s))),
             ("SET NX PX + compare-and-delete", lambda s: timed(plain_pair, s))]
    runs = {name: [] for name, _ in cases}
    for _ in range(a.reps):
        for name, fn in cases:
            runs[name].append(fn(a.seconds))
    med = {name: statistics.median(v) for name, v in runs.items()}
    print("python, acquire + release of a free write lock, 1 client, µs per pair "
          "(median of %d x %.0f s):" % (a.reps, a.seconds))
    for name, _ in cases:
        print("  %-32s %8.1f" % (name, med[name]))
    plain = med["SET NX PX + compare-and-delete"]
    print("  rwlock_client (sync) / redis-py Lock = %.2f, / plain = %.2f" % (
        med["rwlock_client (sync)"] / med["redis-py Lock"], med["rwlock_client (sync)"] / plain))
    print("  rwlock_client.aio / redis.asyncio Lock = %.2f, / plain (sync) = %.2f" % (
        med["rwlock_client.aio"] / med["redis.asyncio Lock"], med["rwlock_client.aio"] / plain))


if __name__ == "__main__":
    main()
