-- Counts for operators and metrics: every row by status; rows that still need attention
-- (pending, dead, rejected) by target and by error class.
SELECT 'status' AS dimension, status AS key, count(*) AS n
FROM failed_sends GROUP BY status
UNION ALL
SELECT 'target', target, count(*)
FROM failed_sends WHERE status IN ('pending', 'dead', 'rejected') GROUP BY target
UNION ALL
SELECT 'error_class', error_class, count(*)
FROM failed_sends WHERE status IN ('pending', 'dead', 'rejected') GROUP BY error_class
