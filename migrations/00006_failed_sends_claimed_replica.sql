-- The replica of a retry-job claim.
--
-- claimed_replica: the replica whose retry job holds the row (the part of claimed_by
-- before its first "/": a claim token is the replica's id, "/", and a number), NULL when
-- no claim holds it. When a replica's liveness in the wheel stage lapses, or it leaves,
-- a survivor releases every row its claims held in one statement
-- (failed_release_replica.sql), rather than leaving them to their lease.

-- +goose Up
ALTER TABLE failed_sends ADD COLUMN claimed_replica text;
UPDATE failed_sends SET claimed_replica = split_part(claimed_by, '/', 1) WHERE claimed_by IS NOT NULL;
CREATE INDEX failed_sends_claimed_replica_idx ON failed_sends (claimed_replica)
    WHERE claimed_replica IS NOT NULL;

-- +goose Down
DROP INDEX failed_sends_claimed_replica_idx;
ALTER TABLE failed_sends DROP COLUMN claimed_replica;
