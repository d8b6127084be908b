-- Record one input that can never be delivered, never over another row: when the
-- message_id has no live row, a rejected row is inserted; when its live row is this very
-- rejection (the same message redelivered), it is kept; when another live row holds the
-- message_id, nothing is written and no row comes back, and the caller records the
-- rejection under a name of its own. Returns the row id and whether it was inserted.
-- $1 message_id, $2 target, $3 payload, $4 properties (jsonb), $5 due_at,
-- $6 error_class, $7 last_error
INSERT INTO failed_sends (message_id, target, payload, properties, due_at, status,
                          error_class, last_error)
VALUES ($1, $2, $3, $4, $5, 'rejected', $6, $7)
ON CONFLICT (message_id) WHERE status NOT IN ('delivered', 'discarded', 'cancelled') DO UPDATE
SET updated_at = failed_sends.updated_at
WHERE failed_sends.status = 'rejected' AND failed_sends.error_class = EXCLUDED.error_class
  AND failed_sends.payload = EXCLUDED.payload
RETURNING id, (xmax = 0) AS inserted
