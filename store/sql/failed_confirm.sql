-- Right before a request of the retry job for row $1: note the parts of a split alert
-- delivered so far ($3, never lowered, whoever holds the row: they were delivered), and,
-- if claim $2 still holds the row and it is pending, renew its lease by $4 and note that
-- a request may be in flight (confirmed_at: a cancel leaves such a row alone). A cancel
-- that commits first makes the row cancelled, and the confirm fails. Returns whether the
-- claim holds the row; no row when the row does not exist.
-- $1 id, $2 claim token, $3 parts_sent, $4 lease (interval)
UPDATE failed_sends
SET parts_sent = GREATEST(parts_sent, $3),
    lease_until = CASE WHEN claimed_by = $2 AND status = 'pending'
                       THEN now() + $4::interval ELSE lease_until END,
    confirmed_at = CASE WHEN claimed_by = $2 AND status = 'pending'
                        THEN now() ELSE confirmed_at END
WHERE id = $1
RETURNING claimed_by IS NOT DISTINCT FROM $2 AND status = 'pending'
