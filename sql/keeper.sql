-- The keeper and redis_locks, where the keeper runs: test/run.sh runs this
-- file in a server with rwlock in shared_preload_libraries (the TAP suite
-- tests renewals over time, crashes and Redis faults).
CREATE EXTENSION IF NOT EXISTS rwlock;
-- under the server's prefix, as sql/rwlock.sql says
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwtest_keeper',
                  false) LIKE '%:rwtest_keeper' AS own_prefix;

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

-- statistics per database (redis_lock_stats), reset first
SELECT redis_lock_stats_reset();
SELECT write_session, write_xact, read_session, read_xact, try_failed
  FROM redis_lock_stats WHERE datname = current_database();
SELECT redis_wlock('st1') > 0, redis_wlock('st1') > 0, redis_rlock('st2') >= 0;
BEGIN;
SELECT redis_wlock_xact('st3') > 0, redis_rlock_xact('st3') > 0;
COMMIT;
SELECT redis_try_wlock('st1') AS stacked_try;  -- held by us: granted, stacked
-- another session's try of what we hold: false, counted
CREATE EXTENSION IF NOT EXISTS dblink;
SELECT dblink_connect('stats_other', format('dbname=%s port=%s host=%s',
         current_database(), current_setting('port'),
         split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT dblink_exec('stats_other', format('SET rwlock.key_prefix = %L',
                                         current_setting('rwlock.key_prefix')));
SELECT * FROM dblink('stats_other', 'SELECT redis_try_rlock(''st1'')') AS t(other_got_it bool);
SELECT dblink_disconnect('stats_other');
-- a Redis that cannot be reached: 08001, counted by class
SET rwlock.redis_url = 'redis://127.0.0.1:1/0';
SELECT redis_wlock('st4');
RESET rwlock.redis_url;
SELECT write_session, write_xact, read_session, read_xact, try_failed,
       errors_connection, errors_permission, errors_other,
       stats_reset > now() - interval '1 minute' AS reset_recently
  FROM redis_lock_stats WHERE datname = current_database();
SELECT redis_unlock_all();
-- the reset function is for superusers unless granted
SELECT has_function_privilege('public', 'redis_lock_stats_reset()', 'EXECUTE') AS public_may_reset;
SELECT redis_lock_stats_reset();
SELECT write_session + write_xact + read_session + read_xact AS after_reset
  FROM redis_lock_stats WHERE datname = current_database();
