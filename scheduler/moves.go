package scheduler

import "context"

// moveLoop moves the timers of this replica's wheel when their alerts are rescheduled
// (store.WheelStage.Moves), by whatever process: an alert moved earlier is handed off
// at its new time, not found overdue by a sweeper a grace period later. A move of an
// alert whose timer is in another replica's wheel changes nothing here. Moves missed
// while the subscription was cut off are the sweeper's.
func (s *Scheduler) moveLoop(ctx context.Context) {
	defer s.life.loops.Done()
	for m := range s.store.Moves(ctx) {
		if s.wheel.Move(m.ID, s.opts.fireAt(m.DueAt)) {
			s.metrics.movesApplied.Inc()
		}
	}
}
