#!/usr/bin/python3
"""cluster_pubsub.py: how a wake-up travels in a Redis Cluster, PUBLISH
against sharded pub/sub (SPUBLISH/SSUBSCRIBE, Redis 7), measured on a running
cluster. Used by bench/cluster.sh; prints tab-separated key/value lines.

For each of the two ways, ROUNDS messages are published one at a time on a
lock's channel (the slot of rwlock:{bench-ps}) by a client of the slot's
master, as release.lua does, and a subscriber receives them:
  publish   PUBLISH on the slot's master; the subscriber on ANOTHER master
            (a waiter's connection may be on any node: the cluster bus
            broadcasts the message to every node)
  spublish  SPUBLISH on the slot's master; SSUBSCRIBE on the same master
            (sharded: the message stays within the slot's shard)
Reported per way: the median and 99th percentile delivery latency (µs,
publish sent to message read) and the publisher's rate with nobody
waiting for deliveries (messages/s, pipelined batches of 100), which shows
what the broadcast costs the master that runs the release.
"""
import argparse
import statistics
import time

import redis


def slot_master(nodes, key):
    """(host, port) of the master serving key's slot, and of another master."""
    r = redis.Redis(host="127.0.0.1", port=nodes[0])
    slot = r.execute_command("CLUSTER", "KEYSLOT", key)
    owner = other = None
    for start, end, master, *_ in r.execute_command("CLUSTER", "SLOTS"):
        port = int(master[1])
        if start <= slot <= end:
            owner = port
        else:
            other = other or port
    return owner, other


def latency(pub, sub, send, channel, rounds):
    """Delivery latencies in µs of rounds messages, one at a time."""
    out = []
    for i in range(rounds):
        t0 = time.perf_counter()
        pub.execute_command(send, channel, "r")
        while True:
            m = sub.get_message(timeout=1.0)
            if m is None:
                raise SystemExit("a %s message was not delivered within 1 s" % send)
            if m["type"] in ("message", "smessage"):
                break
        out.append((time.perf_counter() - t0) * 1e6)
    return out


def rate(pub, send, channel, seconds):
    """Messages published per second, pipelined in batches of 100."""
    n = 0
    t_end = time.perf_counter() + seconds
    t0 = time.perf_counter()
    while time.perf_counter() < t_end:
        p = pub.pipeline(transaction=False)
        for _ in range(100):
            p.execute_command(send, channel, "r")
        p.execute()
        n += 100
    return n / (time.perf_counter() - t0)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--ports", required=True, help="the cluster's ports, comma-separated")
    ap.add_argument("--rounds", type=int, default=2000)
    ap.add_argument("--seconds", type=float, default=2.0)
    a = ap.parse_args()
    nodes = [int(p) for p in a.ports.split(",")]
    channel = "rwlock:{bench-ps}:c"
    owner, other = slot_master(nodes, channel)
    pub = redis.Redis(host="127.0.0.1", port=owner)
    for way, send, sub_port, subscribe in (
            ("publish", "PUBLISH", other, "SUBSCRIBE"),
            ("spublish", "SPUBLISH", owner, "SSUBSCRIBE")):
        conn = redis.Redis(host="127.0.0.1", port=sub_port)
        ps = conn.pubsub()
        ps.execute_command(subscribe, channel)
        ps.subscribed_event.set()   # redis-py 4.3 has no ssubscribe: by hand
        while True:
            m = ps.get_message(timeout=1.0)
            if m is None or m["type"] in ("subscribe", "ssubscribe"):
                break
        lat = latency(pub, ps, send, channel, 50)   # warm-up
        lat = sorted(latency(pub, ps, send, channel, a.rounds))
        print("%s_median_us\t%.1f" % (way, statistics.median(lat)))
        print("%s_p99_us\t%.1f" % (way, lat[int(len(lat) * 0.99) - 1]))
        print("%s_rate\t%.0f" % (way, rate(pub, send, channel, a.seconds)))
        ps.close()


if __name__ == "__main__":
    main()
