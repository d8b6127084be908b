-- The retry job keeps the leases of the rows its claim $2 still holds, among $1, alive
-- while it works through its batch. Returns the ids renewed.
-- $1 ids (bigint[]), $2 claim token, $3 lease (interval)
UPDATE failed_sends
SET lease_until = now() + $3::interval
WHERE id = ANY($1::bigint[]) AND claimed_by = $2 AND status = 'pending'
RETURNING id
