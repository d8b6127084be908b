-- Release the purge's advisory lock (failed_purge_lock.sql).
SELECT pg_advisory_unlock(hashtext(current_schema() || '.failed_sends purge'))
