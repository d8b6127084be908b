-- Claim up to $2 pending rows that are due by Postgres's clock and held by nobody (never
-- claimed, or their lease has run out), oldest due first, for the retry-job claim $1.
-- The row locks (SKIP LOCKED: rows another instance is claiming right now are passed
-- over) last only for this statement; the claim outlives it in claimed_by and
-- lease_until, which only the token's holder may renew or settle. A row taken over from a
-- claim whose lease ran out is no longer being sent by it: confirmed_at starts over.
-- claimed_replica is the token's replica, the part before its first "/"
-- (failed_release_replica.sql).
-- Only rows for the targets $4 (the claimer's configuration has them), or of any target
-- when $4 is NULL: a replica never decides for a target it does not have.
-- $1 claim token, $2 limit, $3 lease (interval), $4 targets (text[], or NULL)
WITH due AS (
    SELECT id
    FROM failed_sends
    WHERE status = 'pending' AND next_attempt_at <= now()
      AND (lease_until IS NULL OR lease_until <= now())
      AND ($4::text[] IS NULL OR target = ANY($4::text[]))
    ORDER BY next_attempt_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE failed_sends f
SET claimed_by = $1, claimed_replica = split_part($1, '/', 1), lease_until = now() + $3::interval,
    confirmed_at = NULL, updated_at = now()
FROM due
WHERE f.id = due.id
RETURNING f.id, f.message_id, f.target, f.payload, f.properties, f.due_at, f.status,
          f.error_class, f.last_error, f.http_status, f.errcode, f.attempts,
          f.next_attempt_at, f.discard_reason, f.created_at, f.updated_at, f.parts_sent,
          f.claimed_by, f.lease_until, f.cancelled_by, f.cancel_reason, f.confirmed_at, f.retried_by, f.retried_at, f.discarded_by
