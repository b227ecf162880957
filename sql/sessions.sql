-- Two sessions: this one and a dblink connection to the same database.
CREATE EXTENSION IF NOT EXISTS rwlock;
CREATE EXTENSION IF NOT EXISTS dblink;
SET rwlock.key_prefix = 'rwtest2';
SELECT dblink_connect('other', format('dbname=%s port=%s host=%s', current_database(),
  current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('other', $$SET rwlock.key_prefix = 'rwtest2'; SELECT 1$$) AS t(x int);

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

-- session end releases everything at once
SELECT * FROM dblink('other', $$SELECT redis_wlock('e') > 0$$) AS t(ok bool);
SELECT dblink_disconnect('other');
SELECT redis_try_wlock('e', '2s') AS released_at_exit;
SELECT redis_unlock_all();
