package failed

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

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

// MessageReader reads the message of a hopping alert's last hop back from the broker's
// store by its offset message id; wire.Reader implements it.
type MessageReader interface {
	Read(ctx context.Context, offsetID string) (*primitive.MessageExt, error)
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
	// broker, and a hopping alert moved earlier than its message carries. nil: such a
	// move is refused (store.RescheduleTooFar, store.RescheduleInHop).
	Publisher CopyPublisher
	// Reader reads a hopping alert moved earlier than its message carries back from the
	// broker, for Publisher to publish a copy of at the new time. nil: such a move is
	// refused (store.RescheduleInHop).
	Reader MessageReader
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
		e := res.Requeue.Entry
		return r.requeue(ctx, id, res.Requeue.Gen, e.DueAt, func() error {
			_, err := r.Publisher.PublishCopy(ctx, wire.Copy{ID: e.ID, Target: e.Target, At: e.DueAt, Body: e.Body,
				Props: e.Props, Hops: e.Hops, Gen: res.Requeue.Gen})
			return err
		})
	}
	if res.Recall != nil {
		return r.recall(ctx, res)
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

// requeue publishes the copy of generation gen of the alert id that goes back to the
// broker, due at dueAt, and settles gen: committed when the publish succeeded, refused
// when it failed.
func (r Rescheduler) requeue(ctx context.Context, id string, gen int64, dueAt time.Time, publish func() error) (store.Rescheduled, error) {
	perr := errors.New("this process has no RocketMQ producer")
	if r.Publisher != nil {
		perr = publish()
	}
	// Settled even when ctx ended: an unsettled generation is settled by its copy's
	// arrival, but a refused one must not wait for that.
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	res, err := r.Stage.SettleRequeue(sctx, id, gen, dueAt, perr == nil)
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

// recall moves a hopping alert earlier than its message carries (store.Recall): its
// last hop's message is read back from the broker and a copy of it, due at the new
// time, is published and settled as a requeue's. When the message cannot be had (this
// process cannot read or publish, or the broker no longer has it) nothing changes and
// the answer is the wheel stage's: store.RescheduleInHop, with the earliest time.
func (r Rescheduler) recall(ctx context.Context, in store.Rescheduled) (store.Rescheduled, error) {
	q := *in.Recall
	refuse := func() error {
		sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		_, err := r.Stage.SettleRequeue(sctx, q.ID, q.Gen, q.DueAt, false)
		return err
	}
	inHop := store.Rescheduled{Result: store.RescheduleInHop, DueAt: in.DueAt}
	if r.Reader == nil || r.Publisher == nil {
		return inHop, refuse()
	}
	msg, err := r.Reader.Read(ctx, q.Msg)
	switch {
	case errors.Is(err, wire.ErrMessageGone), err == nil && msg.GetProperty(wire.PropID) != q.ID:
		return inHop, refuse()
	case err != nil:
		if rerr := refuse(); rerr != nil {
			return store.Rescheduled{}, rerr
		}
		return store.Rescheduled{}, fmt.Errorf("%w: reschedule %s: read its message back from RocketMQ: %v", store.ErrUnavailable, q.ID, err)
	}
	hops, _ := strconv.Atoi(msg.GetProperty(wire.PropHops))
	return r.requeue(ctx, q.ID, q.Gen, q.DueAt, func() error {
		_, err := r.Publisher.PublishCopy(ctx, wire.Copy{ID: q.ID, Target: msg.GetProperty(wire.PropTarget), At: q.DueAt,
			Body: msg.Body, Props: wire.CopyProps(msg), Hops: hops, Gen: q.Gen})
		return err
	})
}
