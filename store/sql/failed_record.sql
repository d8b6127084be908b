-- Record one failed send or rejected input; a second insert of the same message_id is a
-- no-op (the row keeps its history), reported by the absence of a returned id.
-- $1 message_id, $2 target, $3 payload, $4 properties (jsonb), $5 due_at, $6 status,
-- $7 error_class, $8 last_error, $9 http_status, $10 errcode, $11 next_attempt_at
INSERT INTO failed_sends (message_id, target, payload, properties, due_at, status,
                          error_class, last_error, http_status, errcode, next_attempt_at)
VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11)
ON CONFLICT (message_id) DO NOTHING
RETURNING id
