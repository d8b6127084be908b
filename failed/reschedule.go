package failed

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// StageRescheduler moves an alert in the wheel stage, and settles a copy of it sent back
// to the broker; *store.WheelStage implements it.
type StageRescheduler interface {
	Reschedule(ctx context.Context, id string, dueAt time.Time, reach time.Duration) (store.Rescheduled, error)
	SettleRequeue(ctx context.Context, id string, gen int64, dueAt time.Time, commit bool) (store.Rescheduled, error)
}

// CopyPublisher sends a copy of an alert back to the broker; *wire.Producer implements
// it.
type CopyPublisher interface {
	PublishCopy(ctx context.Context, c wire.Copy) (string, error)
}

// RowRescheduler moves the next attempt of an alert's pending failed_sends row;
// *store.FailedSends implements it.
type RowRescheduler interface {
	Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error)
}

// Rescheduler moves an alert that has not been sent to a new due time, keeping its
// RD_ID, wherever it is (docs/design.md, Reschedule): waiting in the wheel stage (moved
// there, atomically against its claim; or, farther than the wheel stage holds, sent back
// to the broker as a copy of a new generation), hopping through the broker (its reschedule record
// routes its next arrival), or, after its send failed, pending in failed_sends (the row's
// next attempt). Every way in reschedules through it (the HTTP API, the console,
// `rocketdelay reschedule`), so each gives the same answer.
type Rescheduler struct {
	Stage StageRescheduler
	Rows  RowRescheduler
	// Publisher sends an alert moved farther than the wheel stage holds back to the
	// broker. nil: such a move is refused (store.RescheduleTooFar).
	Publisher CopyPublisher
	// Reach is how far ahead the wheel stage holds alerts: the scheduler's hop threshold
	// (config scheduler.threshold). Required.
	Reach time.Duration
	// Horizon is the longest delay accepted (config scheduler.horizon). Required.
	Horizon time.Duration
	// Now is the clock the horizon is judged by; nil means time.Now.
	Now func() time.Time
}

// Reschedule moves the alert id to dueAt (a time that has passed means now). A dueAt
// beyond the horizon is an error wrapping store.ErrInvalid, and nothing is asked. The
// wheel stage answers first; when it holds nothing of the alert (its failure is
// recorded, or it is unknown) its failed_sends rows answer, if it has any. An alert
// waiting in the wheel stage and moved beyond Reach goes back to the broker: a copy of a
// new generation is published, then settled against the alert's claim
// (store.RescheduleRequeued, or too late when it was claimed meanwhile). An error
// wrapping store.ErrUnavailable means a store or the broker could not be reached;
// nothing changed, except when the copy was published and only its settle failed: the
// copy settles itself when it arrives, and the alert moves unless it was claimed first.
func (r Rescheduler) Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error) {
	now := time.Now
	if r.Now != nil {
		now = r.Now
	}
	if d := dueAt.Sub(now()); d > r.Horizon {
		return store.Rescheduled{}, fmt.Errorf("%w: %s is %s ahead, beyond the horizon of %s (scheduler.horizon)",
			store.ErrInvalid, dueAt.Format(time.RFC3339), d.Round(time.Second), r.Horizon)
	}
	res, err := r.Stage.Reschedule(ctx, id, dueAt, r.Reach)
	if err != nil {
		return store.Rescheduled{}, err
	}
	if res.Requeue != nil {
		return r.requeue(ctx, id, *res.Requeue)
	}
	if res.Result != store.RescheduleRecorded && res.Result != store.RescheduleUnknown {
		return res, nil
	}
	rows, err := r.Rows.Reschedule(ctx, id, dueAt)
	if err != nil {
		return store.Rescheduled{}, err
	}
	if rows.Result == 0 {
		return res, nil
	}
	return rows, nil
}

// settleTimeout bounds the settle of a requeued copy, which runs even when the caller's
// context ended.
const settleTimeout = 10 * time.Second

// requeue publishes q, the copy of the alert id that goes back to the broker, and
// settles its generation: committed when the publish succeeded, refused when it failed.
func (r Rescheduler) requeue(ctx context.Context, id string, q store.Requeue) (store.Rescheduled, error) {
	e, perr := q.Entry, error(nil)
	if r.Publisher == nil {
		perr = errors.New("this process has no RocketMQ producer")
	} else {
		_, perr = r.Publisher.PublishCopy(ctx, wire.Copy{ID: e.ID, Target: e.Target, At: e.DueAt, Body: e.Body, Props: e.Props,
			Hops: e.Hops, Gen: q.Gen})
	}
	// Settled even when ctx ended: an unsettled generation is settled by its copy's
	// arrival, but a refused one must not wait for that.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	res, err := r.Stage.SettleRequeue(sctx, id, q.Gen, e.DueAt, perr == nil)
	switch {
	case err != nil && perr == nil:
		return store.Rescheduled{}, fmt.Errorf("%w (the copy was sent to RocketMQ: it moves the alert when it arrives, "+
			"unless the alert is sent first)", err)
	case err != nil:
		return store.Rescheduled{}, err
	case res.Result == store.RescheduleTooFar && r.Publisher != nil:
		return store.Rescheduled{}, fmt.Errorf("%w: reschedule %s: send it back to RocketMQ: %v", store.ErrUnavailable, id, perr)
	}
	return res, nil
}
