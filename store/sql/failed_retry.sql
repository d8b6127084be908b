-- An operator asks for rows $1 to be retried now: rows that are pending, dead, rejected
-- or discarded become pending and due at once; delivered and cancelled rows never change. attempts,
-- error_class and last_error are kept as history; discard_reason is cleared. A claim is
-- left as it is: a row the retry job is sending right now stays its claimer's until it
-- is settled or its lease runs out, so no second instance sends it meanwhile. A
-- discarded row whose RD_ID has a live row of a later episode stays discarded, and of
-- several discarded rows of one RD_ID only the newest is retried.
-- $1 ids (bigint[]), $2 who asks ("" unnamed: retried_by NULL)
UPDATE failed_sends
SET status = 'pending', next_attempt_at = now(), discard_reason = NULL, discarded_by = NULL,
    retried_by = NULLIF($2, ''), retried_at = now(), updated_at = now()
WHERE id = ANY($1::bigint[]) AND status IN ('pending', 'dead', 'rejected', 'discarded')
  AND (status IN ('pending', 'dead', 'rejected') OR NOT EXISTS (
      SELECT 1 FROM failed_sends live
      WHERE live.message_id = failed_sends.message_id AND live.id <> failed_sends.id
        AND live.status NOT IN ('delivered', 'discarded', 'cancelled')))
  -- of an alert's discarded rows asked for, only its newest: one live row per RD_ID
  AND (status IN ('pending', 'dead', 'rejected') OR NOT EXISTS (
      SELECT 1 FROM failed_sends newer
      WHERE newer.message_id = failed_sends.message_id AND newer.id > failed_sends.id
        AND newer.status = 'discarded' AND newer.id = ANY($1::bigint[])))
RETURNING id
