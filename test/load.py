#!/usr/bin/python3
"""load.py: many sessions, one Redis lock, and a counter that only the lock
keeps right.

Several sessions (SESSIONS, default 8) run for DURATION seconds (default 10)
against one lock. Each iteration is a writer's or a reader's, at random.

A writer, under redis_wlock, reads a counter row in one statement, marks the
row "half done" in a second, sleeps a millisecond in a third and writes
counter + 1 (computed here, in the client) with the mark cleared in a fourth.
A reader, under redis_rlock, reads the row twice, a millisecond apart: it must
never see the mark, the counter must not move while it reads, and it must not
go back from what this session saw before. A third of the acquisitions are
redis_try_*lock with a wait instead. The run also fails if fewer than
MIN_RATE (default 50) acquisitions a second get through, as happens when
waiters are not woken.

Every session runs in autocommit, so PostgreSQL's row locks exclude nothing
across statements: only the Redis lock does. If two writers overlap, an
update is lost and the final counter is short of the writer iterations; if a
writer overlaps a reader, the reader sees the mark or the counter move.

With a failover (test/t/015_sentinel_load.pl): RWLOCK_URL sets
rwlock.redis_url in every session (a redis+sentinel:// URL), WAIT_REPLICAS
rwlock.wait_replicas, and FAILOVER_CMD is a shell command run halfway through
the run (e.g. redis-cli -p 26392 SENTINEL FAILOVER rwmaster). Class 08 errors
are then expected, a few per session (a grant too few replicas acknowledged,
while the replicas follow the new master, is one; the try forms return false
for it instead): a lock call that fails with one did not take the lock and is
not counted; an unlock that fails with one comes
after the write, which counts. The counter must still equal the writes
counted: no lost update among locks that were granted and acknowledged.

Connects with the usual libpq environment (PGHOST, PGPORT, ...); run it
inside pg_virtualenv, as test/run.sh does. Prints a summary; exits 1 with the
reasons on any failure.
"""
import os
import random
import sys
import threading
import time

import subprocess

import psycopg2

SESSIONS = int(os.environ.get("SESSIONS", "8"))
DURATION = float(os.environ.get("DURATION", "10"))
# Waiters are woken when the lock frees (about 400 acquisitions/s here on two
# CPUs); if they slept until a timer instead, this would drop to about 20.
MIN_RATE = float(os.environ.get("MIN_RATE", "50"))
WRITE_SHARE = 0.4
LOCK = "load-%d-%d" % (os.getpid(), int(time.time()))
RWLOCK_URL = os.environ.get("RWLOCK_URL")
WAIT_REPLICAS = os.environ.get("WAIT_REPLICAS")
FAILOVER_CMD = os.environ.get("FAILOVER_CMD")
MAX_08 = int(os.environ.get("MAX_08", "20"))   # per session, with a failover
errors_08 = {}         # session -> class 08 errors seen
unlock_false = {}      # session -> unlocks that returned false (a failover)
try_false = {}         # session -> try forms that returned false (a failover)

failures = []          # from the sessions, as they happen
verdict = []           # from the final checks, reported first
failures_lock = threading.Lock()


def fail(msg, final=False):
    with failures_lock:
        (verdict if final else failures).append(msg)


def connect():
    conn = psycopg2.connect("")
    conn.autocommit = True
    cur = conn.cursor()
    # A hang must fail the test, not stall it.
    cur.execute("SET lock_timeout = '30s'")
    if RWLOCK_URL:
        cur.execute("SET rwlock.redis_url = %s", (RWLOCK_URL,))
    if WAIT_REPLICAS:
        cur.execute("SET rwlock.wait_replicas = %s", (WAIT_REPLICAS,))
    return conn, cur


def is_08(e):
    return FAILOVER_CMD is not None and (getattr(e, "pgcode", None) or "").startswith("08")


def one(cur, sql, args=None):
    cur.execute(sql, args)
    return cur.fetchone()


def writer_iteration(cur, wid, it, stage=None):
    stage = stage if stage is not None else [None]
    if it % 3 == 0:
        ok = one(cur, "SELECT redis_try_wlock(%s, '30s')", (LOCK,))[0]
        if not ok:
            if FAILOVER_CMD:        # a grant too few replicas acknowledged
                try_false[wid] = try_false.get(wid, 0) + 1
                return False
            fail("session %d: redis_try_wlock with a 30 s wait gave up" % wid)
            return False
    else:
        one(cur, "SELECT redis_wlock(%s)", (LOCK,))
    stage[0] = "inside"
    n, half = one(cur, "SELECT n, half FROM rwlock_load WHERE id = 1")
    if half:
        fail("session %d: writer got the write lock and found the row half done "
             "(another writer is inside the lock)" % wid)
    cur.execute("UPDATE rwlock_load SET half = true WHERE id = 1")
    cur.execute("SELECT pg_sleep(0.001)")
    cur.execute("UPDATE rwlock_load SET n = %s, half = false WHERE id = 1", (n + 1,))
    stage[0] = "unlock"
    if not one(cur, "SELECT redis_unlock(%s)", (LOCK,))[0]:
        if FAILOVER_CMD:
            unlock_false[wid] = unlock_false.get(wid, 0) + 1
        else:
            fail("session %d: redis_unlock of the write lock returned false" % wid)
    return True


def reader_iteration(cur, wid, it, last_seen):
    if it % 3 == 0:
        ok = one(cur, "SELECT redis_try_rlock(%s, '30s')", (LOCK,))[0]
        if not ok:
            if FAILOVER_CMD:        # a grant too few replicas acknowledged
                try_false[wid] = try_false.get(wid, 0) + 1
                return last_seen
            fail("session %d: redis_try_rlock with a 30 s wait gave up" % wid)
            return last_seen
    else:
        one(cur, "SELECT redis_rlock(%s)", (LOCK,))
    n1, half1 = one(cur, "SELECT n, half FROM rwlock_load WHERE id = 1")
    cur.execute("SELECT pg_sleep(0.001)")
    n2, half2 = one(cur, "SELECT n, half FROM rwlock_load WHERE id = 1")
    if half1 or half2:
        fail("session %d: torn read: a reader under the read lock saw a writer's "
             "half-done row (counter %d)" % (wid, n1))
    if n1 != n2:
        fail("session %d: a writer changed the counter (%d -> %d) while a reader "
             "held the read lock" % (wid, n1, n2))
    if n1 < last_seen:
        fail("session %d: the counter went back from %d to %d" % (wid, last_seen, n1))
    if not one(cur, "SELECT redis_unlock(%s)", (LOCK,))[0]:
        if FAILOVER_CMD:
            unlock_false[wid] = unlock_false.get(wid, 0) + 1
        else:
            fail("session %d: redis_unlock of the read lock returned false" % wid)
    return max(last_seen, n2)


def worker(wid, deadline, counts):
    rnd = random.Random(wid)
    writes = reads = 0
    try:
        conn, cur = connect()
        last_seen = 0
        it = 0
        while time.monotonic() < deadline and len(failures) < 20:
            it += 1
            write = rnd.random() < WRITE_SHARE
            stage = ["lock"]
            try:
                if write:
                    if writer_iteration(cur, wid, it, stage):
                        writes += 1
                else:
                    last_seen = reader_iteration(cur, wid, it, last_seen)
                    reads += 1
            except psycopg2.Error as e:
                if not is_08(e):
                    raise
                errors_08[wid] = errors_08.get(wid, 0) + 1
                if write and stage[0] == "unlock":
                    writes += 1         # the write was done under the lock
                elif stage[0] == "inside":
                    raise               # only lock and unlock talk to Redis
                time.sleep(0.05)
        left = one(cur, "SELECT count(*) FROM redis_held_locks")[0]
        if left:
            fail("session %d: still holds %d locks at the end" % (wid, left))
        conn.close()
    except Exception as e:              # noqa: BLE001 - any error fails the test
        fail("session %d: %s: %s" % (wid, type(e).__name__, str(e).strip()))
    counts[wid] = (writes, reads)


def main():
    conn, cur = connect()
    cur.execute("CREATE EXTENSION IF NOT EXISTS rwlock")
    cur.execute("DROP TABLE IF EXISTS rwlock_load")
    cur.execute("CREATE TABLE rwlock_load (id int PRIMARY KEY, n bigint NOT NULL, "
                "half boolean NOT NULL)")
    cur.execute("INSERT INTO rwlock_load VALUES (1, 0, false)")

    counts = {}
    start = time.monotonic()
    deadline = start + DURATION
    threads = [threading.Thread(target=worker, args=(i, deadline, counts))
               for i in range(SESSIONS)]
    for t in threads:
        t.start()
    if FAILOVER_CMD:
        time.sleep(DURATION / 2)
        t_fail = time.monotonic() - start
        subprocess.run(FAILOVER_CMD, shell=True, check=False)
        print("load: ran %r at %.1f s" % (FAILOVER_CMD, t_fail))
    for t in threads:
        t.join(DURATION + 120)
        if t.is_alive():
            fail("a session did not finish within 120 s of the end of the run", True)
    elapsed = time.monotonic() - start

    writes = sum(w for w, _ in counts.values())
    reads = sum(r for _, r in counts.values())
    n, half = one(cur, "SELECT n, half FROM rwlock_load WHERE id = 1")
    if n != writes:
        fail("lost updates: the counter is %d after %d writer iterations (%d lost)"
             % (n, writes, writes - n), True)
    if half:
        fail("the row was left half done", True)
    if not one(cur, "SELECT redis_try_wlock(%s)", (LOCK,))[0]:
        fail("the lock is not free in Redis after the run", True)
    else:
        one(cur, "SELECT redis_unlock(%s)", (LOCK,))
    for wid, n08 in sorted(errors_08.items()):
        if n08 > MAX_08:
            fail("session %d: %d class 08 errors (more than %d)" % (wid, n08, MAX_08), True)
    if writes == 0 or reads == 0:
        fail("no progress: %d writer and %d reader iterations" % (writes, reads), True)
    elif (writes + reads) / elapsed < MIN_RATE:
        fail("too slow: %.0f lock acquisitions/s, under %.0f: are waiters woken when "
             "the lock frees?" % ((writes + reads) / elapsed, MIN_RATE), True)
    cur.execute("DROP TABLE rwlock_load")
    conn.close()

    print("load: %d sessions, %.1f s: %d writer iterations (counter %d), "
          "%d reader iterations, %.0f lock acquisitions/s"
          % (SESSIONS, elapsed, writes, n, reads, (writes + reads) / elapsed))
    for wid in sorted(counts):
        print("  session %d: %d writes, %d reads%s" % (
            wid, *counts[wid],
            (", %d class 08 errors" % errors_08[wid] if wid in errors_08 else "") +
            (", %d unlocks false" % unlock_false[wid] if wid in unlock_false else "") +
            (", %d tries false" % try_false[wid] if wid in try_false else "")))
    if verdict or failures:
        print("load: FAILED", file=sys.stderr)
        for f in verdict + failures[:20]:
            print("  " + f, file=sys.stderr)
        return 1
    print("load: ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
