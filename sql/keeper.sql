-- redis_renew() and redis_locks, in any server: redis_locks lists this
-- session's holds only if rwlock is in shared_preload_libraries (the keeper's
-- shared table); elsewhere it is empty. The TAP suite (t/) tests the keeper.
CREATE EXTENSION IF NOT EXISTS rwlock;
SET rwlock.key_prefix = 'rwtest_keeper';
CREATE TEMP VIEW preloaded AS
  SELECT current_setting('shared_preload_libraries') ~ '(^|[ ,])rwlock($|[ ,])' AS yes;

SELECT redis_renew();  -- nothing held
SELECT redis_wlock('k') > 0 AS ok, redis_rlock('k2') >= 0 AS ok;
SELECT redis_renew();  -- both renewed
SELECT count(*) = CASE WHEN (SELECT yes FROM preloaded) THEN 2 ELSE 0 END AS as_expected
  FROM redis_locks WHERE pid = pg_backend_pid();
SELECT bool_and(lease_state = 'held' AND owner LIKE 'pg:%' AND lease_until > acquired
                AND mode = CASE name WHEN 'k' THEN 'write' ELSE 'read' END
                AND level = 'session') IS NOT FALSE AS rows_ok
  FROM redis_locks WHERE pid = pg_backend_pid();
SELECT redis_unlock_all();
SELECT redis_renew();
SELECT count(*) FROM redis_locks WHERE pid = pg_backend_pid();
