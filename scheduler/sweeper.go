package scheduler

import (
	"context"
	"time"
)

// sweepLoop claims entries that are overdue past the grace period or whose lease
// expired: those of a crashed replica, or whose claim failed.
func (s *Scheduler) sweepLoop(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.opts.SweepInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for {
			entries, err := s.store.ClaimOverdue(ctx, s.opts.Grace, s.opts.ClaimBatch, s.claimToken())
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("sweep failed", "err", err)
				}
				break
			}
			if len(entries) > 0 {
				s.metrics.recovered.Add(float64(len(entries)))
				s.logger.Info("sweeper recovered overdue entries", "count", len(entries))
			}
			s.enqueue(ctx, entries)
			if len(entries) < s.opts.ClaimBatch {
				break
			}
		}
	}
}
