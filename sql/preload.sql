-- What the library preloaded changes (the keeper and shared memory), so
-- that the other files pass either way: expected/preload.out is the
-- answer without preloading (test/run.sh's first server), preload_1.out
-- with rwlock in shared_preload_libraries (a live server set up as the
-- README says: test/installcheck_live.sh). sql/keeper.sql tests the keeper
-- itself.
CREATE EXTENSION IF NOT EXISTS rwlock;
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwpreload-' ||
                  md5(random()::text), false)
  IS NOT NULL AS fresh_prefix;
SELECT current_setting('shared_preload_libraries') ~ '\mrwlock\M' AS preloaded;
CREATE FUNCTION preload_st(n text, OUT state text, OUT mine bool) LANGUAGE sql AS $$
  SELECT i.state, i.writer = c.owner
  FROM redis_lock_info(n) i, redis_connection_info() c WHERE c.current $$;

-- statistics need shared memory: without rwlock preloaded, none are kept
-- (and the reset says so); preloaded, rows per database
SELECT count(*) > 0 AS stats_kept FROM redis_lock_stats;
SELECT redis_lock_stats_reset();

-- Without the keeper, a hold whose lease ran out is reported lost, not
-- hidden; with it, the keeper renews it and it is kept
SET rwlock.lease = '500ms';
SELECT redis_wlock('gone') > 0 AS ok;
SELECT pg_sleep(0.8);
SELECT * FROM preload_st('gone');                    -- Redis has let it go (kept: write, mine)
SELECT redis_try_rlock('probe');             -- any call renews due leases
SELECT name, lease_state FROM redis_held_locks ORDER BY name;
SELECT redis_unlock('gone');                 -- WARNING, false (kept: true)
SELECT redis_unlock('probe');
SELECT count(*) FROM redis_held_locks;
-- a transaction-level hold whose lease ran out before its commit: the
-- session knows it (the lease lapsed on its monotonic clock), COMMIT warns
-- (renewed by the keeper: no warning)
BEGIN;
SELECT redis_wlock_xact('gone2') > 0 AS ok;
SELECT pg_sleep(0.8);
COMMIT;
SELECT redis_try_rlock('probe');             -- warned at COMMIT already
SELECT redis_unlock('probe');
SELECT count(*) FROM redis_held_locks;
-- several names let go at once, one of them lost: false for it, with the
-- WARNING redis_unlock(name) gives, the other let go (kept: both true)
SELECT cardinality(redis_wlock(ARRAY['gone3'])) AS n;
SELECT pg_sleep(0.8);
RESET rwlock.lease;
SELECT redis_wlock('kept') > 0 AS holding;
SELECT redis_unlock(ARRAY['kept', 'gone3']) AS released;
SELECT count(*) FROM redis_held_locks;

DROP FUNCTION preload_st(text);
