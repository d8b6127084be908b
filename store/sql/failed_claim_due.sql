-- Claim up to $2 pending rows due at $1, oldest due first, for one retry-job instance.
-- The row locks (SKIP LOCKED: rows another instance is claiming right now are passed
-- over) last only for this statement; the claim outlives it because next_attempt_at is
-- pushed to $3, the end of the claim lease, so no other instance sees the row as due
-- until the claimer has marked it or the lease has run out.
-- $1 now, $2 limit, $3 lease end
WITH due AS (
    SELECT id
    FROM failed_sends
    WHERE status = 'pending' AND next_attempt_at <= $1
    ORDER BY next_attempt_at, id
    LIMIT $2
    FOR UPDATE SKIP LOCKED
)
UPDATE failed_sends f
SET next_attempt_at = $3, updated_at = now()
FROM due
WHERE f.id = due.id
RETURNING f.id, f.message_id, f.target, f.payload, f.properties, f.due_at, f.status,
          f.error_class, f.last_error, f.http_status, f.errcode, f.attempts,
          f.next_attempt_at, f.discard_reason, f.created_at, f.updated_at, f.parts_sent
