-- Cancel rows $1 (locked by failed_cancel_rows.sql, none of them being sent): they become
-- cancelled by $2 for reason $3 ($3 NULL: none given), and no claim holds them any more.
-- Only rows that the retry job or an operator could still send change.
-- $1 ids (bigint[]), $2 cancelled_by, $3 cancel_reason
UPDATE failed_sends
SET status = 'cancelled', cancelled_by = $2, cancel_reason = $3, next_attempt_at = NULL,
    claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'dead', 'rejected', 'discarded')
RETURNING id
