-- The state in Redis after each kind of operation, read back through
-- redis_lock_info(); and redis_connection_info().
CREATE EXTENSION IF NOT EXISTS rwlock;
-- a prefix of its own (under the server's, as sql/rwlock.sql says), so
-- that nothing from an earlier run is in Redis
SELECT set_config('rwlock.key_prefix', current_setting('rwlock.key_prefix') || ':rwstate-' ||
                  md5(random()::text), false)
  IS NOT NULL AS fresh_prefix;

-- st(name): the lock's state with owner ids replaced by me/other
CREATE FUNCTION st(n text, OUT state text, OUT writer text, OUT readers text,
                   OUT waiting int, OUT lease_ok bool) LANGUAGE sql AS $$
  SELECT i.state,
         CASE WHEN i.writer = c.owner THEN 'me' WHEN i.writer IS NOT NULL THEN 'other' END,
         (SELECT string_agg(CASE WHEN r = c.owner THEN 'me' ELSE 'other' END, ',')
            FROM unnest(i.readers) r),
         cardinality(i.waiting),
         i.lease_left > current_setting('rwlock.lease')::interval * 0.8
           AND i.lease_left <= current_setting('rwlock.lease')::interval
  FROM redis_lock_info(n) i, redis_connection_info() c WHERE c.current $$;

-- before the first lock call: not connected yet
SELECT current, connected, listening, rtt_ms IS NULL AS no_rtt, holds,
       owner ~ '^pg:[0-9a-f]+:[0-9]+:[0-9]+[.][0-9a-f]+:[0-9a-f]{8}$' AS owner_format
  FROM redis_connection_info();

SELECT * FROM st('s');                       -- never used: free, no token
SELECT token FROM redis_lock_info('s');
SELECT redis_wlock('s') AS t1 \gset
SELECT * FROM st('s');                       -- write, me
SELECT token = :t1 AS token_in_redis FROM redis_lock_info('s');
SELECT redis_rlock('s') = :t1 AS stacked;    -- no change in Redis
SELECT * FROM st('s');
SELECT redis_unlock('s');                    -- the read hold: still write
SELECT * FROM st('s');
SELECT redis_unlock('s');                    -- free; the token is kept
SELECT * FROM st('s');
SELECT token = :t1 AS token_kept FROM redis_lock_info('s');

-- a read hold; a read hold returns the last write token
SELECT redis_rlock('s') = :t1 AS read_token;
SELECT * FROM st('s');
-- the sole reader upgrades: in Redis the write covers its read hold
SELECT redis_wlock('s') > :t1 AS upgraded;
SELECT * FROM st('s');
SELECT redis_unlock('s');                    -- drop the write: back to read
SELECT * FROM st('s');
SELECT redis_unlock('s');
SELECT * FROM st('s');

-- a write holder that takes and drops a read hold keeps writing
SELECT redis_wlock('s') > :t1 AS ok;
SELECT redis_rlock('s') > :t1 AS ok;
SELECT redis_unlock('s');                    -- the read (most recent)
SELECT * FROM st('s');
SELECT redis_unlock('s');

-- session and transaction holds of one name are counted apart
BEGIN;
SELECT redis_rlock_xact('s') > 0 AS ok;
SELECT redis_rlock('s') > 0 AS ok;
SELECT * FROM st('s');
COMMIT;
SELECT * FROM st('s');                       -- the session hold remains
SELECT redis_unlock('s');
SELECT * FROM st('s');

-- xact holds: gone from Redis after commit, rollback, savepoint rollback
BEGIN;
SELECT redis_wlock_xact('x') > 0 AS ok;
SELECT * FROM st('x');
COMMIT;
SELECT * FROM st('x');
BEGIN;
SELECT redis_rlock_xact('x') > 0 AS ok;
SELECT * FROM st('x');
ROLLBACK;
SELECT * FROM st('x');
BEGIN;
SAVEPOINT sp;
SELECT redis_wlock_xact('x') > 0 AS ok;
ROLLBACK TO SAVEPOINT sp;
SELECT * FROM st('x');
COMMIT;
-- an error aborts the transaction and releases its holds
BEGIN;
SELECT redis_wlock_xact('x') > 0 AS ok;
SELECT 1/0;
ROLLBACK;
SELECT * FROM st('x');

-- try variants leave the same state as their blocking forms
SELECT redis_try_rlock('y');
SELECT * FROM st('y');
SELECT redis_try_wlock_xact('y');            -- sole reader upgrades, autocommit
SELECT * FROM st('y');
SELECT redis_unlock_all();
SELECT * FROM st('y');

-- the lease follows rwlock.lease
SET rwlock.lease = '10s';
SELECT redis_wlock('l') > 0 AS ok;
SELECT * FROM st('l');
SELECT redis_unlock('l');

-- (a hold whose lease ran out: sql/preload.sql, which the keeper changes)

-- a commit's release is in Redis before anything that follows it
BEGIN;
SELECT redis_wlock_xact('c1') > 0 AS ok;
COMMIT;
SELECT * FROM st('c1');
SELECT redis_wlock_xact('c1') > 0 AS again;  -- autocommit, twice
SELECT redis_wlock_xact('c1') > 0 AS again;
SELECT * FROM st('c1');

-- redis_lock_info validates its argument like the lock functions
SELECT * FROM redis_lock_info(NULL);
SELECT * FROM redis_lock_info('');

-- connected now, with a measured round trip, and no holds left
SELECT current, connected, rtt_ms > 0 AS measured, holds FROM redis_connection_info();
