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
			s.handOff(ctx, s.pool.undone(ctx, c.Entries), true)
			if len(c.Entries)+len(c.Corrupt) < s.opts.ClaimBatch {
				break
			}
		}
	}
}
