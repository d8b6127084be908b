-- The retry job's attempt on row $1 failed; try again $3 from now by Postgres's clock.
-- Only the holder of the claim $9 changes the row, and only while it is pending: an
-- operator's discard during the attempt wins, and so does another instance that took
-- the row over. The claim ends.
-- $1 id, $2 attempts, $3 wait (interval), $4 error_class, $5 last_error, $6 http_status,
-- $7 errcode, $8 parts_sent, $9 claim token
-- An operator's retry that came while the attempt was on the wire (after its confirm)
-- is kept: the row is due at once.
UPDATE failed_sends
SET attempts = $2,
    next_attempt_at = CASE WHEN retried_at > confirmed_at THEN now() ELSE now() + $3::interval END,
    error_class = $4, last_error = $5,
    http_status = $6, errcode = $7, parts_sent = GREATEST(parts_sent, $8),
    claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE id = $1 AND status = 'pending' AND claimed_by = $9
