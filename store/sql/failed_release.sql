-- The retry job hands back rows $1 that its claim $2 took but did not try (it is
-- shutting down): their claim ends, and they are due again as they were. Rows another
-- instance took over since are left alone.
-- $1 ids (bigint[]), $2 claim token
UPDATE failed_sends
SET claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE id = ANY($1::bigint[]) AND claimed_by = $2
