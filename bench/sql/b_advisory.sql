SELECT pg_advisory_lock(2000 + :client_id);
SELECT pg_advisory_unlock(2000 + :client_id);
