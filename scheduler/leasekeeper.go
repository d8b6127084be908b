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
		s.held[e.ID] = e.Token
	}
}

// holdClaim holds one claim, as hold holds entries.
func (s *Scheduler) holdClaim(c store.Claim) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	s.held[c.ID] = c.Token
}

// holds reports whether this replica still holds the claim on id: false once it was
// released, given back, or taken over by another replica (the lease keeper found out).
func (s *Scheduler) holds(id string) bool {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	_, ok := s.held[id]
	return ok
}

func (s *Scheduler) unhold(id string) {
	s.heldMu.Lock()
	defer s.heldMu.Unlock()
	delete(s.held, id)
}

// leaseKeeper extends the leases of every entry this replica holds, three times per
// lease, so that claimed alerts waiting in a backlog stay this replica's. A claim the
// store no longer renews (another replica took it over after this one was cut off or
// paused past the lease) is forgotten: its hand-off, if it still runs, fails its confirm.
func (s *Scheduler) leaseKeeper(ctx context.Context) {
	defer close(s.keeperDone)
	t := time.NewTicker(s.store.Lease() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		s.heldMu.Lock()
		claims := make([]store.Claim, 0, len(s.held))
		for id, token := range s.held {
			claims = append(claims, store.Claim{ID: id, Token: token})
		}
		s.heldMu.Unlock()
		for len(claims) > 0 {
			chunk := claims[:min(len(claims), 1000)]
			claims = claims[len(chunk):]
			lost, err := s.store.ExtendLease(ctx, chunk)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("extending leases failed; another replica may claim these alerts again", "count", len(chunk), "err", err)
				}
				continue
			}
			if len(lost) > 0 {
				s.metrics.claimsLost.Add(float64(len(lost)))
				s.logger.Warn("claims taken over by another replica (this one was paused or cut off past the lease)",
					"count", len(lost))
				for _, id := range lost {
					s.unhold(id)
				}
			}
		}
	}
}
