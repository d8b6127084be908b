-- Right before a request of the retry job for row $1: note the parts of a split alert
-- delivered so far ($3, never lowered, whoever holds the row: they were delivered), and
-- renew the lease of claim $2 by $4 if it still holds the row. Returns whether it does;
-- no row when the row does not exist.
-- $1 id, $2 claim token, $3 parts_sent, $4 lease (interval)
UPDATE failed_sends
SET parts_sent = GREATEST(parts_sent, $3),
    lease_until = CASE WHEN claimed_by = $2 AND status = 'pending'
                       THEN now() + $4::interval ELSE lease_until END
WHERE id = $1
RETURNING claimed_by IS NOT DISTINCT FROM $2 AND status = 'pending'
