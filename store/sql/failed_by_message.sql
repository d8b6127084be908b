-- The rows of one RD_ID, oldest first: its episodes, and a rejection recorded under the
-- broker's message key when the id itself was unusable ("rejected:" || $1).
-- $1 RD_ID (or message key)
SELECT id, message_id, target, payload, properties, due_at, status, error_class,
       last_error, http_status, errcode, attempts, next_attempt_at, discard_reason,
       created_at, updated_at, parts_sent, claimed_by, lease_until, cancelled_by,
       cancel_reason, confirmed_at, retried_by, retried_at, discarded_by
FROM failed_sends
WHERE message_id = $1 OR message_id = 'rejected:' || $1
ORDER BY id
LIMIT 100
