-- Who retried or discarded a row.
--
-- retried_by / retried_at: the operator (a console operator, "cli:<user>", an admin API
-- caller) who last asked for the row to be retried, and when; discarded_by: who
-- discarded it, kept with discard_reason. NULL when nobody did, or when the caller was
-- not named. Nullable columns added: a replica of the previous release, which never
-- names them, keeps working on the same table during a rolling upgrade.

-- +goose Up
ALTER TABLE failed_sends
    ADD COLUMN retried_by   text,
    ADD COLUMN retried_at   timestamptz,
    ADD COLUMN discarded_by text;

-- +goose Down
ALTER TABLE failed_sends
    DROP COLUMN retried_by,
    DROP COLUMN retried_at,
    DROP COLUMN discarded_by;
