-- Two sessions: this one and a dblink connection to the same database.
CREATE EXTENSION IF NOT EXISTS rwlock;
CREATE EXTENSION IF NOT EXISTS dblink;
-- both sessions start with the database's prefix (sql/rwlock.sql): add ours
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwtest2', false)
  LIKE '%:rwtest2' AS own_prefix;
SELECT dblink_connect('other', format('dbname=%s port=%s host=%s', current_database(),
  current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('other', $$SELECT set_config('rwlock.key_prefix',
  current_setting('rwlock.key_prefix') || ':rwtest2', false) = $$ ||
  quote_literal(current_setting('rwlock.key_prefix'))) AS t(same_prefix bool);
-- What the other session sends at the end of a transaction (a release, a
-- waiter's intent withdrawn) is not waited for, and reaches Redis on its own
-- socket: give it up to 500 ms (much less than the 2 s an intent lives by
-- itself) to be seen on ours.
CREATE FUNCTION settled(lock text) RETURNS void LANGUAGE plpgsql AS $$
BEGIN
  FOR i IN 1..50 LOOP
    EXIT WHEN cardinality((redis_lock_info(lock)).waiting) = 0;
    PERFORM pg_sleep(0.01);
  END LOOP;
END $$;

-- the other session holds the write lock
SELECT * FROM dblink('other', $$SELECT redis_wlock('w') > 0$$) AS t(ok bool);
SELECT redis_try_wlock('w') AS write_blocked, redis_try_rlock('w') AS read_blocked;
SET lock_timeout = '300ms';
\set VERBOSITY sqlstate
SELECT redis_wlock('w');
\set VERBOSITY default
RESET lock_timeout;
SELECT clock_timestamp() AS t0 \gset
SELECT redis_try_wlock('w', '200ms') AS waited_false;
SELECT clock_timestamp() - :'t0' >= interval '190ms' AS waited_long_enough;
-- once released, we get it
SELECT * FROM dblink('other', $$SELECT redis_unlock('w')$$) AS t(ok bool);
SELECT redis_try_wlock('w') AS now_free;
SELECT redis_unlock('w');

-- readers share; a writer waits for them
SELECT redis_rlock('r') >= 0 AS reading;
SELECT * FROM dblink('other', $$SELECT redis_try_rlock('r')$$) AS t(shared bool);
SELECT * FROM dblink('other', $$SELECT redis_try_wlock('r')$$) AS t(write_blocked bool);
SELECT redis_unlock('r');
SELECT * FROM dblink('other', $$SELECT redis_try_wlock('r')$$) AS t(sole_reader_upgrades bool);
SELECT * FROM dblink('other', $$SELECT redis_unlock_all()$$) AS t(n int);

-- transaction-level holds of the other session go at its commit
SELECT dblink_exec('other', 'BEGIN');
SELECT * FROM dblink('other', $$SELECT redis_wlock_xact('tx') > 0$$) AS t(ok bool);
SELECT redis_try_rlock('tx') AS blocked_in_xact;
SELECT dblink_exec('other', 'COMMIT');
SELECT redis_try_rlock('tx', '1s') AS free_after_commit;
SELECT redis_unlock('tx');

-- a waiting writer is visible in Redis and gets the lock when we release
SELECT redis_rlock('q') >= 0 AS reading;
SELECT dblink_send_query('other', $$SELECT redis_wlock('q') > 0$$);
SELECT pg_sleep(0.3);
SELECT state, cardinality(readers) AS readers, cardinality(waiting) AS waiting
  FROM redis_lock_info('q');
SELECT redis_unlock('q');
SELECT * FROM dblink_get_result('other') AS t(got_it bool);
SELECT * FROM dblink_get_result('other') AS t(got_it bool);
SELECT state, writer IS NOT NULL AS has_writer, cardinality(waiting) AS waiting
  FROM redis_lock_info('q');
SELECT * FROM dblink('other', $$SELECT redis_unlock('q')$$) AS t(ok bool);

-- a cancelled waiter stops at once and leaves nothing behind in Redis
SELECT redis_wlock('c') > 0 AS holding;
SELECT dblink_send_query('other', $$SELECT redis_wlock('c')$$);
SELECT pg_sleep(0.3);
SELECT cardinality(waiting) AS waiting FROM redis_lock_info('c');
SELECT clock_timestamp() AS t0 \gset
SELECT dblink_cancel_query('other');
SELECT * FROM dblink_get_result('other', false) AS t(token bigint);
SELECT clock_timestamp() - :'t0' < interval '500ms' AS prompt;
SELECT * FROM dblink_get_result('other', false) AS t(token bigint);
SELECT settled('c');
SELECT state, cardinality(waiting) AS waiting FROM redis_lock_info('c');
-- and so does one that statement_timeout ends
SELECT * FROM dblink('other', $$SET statement_timeout = '300ms'; SELECT 1$$) AS t(x int);
SELECT * FROM dblink('other', $$SELECT redis_wlock('c')$$, false) AS t(token bigint);
SELECT * FROM dblink('other', $$RESET statement_timeout; SELECT 1$$) AS t(x int);
SELECT settled('c');
SELECT state, cardinality(waiting) AS waiting FROM redis_lock_info('c');
SELECT redis_unlock('c');
SELECT * FROM dblink('other', $$SELECT redis_try_wlock('c')$$) AS t(free_for_other bool);
SELECT * FROM dblink('other', $$SELECT redis_unlock('c')$$) AS t(ok bool);

-- two readers upgrading: the second to ask, trying, gets false at once
SELECT redis_rlock('up') >= 0 AS reading;
SELECT * FROM dblink('other', $$SELECT redis_rlock('up') >= 0$$) AS t(other_reading bool);
SELECT dblink_send_query('other', $$SELECT redis_wlock('up') > 0$$);
SELECT pg_sleep(0.3);
SELECT clock_timestamp() AS t0 \gset
SELECT redis_try_wlock('up', '5s') AS second_upgrader;
SELECT clock_timestamp() - :'t0' < interval '1s' AS at_once;
SELECT redis_unlock('up');                   -- the first upgrader gets it
SELECT * FROM dblink_get_result('other') AS t(first_upgraded bool);
SELECT * FROM dblink_get_result('other') AS t(first_upgraded bool);
SELECT * FROM dblink('other', $$SELECT redis_unlock_all()$$) AS t(n int);

-- session end releases everything at once
SELECT * FROM dblink('other', $$SELECT redis_wlock('e') > 0$$) AS t(ok bool);
SELECT dblink_disconnect('other');
SELECT redis_try_wlock('e', '2s') AS released_at_exit;
SELECT redis_unlock_all();
DROP FUNCTION settled(text);
