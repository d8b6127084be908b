-- Retention: the retry job deletes rows in a final state (delivered, discarded,
-- rejected; dead ones only when failedSends.deadRetention is set) some time after their
-- last change, in batches. This index finds them oldest first without reading the rest.

-- +goose Up
CREATE INDEX failed_sends_final_updated_idx ON failed_sends (updated_at)
    WHERE status IN ('delivered', 'discarded', 'rejected', 'dead');

-- +goose Down
DROP INDEX failed_sends_final_updated_idx;
