-- An operator asks for rows $1 to be retried now: rows that are pending, dead, rejected
-- or discarded become pending and due at once; delivered rows never change. attempts,
-- error_class and last_error are kept as history; discard_reason is cleared.
-- $1 ids (bigint[])
UPDATE failed_sends
SET status = 'pending', next_attempt_at = now(), discard_reason = NULL, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'dead', 'rejected', 'discarded')
RETURNING id
