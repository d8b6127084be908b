-- The retry job gives up on row $1. Only a row that is still pending changes.
-- $1 id, $2 attempts, $3 error_class, $4 last_error, $5 http_status, $6 errcode,
-- $7 parts_sent
UPDATE failed_sends
SET status = 'dead', attempts = $2, next_attempt_at = NULL, error_class = $3,
    last_error = $4, http_status = $5, errcode = $6, parts_sent = $7, updated_at = now()
WHERE id = $1 AND status = 'pending'
