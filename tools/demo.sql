-- demo.sql: what rwlock does, in two sessions (this one and a dblink one).
\pset footer off
\set ECHO queries
CREATE EXTENSION rwlock;
CREATE EXTENSION dblink;
\set ECHO none
SELECT format('ALTER DATABASE %I SET rwlock.redis_url = %L', current_database(),
              current_setting('rwlock.redis_url')) \gexec
\set ECHO queries
SELECT url, connected FROM redis_connection_info();

\echo
\echo '-- Take the write lock on "invoice:42"; the token fences writes elsewhere.'
SELECT redis_wlock('invoice:42') AS fencing_token;
SELECT name, mode, level, depth, lease_state FROM redis_held_locks;
SELECT state, token, lease_left FROM redis_lock_info('invoice:42');

\echo
\echo '-- Another session cannot take it, in either mode.'
SELECT dblink_connect('other', format('dbname=%s port=%s host=%s', current_database(),
  current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('other', $$SELECT redis_try_wlock('invoice:42'),
                                      redis_try_rlock('invoice:42', '100ms')$$)
  AS t(try_write bool, try_read_100ms bool);

\echo
\echo '-- It waits in redis_wlock; our unlock wakes it at once.'
SELECT dblink_send_query('other', $$SELECT redis_wlock('invoice:42')$$);
SELECT pg_sleep(0.2);
SELECT state, cardinality(waiting) AS writers_waiting FROM redis_lock_info('invoice:42');
SELECT redis_unlock('invoice:42');
SELECT * FROM dblink_get_result('other') AS t(others_token bigint);
SELECT * FROM dblink_get_result('other') AS t(others_token bigint);
SELECT state, token FROM redis_lock_info('invoice:42');
SELECT * FROM dblink('other', $$SELECT redis_unlock('invoice:42')$$) AS t(unlocked bool);

\echo
\echo '-- Readers share; transaction-level holds end with the transaction.'
BEGIN;
SELECT redis_rlock_xact('report') AS read_token;
SELECT * FROM dblink('other', $$SELECT redis_try_rlock('report')$$) AS t(other_reads bool);
SELECT state, cardinality(readers) AS readers FROM redis_lock_info('report');
COMMIT;
SELECT * FROM dblink('other', $$SELECT redis_unlock('report')$$) AS t(unlocked bool);
SELECT state FROM redis_lock_info('report');

\echo
\echo '-- Several names at once: all or none, taken in one canonical order.'
SELECT redis_wlock(ARRAY['invoice:42', 'customer:7']) AS tokens;
SELECT name, mode FROM redis_held_locks ORDER BY name;
SELECT redis_unlock_all() AS released;
