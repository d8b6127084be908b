-- Move the pending rows $1 (locked by failed_cancel_rows.sql, none of them being sent) to
-- their next attempt at $2, or at Postgres's now when $2 has passed: the alert is due
-- then. A claim of the retry job that holds one ends (its holder's confirm then fails,
-- so it sends nothing before the new time); the row is claimed again once it is due.
-- $1 ids (bigint[]), $2 the new due time (timestamptz)
UPDATE failed_sends
SET next_attempt_at = GREATEST($2::timestamptz, now()),
    claimed_by = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'pending'
RETURNING id, next_attempt_at
