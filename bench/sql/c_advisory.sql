SELECT pg_advisory_xact_lock(1000 + :client_id);
