package scheduler

import (
	"context"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// The lease keeper keeps the claims of the entries this replica holds alive.

func (s *Scheduler) hold(entries []store.Entry) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	for _, e := range entries {
		s.held[e.ID] = struct{}{}
	}
}

func (s *Scheduler) unhold(id string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	delete(s.held, id)
}

// leaseKeeper extends the leases of every entry this replica holds, three times per
// lease, so that claimed alerts waiting in a backlog stay this replica's.
func (s *Scheduler) leaseKeeper(ctx context.Context) {
	defer s.loops.Done()
	t := time.NewTicker(s.store.Lease() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.heldMu.Lock()
		ids := make([]string, 0, len(s.held))
		for id := range s.held {
			ids = append(ids, id)
		}
		s.heldMu.Unlock()
		for len(ids) > 0 {
			chunk := ids[:min(len(ids), 1000)]
			ids = ids[len(chunk):]
			if _, err := s.store.ExtendLease(ctx, chunk); err != nil && ctx.Err() == nil {
				s.logger.Warn("extending leases failed; another replica may claim these alerts again", "count", len(chunk), "err", err)
			}
		}
	}
}
