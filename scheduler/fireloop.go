package scheduler

import (
	"context"
	"fmt"
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

// fireLoop claims the keys the wheel fires and queues the won entries for hand-off.
func (s *Scheduler) fireLoop(ctx context.Context) {
	defer s.loops.Done()
	for batch := range s.wheel.C() {
		entries, err := s.store.Claim(ctx, batch)
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
			s.giveBack(context.WithoutCancel(ctx), entries[i:], s.now())
			return
		}
	}
}

func (s *Scheduler) handoffWorker(ctx context.Context) {
	defer s.workers.Done()
	for e := range s.work {
		if ctx.Err() != nil && s.stopping() {
			s.giveBack(context.WithoutCancel(ctx), []store.Entry{e}, s.now())
			continue
		}
		s.deliver(s.handoffCtx, e)
	}
}

func (s *Scheduler) stopping() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

func (s *Scheduler) deliver(ctx context.Context, e store.Entry) {
	a := delivery.Alert{ID: e.ID, Target: e.Target, DueAt: e.DueAt, Body: e.Body, Hops: e.Hops}
	start := s.now()
	if err := s.delivery.Deliver(ctx, a); err != nil {
		s.metrics.handoffs.WithLabelValues("error").Inc()
		retryAt := s.now().Add(s.opts.RetryDelay)
		s.logger.Warn("hand-off failed; will retry", "rd_id", e.ID, "retry_at", retryAt.UTC().Format(time.RFC3339Nano), "err", err)
		s.giveBack(context.WithoutCancel(ctx), []store.Entry{e}, retryAt)
		return
	}
	s.metrics.handoffs.WithLabelValues("ok").Inc()
	s.metrics.lateness.Observe(max(start.Sub(e.DueAt), 0).Seconds())
	err := s.store.Release(context.WithoutCancel(ctx), e.ID)
	s.unhold(e.ID)
	if err != nil {
		// The lease will expire and the alert be handed off again: at least once.
		s.logger.Error("release after hand-off failed; the alert may be handed off again", "rd_id", e.ID, "err", err)
	}
}

func (s *Scheduler) giveBack(ctx context.Context, entries []store.Entry, retryAt time.Time) {
	for _, e := range entries {
		err := s.store.GiveBack(ctx, e.ID, retryAt)
		s.unhold(e.ID)
		if err != nil {
			s.logger.Warn("give-back failed; the lease will expire and the sweeper retry", "rd_id", e.ID, "err", err)
			continue
		}
		if !s.stopping() {
			_ = s.wheel.Add(e.ID, retryAt)
		}
	}
}
