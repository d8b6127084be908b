-- The retry job hands back rows $1 it claimed but did not try (it is shutting down, or
-- its claim lease is running out): they become due at $3 again. Only rows still under
-- this claim change, recognised by the claim's lease end $2, so a row whose lease ran out
-- and that another instance claimed since is left alone.
-- $1 ids (bigint[]), $2 lease end, $3 next_attempt_at
UPDATE failed_sends
SET next_attempt_at = $3, updated_at = now()
WHERE id = ANY($1::bigint[]) AND status = 'pending' AND next_attempt_at = $2
