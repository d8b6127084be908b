-- Operators' listing, newest first, keyset-paginated on id. Every filter is a bind
-- parameter; an empty string, a NULL time or a zero id means "any".
-- $1 status, $2 target, $3 error_class, $4 created_at >= (since), $5 created_at < (until),
-- $6 id < (after), $7 limit
SELECT id, message_id, target, payload, properties, due_at, status, error_class,
       last_error, http_status, errcode, attempts, next_attempt_at, discard_reason,
       created_at, updated_at, parts_sent, claimed_by, lease_until, cancelled_by,
       cancel_reason, confirmed_at, retried_by, retried_at, discarded_by
FROM failed_sends
WHERE ($1::text = '' OR status = $1)
  AND ($2::text = '' OR target = $2)
  AND ($3::text = '' OR error_class = $3)
  AND ($4::timestamptz IS NULL OR created_at >= $4)
  AND ($5::timestamptz IS NULL OR created_at < $5)
  AND ($6::bigint = 0 OR id < $6)
ORDER BY id DESC
LIMIT $7
