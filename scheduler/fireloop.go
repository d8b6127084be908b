package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// The fire loop claims what the timing wheel fires and queues it for the hand-off pool
// (handoff.go), which delivers it, then releases it from the wheel stage or gives it
// back.

// loadDueSoon puts the wheel stage's entries due within the threshold into the wheel, so
// a restarted replica fires them on time rather than after the grace period.
func (s *Scheduler) loadDueSoon(ctx context.Context) error {
	n, err := s.loadDue(ctx)
	if err != nil {
		return fmt.Errorf("scheduler: load due-soon entries: %w", err)
	}
	if n > 0 {
		s.logger.Info("loaded due-soon entries into the wheel", "count", n)
	}
	return nil
}

// loadDue puts the wheel stage's entries due within the threshold (and the grace) into
// the wheel and returns how many: at start, and when another replica is gone, whose
// wheel held some of them. An entry already in the wheel keeps one place in it.
func (s *Scheduler) loadDue(ctx context.Context) (int, error) {
	due, err := s.store.DueWithin(ctx, s.opts.Threshold+s.opts.Grace, 1_000_000)
	if err != nil {
		return 0, err
	}
	for _, d := range due {
		if err := s.wheel.Add(d.ID, s.opts.fireAt(d.DueAt)); err != nil {
			if errors.Is(err, timewheel.ErrStopped) {
				return 0, err
			}
			s.logger.Warn("wheel refused a key; the sweeper will deliver it", "rd_id", d.ID, "err", err)
		}
	}
	return len(due), nil
}

// claimToken returns a token no other claim of any replica uses: only the claim that
// holds an entry can give back, confirm, mark or park it.
func (s *Scheduler) claimToken() string {
	return s.opts.InstanceName + "/" + strconv.FormatUint(s.claims.Add(1), 36)
}

// fireChunk bounds the keys of one claim of the fire loop: a burst of keys fired
// together is claimed a chunk at a time, each chunk queued for hand-off as soon as its
// claim lands, so the first alerts of a burst go while the rest are being claimed.
const fireChunk = 256

// fireLoop claims the keys the wheel fires, a chunk at a time, and queues the won
// entries for hand-off. Keys that are not due yet by Redis's clock (this replica's
// clock runs ahead of it) go back into the wheel for the time Redis says is left.
func (s *Scheduler) fireLoop(ctx context.Context) {
	defer s.life.loops.Done()
	for fired := range s.wheel.C() {
		for len(fired) > 0 {
			n := min(len(fired), fireChunk)
			chunk := fired[:n:n]
			fired = fired[n:]
			if !s.claimFired(ctx, chunk) {
				// Redis failed the chunk after a lease of retries, or the replica is
				// stopping: the rest stays due in Redis, for the sweeper once overdue (or
				// the other replicas), rather than each chunk waiting out the outage again.
				fired = nil
			}
		}
	}
}

// claimFired claims a batch of fired keys and queues what it won for hand-off; it
// reports false when the claim failed (retried aside when it may have run; what it did
// not take stays due, for the sweeper).
func (s *Scheduler) claimFired(ctx context.Context, batch []string) bool {
	token := s.claimToken()
	claim := func(ctx context.Context) (store.Claimed, error) {
		return s.store.ClaimAhead(ctx, batch, token, s.opts.ClaimAhead)
	}
	c, err := s.pool.claim(ctx, "claim", claim)
	if errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil {
		// It may have run: the same claim again, aside, until its outcome is known
		// (claimKnown); what it did not take stays due, for the sweeper.
		s.logger.Warn("claim of fired keys failed; trying it again", "keys", len(batch), "err", err)
		s.life.loops.Add(1)
		go func() {
			defer s.life.loops.Done()
			if c, err := s.pool.claimKnown(ctx, "claim", claim, func(error) {}); err == nil {
				s.fired(ctx, batch, c)
			}
		}()
		return false
	}
	if err != nil {
		// It did not run: the entries stay due; the sweeper claims them once overdue.
		s.logger.Warn("claim of fired keys failed; the sweeper will retry", "keys", len(batch), "err", err)
		return false
	}
	s.fired(ctx, batch, c)
	return true
}

// fired queues the entries a claim of the fired keys batch won for hand-off and puts
// those not due yet by Redis's clock back into the wheel.
func (s *Scheduler) fired(ctx context.Context, batch []string, c store.Claimed) {
	won := len(c.Entries) + len(c.Corrupt)
	s.metrics.claims.WithLabelValues("won").Add(float64(won))
	s.metrics.claims.WithLabelValues("lost").Add(float64(len(batch) - won - len(c.NotDue)))
	s.metrics.claims.WithLabelValues("not_due").Add(float64(len(c.NotDue)))
	for _, nd := range c.NotDue {
		_ = s.wheel.Add(nd.ID, s.opts.fireAt(s.now().Add(nd.Wait))) // refused only when stopping: the sweeper has it
	}
	s.pool.quarantine(ctx, c.Corrupt)
	s.handOff(ctx, c.Entries, false)
}

// handOff queues claimed entries for hand-off, each at its due time: those a claim took
// before it (claimed ahead, Options.ClaimAhead; or claimed ahead by a replica since gone
// and swept) wait for it, on a goroutine of their own, or on the caller's with inline
// (the sweeper's, which claims no more meanwhile).
func (s *Scheduler) handOff(ctx context.Context, entries []store.Entry, inline bool) {
	if !slices.ContainsFunc(entries, func(e store.Entry) bool { return e.DueIn > 0 }) {
		s.pool.enqueue(ctx, entries)
		return
	}
	claimed := time.Now() // the claim's reply is in: each DueIn counts from no later than this
	waiting := slices.Clone(entries)
	slices.SortStableFunc(waiting, func(a, b store.Entry) int { return a.DueAt.Compare(b.DueAt) })
	if inline {
		s.enqueueWhenDue(ctx, claimed, waiting)
		return
	}
	s.life.loops.Add(1)
	go func() {
		defer s.life.loops.Done()
		s.enqueueWhenDue(ctx, claimed, waiting)
	}()
}

// enqueueWhenDue queues entries, in order of due time, for hand-off each at its due time:
// once its DueIn has passed since claimed (the claim's reply was in by then, so it is
// due by the clock of the Redis that holds it) and it is due by this replica's
// reference clock too. When ctx ends (stopping) it drops the rest: this replica holds
// them, and hands them back as it stops.
func (s *Scheduler) enqueueWhenDue(ctx context.Context, claimed time.Time, entries []store.Entry) {
	for len(entries) > 0 {
		since, now := time.Since(claimed), s.now()
		n := 0
		for n < len(entries) && entries[n].DueIn <= since && !entries[n].DueAt.After(now) {
			n++
		}
		if n > 0 {
			s.pool.enqueue(ctx, entries[:n])
			entries = entries[n:]
			continue
		}
		t := time.NewTimer(max(entries[0].DueIn-since, entries[0].DueAt.Sub(now)))
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			s.metrics.handoffs.WithLabelValues("stopping").Add(float64(len(entries)))
			return
		}
	}
}

// fireAt is when the wheel fires the key of an alert due at due: ClaimAhead before it,
// so that its claim is over by then.
func (o Options) fireAt(due time.Time) time.Time { return due.Add(-o.ClaimAhead) }
