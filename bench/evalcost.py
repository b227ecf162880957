#!/usr/bin/python3
"""Redis CPU of the release sent at transaction end, which goes as EVAL with
the script's body (src/release.c says why), against EVALSHA of the same
script, in one Redis and one run.

Redis hashes the whole body of every EVAL before it looks the script up, in
processCommand, outside the time INFO commandstats gives the command; so
this measures the server's CPU (INFO cpu, used_cpu_user + used_cpu_sys) over
N pipelined calls, the lock being free (release.lua's fast path: what a
COMMIT of an uncontended _xact lock costs Redis). Protocol 3: each call
carries the next seq of one owner (ARGV[2], docs/protocol.md 4.1), which
the release records (s:<owner>) as a COMMIT's does; like the extension's
plain release, it sends owner and seq only (the lean calling convention).

  release.lua, EVAL of the file as written (comments and all)
  release.lua, EVAL of the body the extension embeds (tools/embed_lua.pl:
               comments, indentation and blank lines removed)
  release.lua, EVALSHA (what a release waited for costs)

  evalcost.py --port N [--calls 20000] [--reps 5]

Prints µs of Redis CPU per call (median over the repetitions, cases
interleaved) and the ratios to EVALSHA.
"""
import argparse
import itertools
import os
import secrets
import statistics
import subprocess

import redis

ROOT = os.path.normpath(os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
RELEASE = os.path.join(ROOT, "lua", "release.lua")


def cpu(r):
    i = r.info("cpu")
    return i["used_cpu_user"] + i["used_cpu_sys"]


def per_call(r, cmd, args, calls):
    """cmd: the command and script; args(): its keys and arguments, a new
    seq each time."""
    p = r.pipeline(transaction=False)
    c0 = cpu(r)
    for _ in range(calls // 1000):
        for _ in range(1000):
            p.execute_command(*(cmd + args()))
        for reply in p.execute():
            if reply != 0:   # 0: the owner held nothing; anything else is a bug here
                raise RuntimeError("release.lua answered %r" % (reply,))
    return (cpu(r) - c0) / calls * 1e6


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    r = redis.Redis(port=a.port)
    full = open(RELEASE).read()
    embedded = subprocess.run(["perl", os.path.join(ROOT, "tools", "embed_lua.pl"),
                              "--compact", RELEASE], check=True, capture_output=True,
                              text=True).stdout
    sha = r.script_load(embedded)
    r.script_load(full)
    # One owner for the run, new each run: its seq record (s:<owner>) stays
    # 10 minutes, and a counter started again at 1 would be stale.
    owner = "bench-owner:%d:%s" % (os.getpid(), secrets.token_hex(6))
    seq = itertools.count(1)

    def args():
        return (2, "bench:{e}", "bench:{e}:q", owner, next(seq))

    cases = [
        ("EVAL, the file (%d bytes)" % len(full), ("EVAL", full)),
        ("EVAL, as embedded (%d bytes)" % len(embedded), ("EVAL", embedded)),
        ("EVALSHA", ("EVALSHA", sha)),
    ]
    got = {name: [] for name, _ in cases}
    for _ in range(a.reps):
        for name, cmd in cases:
            got[name].append(per_call(r, cmd, args, a.calls))
    sha_us = statistics.median(got["EVALSHA"])
    for name, _ in cases:
        us = statistics.median(got[name])
        print("release.lua %-30s %6.2f µs of Redis CPU a call  (%.2f x EVALSHA)"
              % (name, us, us / sha_us))


if __name__ == "__main__":
    main()
