-- Delete up to $3 rows whose retention is over: delivered, discarded, cancelled and
-- rejected rows whose last change is older than $1, and dead rows older than $2 ($2
-- NULL: dead rows are kept). Never a pending row (a claimed row is always pending). Oldest first; rows
-- locked by someone else are left for the next batch.
-- $1 interval, $2 interval or NULL, $3 int
WITH gone AS (
    DELETE FROM failed_sends
    WHERE id IN (
        SELECT id FROM failed_sends
        WHERE (status IN ('delivered', 'discarded', 'cancelled', 'rejected')
               AND updated_at < now() - $1::interval)
           OR ($2::interval IS NOT NULL AND status = 'dead' AND updated_at < now() - $2::interval)
        ORDER BY updated_at
        LIMIT $3
        FOR UPDATE SKIP LOCKED)
    RETURNING status)
SELECT status, count(*) FROM gone GROUP BY status
