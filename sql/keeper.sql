-- The keeper and redis_locks, where the keeper runs: test/run.sh runs this
-- file in a server with rwlock in shared_preload_libraries (the TAP suite
-- tests renewals over time, crashes and Redis faults).
CREATE EXTENSION IF NOT EXISTS rwlock;
SET rwlock.key_prefix = 'rwtest_keeper';

-- the keeper runs (it starts with the server: give it ten seconds)
DO $$
BEGIN
  FOR i IN 1..100 LOOP
    PERFORM pg_stat_clear_snapshot();
    EXIT WHEN EXISTS (SELECT FROM pg_stat_activity WHERE backend_type = 'rwlock keeper');
    PERFORM pg_sleep(0.1);
  END LOOP;
END $$;
SELECT count(*) AS keepers FROM pg_stat_activity WHERE backend_type = 'rwlock keeper';
SELECT redis_renew();  -- nothing held
SELECT redis_wlock('k') > 0 AS ok, redis_rlock('k2') >= 0 AS ok;
BEGIN;
SELECT redis_rlock_xact('k3') >= 0 AS ok;
SELECT redis_renew();  -- all three renewed
-- one row per session, name and level, with the keeper's view of its lease
SELECT name, mode, level, lease_state, owner LIKE 'pg:%' AS owner_ok,
       lease_until > acquired AS lease_ok,
       lease_until <= now() + current_setting('rwlock.lease')::interval + '1s' AS lease_bounded
  FROM redis_locks WHERE pid = pg_backend_pid() ORDER BY name;
COMMIT;
SELECT name FROM redis_locks WHERE pid = pg_backend_pid() ORDER BY name;
SELECT redis_unlock_all();
SELECT redis_renew();
SELECT count(*) FROM redis_locks WHERE pid = pg_backend_pid();
