package scheduler

import (
	"context"
	"fmt"
	"strconv"

	"github.com/rocketdelay/rocketdelay/store"
)

// The fire loop claims what the timing wheel fires and queues it for the hand-off pool
// (handoff.go), which delivers it, then releases it from the wheel stage or gives it
// back.

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
// Keys that are not due yet by Redis's clock (this replica's clock runs ahead of it)
// go back into the wheel for the time Redis says is left.
func (s *Scheduler) fireLoop(ctx context.Context) {
	defer s.life.loops.Done()
	for batch := range s.wheel.C() {
		token := s.claimToken()
		c, err := s.claimRetrying(ctx, "claim", func(ctx context.Context) (store.Claimed, error) {
			return s.store.Claim(ctx, batch, token)
		})
		if err != nil {
			// The entries stay in Redis; the sweeper claims them once overdue.
			s.logger.Warn("claim of fired keys failed; the sweeper will retry", "keys", len(batch), "err", err)
			continue
		}
		won := len(c.Entries) + len(c.Corrupt)
		s.metrics.claims.WithLabelValues("won").Add(float64(won))
		s.metrics.claims.WithLabelValues("lost").Add(float64(len(batch) - won - len(c.NotDue)))
		s.metrics.claims.WithLabelValues("not_due").Add(float64(len(c.NotDue)))
		for _, nd := range c.NotDue {
			_ = s.wheel.Add(nd.ID, s.now().Add(nd.Wait)) // refused only when stopping: the sweeper has it
		}
		s.pool.quarantine(ctx, c.Corrupt)
		s.pool.enqueue(ctx, c.Entries)
	}
}

// claimRetrying runs a claim, and runs it again with the same token while Redis cannot
// be reached: the claim may have landed with its reply lost, and a repeat returns what
// it took, so the entries do not wait a whole lease for a claim nobody holds. It gives
// up after one lease (the sweeper of any replica takes the entries by then) or when ctx
// ends.
func (s *Scheduler) claimRetrying(ctx context.Context, op string, claim func(context.Context) (store.Claimed, error)) (store.Claimed, error) {
	var c store.Claimed
	err := retryStore(ctx, s.metrics, op, s.store.Lease(), func(ctx context.Context) error {
		var err error
		c, err = claim(ctx)
		return err
	})
	return c, err
}
