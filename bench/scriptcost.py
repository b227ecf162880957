#!/usr/bin/python3
"""Redis CPU per script call (INFO commandstats, usec_per_call) of a lock +
unlock pair, for rwlock's scripts and for the baselines, all in one Redis and
one run, interleaved in repetitions (SPEC section 11).

  rwlock write   acquire.lua "w" + release.lua, one owner, a free lock
  rwlock read    acquire.lua "r" + release.lua
  baseline write bench/baseline/wlock.lua + wunlock.lua (Redisson-style)
  baseline read  bench/baseline/rlock.lua + runlock.lua
  setnx          SET NX PX + a compare-and-delete script

Every case runs N pairs after CONFIG RESETSTAT and reports the server's µs
per call over all its calls (scripts and, for setnx, SET). The arguments are
the extension's (lease 30000, mark 2000, keep 600000).

  scriptcost.py --port N [--pairs 2000] [--reps 25] [--batch 100]
                [--old-lua DIR] [--tag cpu] [--tsv]

Each repetition runs every case in turn, so the ratios are taken within a
repetition (cases a second apart) and their median reported: Redis's
usec_per_call is a mean of wall-clock durations, and on a shared machine a
preempted call inflates it; short interleaved repetitions keep that noise
from favouring one side. --batch 0 sends one command per round trip (as the
extension does; noisier), the default pipelines 100 pairs. --old-lua DIR
also measures the acquire/release scripts found in DIR (e.g. protocol 1's)
as "old", for before/after figures in the same run. Prints medians; with
--tsv, key<TAB>value lines of every repetition on stdout (bench/run.sh's
raw format), keys prefixed by --tag.
"""
import argparse
import os
import re
import statistics
import sys

import redis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
BASE = os.path.join(ROOT, "bench", "baseline")
CAS_DEL = ("if redis.call('GET', KEYS[1]) == ARGV[1] then "
           "return redis.call('DEL', KEYS[1]) else return 0 end")


def read(path):
    with open(path) as f:
        return f.read()


def version_of(body):
    m = re.match(r"-- rwlock protocol (\S+):", body)
    return m.group(1) if m else "1"


def lean(body):
    """Protocol 3's lean calling convention (owner and seq first, the version
    the script's own): every acquire.lua since it; the ones before said
    "ARGV[1]  protocol version" in their header."""
    return not re.search(r"^-- ARGV\[1\]\s+protocol version", body, re.M)


class Case:
    batch = 100

    def __init__(self, r, key, pairs):
        self.r, self.key, self.pairs = r, key, pairs

    def run(self, reps_out):
        r = self.r
        self.setup()
        r.config_resetstat()
        p = r.pipeline(transaction=False)
        if self.batch == 0:
            # one command per round trip, as the extension talks
            for i in range(self.pairs):
                self.pair(p, i)
                self.check([fn(*args, **kw) for fn, args, kw in self.unpipe(p)])
        else:
            for i in range(self.pairs):
                self.pair(p, i)
                if i % self.batch == self.batch - 1:
                    self.check(p.execute())
            self.check(p.execute())
        stats = r.info("commandstats")
        usec = calls = 0
        for cmd in self.commands:
            st = stats.get("cmdstat_" + cmd)
            if st:
                usec += st["usec"]
                calls += st["calls"]
        reps_out.setdefault(self.key, []).append(usec / calls)

    def setup(self):
        pass

    def unpipe(self, p):
        """The commands queued on p, as calls to run one by one."""
        calls = []
        for args, options in p.command_stack:
            calls.append((self.r.execute_command, args, options))
        p.reset()
        return calls

    def check(self, replies):
        for x in replies:
            if isinstance(x, Exception):
                raise x


class Rwlock(Case):
    commands = ("evalsha",)

    def __init__(self, r, key, pairs, lua, mode):
        super().__init__(r, key, pairs)
        self.mode = mode
        acq, rel = read(os.path.join(lua, "acquire.lua")), read(os.path.join(lua, "release.lua"))
        self.v, self.lean = version_of(acq), lean(acq)
        self.acq, self.rel = r.script_load(acq), r.script_load(rel)
        k = "cost:{%s}" % key
        # protocol 1 took three keys (hash, readers, intents), 2 takes two
        self.keys = (k, k + ":r", k + ":q") if self.v == "1" else (k, k + ":q")

    def setup(self):
        self.r.delete(*self.keys)
        self.seq = 0

    def pair(self, p, i):
        o = "pg:bench:1:00000000"
        if self.v in ("1", "2"):
            p.evalsha(self.acq, len(self.keys), *self.keys, self.v, o,
                      self.mode, 30000, 2000, 600000)
            p.evalsha(self.rel, len(self.keys), *self.keys, self.v, o, "", 0, 600000)
            return
        self.seq += 2
        if self.lean:
            # as the extension sends them: owner, seq, mode, lease and the
            # mark of a blocking acquisition; owner and seq to release
            p.evalsha(self.acq, len(self.keys), *self.keys, o, self.seq - 1,
                      self.mode, 30000, 2000)
            p.evalsha(self.rel, len(self.keys), *self.keys, o, self.seq)
            return
        # protocol 3 before the lean convention: the version first, the
        # owner's request sequence, and "-" as the extension sent it (it
        # holds nothing of the lock)
        p.evalsha(self.acq, len(self.keys), *self.keys, self.v, o, self.seq - 1,
                  self.mode, 30000, 2000, 600000, "-")
        p.evalsha(self.rel, len(self.keys), *self.keys, self.v, o, self.seq, "", 0, 600000)

    def check(self, replies):
        super().check(replies)
        for a, rel in zip(replies[0::2], replies[1::2]):
            granted = a >= 0 if self.v != "1" else a[0] == 1   # protocol 1: {1, token}
            if not granted or rel != 1:
                raise RuntimeError("%s: not granted/released: %r %r" % (self.key, a, rel))


class Baseline(Case):
    commands = ("evalsha",)

    def __init__(self, r, key, pairs, mode):
        super().__init__(r, key, pairs)
        self.mode = mode
        names = ("wlock", "wunlock") if mode == "w" else ("rlock", "runlock")
        self.lock, self.unlock = (r.script_load(read(os.path.join(BASE, n + ".lua")))
                                  for n in names)
        self.h = "cost:{%s}" % key
        self.owner = "0b7e3f4c-1d2e-4f00-9a1b-3c4d5e6f7a8b:1"

    def setup(self):
        self.r.delete(self.h)

    def pair(self, p, i):
        h, o = self.h, self.owner
        if self.mode == "w":
            p.evalsha(self.lock, 1, h, 30000, o + ":write")
            p.evalsha(self.unlock, 2, h, "redisson_rwlock__channel:{%s}" % self.key, 0, 30000,
                      o + ":write")
        else:
            p.evalsha(self.lock, 2, h, "%s:%s:rwlock_timeout" % (h, o), 30000, o, o + ":write")
            p.evalsha(self.unlock, 4, h, "redisson_rwlock__channel:{%s}" % self.key,
                      "%s:%s:rwlock_timeout" % (h, o), h, 0, o)

    def check(self, replies):
        super().check(replies)
        for a, rel in zip(replies[0::2], replies[1::2]):
            if a is not None or rel != 1:
                raise RuntimeError("%s: not granted/released: %r %r" % (self.key, a, rel))


class SetNx(Case):
    commands = ("set", "evalsha")

    def __init__(self, r, key, pairs):
        super().__init__(r, key, pairs)
        self.cas = r.script_load(CAS_DEL)
        self.k = "cost:{%s}" % key

    def pair(self, p, i):
        p.set(self.k, "owner-1", nx=True, px=30000)
        p.evalsha(self.cas, 1, self.k, "owner-1")

    def check(self, replies):
        super().check(replies)
        for a, rel in zip(replies[0::2], replies[1::2]):
            if a is not True or rel != 1:
                raise RuntimeError("setnx: not granted/released: %r %r" % (a, rel))


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--pairs", type=int, default=2000)
    ap.add_argument("--reps", type=int, default=25)
    ap.add_argument("--lua", default=os.path.join(ROOT, "lua"))
    ap.add_argument("--old-lua")
    ap.add_argument("--batch", type=int, default=100,
                    help="pairs per pipeline (default 100); 0: one command per round trip")
    ap.add_argument("--tag", default="cpu", help="prefix of the keys in --tsv output")
    ap.add_argument("--tsv", action="store_true")
    a = ap.parse_args()
    r = redis.Redis(host="127.0.0.1", port=a.port)
    cases = [
        Rwlock(r, "cpu_rw_w", a.pairs, a.lua, "w"),
        Baseline(r, "cpu_base_w", a.pairs, "w"),
        Rwlock(r, "cpu_rw_r", a.pairs, a.lua, "r"),
        Baseline(r, "cpu_base_r", a.pairs, "r"),
        SetNx(r, "cpu_setnx", a.pairs),
    ]
    if a.old_lua:
        cases += [Rwlock(r, "cpu_old_w", a.pairs, a.old_lua, "w"),
                  Rwlock(r, "cpu_old_r", a.pairs, a.old_lua, "r")]
    Case.batch = a.batch
    out = {}
    for c in cases:                     # warm-up
        c.pairs, n = 500, c.pairs
        c.run({})
        c.pairs = n
    for _ in range(a.reps):
        for c in cases:
            c.run(out)
    for k, xs in out.items():
        print("%-12s usec_per_call median %5.2f  quartiles %5.2f %5.2f" % (
            k, statistics.median(xs), *statistics.quantiles(xs, n=4)[0::2]), file=sys.stderr)
        if a.tsv:
            for x in xs:
                print("%s_us\t%.3f" % (k.replace("cpu", a.tag, 1), x))
    # Ratios within each repetition (the cases of one repetition ran within a
    # second of each other), then their median: slow drifts of a shared
    # machine cancel out.
    for m in ("w", "r"):
        rs = [x / y for x, y in zip(out["cpu_rw_" + m], out["cpu_base_" + m])]
        print("ratio rwlock/baseline %s: median of per-repetition ratios %.2f" % (
            m, statistics.median(rs)), file=sys.stderr)
        if a.tsv:
            for x in rs:
                print("%s_ratio_%s\t%.4f" % (a.tag, m, x))

if __name__ == "__main__":
    main()
