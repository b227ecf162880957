#!/usr/bin/python3
"""Hand-off latency between SQL sessions and each client, both ways: the
compliance suite's two hand-off cases (test/compliance/driver.py) with more
rounds, from the releaser's call to the waiter's return (CLOCK_MONOTONIC).
Run under pg_virtualenv with the extension installed. Part of
bench/clients.sh.

    clients_handoff.py [--rounds 200] python python-async node
"""
import argparse
import os
import sys

ap = argparse.ArgumentParser()
ap.add_argument("--rounds", type=int, default=200)
ap.add_argument("clients", nargs="*", default=["python", "python-async", "node"])
a = ap.parse_args()
os.environ["RWLOCK_CROSS_ROUNDS"] = str(a.rounds)
ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
sys.path.insert(0, os.path.join(ROOT, "test", "compliance"))
import driver  # noqa: E402

srv = driver.RedisServer(6397, prefix="rwlock-bench-")
admin = driver.psycopg2.connect(dbname=os.environ.get("PGDATABASE", "postgres"))
admin.autocommit = True
driver.q(admin, "CREATE EXTENSION IF NOT EXISTS rwlock")
rows = []
try:
    for client in a.clients:
        suite = driver.Suite(client, srv)
        try:
            suite.handoff_to_sql()
            suite.handoff_from_sql()
        finally:
            suite.close()
        for key, what in (("from_sql", "SQL -> %s" % client), ("to_sql", "%s -> SQL" % client)):
            lat = suite.figures.get(key)
            if lat:
                rows.append((what, driver.statistics.median(lat), driver.pct(lat, 99), len(lat)))
finally:
    srv.stop()
print("hand-off latency, releaser's call -> waiter's return, ms:")
print("  %-24s %7s %7s %7s" % ("", "p50", "p99", "rounds"))
for what, p50, p99, n in rows:
    print("  %-24s %7.2f %7.2f %7d" % (what, p50, p99, n))
