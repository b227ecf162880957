-- Every change to the SQL objects ships as an upgrade script from 1.0:
-- ALTER EXTENSION rwlock UPDATE ends where CREATE EXTENSION does.
DROP EXTENSION rwlock;
CREATE EXTENSION rwlock VERSION '1.0';
SELECT extversion FROM pg_extension WHERE extname = 'rwlock';
SELECT has_table_privilege('public', 'redis_held_locks', 'SELECT') AS held_public,
       has_table_privilege('public', 'redis_locks', 'SELECT') AS locks_public;
ALTER EXTENSION rwlock UPDATE;
SELECT extversion = (SELECT default_version FROM pg_available_extensions
                      WHERE name = 'rwlock') AS at_default
  FROM pg_extension WHERE extname = 'rwlock';
SELECT has_table_privilege('public', 'redis_held_locks', 'SELECT') AS held_public,
       has_table_privilege('public', 'redis_locks', 'SELECT') AS locks_public;
-- the updated extension works
SELECT redis_wlock('upgraded') > 0 AS ok;
SELECT redis_unlock('upgraded');
-- and matches a fresh one: the same objects, the same grants
CREATE TEMP TABLE updated AS
  SELECT pg_describe_object(classid, objid, objsubid) AS obj
    FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
     AND deptype = 'e';
DROP EXTENSION rwlock;
CREATE EXTENSION rwlock;
SELECT pg_describe_object(classid, objid, objsubid) AS obj
  FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
   AND deptype = 'e'
EXCEPT SELECT obj FROM updated;
SELECT obj FROM updated
EXCEPT SELECT pg_describe_object(classid, objid, objsubid)
  FROM pg_depend WHERE refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
   AND deptype = 'e';
SELECT has_table_privilege('public', 'redis_held_locks', 'SELECT') AS held_public;
-- every function and view has a description, the same fresh and updated
SELECT p.oid::regprocedure AS undescribed FROM pg_proc p
  JOIN pg_depend d ON d.objid = p.oid AND d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
 WHERE obj_description(p.oid, 'pg_proc') IS NULL;
SELECT c.relname AS undescribed FROM pg_class c
  JOIN pg_depend d ON d.objid = c.oid AND d.deptype = 'e'
   AND d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock')
 WHERE obj_description(c.oid, 'pg_class') IS NULL;
CREATE TEMP TABLE fresh_comments AS
  SELECT pg_describe_object(d.classid, d.objid, 0) || ': ' ||
           coalesce(obj_description(d.objid, 'pg_proc'), obj_description(d.objid, 'pg_class')) AS descr
    FROM pg_depend d
   WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock') AND d.deptype = 'e';
DROP EXTENSION rwlock;
CREATE EXTENSION rwlock VERSION '1.1';
ALTER EXTENSION rwlock UPDATE;
SELECT extversion FROM pg_extension WHERE extname = 'rwlock';
SELECT pg_describe_object(d.classid, d.objid, 0) || ': ' ||
         coalesce(obj_description(d.objid, 'pg_proc'), obj_description(d.objid, 'pg_class')) AS differs
  FROM pg_depend d
 WHERE d.refobjid = (SELECT oid FROM pg_extension WHERE extname = 'rwlock') AND d.deptype = 'e'
EXCEPT SELECT descr FROM fresh_comments;
