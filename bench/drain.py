#!/usr/bin/python3
"""h: the cost of hand-offs with many waiters (SPEC section 11: "the Redis work
of a hand-off does not grow with the number of waiters").

A holder session takes the write lock; N other sessions block in
`SELECT redis_wlock(name), redis_unlock(name)`, each in its own connection and
thread, so that each takes the lock and releases it at once. When all N are
seen waiting (pg_stat_activity: wait event type Extension, and then a pause
so that every one sleeps after its retry), Redis's statistics are reset and
the holder unlocks at t0. The drain ends when the last waiter's statement
returns, at t1.

Reports, for each N: drain time (t1 - t0), the script calls Redis ran
meanwhile (EVALSHA + EVAL, INFO commandstats: the holder's release, and every
try of every waiter, renewals of their intents included) and the PUBLISHes,
and per hand-off (divided by N). With --tsv, key<TAB>value lines on stdout:
h<N>_ms, h<N>_calls, h<N>_publish. The waiters' tokens are checked to be
all different.

  drain.py --dsn '...' --redis-port N [--waiters 10,50,100] [--rounds 3]
"""
import argparse
import statistics
import sys
import threading
import time

import psycopg2
import redis


def connect(dsn):
    c = psycopg2.connect(dsn)
    c.autocommit = True
    return c


def calls(stats):
    return sum(stats.get(k, {}).get("calls", 0) for k in ("cmdstat_evalsha", "cmdstat_eval"))


def one_round(dsn, r, n, name):
    holder = connect(dsn)
    hc = holder.cursor()
    hc.execute("SELECT redis_wlock(%s)", (name,))
    conns = [connect(dsn) for _ in range(n)]
    pids = []
    for c in conns:
        cur = c.cursor()
        cur.execute("SELECT pg_backend_pid()")
        pids.append(cur.fetchone()[0])
    done = [None] * n
    tokens = [None] * n
    errors = []

    def waiter(i):
        try:
            cur = conns[i].cursor()
            cur.execute("SELECT redis_wlock(%s), redis_unlock(%s)", (name, name))
            tokens[i] = cur.fetchone()[0]
            done[i] = time.monotonic()
        except Exception as e:          # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=waiter, args=(i,), daemon=True) for i in range(n)]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        hc.execute("SELECT count(*) FROM pg_stat_activity WHERE pid = ANY(%s) "
                   "AND state = 'active' AND wait_event_type = 'Extension'", (pids,))
        if hc.fetchone()[0] == n:
            break
        time.sleep(0.02)
    else:
        raise RuntimeError("the %d waiters were not all seen waiting" % n)
    time.sleep(0.3)          # every waiter past its retry after subscribing
    r.config_resetstat()
    t0 = time.monotonic()
    hc.execute("SELECT redis_unlock(%s)", (name,))
    for t in threads:
        t.join(60)
    stats = r.info("commandstats")
    if errors or any(d is None for d in done):
        raise RuntimeError("waiters failed: %s" % errors[:3])
    t1 = max(done)
    if len(set(tokens)) != n:
        raise RuntimeError("two waiters got the same token")
    for c in conns + [holder]:
        c.close()
    return (t1 - t0) * 1000, calls(stats), stats.get("cmdstat_publish", {}).get("calls", 0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--dsn", required=True)
    ap.add_argument("--redis-port", type=int, default=6395)
    ap.add_argument("--waiters", default="10,50,100")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--tsv", action="store_true")
    a = ap.parse_args()
    r = redis.Redis(host="127.0.0.1", port=a.redis_port)
    for n in [int(x) for x in a.waiters.split(",")]:
        res = [one_round(a.dsn, r, n, "bench_h%d_%d" % (n, k)) for k in range(a.rounds)]
        ms = statistics.median(x[0] for x in res)
        c = statistics.median(x[1] for x in res)
        p = statistics.median(x[2] for x in res)
        print("drain %3d waiters: %7.1f ms, %5d script calls (%.2f a hand-off), %4d publishes"
              "   [rounds: %s]" % (n, ms, c, c / n, p,
                                   ", ".join("%.0f ms %d calls" % (x[0], x[1]) for x in res)),
              file=sys.stderr)
        if a.tsv:
            for x in res:
                print("h%d_ms\t%.2f" % (n, x[0]))
                print("h%d_calls\t%d" % (n, x[1]))
                print("h%d_publish\t%d" % (n, x[2]))


if __name__ == "__main__":
    main()
