package scheduler

import (
	"context"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// sweepLoop claims entries that are overdue past the grace period or whose lease
// expired, and, with them, everything a replica whose liveness lapsed held (the wheel
// stage's ClaimOverdue takes it over first): those of a crashed replica, or whose claim
// failed.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	defer s.life.loops.Done()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			token := s.claimToken()
			// A sweep that failed may have run and taken entries under its token: the same
			// sweep again until that is known (claimKnown).
			c, err := s.pool.claimKnown(ctx, "sweep", func(ctx context.Context) (store.Claimed, error) {
				return s.store.ClaimOverdue(ctx, s.opts.Grace, s.opts.ClaimBatch, token)
			}, func(err error) { s.logger.Warn("sweep failed; trying it again", "err", err) })
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("sweep failed", "err", err)
				}
				break
			}
			if n := len(c.Entries) + len(c.Corrupt); n > 0 {
				s.metrics.recovered.Add(float64(n))
				s.logger.Info("sweeper recovered overdue entries", "count", n)
			}
			s.pool.quarantine(ctx, c.Corrupt)
			s.pool.enqueue(ctx, c.Entries)
			if len(c.Entries)+len(c.Corrupt) < s.opts.ClaimBatch {
				break
			}
		}
	}
}

// moveLoop moves the timers of this replica's wheel when their alerts are rescheduled
// (store.WheelStage.Moves), by whatever process: an alert moved earlier is handed off
// at its new time, not found overdue by a sweeper a grace period later. A move of an
// alert whose timer is in another replica's wheel changes nothing here. Moves missed
// while the subscription was cut off are the sweeper's.
func (s *Scheduler) moveLoop(ctx context.Context) {
	defer s.life.loops.Done()
	for m := range s.store.Moves(ctx) {
		if s.wheel.Move(m.ID, m.DueAt) {
			s.metrics.movesApplied.Inc()
		}
	}
}
