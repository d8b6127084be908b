-- failed_sends: alerts that could not be delivered, and inputs that never can be.
-- The sender's final failures and the scheduler's rejects are inserted here before their
-- entry leaves Redis; a periodic job retries `pending` rows; operators list, retry and
-- discard rows with `rocketdelay failed …`.

-- +goose Up
CREATE TABLE failed_sends (
    id              bigint      GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    -- RD_ID of the alert; one row per alert, so a repeated insert is a no-op.
    message_id      text        NOT NULL UNIQUE,
    -- Robot group name from RD_TARGET ('' when the input had none).
    target          text        NOT NULL DEFAULT '',
    -- The alert body exactly as received (may be invalid UTF-8 for rejected inputs).
    payload         bytea       NOT NULL,
    -- The message properties as received, for rejected inputs and for operators.
    properties      jsonb       NOT NULL DEFAULT '{}'::jsonb,
    -- When the alert was due; NULL when the input carried no usable due time.
    due_at          timestamptz,
    status          text        NOT NULL DEFAULT 'pending'
        CONSTRAINT failed_sends_status_check
        CHECK (status IN ('pending', 'delivered', 'dead', 'rejected', 'discarded')),
    -- throttled, transient, robot_broken, payload_permanent, rejected, …
    error_class     text        NOT NULL,
    -- Readable reason of the last failure; never contains tokens or secrets.
    last_error      text        NOT NULL DEFAULT '',
    http_status     integer,
    errcode         integer,
    attempts        integer     NOT NULL DEFAULT 0 CONSTRAINT failed_sends_attempts_check CHECK (attempts >= 0),
    -- When the retry job may try this row next; NULL unless status is pending.
    next_attempt_at timestamptz,
    -- Why an operator discarded the row.
    discard_reason  text,
    created_at      timestamptz NOT NULL DEFAULT now(),
    updated_at      timestamptz NOT NULL DEFAULT now(),
    CONSTRAINT failed_sends_pending_has_next CHECK (status <> 'pending' OR next_attempt_at IS NOT NULL)
);

-- The retry job: due pending rows, oldest first (… FOR UPDATE SKIP LOCKED).
CREATE INDEX failed_sends_retry_idx ON failed_sends (next_attempt_at) WHERE status = 'pending';
-- Operators' usual filters, newest first.
CREATE INDEX failed_sends_status_created_idx ON failed_sends (status, created_at DESC);
CREATE INDEX failed_sends_target_created_idx ON failed_sends (target, created_at DESC);
CREATE INDEX failed_sends_class_created_idx ON failed_sends (error_class, created_at DESC);
CREATE INDEX failed_sends_created_idx ON failed_sends (created_at DESC);

-- +goose Down
DROP TABLE failed_sends;
