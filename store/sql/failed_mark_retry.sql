-- The retry job's attempt on row $1 failed; try again at $3. Only a row that is still
-- pending changes: an operator's discard during the attempt wins.
-- $1 id, $2 attempts, $3 next_attempt_at, $4 error_class, $5 last_error, $6 http_status,
-- $7 errcode, $8 parts_sent
UPDATE failed_sends
SET attempts = $2, next_attempt_at = $3, error_class = $4, last_error = $5,
    http_status = $6, errcode = $7, parts_sent = $8, updated_at = now()
WHERE id = $1 AND status = 'pending'
