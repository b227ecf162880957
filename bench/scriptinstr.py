#!/usr/bin/python3
"""Redis instructions per script call of a lock + unlock pair, counted by
valgrind's callgrind: rwlock's scripts (this tree's lua/, and optionally an
older protocol's), the Redisson-style baseline (bench/baseline/) and
SET NX PX + compare-and-delete, on one redis-server run under callgrind.

Instruction counts do not depend on what else the machine runs, so this is
the figure to compare two versions of the scripts by on a shared machine
(bench/scriptcost.py measures microseconds, as INFO commandstats does, and
needs a quiet one). Each case: 1000 pairs of one owner on one lock,
pipelined 100 at a time, after a warm-up; the count covers the whole server
(reading the command, running the script, replying) over the pairs, divided
by the number of calls.

  scriptinstr.py [--old-lua DIR] [--pairs N]

Needs valgrind (callgrind_control), redis-server and python3-redis. Starts
its own redis-server on a free port of 127.0.0.1 and stops it. Prints one
line per mode: instructions per call and the ratio to the baseline.
"""
import argparse
import glob
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time

import redis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BASE = os.path.join(ROOT, "bench", "baseline")
CAS_DEL = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
           "return redis.call('DEL', KEYS[1]) else return 0 end")
OWNER = "pg:bench:1:00000000"


def free_port():
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def version_of(body):
    m = re.match(r"-- rwlock protocol (\S+):", body)
    return m.group(1) if m else "1"


def lean(body):
    """Protocol 3's lean calling convention (owner and seq first, the version
    the script's own): every acquire.lua since it; the ones before said
    "ARGV[1]  protocol version" in their header."""
    return not re.search(r"^-- ARGV\[1\]\s+protocol version", body, re.M)


class Server:
    def __init__(self, work):
        self.port = free_port()
        self.out = os.path.join(work, "cg.out")
        self.proc = subprocess.Popen(
            ["valgrind", "--tool=callgrind", "--callgrind-out-file=" + self.out,
             "redis-server", "--port", str(self.port), "--bind", "127.0.0.1",
             "--save", "", "--appendonly", "no"],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=work)
        self.r = redis.Redis(host="127.0.0.1", port=self.port)
        for _ in range(200):
            try:
                self.r.ping()
                return
            except redis.ConnectionError:
                time.sleep(0.1)
        raise RuntimeError("redis-server under callgrind did not start")

    def zero(self):
        subprocess.run(["callgrind_control", "-z", str(self.proc.pid)], capture_output=True)

    def count(self):
        subprocess.run(["callgrind_control", "-d", str(self.proc.pid)], capture_output=True)
        dumps = sorted(glob.glob(self.out + ".*"), key=os.path.getmtime)
        with open(dumps[-1]) as f:
            m = re.search(r"^(?:summary|totals): (\d+)", f.read(), re.M)
        return int(m.group(1))

    def stop(self):
        self.proc.terminate()
        self.proc.wait()


def rwlock_pairs(r, lua, mode, tag):
    acq = open(os.path.join(lua, "acquire.lua")).read()
    v, lean_args = version_of(acq), lean(acq)
    a = r.script_load(acq)
    rel = r.script_load(open(os.path.join(lua, "release.lua")).read())
    # Keys of the same length for every case: a key's length alone moves the
    # count by hundreds of instructions a call (hashing, listpack searches).
    keys = ("cost:{%s:%s}" % (tag, mode), "cost:{%s:%s}:q" % (tag, mode))
    seq = [0]

    def pair(p):
        if v == "3" and lean_args:
            # as the extension sends them: a blocking acquisition (a mark),
            # a plain release; mark, keep and the version otherwise defaults
            seq[0] += 2
            p.evalsha(a, 2, *keys, OWNER, seq[0] - 1, mode, 30000, 2000)
            p.evalsha(rel, 2, *keys, OWNER, seq[0])
        elif v == "3":
            seq[0] += 2
            p.evalsha(a, 2, *keys, v, OWNER, seq[0] - 1, mode, 30000, 2000, 600000, "-")
            p.evalsha(rel, 2, *keys, v, OWNER, seq[0], "", 0, 600000)
        else:
            p.evalsha(a, 2, *keys, v, OWNER, mode, 30000, 2000, 600000, "-")
            p.evalsha(rel, 2, *keys, v, OWNER, "", 0, 600000)
    return pair


def baseline_pairs(r, mode):
    h, o = "cost:{base}", "0b7e3f4c-1d2e-4f00-9a1b-3c4d5e6f7a8b:1"
    names = ("wlock", "wunlock") if mode == "w" else ("rlock", "runlock")
    lock, unlock = (r.script_load(open(os.path.join(BASE, n + ".lua")).read()) for n in names)

    def pair(p):
        if mode == "w":
            p.evalsha(lock, 1, h, 30000, o + ":write")
            p.evalsha(unlock, 2, h, "redisson_rwlock__channel:{base}", 0, 30000, o + ":write")
        else:
            p.evalsha(lock, 2, h, "%s:%s:rwlock_timeout" % (h, o), 30000, o, o + ":write")
            p.evalsha(unlock, 4, h, "redisson_rwlock__channel:{base}",
                      "%s:%s:rwlock_timeout" % (h, o), h, 0, o)
    return pair


def measure(srv, pair, pairs):
    p = srv.r.pipeline(transaction=False)
    for i in range(100):        # warm-up: scripts cached, keys made
        pair(p)
    p.execute()
    srv.zero()
    for i in range(pairs):
        pair(p)
        if i % 100 == 99:
            p.execute()
    p.execute()
    return srv.count() / (2 * pairs)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--old-lua")
    ap.add_argument("--pairs", type=int, default=1000)
    a = ap.parse_args()
    if not shutil.which("valgrind"):
        sys.exit("scriptinstr.py: needs valgrind")
    work = tempfile.mkdtemp(prefix="rwlock-scriptinstr.")
    srv = Server(work)
    try:
        for mode in ("w", "r"):
            base = measure(srv, baseline_pairs(srv.r, mode), a.pairs)
            line = ["%s: Redisson-style %.0f instructions per call" % (mode, base)]
            cases = [("this", os.path.join(ROOT, "lua"), "new")]   # tags of one length
            if a.old_lua:
                cases.append(("old", a.old_lua, "old"))
            for name, lua, tag in cases:
                n = measure(srv, rwlock_pairs(srv.r, lua, mode, tag), a.pairs)
                line.append("%s %.0f (%.3f of it)" % (name, n, n / base))
            print("; ".join(line))
    finally:
        srv.stop()
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
