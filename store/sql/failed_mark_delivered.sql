-- The retry job delivered row $1. Delivery is a fact, so it is recorded whatever the
-- row's status or claim became meanwhile (an operator may have discarded it during the
-- send, or another instance taken it over, or a cancel made it cancelled after the claim
-- that sent it had lost it); the claim ends.
-- $1 id
UPDATE failed_sends
SET status = 'delivered', next_attempt_at = NULL, claimed_by = NULL, claimed_replica = NULL, lease_until = NULL,
    confirmed_at = NULL, updated_at = now()
WHERE id = $1 AND status <> 'delivered'
