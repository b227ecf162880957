-- Deep stacking: holds stack without bound, at both levels, and a stacked
-- hold needs room whether or not it goes to Redis (a hold pushed past its
-- room once crashed the backend: issue 27, finding 1).
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rwlock;
RESET client_min_messages;
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwstack-' ||
                  md5(random()::text), false)
  IS NOT NULL AS fresh_prefix;

-- 150 session-level read holds of one name, then 150 write holds of another
SELECT count(redis_rlock('b')) FROM generate_series(1, 150);
SELECT count(redis_wlock('w')) FROM generate_series(1, 150);
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name, mode;
SELECT bool_and(redis_unlock('b')) FROM generate_series(1, 150);
SELECT bool_and(redis_unlock('w')) FROM generate_series(1, 150);
SELECT redis_unlock('b');                    -- none left: WARNING, false
SELECT count(*) FROM redis_held_locks;

-- 150 transaction-level holds in one transaction, then COMMIT
BEGIN;
SELECT count(redis_wlock_xact('c')) FROM generate_series(1, 150);
SELECT count(redis_rlock_xact('c')) FROM generate_series(1, 150);
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY mode;
COMMIT;
SELECT count(*) FROM redis_held_locks;
SELECT state FROM redis_lock_info('c');

-- the first xact hold of a name held at session level needs no Redis call
SELECT redis_rlock('a') >= 0 AS session_hold;
BEGIN;
SELECT redis_rlock_xact('a') >= 0 AS xact_hold_stacked;
SELECT count(redis_rlock_xact('a')) FROM generate_series(1, 40);
SELECT level, depth FROM redis_held_locks ORDER BY level;
ROLLBACK;
SELECT level, depth FROM redis_held_locks;
SELECT redis_unlock('a');
SELECT state FROM redis_lock_info('a');

-- xact holds taken in savepoints, many deep, rolled back and released
BEGIN;
SELECT count(redis_wlock_xact('s')) FROM generate_series(1, 20);
SAVEPOINT p;
SELECT count(redis_rlock_xact('s')) FROM generate_series(1, 100);
SELECT count(redis_wlock_xact('s2')) FROM generate_series(1, 30);
ROLLBACK TO p;
SELECT name, mode, depth FROM redis_held_locks ORDER BY name, mode;
SAVEPOINT q;
SELECT count(redis_rlock_xact('s')) FROM generate_series(1, 50);
RELEASE q;
SELECT name, mode, depth FROM redis_held_locks ORDER BY name, mode;
COMMIT;
SELECT count(*) FROM redis_held_locks;
SELECT state FROM redis_lock_info('s');
SELECT state FROM redis_lock_info('s2');
