-- Record one failed send or rejected input. A row for the same message_id that is still
-- pending is the same failure recorded twice (a crash between recording and releasing):
-- it is kept as it is. A row that is not pending (delivered, dead, rejected, discarded)
-- is an earlier episode of the same RD_ID; the new failure replaces it, so it is retried
-- (or shown) rather than swallowed. Returns the row id and whether the row was inserted
-- or replaced; no row when a pending row was kept.
-- $1 message_id, $2 target, $3 payload, $4 properties (jsonb), $5 due_at, $6 status,
-- $7 error_class, $8 last_error, $9 http_status, $10 errcode, $11 next_attempt_at,
-- $12 parts_sent
INSERT INTO failed_sends (message_id, target, payload, properties, due_at, status,
                          error_class, last_error, http_status, errcode, next_attempt_at,
                          parts_sent)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
ON CONFLICT (message_id) DO UPDATE
SET target = EXCLUDED.target, payload = EXCLUDED.payload, properties = EXCLUDED.properties,
    due_at = EXCLUDED.due_at, status = EXCLUDED.status, error_class = EXCLUDED.error_class,
    last_error = EXCLUDED.last_error, http_status = EXCLUDED.http_status,
    errcode = EXCLUDED.errcode, next_attempt_at = EXCLUDED.next_attempt_at,
    parts_sent = EXCLUDED.parts_sent, attempts = 0, discard_reason = NULL,
    created_at = now(), updated_at = now()
WHERE failed_sends.status <> 'pending'
RETURNING id, (xmax = 0) AS inserted
