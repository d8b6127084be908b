package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// recordErrors counts writes to failed_sends that failed (Postgres unreachable): the
// alert is kept (in Redis, or in RocketMQ for a rejected input) and tried again.
func newRecordErrors(reg prometheus.Registerer) *prometheus.CounterVec {
	c := prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rocketdelay_failed_sends_record_errors_total",
		Help: "Writes to failed_sends that failed; the alert is kept and retried. By kind: send_failure, rejected.",
	}, []string{"kind"})
	reg.MustRegister(c)
	c.WithLabelValues("send_failure")
	c.WithLabelValues("rejected")
	return c
}

// rejectRecorder records the scheduler's rejected inputs in failed_sends.
type rejectRecorder struct {
	fs     *store.FailedSends
	errors *prometheus.CounterVec
}

func (r rejectRecorder) RecordRejected(ctx context.Context, a scheduler.Alert, props map[string]string, rej *scheduler.Rejection) error {
	var due *time.Time
	if !a.DeliverAt.IsZero() {
		due = &a.DeliverAt
	}
	id := a.ID
	if id == "" || len(id) > scheduler.MaxIDLength {
		// The id itself is what is wrong; keep the row findable by the broker's message key.
		id = "rejected:" + props["UNIQ_KEY"]
	}
	_, err := r.fs.Record(ctx, store.NewFailedSend{
		MessageID:  id,
		Target:     a.Target,
		Payload:    a.Body,
		Properties: props,
		DueAt:      due,
		Rejected:   true,
		ErrorClass: "rejected_" + string(rej.Reason),
		LastError:  rej.Detail,
	})
	if err != nil {
		r.errors.WithLabelValues("rejected").Inc()
	}
	return err
}

// senderHandoff delivers due alerts through the DingTalk sender. An alert the sender
// cannot deliver is recorded in failed_sends — pending for the retry job, or rejected
// when DingTalk refuses its content — before the scheduler releases it from Redis; when
// that record cannot be written the alert is given back to the wheel stage.
type senderHandoff struct {
	snd    *sender.Sender
	fs     *store.FailedSends
	retry  time.Duration // the retry job's first wait
	logger *slog.Logger
	now    func() time.Time
	errors *prometheus.CounterVec
}

func (h senderHandoff) Deliver(ctx context.Context, a scheduler.Alert) error {
	err := h.snd.SendAlert(ctx, a.Target, a.Body, a.DeliverAt)
	if err == nil {
		return nil
	}
	var f *sender.Failure
	if !errors.As(err, &f) || ctx.Err() != nil {
		return err // stopping, or not a send failure: the scheduler retries
	}
	due := a.DeliverAt
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
		rec.NextAttemptAt = h.now().Add(max(h.retry, f.RetryAfter))
	} else {
		rec.Rejected = true
	}
	if _, rerr := h.fs.Record(ctx, rec); rerr != nil {
		h.errors.WithLabelValues("send_failure").Inc()
		h.logger.Error("cannot record an undeliverable alert in failed_sends; it stays in Redis and is retried",
			"rd_id", a.ID, "target", a.Target, "send_err", f.Error(), "err", rerr)
		return fmt.Errorf("record failed send: %w", rerr)
	}
	h.logger.Warn("alert not delivered; recorded in failed_sends", "rd_id", a.ID, "target", a.Target,
		"class", string(f.Class), "reason", f.Reason, "retry", f.Class.Retryable())
	return nil
}

func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}

// jobSender lets the failed-sends retry job send through the DingTalk sender.
type jobSender struct{ snd *sender.Sender }

func (j jobSender) Send(ctx context.Context, target string, payload []byte) error {
	err := j.snd.SendBody(ctx, target, payload)
	var f *sender.Failure
	if errors.As(err, &f) {
		return jobError{f}
	}
	return err
}

// jobError gives a sender failure the methods the retry job inspects.
type jobError struct{ f *sender.Failure }

func (e jobError) Error() string   { return e.f.Error() }
func (e jobError) Unwrap() error   { return e.f }
func (e jobError) Class() string   { return string(e.f.Class) }
func (e jobError) Permanent() bool { return !e.f.Class.Retryable() }
func (e jobError) HTTPStatus() int { return e.f.HTTPStatus }
func (e jobError) Errcode() int    { return e.f.Errcode }

func (e jobError) RetryAfter() time.Duration { return e.f.RetryAfter }
