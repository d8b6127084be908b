package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// Alert is one alert that is due (or, for Reject, that arrived and can never be).
type Alert struct {
	// ID is the idempotency key (RD_ID).
	ID string
	// Target names the robot group.
	Target string
	// DueAt is when the alert is due, millisecond precision; zero when unknown.
	DueAt time.Time
	// Body is the alert as published: a DingTalk message JSON object or plain text.
	Body []byte
	// Hops is the number of broker hops the alert took.
	Hops int
}

// Rejected is an input that can never be delivered as it is.
type Rejected struct {
	// Alert is the input decoded as far as it could be.
	Alert Alert
	// Properties are the message's properties as received.
	Properties map[string]string
	// MessageKey is the broker's unique key of the message; it names the row when the
	// alert has no usable id.
	MessageKey string
	// Reason classifies the rejection, a metric label such as "bad_body"; the row's
	// error class is "rejected_" + Reason.
	Reason string
	// Detail says what is wrong in words the producer can act on.
	Detail string
}

// ReasonBadID is the Reason of a rejection whose RD_ID itself is unusable: the row is
// then named after the message key.
const ReasonBadID = "bad_id"

// Sender sends one alert to the robots of a target; *sender.Sender implements it. Every
// error it returns is a *sender.Failure.
type Sender interface {
	SendAlert(ctx context.Context, target string, body []byte, due time.Time) error
}

// Options tune a Deliverer. A zero field takes its default.
type Options struct {
	// FirstRetry is how long after a failed send the retry job first tries it again (the
	// failure's RetryAfter, when longer, wins). Default config failedSends.backoffBase.
	FirstRetry time.Duration
}

// Deliverer delivers due alerts, and records what it cannot deliver in failed_sends.
// It is safe for concurrent use.
type Deliverer struct {
	sender  Sender
	failed  *store.FailedSends
	opts    Options
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// New returns a Deliverer that sends through snd and records in fs. metrics may be nil;
// now is the clock of the failed rows' first attempt.
func New(snd Sender, fs *store.FailedSends, opts Options, logger *slog.Logger, metrics *Metrics, now func() time.Time) *Deliverer {
	if opts.FirstRetry <= 0 {
		opts.FirstRetry = config.DefaultFailedSendsBackoffBase
	}
	return &Deliverer{sender: snd, failed: fs, opts: opts, logger: logger.With("component", "delivery"),
		metrics: metrics, now: now}
}

// Deliver sends a due alert. It returns nil when the alert needs nothing more from the
// caller: DingTalk accepted it, or the sender gave up and the alert is now a row of
// failed_sends (pending, for the retry job; rejected, when DingTalk refuses its
// content). Any error means the alert is neither delivered nor recorded (the caller is
// stopping, or Postgres is unreachable): the caller keeps it and tries again.
func (d *Deliverer) Deliver(ctx context.Context, a Alert) error {
	err := d.sender.SendAlert(ctx, a.Target, a.Body, a.DueAt)
	if err == nil {
		return nil
	}
	var f *sender.Failure
	if !errors.As(err, &f) || ctx.Err() != nil {
		return err // stopping, or not a send failure: the caller retries
	}
	due := a.DueAt
	rec := store.NewFailedSend{
		MessageID:  a.ID,
		Target:     a.Target,
		Payload:    a.Body,
		DueAt:      &due,
		ErrorClass: string(f.Class),
		LastError:  f.Reason,
		HTTPStatus: nonZero(f.HTTPStatus),
		Errcode:    nonZero(f.Errcode),
	}
	if f.Class.Retryable() {
		rec.NextAttemptAt = d.now().Add(max(d.opts.FirstRetry, f.RetryAfter))
	} else {
		rec.Rejected = true
	}
	if _, rerr := d.failed.Record(ctx, rec); rerr != nil {
		d.metrics.recordError(kindSendFailure)
		d.logger.Error("cannot record an undeliverable alert in failed_sends; it is kept and tried again",
			"rd_id", a.ID, "target", a.Target, "send_err", f.Error(), "err", rerr)
		return fmt.Errorf("delivery: record failed send: %w", rerr)
	}
	d.logger.Warn("alert not delivered; recorded in failed_sends", "rd_id", a.ID, "target", a.Target,
		"class", string(f.Class), "reason", f.Reason, "retry", f.Class.Retryable())
	return nil
}

// Reject records an input that can never be delivered as a rejected row of
// failed_sends, with error class "rejected_" + r.Reason and r.Detail as its reason. An
// error means nothing was recorded: the caller keeps the input and tries again.
func (d *Deliverer) Reject(ctx context.Context, r Rejected) error {
	var due *time.Time
	if !r.Alert.DueAt.IsZero() {
		due = &r.Alert.DueAt
	}
	id := r.Alert.ID
	if id == "" || r.Reason == ReasonBadID {
		// The id itself is what is wrong; keep the row findable by the broker's message key.
		id = "rejected:" + r.MessageKey
	}
	_, err := d.failed.Record(ctx, store.NewFailedSend{
		MessageID:  id,
		Target:     r.Alert.Target,
		Payload:    r.Alert.Body,
		Properties: r.Properties,
		DueAt:      due,
		Rejected:   true,
		ErrorClass: "rejected_" + r.Reason,
		LastError:  r.Detail,
	})
	if err != nil {
		d.metrics.recordError(kindRejected)
		return fmt.Errorf("delivery: record rejected input: %w", err)
	}
	return nil
}

func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}
