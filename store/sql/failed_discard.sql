-- An operator gives up on rows $1 for reason $2: rows that are pending, dead or rejected
-- become discarded; delivered, cancelled and already discarded rows never change.
-- $1 ids (bigint[]), $2 reason, $3 who discards ("" unnamed: discarded_by NULL)
UPDATE failed_sends
SET status = 'discarded', next_attempt_at = NULL, discard_reason = $2, discarded_by = NULLIF($3, ''), updated_at = now()
WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'dead', 'rejected')
RETURNING id
