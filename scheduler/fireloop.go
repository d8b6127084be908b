package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/store"
)

// The fire loop claims what the timing wheel fires; the hand-off workers deliver what
// is claimed, then release it from the wheel stage or give it back.

// loadDueSoon puts the wheel stage's entries due within the threshold into the wheel, so
// a restarted replica fires them on time rather than after the grace period.
func (s *Scheduler) loadDueSoon(ctx context.Context) error {
	due, err := s.store.DueWithin(ctx, s.opts.Threshold+s.opts.Grace, 1_000_000)
	if err != nil {
		return fmt.Errorf("scheduler: load due-soon entries: %w", err)
	}
	for _, d := range due {
		if err := s.wheel.Add(d.ID, d.DueAt); err != nil {
			s.logger.Warn("wheel refused a key; the sweeper will deliver it", "rd_id", d.ID, "err", err)
		}
	}
	if len(due) > 0 {
		s.logger.Info("loaded due-soon entries into the wheel", "count", len(due))
	}
	return nil
}

// claimToken returns a token no other claim of any replica uses: only the claim that
// holds an entry can extend, give back, confirm or mark it.
func (s *Scheduler) claimToken() string {
	return s.opts.InstanceName + "/" + strconv.FormatUint(s.claims.Add(1), 36)
}

// fireLoop claims the keys the wheel fires and queues the won entries for hand-off.
func (s *Scheduler) fireLoop(ctx context.Context) {
	defer s.loops.Done()
	for batch := range s.wheel.C() {
		entries, err := s.store.Claim(ctx, batch, s.claimToken())
		if err != nil {
			// The entries stay in Redis; the sweeper claims them once overdue.
			s.logger.Warn("claim of fired keys failed; the sweeper will retry", "keys", len(batch), "err", err)
			continue
		}
		s.metrics.claims.WithLabelValues("won").Add(float64(len(entries)))
		s.metrics.claims.WithLabelValues("lost").Add(float64(len(batch) - len(entries)))
		s.enqueue(ctx, entries)
	}
}

// enqueue hands claimed entries to the workers; when stopping, it gives back the rest.
// Entries are held (their leases kept alive) from here until released or given back, so
// a backlog waiting for the sender never loses its claim to another replica's sweeper.
func (s *Scheduler) enqueue(ctx context.Context, entries []store.Entry) {
	s.hold(entries)
	for i, e := range entries {
		select {
		case s.work <- e:
		case <-ctx.Done():
			for _, e := range entries[i:] {
				s.giveBack(context.WithoutCancel(ctx), e, s.now())
			}
			return
		}
	}
}

// handoffWorker hands off what the fire loop and the sweeper queue, within each
// target's share of the workers (see targetGate): after a hand-off it takes the next
// entry its target queued, if any.
func (s *Scheduler) handoffWorker(ctx context.Context) {
	defer s.workers.Done()
	for e := range s.work {
		if !s.gate.enter(e) {
			continue // queued behind its target's hand-offs in flight
		}
		for ok := true; ok; e, ok = s.gate.leave(e.Target) {
			if ctx.Err() != nil && s.stopping() {
				s.giveBack(context.WithoutCancel(ctx), e, s.now())
				continue
			}
			s.deliver(s.handoffCtx, e)
		}
	}
}

func (s *Scheduler) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// deliver hands one claimed entry to the Delivery and ends its claim: released when the
// Delivery is done with it, given back (to be tried again after a backoff) when not,
// dropped when the claim was lost on the way (another replica has the entry).
func (s *Scheduler) deliver(ctx context.Context, e store.Entry) {
	if early := e.DueAt.Sub(s.now()); early > 0 {
		// Not due yet by this replica's own clock: the sweeper judged by Redis's clock, or
		// the wall clock was stepped since the key went into the wheel. Never early.
		s.metrics.handoffs.WithLabelValues("not_due").Inc()
		s.logger.Debug("claimed alert not due yet by this replica's clock; given back until it is",
			"rd_id", e.ID, "early", early.String())
		s.giveBack(context.WithoutCancel(ctx), e, e.DueAt)
		return
	}
	a := delivery.Alert{ID: e.ID, Target: e.Target, DueAt: e.DueAt, Body: e.Body, Hops: e.Hops,
		Claim: e.Claim(), Failure: e.Failure}
	start := s.now()
	outcome, err := s.delivery.Deliver(ctx, a)
	switch {
	case errors.Is(err, store.ErrNotHeld):
		s.metrics.handoffs.WithLabelValues("claim_lost").Inc()
		s.unhold(e.ID)
		s.logger.Warn("claim lost during the hand-off (this replica was paused or cut off from Redis "+
			"longer than the lease); the replica that holds it now delivers it", "rd_id", e.ID)
		return
	case err != nil:
		s.metrics.handoffs.WithLabelValues("error").Inc()
		retryAt := s.now().Add(s.retryDelay(e.Tries))
		s.logger.Warn("hand-off failed; will retry", "rd_id", e.ID, "tries", e.Tries+1,
			"retry_at", retryAt.UTC().Format(time.RFC3339Nano), "err", err)
		s.giveBack(context.WithoutCancel(ctx), e, retryAt)
		return
	}
	s.metrics.handoffs.WithLabelValues(outcomeLabel(outcome)).Inc()
	if outcome == store.Delivered {
		s.metrics.lateness.Observe(max(start.Sub(e.DueAt), 0).Seconds())
	}
	lost, err := s.store.Release(context.WithoutCancel(ctx), outcome, e.Claim())
	s.unhold(e.ID)
	switch {
	case err != nil:
		// The lease will expire and the entry be claimed again; the done marker or the noted
		// failure decides then (see delivery): at least once, deduplicated where possible.
		s.logger.Error("release after hand-off failed; the alert may be handed off again", "rd_id", e.ID, "err", err)
	case lost > 0:
		s.logger.Warn("released an alert whose claim had run out; it is done, and the replica that took it over will not send it",
			"rd_id", e.ID)
	}
}

func outcomeLabel(o store.Outcome) string {
	if o == store.Recorded {
		return "recorded"
	}
	return "ok"
}

// retryDelay is the wait before the next hand-off of an entry given back tries times:
// RetryDelay doubled per try, at most RetryMaxDelay.
func (s *Scheduler) retryDelay(tries int) time.Duration {
	d := s.opts.RetryDelay
	for range min(tries, 30) {
		if d >= s.opts.RetryMaxDelay {
			break
		}
		d *= 2
	}
	return min(d, s.opts.RetryMaxDelay)
}

// giveBack returns a claimed entry to the due index for retryAt, if this claim still
// holds it, and puts it back in the wheel.
func (s *Scheduler) giveBack(ctx context.Context, e store.Entry, retryAt time.Time) {
	ok, err := s.store.GiveBack(ctx, e.Claim(), retryAt)
	s.unhold(e.ID)
	if err != nil {
		s.logger.Warn("give-back failed; the lease will expire and the sweeper retry", "rd_id", e.ID, "err", err)
		return
	}
	if ok && !s.stopping() {
		_ = s.wheel.Add(e.ID, retryAt)
	}
}
