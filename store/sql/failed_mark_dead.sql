-- The retry job gives up on row $1. Only the holder of the claim $8 changes the row, and
-- only while it is pending. The claim ends.
-- $1 id, $2 attempts, $3 error_class, $4 last_error, $5 http_status, $6 errcode,
-- $7 parts_sent, $8 claim token
-- An operator's retry that came while the attempt was on the wire (after its confirm)
-- is kept: the row stays pending, due at once, for one more attempt.
UPDATE failed_sends
SET status = CASE WHEN retried_at > confirmed_at THEN 'pending' ELSE 'dead' END,
    next_attempt_at = CASE WHEN retried_at > confirmed_at THEN now() END,
    attempts = $2, error_class = $3,
    last_error = $4, http_status = $5, errcode = $6, parts_sent = GREATEST(parts_sent, $7),
    claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE id = $1 AND status = 'pending' AND claimed_by = $8
