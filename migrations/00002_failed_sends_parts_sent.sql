-- parts_sent: how many leading parts of a split alert (text or markdown over 20000
-- bytes, sent as numbered parts) DingTalk accepted before the send failed. The retry
-- job sends from the next part, so the parts already delivered are not sent twice.

-- +goose Up
ALTER TABLE failed_sends
    ADD COLUMN parts_sent integer NOT NULL DEFAULT 0
        CONSTRAINT failed_sends_parts_sent_check CHECK (parts_sent >= 0);

-- +goose Down
ALTER TABLE failed_sends DROP COLUMN parts_sent;
