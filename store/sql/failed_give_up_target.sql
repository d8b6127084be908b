-- Give up every pending row of target $1 that is due and that no claim holds (never
-- claimed, or its lease ran out): no replica of the deployment has the target any more.
-- A row not due yet waits for its time, as it would for a retry. The rows are dead,
-- their last error $2, and an operator may retry them once a replica has it again.
-- $1 target, $2 last_error
UPDATE failed_sends
SET status = 'dead', next_attempt_at = NULL, error_class = 'unknown_target', last_error = $2,
    claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, updated_at = now()
WHERE target = $1 AND status = 'pending' AND next_attempt_at <= now()
  AND (lease_until IS NULL OR lease_until <= now())
