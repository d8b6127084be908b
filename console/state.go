package console

import (
	"context"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// dueShown is how many of the entries due soonest the scheduler view lists.
const dueShown = 100

// Sources are where the scheduler view reads its state.
type Sources struct {
	Wheel *store.WheelStage
	Pool  *store.RobotPool
	// Targets are the configured chat targets; Limit the default limit per window.
	Targets map[string]sender.Target
	Limit   int
	// Mode says how hops cross the broker; Lateness summarises hand-off lateness.
	Mode     func() string
	Lateness func() (count uint64, p50, p99 time.Duration)
}

// State reads the scheduler's state: wheel-stage counts, the entries due soonest with
// their targets, the robot pool, lateness.
func (s Sources) State(ctx context.Context) (State, error) {
	st := State{Mode: s.Mode()}
	var err error
	if st.Waiting, st.InFlight, err = s.Wheel.Stats(ctx); err != nil {
		return State{}, err
	}
	due, err := s.Wheel.DueWithin(ctx, 100*365*24*time.Hour, dueShown)
	if err != nil {
		return State{}, err
	}
	ids := make([]string, len(due))
	for i, d := range due {
		ids[i] = d.ID
	}
	entries, err := s.Wheel.Peek(ctx, ids)
	if err != nil {
		return State{}, err
	}
	for _, e := range entries {
		st.Due = append(st.Due, Due{ID: e.ID, Target: e.Target, At: e.DueAt})
	}
	if st.Robots, err = sender.RobotStatuses(ctx, s.Pool, s.Targets, s.Limit); err != nil {
		return State{}, err
	}
	st.Lateness.Count, st.Lateness.P50, st.Lateness.P99 = s.Lateness()
	return st, nil
}
