-- An operator asks for every row with status $1 (and target $2 unless empty) to be
-- retried now; the same rules as failed_retry.sql.
-- $1 status, $2 target, $3 who asks ("" unnamed)
UPDATE failed_sends
SET status = 'pending', next_attempt_at = now(), discard_reason = NULL, discarded_by = NULL,
    retried_by = NULLIF($3, ''), retried_at = now(), updated_at = now()
WHERE status = $1 AND status IN ('pending', 'dead', 'rejected', 'discarded')
  AND ($2::text = '' OR target = $2)
  AND (status IN ('pending', 'dead', 'rejected') OR NOT EXISTS (
      SELECT 1 FROM failed_sends live
      WHERE live.message_id = failed_sends.message_id AND live.id <> failed_sends.id
        AND live.status NOT IN ('delivered', 'discarded', 'cancelled')))
  -- of an alert's discarded rows asked for, only its newest: one live row per RD_ID
  AND (status IN ('pending', 'dead', 'rejected') OR NOT EXISTS (
      SELECT 1 FROM failed_sends newer
      WHERE newer.message_id = failed_sends.message_id AND newer.id > failed_sends.id
        AND newer.status = 'discarded' AND ($2::text = '' OR newer.target = $2)))
RETURNING id
