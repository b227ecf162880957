#!/usr/bin/python3
"""g: hand-off latency of a write lock (issue 3).

A holder session holds the write lock; waiter sessions block in redis_wlock.
The holder's redis_unlock returns at t0, a waiter's redis_wlock returns at t1;
the hand-off is t1 - t0, both read from CLOCK_MONOTONIC on this machine.

  1 waiter    two psycopg2 sessions driven by two threads of this process
              (psycopg2 lets go of the GIL while a statement runs); the waiter
              is seen blocked (pg_stat_activity: wait event type Extension)
              before the holder releases.
  16 waiters  16 processes, each its own session, looping: take the lock, hold
              it ~1 ms, release, pause 2-8 ms so the next grant goes to one of
              the others. Grants are ordered by their fencing tokens (strictly
              increasing), so the k-th grant pairs with the (k-1)-th release.
  polling     the baseline, in the same invocation: redis-py's Lock with its
              default sleep (0.1 s), the same hand-off between two threads.

Prints p50 and p99 (ms) of each; with --tsv, key<TAB>value lines on stdout.
"""
import argparse
import math
import multiprocessing as mp
import queue
import random
import statistics
import sys
import threading
import time

import psycopg2
import redis


def now():
    return time.clock_gettime(time.CLOCK_MONOTONIC)


def pct(xs, p):
    s = sorted(xs)
    return s[max(0, math.ceil(p / 100.0 * len(s)) - 1)]


def connect(dsn):
    c = psycopg2.connect(dsn)
    c.autocommit = True
    return c


# ---------------------------------------------------------------- 1 waiter
def one_waiter(dsn, rounds, name="bench_g1"):
    holder, waiter, mon = connect(dsn), connect(dsn), connect(dsn)
    hc, wc, mc = holder.cursor(), waiter.cursor(), mon.cursor()
    wc.execute("SELECT pg_backend_pid()")
    wpid = wc.fetchone()[0]
    # Warm up both sessions' Redis connections (command and subscriber).
    for c in (hc, wc):
        c.execute("SELECT redis_wlock(%s), redis_unlock(%s)", (name, name))

    go, done = queue.Queue(), queue.Queue()

    def waiter_loop():
        while go.get():
            wc.execute("SELECT redis_wlock(%s)", (name,))
            t1 = now()
            wc.execute("SELECT redis_unlock(%s)", (name,))
            done.put(t1)

    th = threading.Thread(target=waiter_loop, daemon=True)
    th.start()
    out, unseen = [], 0
    for _ in range(rounds):
        hc.execute("SELECT redis_wlock(%s)", (name,))
        go.put(True)
        time.sleep(0.005 + random.random() * 0.005)
        # Make sure the waiter sleeps in its wait, not in a round trip.
        seen = False
        for _ in range(200):
            mc.execute("SELECT wait_event_type, state FROM pg_stat_activity WHERE pid = %s",
                       (wpid,))
            ev, st = mc.fetchone()
            if ev == "Extension" and st == "active":
                seen = True
                break
            time.sleep(0.001)
        unseen += 0 if seen else 1
        hc.execute("SELECT redis_unlock(%s)", (name,))
        t0 = now()
        t1 = done.get()
        out.append(t1 - t0)
    go.put(False)
    th.join()
    for c in (holder, waiter, mon):
        c.close()
    if unseen:
        print("handoff: the waiter was not seen waiting in %d rounds" % unseen, file=sys.stderr)
    return out


# ---------------------------------------------------------------- 16 waiters
def contender(dsn, name, barrier, count, limit, results):
    rnd = random.Random()
    conn = connect(dsn)
    cur = conn.cursor()
    cur.execute("SELECT redis_wlock(%s), redis_unlock(%s)", (name, name))  # warm up
    rec = []
    barrier.wait()
    while True:
        cur.execute("SELECT redis_wlock(%s)", (name,))
        t1 = now()
        tok = cur.fetchone()[0]
        time.sleep(0.001)
        cur.execute("SELECT redis_unlock(%s)", (name,))
        t0 = now()
        rec.append((tok, t1, t0))
        with count.get_lock():
            count.value += 1
            stop = count.value >= limit
        if stop:
            break
        time.sleep(0.002 + rnd.random() * 0.006)
    conn.close()
    results.put((mp.current_process().pid, rec))


def many_waiters(dsn, nwaiters, grants, name="bench_g16"):
    ctx = mp.get_context("fork")
    barrier = ctx.Barrier(nwaiters)
    count = ctx.Value("i", 0)
    results = ctx.Queue()
    procs = [ctx.Process(target=contender, args=(dsn, name, barrier, count, grants, results))
             for _ in range(nwaiters)]
    for p in procs:
        p.start()
    allrec = []
    for _ in procs:
        pid, rec = results.get()
        allrec += [(tok, t1, t0, pid) for tok, t1, t0 in rec]
    for p in procs:
        p.join()
    allrec.sort()
    out = []
    for prev, cur in zip(allrec, allrec[1:]):
        if prev[3] != cur[3]:  # a hand-off to another session
            out.append(cur[1] - prev[2])
    return out[10:]  # the first grants include start-up


# ---------------------------------------------------------------- polling baseline
def polling_baseline(port, rounds, name="bench_gpoll"):
    r = redis.Redis(host="127.0.0.1", port=port)
    r.delete(name)
    hl = r.lock(name, timeout=30)  # default sleep 0.1 s
    wl = r.lock(name, timeout=30)
    go, done = queue.Queue(), queue.Queue()

    def waiter_loop():
        while go.get():
            wl.acquire()
            t1 = now()
            wl.release()
            done.put(t1)

    th = threading.Thread(target=waiter_loop, daemon=True)
    th.start()
    out = []
    for _ in range(rounds):
        hl.acquire()
        go.put(True)
        time.sleep(0.01 + random.random() * 0.1)  # any phase of the waiter's polling
        hl.release()
        t0 = now()
        out.append(done.get() - t0)
    go.put(False)
    th.join()
    return out


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--redis-port", type=int, default=6395)
    ap.add_argument("--rounds", type=int, default=200)
    ap.add_argument("--waiters", type=int, default=16)
    ap.add_argument("--grants", type=int, default=400)
    ap.add_argument("--poll-rounds", type=int, default=40)
    ap.add_argument("--tsv", action="store_true")
    a = ap.parse_args()

    res = {
        "g1": one_waiter(a.dsn, a.rounds),
        "g16": many_waiters(a.dsn, a.waiters, a.grants),
        "gpoll": polling_baseline(a.redis_port, a.poll_rounds),
    }
    for key, xs in res.items():
        ms = [x * 1000 for x in xs]
        p50, p99 = pct(ms, 50), pct(ms, 99)
        print("handoff %-6s n=%-4d p50 %8.3f ms  p99 %8.3f ms  mean %8.3f ms  max %8.3f ms"
              % (key, len(ms), p50, p99, statistics.mean(ms), max(ms)), file=sys.stderr)
        if a.tsv:
            print("%s_p50_ms\t%.4f" % (key, p50))
            print("%s_p99_ms\t%.4f" % (key, p99))
            print("%s_n\t%d" % (key, len(ms)))


if __name__ == "__main__":
    main()
