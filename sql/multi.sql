-- Several names at once (issue 40, SPEC 16): redis_wlock(text[]) and
-- friends. All the names or none; each a hold of its own; tokens in the
-- array's order; NULL and empty arrays refused. A second session (dblink)
-- holds one of the names, to see a call give back what it took.
SET client_min_messages = warning;
CREATE EXTENSION IF NOT EXISTS rwlock;
CREATE EXTENSION IF NOT EXISTS dblink;
RESET client_min_messages;
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwmulti-' ||
                  md5(random()::text), false) AS prefix \gset
SELECT dblink_connect('other', format('dbname=%s port=%s host=%s', current_database(),
  current_setting('port'), split_part(current_setting('unix_socket_directories'), ',', 1)));
SELECT * FROM dblink('other', format('SELECT set_config(%L, %L, false) IS NOT NULL',
  'rwlock.key_prefix', :'prefix')) AS t(same_prefix bool);
-- the SQLSTATE and message of a statement, or 'ok'
CREATE FUNCTION pg_temp.outcome(cmd text) RETURNS text LANGUAGE plpgsql AS $$
BEGIN
  EXECUTE cmd;
  RETURN 'ok';
EXCEPTION WHEN OTHERS THEN
  RETURN SQLSTATE || ': ' || SQLERRM;
END $$;
-- what Redis has of a lock, once what the other session sent at the end of
-- its statement has arrived (its own socket: up to 500 ms)
CREATE FUNCTION pg_temp.state_when(lock text, want text) RETURNS text LANGUAGE plpgsql AS $$
DECLARE
  s text;
BEGIN
  FOR i IN 1..50 LOOP
    SELECT state INTO s FROM redis_lock_info(lock);
    EXIT WHEN s = want;
    PERFORM pg_sleep(0.01);
  END LOOP;
  RETURN s;
END $$;

-- tokens in the array's order; a duplicate is one name, its token at each place
SELECT t[1] AS tok_b, t[2] AS tok_a, cardinality(t) AS n, t[1] = t[3] AS dup_same_token,
       t[1] > 0 AND t[2] > 0 AND t[1] <> t[2] AS two_tokens
  FROM redis_wlock(ARRAY['m-b', 'm-a', 'm-b']) t \gset
SELECT :n AS n, :'dup_same_token' AS dup_same_token, :'two_tokens' AS two_tokens;
-- each name is a hold of its own, with its own token, once
SELECT name, mode, level, depth,
       token = CASE name WHEN 'm-a' THEN :tok_a ELSE :tok_b END AS its_token
  FROM redis_held_locks ORDER BY name;
SELECT state FROM redis_lock_info('m-a');
-- unlocked one by one, as if taken alone
SELECT redis_unlock('m-a');
SELECT name, depth FROM redis_held_locks ORDER BY name;
SELECT redis_unlock('m-b');
SELECT redis_unlock('m-b');                  -- only one hold: WARNING, false
SELECT count(*) AS held FROM redis_held_locks;

-- stacking: a name already held stacks (same token, no new acquisition)
SELECT redis_wlock('m-a') AS tok_a \gset
SELECT t[2] = :tok_a AS stacked_same_token
  FROM redis_wlock(ARRAY['m-c', 'm-a']) t;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name;
SELECT redis_unlock_all();
-- a read call over a write hold stacks too (the hold's token), at
-- transaction level over a session hold as well; the other name is taken
SELECT redis_wlock('m-s1') AS tok_s1 \gset
BEGIN;
SELECT t[1] = :tok_s1 AS read_on_write_token, t[2] >= 0 AS other_read
  FROM redis_rlock_xact(ARRAY['m-s1', 'm-s2']) t;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name, level, mode;
COMMIT;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name;
SELECT state FROM redis_lock_info('m-s2');
SELECT redis_unlock_all();

-- read forms: the names' latest write tokens
SELECT t[1] >= 0 AND t[2] >= 0 AS read_tokens FROM redis_rlock(ARRAY['m-r1', 'm-r2']) t;
SELECT * FROM dblink('other', $$SELECT redis_try_rlock(ARRAY['m-r2', 'm-r1'])$$)
  AS t(readers_share bool);
SELECT * FROM dblink('other', $$SELECT redis_try_wlock(ARRAY['m-r1'])$$)
  AS t(write_taken bool);
SELECT * FROM dblink('other', $$SELECT redis_unlock_all()$$) AS t(n int);
SELECT redis_unlock_all();

-- NULL, empty, more than one dimension, a bad name or wait: errors that
-- say so, and nothing taken
SELECT pg_temp.outcome($$SELECT redis_wlock(NULL::text[])$$);
SELECT pg_temp.outcome($$SELECT redis_wlock(ARRAY['m-a', NULL])$$);
SELECT pg_temp.outcome($$SELECT redis_rlock_xact('{}'::text[])$$);
SELECT pg_temp.outcome($$SELECT redis_try_wlock(ARRAY[]::text[])$$);
SELECT pg_temp.outcome($$SELECT redis_wlock(ARRAY[ARRAY['m-a', 'm-b'], ARRAY['m-c', 'm-d']])$$);
SELECT pg_temp.outcome($$SELECT redis_wlock(ARRAY['m-a', ''])$$);
SELECT pg_temp.outcome($$SELECT redis_wlock(ARRAY['m-a', repeat('x', 1025)])$$);
SELECT pg_temp.outcome($$SELECT redis_try_wlock(ARRAY['m-a'], NULL)$$);
SELECT pg_temp.outcome($$SELECT redis_try_rlock_xact(ARRAY['m-a'], '-1s')$$);
-- a single name is still the text form, even one that looks like an array
SELECT pg_temp.outcome($$SELECT redis_wlock(NULL)$$);
SELECT redis_wlock('{m-a,m-b}') > 0 AS single_name;
SELECT name FROM redis_held_locks;
SELECT redis_unlock('{m-a,m-b}');

-- all or none: the other session holds m-y
SELECT * FROM dblink('other', $$SELECT redis_wlock('m-y') > 0$$) AS t(other_holds bool);
SELECT redis_try_wlock(ARRAY['m-x', 'm-y', 'm-z']) AS all_or_none;
SELECT count(*) AS held FROM redis_held_locks;
SELECT state FROM redis_lock_info('m-x');    -- given back: free in Redis
SELECT * FROM dblink('other', $$SELECT redis_try_wlock(ARRAY['m-x', 'm-z'])$$)
  AS t(free_for_other bool);
SELECT * FROM dblink('other', $$SELECT redis_unlock('m-x') AND redis_unlock('m-z')$$)
  AS t(ok bool);
-- the try's wait is the whole call's
SELECT clock_timestamp() AS t0 \gset
SELECT redis_try_rlock(ARRAY['m-x', 'm-y'], '200ms') AS waited_false;
SELECT clock_timestamp() - :'t0' >= interval '190ms' AS waited_long_enough,
       clock_timestamp() - :'t0' < interval '2s' AS not_longer;
SELECT count(*) AS held FROM redis_held_locks;
-- a lock form: lock_timeout, and the names taken before are given back
SET lock_timeout = '200ms';
SELECT pg_temp.outcome($$SELECT redis_wlock(ARRAY['m-y', 'm-x'])$$);
RESET lock_timeout;
SELECT count(*) AS held FROM redis_held_locks;
SELECT state FROM redis_lock_info('m-x');
-- the same inside a PL/pgSQL block that catches the error: the block's
-- subtransaction ends, and with it what the call took
SET lock_timeout = '200ms';
DO $$ BEGIN
  PERFORM redis_wlock(ARRAY['m-x', 'm-y']);
EXCEPTION WHEN lock_not_available THEN
  RAISE NOTICE 'timed out, holding % hold(s)', (SELECT count(*) FROM redis_held_locks);
END $$;
RESET lock_timeout;
SELECT state FROM redis_lock_info('m-x');

-- holds the session had before the call stay, and keep their mode: m-x
-- was read, the call upgraded it, the failure makes it read again
SELECT redis_rlock('m-x') >= 0 AS reading;
SELECT redis_try_wlock(ARRAY['m-x', 'm-y']) AS all_or_none;
SELECT name, mode, level, depth FROM redis_held_locks;
SELECT state FROM redis_lock_info('m-x');
-- a write hold held before is only unstacked
SELECT redis_wlock('m-w') > 0 AS writing;
SELECT redis_try_wlock(ARRAY['m-w', 'm-y']) AS all_or_none;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name;
SELECT state FROM redis_lock_info('m-w');
SELECT redis_unlock_all();

-- transaction level: all released at commit; a failed try keeps what the
-- transaction held before it, and gives back only its own
BEGIN;
SELECT cardinality(redis_wlock_xact(ARRAY['m-t2', 'm-t1'])) AS n;
SELECT redis_rlock_xact('m-t3') >= 0 AS reading;
SELECT redis_try_wlock_xact(ARRAY['m-t4', 'm-t3', 'm-y']) AS all_or_none;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name;
SELECT state FROM redis_lock_info('m-t4');
SELECT redis_try_rlock_xact(ARRAY['m-t4', 'm-t5']) AS taken;
SELECT name, mode, level, depth FROM redis_held_locks ORDER BY name;
COMMIT;
SELECT count(*) AS held FROM redis_held_locks;
SELECT state FROM redis_lock_info('m-t1');

-- many names in one call (one round trip), at both levels
BEGIN;
SELECT cardinality(redis_wlock_xact(array(SELECT 'm-many' || g FROM generate_series(1, 40) g)))
  AS xact_tokens;
SELECT count(*) AS held, bool_and(token > 0) AS tokens FROM redis_held_locks;
COMMIT;
SELECT cardinality(redis_rlock(array(SELECT 'm-many' || g FROM generate_series(1, 40) g)))
  AS session_tokens;
SELECT count(*) AS held FROM redis_held_locks WHERE mode = 'read' AND depth = 1;
SELECT redis_unlock_all();

-- the other session, which holds m-y, takes {m-y, m-c1} (m-y stacks);
-- then waits for {m-c1, m-c2} while we hold m-c2: it holds m-c1 while it
-- waits, and a cancel gives m-c1 back
SELECT * FROM dblink('other', $$SELECT cardinality(redis_wlock(ARRAY['m-y', 'm-c1']))$$)
  AS t(n int);
SELECT * FROM dblink('other', $$SELECT redis_unlock_all()$$) AS t(n int);
SELECT redis_wlock('m-c2') > 0 AS holding;
SELECT dblink_send_query('other', $$SELECT redis_wlock(ARRAY['m-c2', 'm-c1'])$$);
SELECT pg_temp.state_when('m-c1', 'write') AS while_waiting;
SELECT pg_sleep(0.2);
SELECT cardinality(waiting) AS waiting FROM redis_lock_info('m-c2');
SELECT dblink_cancel_query('other');
SELECT * FROM dblink_get_result('other', false) AS t(tokens bigint[]);
SELECT * FROM dblink_get_result('other', false) AS t(tokens bigint[]);
SELECT pg_temp.state_when('m-c1', 'free') AS after_cancel;
-- and when we let go, it gets both
SELECT dblink_send_query('other', $$SELECT cardinality(redis_wlock(ARRAY['m-c2', 'm-c1']))$$);
SELECT pg_sleep(0.2);
SELECT redis_unlock('m-c2');
SELECT * FROM dblink_get_result('other') AS t(n int);
SELECT * FROM dblink_get_result('other') AS t(n int);
SELECT * FROM dblink('other', $$SELECT name, mode FROM redis_held_locks ORDER BY name$$)
  AS t(name text, mode text);
SELECT * FROM dblink('other', $$SELECT redis_unlock_all()$$) AS t(n int);
SELECT dblink_disconnect('other');

-- redis_unlock(text[]): each name once, as redis_unlock(name) would; its
-- answer at each of its places in the array; a name not held is false with
-- a WARNING; a duplicate is one name (one hold let go)
SELECT cardinality(redis_wlock(ARRAY['m-u1', 'm-u2', 'm-u3'])) AS n;
SELECT redis_wlock('m-u1') > 0 AS stacked;
SELECT redis_unlock(ARRAY['m-u3', 'm-u1', 'm-none', 'm-u1']) AS released;
SELECT name, mode, depth FROM redis_held_locks ORDER BY name;
SELECT state FROM redis_lock_info('m-u3');   -- let go in Redis: free
SELECT state FROM redis_lock_info('m-u1');   -- one hold left: still held
SELECT redis_unlock(ARRAY['m-u1', 'm-u2']) AS released;
SELECT count(*) AS held FROM redis_held_locks;
SELECT state FROM redis_lock_info('m-u2');
-- naming the mode, as redis_unlock(name, mode): m-u4 held for reading,
-- then writing; m-u5 for reading. 'read' lets go of both read holds (m-u4's
-- write stays); again, neither has a read hold left
SELECT redis_rlock('m-u4') >= 0 AND redis_wlock('m-u4') > 0 AS upgraded;
SELECT redis_rlock('m-u5') >= 0 AS reading;
SELECT redis_unlock(ARRAY['m-u4', 'm-u5'], 'read') AS released;
SELECT name, mode, depth FROM redis_held_locks ORDER BY name;
SELECT redis_unlock(ARRAY['m-u5', 'm-u4'], 'read') AS released;
SELECT redis_unlock(ARRAY['m-u4'], 'write') AS released;
SELECT count(*) AS held FROM redis_held_locks;
-- transaction-level holds are not let go by hand
BEGIN;
SELECT cardinality(redis_wlock_xact(ARRAY['m-u6', 'm-u7'])) AS n;
SELECT redis_unlock(ARRAY['m-u6', 'm-u7']) AS released;
SELECT count(*) AS held FROM redis_held_locks;
COMMIT;
-- many names: every one let go, in one call
SELECT cardinality(redis_wlock(array(SELECT 'm-un' || g FROM generate_series(1, 40) g)))
  AS tokens;
SELECT bool_and(r) AS all_released, count(*) AS n
  FROM unnest(redis_unlock(array(SELECT 'm-un' || g FROM generate_series(1, 40) g))) r;
SELECT count(*) AS held FROM redis_held_locks;
-- (a hold whose lease ran out among them: sql/preload.sql, which the
-- keeper changes)
-- NULL, empty, more than one dimension, a bad name or mode: errors that say
-- so, and nothing let go
SELECT redis_wlock('m-u10') > 0 AS holding;
SELECT pg_temp.outcome($$SELECT redis_unlock(NULL::text[])$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(ARRAY['m-u10', NULL])$$);
SELECT pg_temp.outcome($$SELECT redis_unlock('{}'::text[])$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(ARRAY[ARRAY['m-u10'], ARRAY['m-u11']])$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(ARRAY['m-u10', ''])$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(ARRAY['m-u10'], NULL)$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(ARRAY['m-u10'], 'shared')$$);
SELECT pg_temp.outcome($$SELECT redis_unlock(NULL::text[], 'read')$$);
SELECT name, depth FROM redis_held_locks;
-- a single name is still the text form
SELECT redis_unlock('m-u10');
