-- Single-session semantics of rwlock against the Redis at rwlock.redis_url
-- (test/run.sh starts one on 127.0.0.1:6379).
CREATE EXTENSION rwlock;
-- No test writes under the production prefix (installcheck may run beside a
-- live server's Redis): this database's new sessions (dblink's) default to a
-- prefix of their own. Each is the server's prefix (the value a session
-- starts with, e.g. rwlock) followed by ":<test's own>", so its keys are
-- still under the server's prefix, where a live server's Redis ACL user
-- may write (~<prefix>:*, docs/connecting.md), and never among the
-- production keys (<prefix>:{<name>}, <prefix>:wait:{<owner>}).
DO $$ BEGIN
  EXECUTE format('ALTER DATABASE %I SET rwlock.key_prefix = %L',
                 current_database(), current_setting('rwlock.key_prefix') || ':rwregress');
END $$;
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwtest', false)
  LIKE '%:rwtest' AS own_prefix;

-- write, stacked read, held view
SELECT redis_wlock('a') > 0 AS got_token;
SELECT redis_rlock('a') = redis_wlock('a') AS stacked_same_token;
SELECT name, mode, level, depth, lease_state FROM redis_held_locks ORDER BY mode DESC;
-- most recent first: w, r, w
SELECT redis_unlock('a'), redis_unlock('a'), redis_unlock('a');
SELECT redis_unlock('a');  -- not held: WARNING and false
SELECT count(*) FROM redis_held_locks;

-- tokens strictly increase across write acquisitions
CREATE TEMP TABLE toks (t bigint);
INSERT INTO toks SELECT redis_wlock('t');
SELECT redis_unlock('t');
INSERT INTO toks SELECT redis_wlock('t');
SELECT redis_unlock('t');
SELECT max(t) > min(t) AS increasing FROM toks;

-- transaction-level holds go at commit, at rollback, at savepoint rollback
BEGIN;
SELECT redis_rlock_xact('x') >= 0 AS ok;
SELECT name, mode, level FROM redis_held_locks;
COMMIT;
SELECT count(*) FROM redis_held_locks;
BEGIN;
SELECT redis_wlock_xact('x') > 0 AS ok;
ROLLBACK;
SELECT count(*) FROM redis_held_locks;
BEGIN;
SELECT redis_wlock_xact('y') > 0 AS ok;
SAVEPOINT s;
SELECT redis_wlock_xact('z') > 0 AS ok;
ROLLBACK TO SAVEPOINT s;
SELECT name FROM redis_held_locks;
COMMIT;
SELECT count(*) FROM redis_held_locks;

-- try variants and unlock_all
SELECT redis_try_wlock('p'), redis_try_rlock('q'), redis_try_rlock('q', '10ms');
SELECT redis_unlock_all();
SELECT count(*) FROM redis_held_locks;

-- PREPARE TRANSACTION is refused while holding xact locks
BEGIN;
SELECT redis_wlock_xact('prep') > 0 AS ok;
PREPARE TRANSACTION 'rw';
SELECT count(*) FROM redis_held_locks;

-- bad input
SELECT redis_wlock(NULL);
SELECT redis_wlock('');
SELECT redis_wlock(repeat('x', 1025));
SELECT redis_try_wlock('a', '-1s');
SELECT redis_try_wlock('a', NULL);
SELECT redis_wlock(E'br{ace}s\nnewline é') > 0 AS odd_name_ok;
SELECT redis_unlock(E'br{ace}s\nnewline é');

-- wrong settings
SET rwlock.redis_url = 'http://x';
SET rwlock.redis_url = 'redis+cluster://127.0.0.1:7000/1';
SET rwlock.redis_url = 'redis+cluster:///';
-- a refused URL is not quoted: its password would reach the client and the log
SET rwlock.redis_url = 'redis://someone:s3cretpw@127.0.0.1:99999/0';
-- %00 in a URL's user, password or master name is refused, not cut short
SET rwlock.redis_url = 'redis://u:a%00b@127.0.0.1:6379/0';
SET rwlock.key_prefix = 'a{b';
SET rwlock.lease = '1ms';

-- unreachable Redis: class 08, and the session stays usable
SET rwlock.redis_url = 'redis://127.0.0.1:1/0';
\set VERBOSITY sqlstate
SELECT redis_wlock('u');
\set VERBOSITY default
RESET rwlock.redis_url;
SELECT redis_wlock('u') > 0 AS works_again;
SELECT redis_unlock('u');

-- DISCARD ALL releases session-level holds, as it releases advisory locks
SELECT redis_wlock('d1') > 0 AS ok, redis_rlock('d2') >= 0 AS ok, redis_wlock('d1') > 0 AS ok;
DISCARD ALL;
SELECT count(*) FROM redis_held_locks;
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwtest', false)
  LIKE '%:rwtest' AS own_prefix;            -- DISCARD ALL reset it too
SELECT redis_try_wlock('d1') AS free_again, redis_try_wlock('d2') AS free_again;
SELECT redis_unlock_all();

-- unlock naming the mode (pg_advisory_unlock_shared's counterpart)
SELECT redis_wlock('m') > 0 AS w, redis_rlock('m') > 0 AS r, redis_wlock('m') > 0 AS w2;
SELECT redis_unlock('m', 'read');            -- the read hold, under the newer write
SELECT mode, depth FROM redis_held_locks WHERE name = 'm' ORDER BY mode;
SELECT redis_unlock('m', 'read');            -- none left: WARNING, false
SELECT redis_unlock('m', 'write'), redis_unlock('m', 'write');
SELECT count(*) FROM redis_held_locks WHERE name = 'm';
SELECT redis_rlock('m') >= 0 AS r, redis_wlock('m') > 0 AS w;
SELECT redis_unlock('m', 'write');           -- drops the write, keeps the read
SELECT state FROM redis_lock_info('m');      -- Redis has only the read lock now
SELECT redis_unlock('m', 'write');           -- WARNING, false
SELECT redis_unlock('m', 'read');
SELECT state FROM redis_lock_info('m');
SELECT redis_unlock('m', 'shared');          -- 22023
SELECT redis_unlock('m', NULL);              -- 22004
