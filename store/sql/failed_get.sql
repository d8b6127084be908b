-- One row by id.
-- $1 id
SELECT id, message_id, target, payload, properties, due_at, status, error_class,
       last_error, http_status, errcode, attempts, next_attempt_at, discard_reason,
       created_at, updated_at, parts_sent, claimed_by, lease_until, cancelled_by,
       cancel_reason, confirmed_at, retried_by, retried_at, discarded_by
FROM failed_sends
WHERE id = $1
