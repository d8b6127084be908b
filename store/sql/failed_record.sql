-- Record one failed send. A live row for the same message_id that is still pending is
-- the same failure recorded twice (a crash between recording and releasing): it is kept
-- as it is. A live row that is dead or rejected is an earlier episode of the same RD_ID;
-- the new failure replaces it, so it is retried rather than swallowed. A final row
-- (delivered, discarded, cancelled) is never overwritten: when its due time is this
-- failure's, the failure is a stale copy of the same alert (a replica that lost its
-- claim) and nothing is written; otherwise the new episode gets a row of its own. Returns the row id,
-- whether it was inserted, and whether a final row stopped the record; no row when a
-- pending row was kept.
-- $1 message_id, $2 target, $3 payload, $4 properties (jsonb), $5 due_at, $6 status,
-- $7 error_class, $8 last_error, $9 http_status, $10 errcode, $11 next_attempt_at,
-- $12 parts_sent
WITH final AS (
    SELECT id
    FROM failed_sends
    WHERE message_id = $1 AND status IN ('delivered', 'discarded', 'cancelled')
      AND due_at IS NOT DISTINCT FROM $5::timestamptz
    LIMIT 1
), ins AS (
    INSERT INTO failed_sends (message_id, target, payload, properties, due_at, status,
                              error_class, last_error, http_status, errcode,
                              next_attempt_at, parts_sent)
    SELECT $1::text, $2::text, $3::bytea, $4::jsonb, $5::timestamptz, $6::text, $7::text,
           $8::text, $9::integer, $10::integer, $11::timestamptz, $12::integer
    WHERE NOT EXISTS (SELECT 1 FROM final)
    ON CONFLICT (message_id) WHERE status NOT IN ('delivered', 'discarded', 'cancelled') DO UPDATE
    SET target = EXCLUDED.target, payload = EXCLUDED.payload, properties = EXCLUDED.properties,
        due_at = EXCLUDED.due_at, status = EXCLUDED.status, error_class = EXCLUDED.error_class,
        last_error = EXCLUDED.last_error, http_status = EXCLUDED.http_status,
        errcode = EXCLUDED.errcode, next_attempt_at = EXCLUDED.next_attempt_at,
        parts_sent = EXCLUDED.parts_sent, attempts = 0, discard_reason = NULL,
        claimed_by = NULL, claimed_replica = NULL, lease_until = NULL, confirmed_at = NULL, created_at = now(),
        updated_at = now()
    WHERE failed_sends.status IN ('dead', 'rejected')
    RETURNING id, (xmax = 0) AS inserted
)
SELECT id, inserted, false AS final FROM ins
UNION ALL
SELECT id, false, true FROM final
