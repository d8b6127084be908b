-- Count, up to $3, the rows whose retention is over (failed_purge.sql's rows): the
-- purge's progress. The bound keeps the count cheap on a table of millions.
-- $1 interval, $2 interval or NULL, $3 int
SELECT count(*) FROM (
    SELECT 1 FROM failed_sends
    WHERE (status IN ('delivered', 'discarded', 'cancelled', 'rejected')
           AND updated_at < now() - $1::interval)
       OR ($2::interval IS NOT NULL AND status = 'dead' AND updated_at < now() - $2::interval)
    LIMIT $3) AS past
