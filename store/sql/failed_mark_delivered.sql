-- The retry job delivered row $1. Delivery is a fact, so it is recorded whatever the
-- row's status became meanwhile (an operator may have discarded it during the send).
-- $1 id
UPDATE failed_sends
SET status = 'delivered', next_attempt_at = NULL, updated_at = now()
WHERE id = $1 AND status <> 'delivered'
