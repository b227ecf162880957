#!/usr/bin/python3
"""The Python client behind Sentinel (t/013_sentinel.pl): the URL, a lock
held while SQL checks it is excluded, wait_replicas, ReplicasNotAcknowledged.
Usage: sentinel_client.py URL PREFIX NAME; prints lines the test reads;
waits for a line on stdin before releasing."""
import os
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)),
                                "..", "clients", "python"))
from rwlock_client import Client, ReplicasNotAcknowledged  # noqa: E402

url, prefix, name = sys.argv[1:4]
locks = Client.from_url(url, prefix=prefix, lease=5.0, wait_replicas=1)
lk = locks.write_lock(name)
token = lk.acquire(timeout=5)
print("held %d" % token, flush=True)
sys.stdin.readline()
print("released %s" % lk.release(), flush=True)
too_many = Client.from_url(url, prefix=prefix, lease=5.0, wait_replicas=3,
                           wait_replicas_timeout=0.1)
try:
    too_many.write_lock(name + "x").acquire(timeout=1)
    print("unacked granted")
except ReplicasNotAcknowledged as e:
    print("unacked refused: %s" % e)
print("try %s" % too_many.write_lock(name + "x").try_acquire(), flush=True)
print("state %s" % locks.info(name + "x")["state"], flush=True)
