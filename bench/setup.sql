-- Objects the benchmark needs in its throw-away database, after rwlock's
-- own script (run by bench/run.sh against a private copy of the library).

-- d: n stacked re-locks + unlocks of a lock the session already holds once;
-- returns µs per iteration (one lock + one unlock).
CREATE FUNCTION bench_loop_rwlock(n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  t1 timestamptz;
BEGIN
  PERFORM redis_wlock('bench_d');
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    PERFORM redis_wlock('bench_d');
    PERFORM redis_unlock('bench_d');
  END LOOP;
  t1 := clock_timestamp();
  PERFORM redis_unlock('bench_d');
  RETURN round((extract(epoch FROM t1 - t0) * 1e6 / n)::numeric, 3);
END $$;

-- d's baseline: the same loop over a held advisory lock.
CREATE FUNCTION bench_loop_advisory(n int) RETURNS float8 LANGUAGE plpgsql AS $$
DECLARE
  t0 timestamptz;
  t1 timestamptz;
BEGIN
  PERFORM pg_advisory_lock(4242);
  t0 := clock_timestamp();
  FOR i IN 1..n LOOP
    PERFORM pg_advisory_lock(4242);
    PERFORM pg_advisory_unlock(4242);
  END LOOP;
  t1 := clock_timestamp();
  PERFORM pg_advisory_unlock(4242);
  RETURN round((extract(epoch FROM t1 - t0) * 1e6 / n)::numeric, 3);
END $$;
