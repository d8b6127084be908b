package scheduler

import (
	"context"
	"errors"
	"sync"

	"github.com/rocketdelay/rocketdelay/store"
)

// Sharing a busy robot group's sends across replicas (package sender's share.go): the hand-off
// lets the sender park an alert's claim in the wheel stage (heldEntry.Park, claim.go),
// and the sender of any replica adopts parked alerts of the target into its next send
// (Adopt): they are claimed by this replica and handed off as the fire loop's claims
// are.

// adoptions tracks the hand-offs of adopted alerts, which run outside the workers.
type adoptions struct {
	mu      sync.Mutex
	closed  bool // stop began: adopt nothing more
	running sync.WaitGroup
}

// Adopt claims up to limit of target's parked alerts for this replica and hands each
// off at once, outside the workers and their target's share (the sender that adopted
// them waits for them, to send them in the send it is making). It returns how many it
// handed off and how many stay parked. After Stop it adopts nothing.
func (s *Scheduler) Adopt(ctx context.Context, target string, limit int) (adopted, left int, err error) {
	if s.pool == nil {
		return 0, 0, nil // not started
	}
	return s.pool.adopt(ctx, target, limit, s.claimToken())
}

func (p *handoffPool) adopt(ctx context.Context, target string, limit int, token string) (int, int, error) {
	a := &p.adopting
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.closed {
		return 0, 0, nil
	}
	// Repeated with the same token while Redis cannot be reached: the adopt may have
	// landed with its reply lost, and a repeat returns what it took.
	var left int
	adopt := func(ctx context.Context) (store.Claimed, error) {
		c, l, err := p.store.Adopt(ctx, target, limit, token)
		left = l
		return c, err
	}
	c, err := p.claim(ctx, "adopt", adopt)
	mayHaveRun := errors.Is(err, store.ErrUnavailable) || errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
	if mayHaveRun && p.ctx.Err() == nil {
		// It may have run: Redis cut off with its reply lost, or the caller's time up
		// while Redis was slow. The same adopt again, aside and for as long as the replica
		// runs, until its outcome is known (claimKnown); what it took is handed off then.
		go func() {
			if c, err := p.claimKnown(p.ctx, "adopt", adopt, func(error) {}); err == nil {
				a.mu.Lock()
				defer a.mu.Unlock()
				if !a.closed {
					p.handOffAdopted(c)
				}
			}
		}()
	}
	if err != nil {
		return 0, 0, err
	}
	p.handOffAdopted(c)
	return len(c.Entries), left, nil
}

// handOffAdopted hands off what an adopt took, each at once; the caller holds
// adopting.mu.
func (p *handoffPool) handOffAdopted(c store.Claimed) {
	a := &p.adopting
	p.metrics.claims.WithLabelValues("adopted").Add(float64(len(c.Entries) + len(c.Corrupt)))
	if len(c.Corrupt) > 0 {
		a.running.Add(1) // its releases are queued before the pool's wait waits for them
		go func() {
			defer a.running.Done()
			p.quarantine(p.ctx, c.Corrupt)
		}()
	}
	for _, e := range c.Entries {
		a.running.Add(1)
		go func() {
			defer a.running.Done()
			p.deliver(e, true)
		}()
	}
}

// closeAdopting makes Adopt a no-op; the pool's wait waits for the adopted hand-offs in
// flight.
func (p *handoffPool) closeAdopting() {
	p.adopting.mu.Lock()
	p.adopting.closed = true
	p.adopting.mu.Unlock()
}
