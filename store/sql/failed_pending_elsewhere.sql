-- The targets of due pending rows that are not among $1 (the asking replica's targets):
-- rows only another replica's configuration may have, or none.
-- $1 targets (text[])
SELECT DISTINCT target
FROM failed_sends
WHERE status = 'pending' AND next_attempt_at <= now() AND NOT (target = ANY($1::text[]))
ORDER BY target
