-- What a role without privileges may see and set.
CREATE EXTENSION IF NOT EXISTS rwlock;
LOAD 'rwlock';    -- its settings exist once the library is loaded
CREATE ROLE regress_rwlock_user;
SET ROLE regress_rwlock_user;

-- rwlock.redis_url is hidden and cannot be set; key_prefix cannot be set
SHOW rwlock.redis_url;
SELECT count(*) FROM pg_settings WHERE name = 'rwlock.redis_url';
SET rwlock.redis_url = 'redis://127.0.0.1:6380/0';
SET rwlock.key_prefix = 'mine';
-- the others are anyone's
SET rwlock.lease = '20s';
SET rwlock.connect_timeout = '1s';
SET rwlock.command_timeout = '1s';
-- (every setting is listed, but only the values this test sets are shown:
-- the others are the server's, and rwlock.max_holds exists only where the
-- library is preloaded); the prefix is still the database's
SELECT name, CASE WHEN name IN ('rwlock.lease', 'rwlock.connect_timeout',
                                'rwlock.command_timeout') THEN setting END AS setting, unit
  FROM pg_settings WHERE name LIKE 'rwlock.%' AND name <> 'rwlock.max_holds' ORDER BY name;
SELECT current_setting('rwlock.key_prefix') LIKE '%:rwregress' AS database_prefix;

-- locks work; the connection's URL is not shown
SELECT redis_wlock('priv') > 0 AS ok;
SELECT url, connected, holds FROM redis_connection_info();
-- the views are readable by every role, as pg_locks is
SELECT name, mode, level FROM redis_held_locks;
SELECT count(*) >= 0 AS readable FROM redis_locks;
SELECT redis_unlock('priv');
RESET ROLE;

-- a superuser sees the URL, without a password
SET rwlock.redis_url = 'redis://someone:secret@127.0.0.1:6379/0';
SHOW rwlock.redis_url;
SELECT url FROM redis_connection_info() WHERE current;
RESET rwlock.redis_url;
DROP ROLE regress_rwlock_user;
