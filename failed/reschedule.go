package failed

import (
	"context"
	"fmt"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// StageRescheduler moves an alert in the wheel stage; *store.WheelStage implements it.
type StageRescheduler interface {
	Reschedule(ctx context.Context, id string, dueAt time.Time, reach time.Duration) (store.Rescheduled, error)
}

// RowRescheduler moves the next attempt of an alert's pending failed_sends row;
// *store.FailedSends implements it.
type RowRescheduler interface {
	Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error)
}

// Rescheduler moves an alert that has not been sent to a new due time, keeping its
// RD_ID, wherever it is (docs/design.md, Reschedule): waiting in the wheel stage (moved
// there, atomically against its claim), hopping through the broker (its reschedule record
// routes its next arrival), or, after its send failed, pending in failed_sends (the row's
// next attempt). Every way in reschedules through it (the HTTP API, the console,
// `rocketdelay reschedule`), so each gives the same answer.
type Rescheduler struct {
	Stage StageRescheduler
	Rows  RowRescheduler
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
// recorded, or it is unknown) its failed_sends rows answer, if it has any. An error
// wrapping store.ErrUnavailable means a store could not be reached; nothing changed.
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
