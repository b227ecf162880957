-- deep.sql: calls run by verify/memcheck.sh after the suites, for what the
-- suites do not do: many holds of one name at each level, in and out of
-- transactions and savepoints (each hold needs room in the session's
-- stacks), and the views over them. Each part below runs in a session of
-- its own (a backend stopped by the checker ends only its part).
-- The output is not compared: the sanitizers and the server log judge.
CREATE EXTENSION IF NOT EXISTS rwlock;
-- session: session-level holds stacked past the first room
SELECT count(redis_rlock('memcheck_b')) FROM generate_series(1, 40);
SELECT count(redis_wlock('memcheck_b2')) FROM generate_series(1, 40);
SELECT redis_unlock_all();
-- session: transaction-level holds stacked past the first room
BEGIN;
SELECT count(redis_wlock_xact('memcheck_c')) FROM generate_series(1, 40);
COMMIT;
-- session: savepoints over deep transaction-level stacks
BEGIN;
SELECT count(redis_rlock_xact('memcheck_d')) FROM generate_series(1, 40);
SAVEPOINT s1;
SELECT count(redis_rlock_xact('memcheck_d')) FROM generate_series(1, 40);
ROLLBACK TO s1;
SELECT count(redis_wlock_xact('memcheck_e')) FROM generate_series(1, 120);
RELEASE s1;
COMMIT;
-- session: both levels, the views, unlocking one by one, DISCARD ALL
SELECT count(redis_rlock('memcheck_f')) FROM generate_series(1, 150);
SELECT count(redis_try_wlock('memcheck_f')) FROM generate_series(1, 20);
BEGIN;
SELECT count(redis_rlock_xact('memcheck_f')) FROM generate_series(1, 30);
SELECT count(*) FROM redis_held_locks;
SELECT count(*) FROM redis_locks;
SELECT count(*) FROM redis_lock_info('memcheck_f');
SELECT count(*) FROM redis_connection_info();
COMMIT;
SELECT count(redis_unlock('memcheck_f')) FROM generate_series(1, 20);
DISCARD ALL;
SELECT redis_unlock_all();
