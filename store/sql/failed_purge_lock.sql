-- Take the purge's advisory lock, if free: one purger at a time per schema (the key is
-- the schema's name hashed with the lock's purpose, so tests in schemas of their own do
-- not wait for each other). Held by the session until failed_purge_unlock.sql.
SELECT pg_try_advisory_lock(hashtext(current_schema() || '.failed_sends purge'))
