#!/usr/bin/python3
"""Turn bench/run.sh's raw figures (key<TAB>value) into the results table
(stdout and a Markdown file) and the data file of the chart."""
import datetime
import os
import platform
import subprocess
import sys

raw_path, md_path, dat_path = sys.argv[1:4]
import statistics

allv = {}
with open(raw_path) as f:
    for line in f:
        if "\t" in line:
            k, x = line.rstrip("\n").split("\t", 1)
            try:
                allv.setdefault(k, []).append(float(x))
            except ValueError:
                pass
v = {k: statistics.median(xs) for k, xs in allv.items()}  # repetitions: median


def rep_ratio(fn):
    """Median over repetitions of a ratio computed within each repetition."""
    n = min(len(xs) for xs in allv.values() if len(xs) > 1) if allv else 0
    vals = []
    for i in range(n):
        try:
            vals.append(fn(lambda k: allv[k][i]))
        except (KeyError, IndexError, ZeroDivisionError):
            pass
    return statistics.median(vals) if vals else float("nan")


def g(k):
    return v.get(k, float("nan"))


def us_lat(key):  # pgbench average latency, ms -> µs
    return g(key + "_lat_ms") * 1000.0


def us_per_op(key):  # aggregate: µs of wall time per transaction, all clients
    return 1e6 / g(key + "_tps")


rows = []  # (id, what, value, unit, baseline what, baseline value, ratio, target, verdict)


def row(i, what, val, unit, bwhat="", bval=None, ratio=None, target="", ok=None):
    rows.append((i, what, val, unit, bwhat, bval, ratio, target,
                 "" if ok is None else ("PASS" if ok else "MISS")))


# a. floor
pg = us_lat("a_pg")
row("a", "PostgreSQL `SELECT 1` round trip (pgbench), 1 client", pg, "µs")
row("a", "Redis `PING` (hiredis loop), 1 client", g("a_ping_us"), "µs",
    "`PING`, redis-benchmark -c 1", g("a_rb_ping_us"), g("a_ping_us") / g("a_rb_ping_us"), "info")
row("a", "Redis `EVALSHA` of `return 1` (hiredis loop)", g("a_eval1_us"), "µs")
row("a", "Redis acquire.lua + release.lua by `EVALSHA`, a real take + release (hiredis loop)",
    g("a_pair_us"), "µs")
row("a", "`redis_lock_info` (info.lua, read-only): one Redis round trip made by a backend, 1 client",
    us_lat("a_info"), "µs", "`SELECT 1` + `EVALSHA return 1`", pg + g("a_eval1_us"),
    us_lat("a_info") / (pg + g("a_eval1_us")), "info")
r = rep_ratio(lambda s: s("a_chain_us") / (s("a_pg_lat_ms") * 1000 + s("a_eval1_us")))
row("a", "a chain of three processes without PostgreSQL: client → server (loopback TCP) → Redis "
    "`EVALSHA return 1` (bench/redis_rtt.c chain)", g("a_chain_us"), "µs",
    "`SELECT 1` + `EVALSHA return 1`", pg + g("a_eval1_us"), r, "info")
floor = 2 * pg + g("a_pair_us")
floor_eval1 = 2 * pg + 2 * g("a_eval1_us")

# b. session lock + unlock
b1 = us_lat("b_1")
rr = rep_ratio(lambda s: s("b_1_lat_ms") * 1000 /
               (2 * s("a_pg_lat_ms") * 1000 + s("a_pair_us")))
row("b", "`redis_wlock` + `redis_unlock`, 1 client, µs a pair", b1, "µs",
    "floor: 2 × `SELECT 1` + acquire/release pair", floor, rr, "≤ 1.15", rr <= 1.15)
row("b", "same, ratio of the medians (not per repetition)", b1, "µs",
    "floor", floor, b1 / floor, "info")
row("b", "same, against a floor of empty scripts", b1, "µs",
    "2 × `SELECT 1` + 2 × `EVALSHA return 1`", floor_eval1, b1 / floor_eval1, "info")
row("b", "same, against `pg_advisory_lock` + `unlock`, 1 client", b1, "µs",
    "advisory pair, 1 client", us_lat("b_adv"), b1 / us_lat("b_adv"), "info")
best = min(allv.get("b_1_lat_ms", [float("nan")])) * 1000
best_floor = (2 * min(allv.get("a_pg_lat_ms", [float("nan")])) * 1000
              + min(allv.get("a_pair_us", [float("nan")])))
row("b", "same, best sample of each (the quietest moments of the run)", best, "µs",
    "floor from the best samples", best_floor, best / best_floor, "info")
row("b", "same, Redis over a unix socket (`unix://`), 1 client", us_lat("b_1unix"), "µs",
    "b over TCP (127.0.0.1), 1 client", b1, us_lat("b_1unix") / b1, "info")
r = rep_ratio(lambda s: s("b_1_lat_ms") / (2 * s("a_info_lat_ms")))
row("b", "same, against two calls that make one Redis round trip each", b1, "µs",
    "2 × `redis_lock_info` (a)", 2 * us_lat("a_info"), r, "info")
r = rep_ratio(lambda s: s("b_1_lat_ms") * 1000 / (2 * s("a_chain_us")))
row("b", "same, against two requests through the chain of three processes", b1, "µs",
    "2 × the chain (a)", 2 * g("a_chain_us"), r, "info")
r = rep_ratio(lambda s: s("b_16_tps") / s("b_1_tps"))
row("b", "`redis_wlock` + `redis_unlock`, 16 clients, distinct names", g("b_16_tps"), "pairs/s",
    "the same, 1 client", g("b_1_tps"), r, "≥ 2.5", r >= 2.5)

# c. xact lock in autocommit
r = rep_ratio(lambda s: s("c_rw_tps") / s("c_adv_tps"))
row("c", "`redis_wlock_xact` in autocommit, 1 client", g("c_rw_tps"), "xacts/s",
    "`pg_advisory_xact_lock`, 1 client", g("c_adv_tps"), r, "≥ 0.45", r >= 0.45)
c_us = 1e6 / g("c_rw_tps")
r = rep_ratio(lambda s: 1e6 / s("c_rw_tps") / (s("a_pg_lat_ms") * 1000 + s("a_eval1_us")))
row("c", "same, µs a transaction, against its floor", c_us, "µs",
    "`SELECT 1` + `EVALSHA return 1`", pg + g("a_eval1_us"), r, "≤ 1.2", r <= 1.2)
r = rep_ratio(lambda s: 1e6 / s("c_rw_tps") / (s("a_info_lat_ms") * 1000))
row("c", "same, against a call that makes one Redis round trip", c_us, "µs",
    "`redis_lock_info` (a)", us_lat("a_info"), r, "info")
r = rep_ratio(lambda s: 1e6 / s("c_rw_tps") / s("a_chain_us"))
row("c", "same, against one request through the chain of three processes", c_us, "µs",
    "the chain (a)", g("a_chain_us"), r, "info")
r = rep_ratio(lambda s: s("c_rwunix_tps") / s("c_adv_tps"))
row("c", "same, Redis over a unix socket (`unix://`)", g("c_rwunix_tps"), "xacts/s",
    "`pg_advisory_xact_lock`, 1 client", g("c_adv_tps"), r, "info")

# d. stacked re-lock loop
r = g("d_rw_us") / g("d_adv_us")
row("d", "stacked `redis_wlock` + `redis_unlock` of a held lock, PL/pgSQL loop", g("d_rw_us"),
    "µs/iter", "`pg_advisory_lock` + `unlock` of a held lock", g("d_adv_us"), r, "≤ 2", r <= 2)

# e. 16 readers on one name
r = g("e_rw_tps") / g("e_adv_tps")
row("e", "`redis_rlock` + `redis_unlock`, 16 clients, one name", g("e_rw_tps"), "pairs/s",
    "`pg_advisory_lock_shared` + `unlock_shared`, 16 clients", g("e_adv_tps"), r, "info")
row("e", "same, against writers on distinct names (b, 16 clients)", g("e_rw_tps"), "pairs/s",
    "b, 16 clients", g("b_16_tps"), g("e_rw_tps") / g("b_16_tps"), "info")

# f. redis-py Lock
row("f", "redis-py `Lock` acquire + release, 1 client (app straight to Redis)",
    g("f_redispy_us"), "µs", "rwlock from SQL (b, 1 client)", b1, g("f_redispy_us") / b1, "info")

# g. hand-off
p50, p99 = g("g1_p50_ms"), g("g1_p99_ms")
row("g", "hand-off, 1 waiter, p50 (n=%d)" % g("g1_n"), p50, "ms",
    "redis-py `Lock` polling (sleep 0.1 s), p50", g("gpoll_p50_ms"), p50 / g("gpoll_p50_ms"),
    "≤ 1 ms", p50 <= 1.0)
row("g", "hand-off, 1 waiter, p99", p99, "ms",
    "redis-py `Lock` polling, p99 (n=%d)" % g("gpoll_n"), g("gpoll_p99_ms"),
    p99 / g("gpoll_p99_ms"), "≤ 5 ms", p99 <= 5.0)
row("g", "hand-off, 16 waiters, p50 (n=%d)" % g("g16_n"), g("g16_p50_ms"), "ms",
    "redis-py `Lock` polling, p50", g("gpoll_p50_ms"), g("g16_p50_ms") / g("gpoll_p50_ms"), "info")
row("g", "hand-off, 16 waiters, p99", g("g16_p99_ms"), "ms",
    "redis-py `Lock` polling, p99", g("gpoll_p99_ms"), g("g16_p99_ms") / g("gpoll_p99_ms"), "info")

# TLS (bench/tls.sh): b over rediss:// against the same over plain TCP,
# measured beside it in each repetition.
if "b_1tls_lat_ms" in allv:
    r = rep_ratio(lambda s: s("b_1tls_lat_ms") / s("b_1tcp_lat_ms"))
    row("b", "same, over TLS (`rediss://`, certificate verified), 1 client", us_lat("b_1tls"), "µs",
        "the same over plain TCP, beside it", us_lat("b_1tcp"), r, "info")
# h. hand-offs with many waiting writers
for n in (10, 50, 100):
    ms, calls, pub = g("h%d_ms" % n), g("h%d_calls" % n), g("h%d_publish" % n)
    if ms != ms:
        continue
    row("h", "hand-offs, %d writers waiting, each taking the lock and releasing it at once: "
        "drain time" % n, ms, "ms", "%d × the 1-waiter hand-off p50 (g)" % n, n * p50,
        ms / (n * p50), "≤ 150 ms" if n == 50 else "info", (ms <= 150) if n == 50 else None)
    row("h", "same, Redis script calls per hand-off (%d in all; PUBLISH: %d)" % (calls, pub),
        calls / n, "calls", "", None, None, "≤ 4", calls / n <= 4)


# i. Redis CPU per script call
def cpu_rows(tag, how, with_target):
    for m, what in (("w", "write"), ("r", "read")):
        rw_, base = g("%s_rw_%s_us" % (tag, m)), g("%s_base_%s_us" % (tag, m))
        if rw_ != rw_:
            continue
        ratio = g("%s_ratio_%s" % (tag, m))
        row("i", "Redis CPU per script call, %s lock + unlock (acquire.lua + release.lua), %s"
            % (what, how), rw_, "µs", "Redisson-style %s lock + unlock (bench/baseline)" % what,
            base, ratio, "≤ 1.25" if with_target else "info",
            (ratio <= 1.25) if with_target else None)
    if g("%s_setnx_us" % tag) == g("%s_setnx_us" % tag):
        row("i", "same, write, against the simplest lock, %s" % how, g("%s_rw_w_us" % tag), "µs",
            "SET NX PX + compare-and-delete script", g("%s_setnx_us" % tag),
            g("%s_rw_w_us" % tag) / g("%s_setnx_us" % tag), "info")


cpu_rows("cpu", "pipelined (INFO commandstats usec_per_call; ratio: median of 25 interleaved "
         "repetitions)", True)
cpu_rows("cpuseq", "one command per round trip", False)

# wait_replicas (bench/replicas.sh): b with rwlock.wait_replicas = 1 (WAIT 1
# after the acquire script, one replica on loopback) against 0, beside it.
if "b_1w1_lat_ms" in allv:
    r = rep_ratio(lambda s: s("b_1w1_lat_ms") / s("b_1w0_lat_ms"))
    row("b", "same, `rwlock.wait_replicas = 1` (one replica, loopback), 1 client", us_lat("b_1w1"), "µs",
        "the same with `wait_replicas = 0`, beside it", us_lat("b_1w0"), r, "info")


def fmt(x):
    if x is None:
        return ""
    if x != x:
        return "n/a"
    if abs(x) >= 1000:
        return "%.0f" % x
    if abs(x) >= 10:
        return "%.1f" % x
    return "%.3f" % x if abs(x) < 1 else "%.2f" % x


hdr = ["", "measurement", "value", "unit", "baseline (same run)", "baseline value",
       "ratio", "target", "result"]
lines = ["| " + " | ".join(hdr) + " |", "|" + "|".join(["---"] * len(hdr)) + "|"]
for (i, what, val, unit, bwhat, bval, ratio, target, verdict) in rows:
    lines.append("| " + " | ".join([i, what, fmt(val), unit, bwhat, fmt(bval),
                                     "" if ratio is None else ("%.2f" % ratio if ratio >= 0.1 else "%.4f" % ratio),
                                     target, verdict]) + " |")

try:
    rev = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
except OSError:
    rev = "?"
head = [
    "# rwlock benchmark results",
    "",
    "Run %s UTC at commit `%s` on %s, %d CPUs (%s); `bash bench/run.sh`, "
    "pgbench `-n -M prepared -T %s`, %s interleaved repetitions, medians shown. Ratios are value / baseline; every baseline "
    "was measured in the same run; for the targets of b and c the ratio is the median "
    "of the ratios within each repetition, which cancels slow drifts of a shared machine. Latencies of pgbench are its average; "
    "\"pairs/s\" and \"xacts/s\" are pgbench's tps." % (
        datetime.datetime.utcnow().strftime("%Y-%m-%d %H:%M"), rev, platform.node(),
        os.cpu_count(), platform.platform(), os.environ.get("BENCH_SECONDS", "2"),
        os.environ.get("BENCH_REPS", "3")),
    "",
]
npass = sum(1 for r in rows if r[8] == "PASS")
nmiss = sum(1 for r in rows if r[8] == "MISS")
tail = ["", "Targets: %d PASS, %d MISS." % (npass, nmiss), ""]
text = "\n".join(head + lines + tail)
# Sections other scripts keep in the file (## ..., e.g. bench/cluster.sh's)
# stay after the table.
if os.path.exists(md_path):
    old = open(md_path).read()
    if "\n## " in old:
        text += old[old.index("\n## ") + 1:]
with open(md_path, "w") as f:
    f.write(text)
print(text)

# Chart: µs per operation, measured next to its baseline (log scale).
chart = [
    ("b 1 client\\npair vs floor", b1, floor),
    ("b 16 clients\\nper pair vs 1 client", us_per_op("b_16"), us_per_op("b_1")),
    ("c xact lock\\nvs advisory", us_per_op("c_rw"), us_per_op("c_adv")),
    ("d stacked\\nvs advisory", g("d_rw_us"), g("d_adv_us")),
    ("e 16 readers\\nvs adv. shared", us_per_op("e_rw"), us_per_op("e_adv")),
    ("f rwlock (b)\\nvs redis-py", b1, g("f_redispy_us")),
    ("g hand-off p50\\nvs polling", p50 * 1000, g("gpoll_p50_ms") * 1000),
    ("g hand-off p99\\nvs polling", p99 * 1000, g("gpoll_p99_ms") * 1000),
    ("g 16 waiters p50\\nvs polling", g("g16_p50_ms") * 1000, g("gpoll_p50_ms") * 1000),
    ("i Redis CPU, write\\nvs Redisson-style", g("cpu_rw_w_us"), g("cpu_base_w_us")),
    ("i Redis CPU, read\\nvs Redisson-style", g("cpu_rw_r_us"), g("cpu_base_r_us")),
]
with open(dat_path, "w") as f:
    f.write("# label rwlock baseline\n")
    for label, a, b in chart:
        f.write('"%s" %.3f %.3f\n' % (label, max(a, 0.001), max(b, 0.001)))
