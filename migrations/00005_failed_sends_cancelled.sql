-- Cancelled rows, and sends in flight.
--
-- A cancel of an alert whose send failed finds its live copy here: a row the retry job
-- or an operator could still send (pending, dead, rejected, discarded). The cancel makes
-- it cancelled, noting by whom (cancelled_by) and why (cancel_reason). A cancelled row is
-- final, as a delivered one: no later record overwrites it, the retry job never claims
-- it, its confirm fails, an operator's retry leaves it alone, and the purge deletes it
-- after the retention.
--
-- confirmed_at: when the retry-job claim that holds a pending row last confirmed it,
-- right before a request; NULL when no request of its claim may be in flight (not
-- claimed, not confirmed yet, or settled). A cancel never cancels a row whose send was
-- confirmed: its request may reach DingTalk, so the answer is "too late". The confirm
-- and the cancel lock the row, so whichever commits first wins and the other sees it.

-- +goose Up
ALTER TABLE failed_sends
    ADD COLUMN cancelled_by  text,
    ADD COLUMN cancel_reason text,
    ADD COLUMN confirmed_at  timestamptz;
ALTER TABLE failed_sends DROP CONSTRAINT failed_sends_status_check;
ALTER TABLE failed_sends ADD CONSTRAINT failed_sends_status_check
    CHECK (status IN ('pending', 'delivered', 'dead', 'rejected', 'discarded', 'cancelled'));
ALTER TABLE failed_sends ADD CONSTRAINT failed_sends_cancelled_by_check
    CHECK (status <> 'cancelled' OR cancelled_by IS NOT NULL);
DROP INDEX failed_sends_live_message_idx;
CREATE UNIQUE INDEX failed_sends_live_message_idx ON failed_sends (message_id)
    WHERE status NOT IN ('delivered', 'discarded', 'cancelled');
DROP INDEX failed_sends_final_updated_idx;
CREATE INDEX failed_sends_final_updated_idx ON failed_sends (updated_at)
    WHERE status IN ('delivered', 'discarded', 'rejected', 'dead', 'cancelled');

-- +goose Down
-- A cancelled row becomes what the schema had closest to it: discarded, with who and why
-- in its reason.
UPDATE failed_sends
SET status = 'discarded',
    discard_reason = 'cancelled by ' || cancelled_by || COALESCE(': ' || cancel_reason, '')
WHERE status = 'cancelled';
DROP INDEX failed_sends_final_updated_idx;
CREATE INDEX failed_sends_final_updated_idx ON failed_sends (updated_at)
    WHERE status IN ('delivered', 'discarded', 'rejected', 'dead');
DROP INDEX failed_sends_live_message_idx;
CREATE UNIQUE INDEX failed_sends_live_message_idx ON failed_sends (message_id)
    WHERE status NOT IN ('delivered', 'discarded');
ALTER TABLE failed_sends DROP CONSTRAINT failed_sends_cancelled_by_check;
ALTER TABLE failed_sends DROP CONSTRAINT failed_sends_status_check;
ALTER TABLE failed_sends ADD CONSTRAINT failed_sends_status_check
    CHECK (status IN ('pending', 'delivered', 'dead', 'rejected', 'discarded'));
ALTER TABLE failed_sends
    DROP COLUMN confirmed_at,
    DROP COLUMN cancel_reason,
    DROP COLUMN cancelled_by;
