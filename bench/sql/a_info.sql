SELECT state FROM redis_lock_info('bench_a' || :client_id::int);
