#!/usr/bin/python3
"""f: an application-side peer taking a lock straight from Redis: redis-py's
Lock, acquire + release in a loop, one client. Prints µs per pair."""
import argparse
import time

import redis

ap = argparse.ArgumentParser()
ap.add_argument("--port", type=int, default=6395)
ap.add_argument("--seconds", type=float, default=4)
a = ap.parse_args()

r = redis.Redis(host="127.0.0.1", port=a.port)
lock = r.lock("bench_f", timeout=30)
for _ in range(200):  # warm up: connection, script cache
    lock.acquire()
    lock.release()
n = 0
t0 = time.perf_counter()
deadline = t0 + a.seconds
while True:
    for _ in range(100):
        lock.acquire()
        lock.release()
    n += 100
    t = time.perf_counter()
    if t >= deadline:
        break
print("%.2f" % ((t - t0) * 1e6 / n))
