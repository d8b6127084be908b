-- Fenced claims of the retry job, and history kept.
--
-- claimed_by / lease_until: the retry job claims a row by writing its own token and a
-- lease on Postgres's clock. Only the holder of the token may settle the row (mark it
-- retried or dead); a confirm right before every request renews the lease and fails
-- once another instance took the row over, so a paused replica, one whose clock is
-- off, or one that waited long for a robot never sends a row another is sending.
--
-- One live row per RD_ID, any number of final ones: a delivered or discarded row is
-- history and is never overwritten. A stale re-record of the same alert (same due time)
-- leaves it as it is; a later episode of the same RD_ID (a new due time) gets a row of
-- its own.

-- +goose Up
ALTER TABLE failed_sends
    ADD COLUMN claimed_by  text,
    ADD COLUMN lease_until timestamptz;
ALTER TABLE failed_sends DROP CONSTRAINT failed_sends_message_id_key;
CREATE UNIQUE INDEX failed_sends_live_message_idx ON failed_sends (message_id)
    WHERE status NOT IN ('delivered', 'discarded');
CREATE INDEX failed_sends_message_idx ON failed_sends (message_id);

-- +goose Down
DROP INDEX failed_sends_message_idx;
DROP INDEX failed_sends_live_message_idx;
-- Keeps the newest row of each RD_ID, as the old schema allowed one.
DELETE FROM failed_sends f USING failed_sends g
WHERE f.message_id = g.message_id AND f.id < g.id;
ALTER TABLE failed_sends ADD CONSTRAINT failed_sends_message_id_key UNIQUE (message_id);
ALTER TABLE failed_sends
    DROP COLUMN lease_until,
    DROP COLUMN claimed_by;
