#!/usr/bin/python3
"""The compliance suite's agent for the Python client (test/compliance/driver.py):
one JSON request a line on stdin, one JSON answer a line on stdout, each
request run concurrently (a thread each; with --async, a task each on
rwlock_client.aio). The protocol: test/compliance/README.md.

    agent.py --redis redis://127.0.0.1:6379/0 [--async] [--prefix rwlock]

A redis+cluster://host1:port1[,host2:port2...]/ URL (the extension's) makes
it connect through redis-py's RedisCluster (redis.asyncio's with --async),
those nodes its startup nodes.
"""
import argparse
import asyncio
import importlib
import json
import logging
import os
import sys
import threading
import time

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "clients", "python"))
import redis  # noqa: E402
import rwlock_client as rw  # noqa: E402

out_mutex = threading.Lock()


def emit(msg, start=None):
    """One line out; mono: when the call returned, start: when it began
    (CLOCK_MONOTONIC, ns)."""
    msg["mono"] = time.monotonic_ns()
    if start is not None:
        msg["start"] = start
    line = json.dumps(msg)
    with out_mutex:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()


def error_kind(e):
    if isinstance(e, rw.ProtocolVersionError):
        return "version"
    if isinstance(e, rw.StaleRequestError):
        return "stale"
    if isinstance(e, rw.LockTimeout):
        return "timeout"
    if isinstance(e, rw.UpgradeConflict):
        return "conflict"
    if isinstance(e, rw.DeadlockDetected):
        return "deadlock"
    if isinstance(e, (redis.exceptions.ConnectionError, redis.exceptions.TimeoutError)):
        return "connection"
    return "other"


class Agent:
    """The ops on lock handles; `await_` turns a call's result into its value
    (identity for the synchronous client)."""

    def __init__(self, client):
        self.client = client
        self.locks = {}
        self.lost = {}

    def new(self, req):
        def on_lost(lk, h=req["lock"]):
            self.lost[h] = self.lost.get(h, 0) + 1
            emit({"event": "lost", "lock": h})
        if req.get("names"):
            # Several names, all or none: a MultiLock (AsyncMultiLock).
            make = self.client.write_locks if req["mode"] == "w" else self.client.read_locks
            lk = make(req["names"], lease=req.get("lease"), on_lost=on_lost)
            self.locks[req["lock"]] = lk
            return {"owner": lk.owner}
        make = self.client.write_lock if req["mode"] == "w" else self.client.read_lock
        lk = make(req["name"], lease=req.get("lease"), on_lost=on_lost)
        if req.get("owner"):
            lk.owner = req["owner"]     # one holder in two lock objects
        self.locks[req["lock"]] = lk
        return {"owner": lk.owner}

    def state(self, req):
        lk = self.locks[req["lock"]]
        return {"held": lk.held, "lost": lk.lost,
                "token": lk.tokens if hasattr(lk, "tokens") else lk.token,
                "lost_events": self.lost.get(req["lock"], 0), "mode": lk.mode}

    def local(self, req, client):
        """The answer to a request that makes no Redis call, else None."""
        if req["op"] in ("new", "state"):
            return getattr(self, req["op"])(req)
        if req["op"] == "hello":
            return {"client": client}
        return None

    def call(self, req):
        """(method, args) of the lock call a request asks for, or None."""
        op = req["op"]
        if op == "info":
            return self.client.info, (req["name"],)
        lk = self.locks.get(req.get("lock"))
        return {"acquire": lambda: (lk.acquire, (req.get("timeout"),)),
                "try": lambda: (lk.try_acquire, (req.get("wait", 0),)),
                "release": lambda: (lk.release, ()),
                "upgrade": lambda: (lk.upgrade, (req.get("timeout"),)),
                "downgrade": lambda: (lk.downgrade, ()),
                }.get(op, lambda: None)()


def answer(req, result):
    op = req["op"]
    if op == "acquire":
        return {"token": result}
    if op in ("try", "upgrade"):
        return {"got": result}
    if op in ("release", "downgrade"):
        return {"held": result}
    return {"info": result}


CLUSTER_SCHEME = "redis+cluster://"


def connect(url, lib):
    """lib's client for url: its RedisCluster for a redis+cluster:// URL."""
    if not url.startswith(CLUSTER_SCHEME):
        return lib.Redis.from_url(url)
    cluster = importlib.import_module(lib.__name__ + ".cluster")
    # It logs every error answer with a traceback (the version cases expect some).
    logging.getLogger("redis.cluster").setLevel(logging.CRITICAL)
    seeds = url[len(CLUSTER_SCHEME):].split("/")[0].split(",")
    return cluster.RedisCluster(startup_nodes=[
        cluster.ClusterNode(h, int(p)) for h, p in (s.rsplit(":", 1) for s in seeds)])


def run_sync(url, prefix):
    agent = Agent(rw.Client(connect(url, redis), prefix=prefix))

    def handle(req):
        start = time.monotonic_ns()
        try:
            res = agent.local(req, "python")
            if res is None:
                fn, args = agent.call(req)
                res = answer(req, fn(*args))
            emit(dict(res, id=req["id"], ok=True), start)
        except Exception as e:  # noqa: BLE001
            emit({"id": req["id"], "ok": False, "error": error_kind(e), "message": str(e)})

    for line in sys.stdin:
        req = json.loads(line)
        if req["op"] == "exit":
            break
        threading.Thread(target=handle, args=(req,), daemon=True).start()


async def run_async(url, prefix):
    import redis.asyncio as aredis
    from rwlock_client.aio import AsyncClient
    agent = Agent(AsyncClient(connect(url, aredis), prefix=prefix))
    loop = asyncio.get_running_loop()
    queue = asyncio.Queue()

    def reader():
        for line in sys.stdin:
            loop.call_soon_threadsafe(queue.put_nowait, json.loads(line))
        loop.call_soon_threadsafe(queue.put_nowait, {"op": "exit"})
    threading.Thread(target=reader, daemon=True).start()

    async def handle(req):
        start = time.monotonic_ns()
        try:
            res = agent.local(req, "python-async")
            if res is None:
                fn, args = agent.call(req)
                res = answer(req, await fn(*args))
            emit(dict(res, id=req["id"], ok=True), start)
        except Exception as e:  # noqa: BLE001
            emit({"id": req["id"], "ok": False, "error": error_kind(e), "message": str(e)})

    tasks = set()
    while True:
        req = await queue.get()
        if req["op"] == "exit":
            break
        t = asyncio.ensure_future(handle(req))
        tasks.add(t)
        t.add_done_callback(tasks.discard)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--redis", required=True)
    ap.add_argument("--prefix", default="rwlock")
    ap.add_argument("--async", dest="use_async", action="store_true")
    a = ap.parse_args()
    if a.use_async:
        asyncio.run(run_async(a.redis, a.prefix))
    else:
        run_sync(a.redis, a.prefix)
    os._exit(0)


if __name__ == "__main__":
    main()
