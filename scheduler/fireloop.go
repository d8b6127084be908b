package scheduler

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/cenkalti/backoff/v5"

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
// Keys that are not due yet by Redis's clock (this replica's clock runs ahead of it)
// go back into the wheel for the time Redis says is left.
func (s *Scheduler) fireLoop(ctx context.Context) {
	defer s.loops.Done()
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
		s.quarantine(ctx, c.Corrupt)
		s.enqueue(ctx, c.Entries)
	}
}

// claimRetrying runs a claim, and runs it again with the same token while Redis cannot
// be reached: the claim may have landed with its reply lost, and a repeat returns what
// it took, so the entries do not wait a whole lease for a claim nobody holds. It gives
// up after one lease (the sweeper of any replica takes the entries by then) or when ctx
// ends.
func (s *Scheduler) claimRetrying(ctx context.Context, op string, claim func(context.Context) (store.Claimed, error)) (store.Claimed, error) {
	var c store.Claimed
	err := s.retryStore(ctx, op, s.store.Lease(), func(ctx context.Context) error {
		var err error
		c, err = claim(ctx)
		return err
	})
	return c, err
}

// retryStore runs write, and runs it again with backoff (50 ms doubling to 1 s) while
// it fails with store.ErrUnavailable, until it lands, another error comes back, more
// than within has passed (0: no bound), or ctx ends.
func (s *Scheduler) retryStore(ctx context.Context, op string, within time.Duration, write func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, time.Second
	tries := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		if tries++; tries > 1 {
			s.metrics.storeRetries.WithLabelValues(op).Inc()
		}
		err := write(ctx)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(within))
	return err
}

// quarantine records claimed entries whose record cannot be decoded as rejected inputs
// (rejected_corrupt_entry, with the record as the payload) and releases them, so one
// damaged record never blocks the rest of its batch nor comes back forever. One whose
// rejection cannot be recorded now is given back for later.
func (s *Scheduler) quarantine(ctx context.Context, corrupt []store.Corrupt) {
	for _, c := range corrupt {
		s.holdClaim(c.Claim)
		err := s.delivery.Reject(ctx, delivery.Rejected{Alert: delivery.Alert{ID: c.Claim.ID, Body: c.Record},
			Reason: rejectCorruptEntry, Detail: "the wheel stage's record of this alert cannot be decoded (" + c.Err.Error() +
				"): it was damaged in Redis or written by an unknown version; the record is kept as this row's payload"})
		if err != nil {
			s.logger.Warn("cannot record a corrupt wheel-stage entry; it is given back and tried again", "rd_id", c.Claim.ID, "err", err)
			s.giveBack(store.Entry{ID: c.Claim.ID, Token: c.Claim.Token}, s.now().Add(s.opts.RetryMaxDelay), 0)
			continue
		}
		s.metrics.quarantined.Inc()
		s.logger.Error("corrupt wheel-stage entry recorded as rejected and released", "rd_id", c.Claim.ID, "err", c.Err)
		s.release(store.Entry{ID: c.Claim.ID, Token: c.Claim.Token}, store.Recorded)
	}
}

// rejectCorruptEntry is the rejection reason of a wheel-stage record that cannot be
// decoded.
const rejectCorruptEntry = "corrupt_entry"

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
				s.giveBack(e, s.now(), e.PartsSent)
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
				s.giveBack(e, s.now(), e.PartsSent)
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
		// Not due yet by the reference clock as this replica knows it (the claim itself
		// judged by Redis's): the offset moved since. Never early by either.
		s.metrics.handoffs.WithLabelValues("not_due").Inc()
		s.logger.Debug("claimed alert not due yet by this replica's reference clock; given back until it is",
			"rd_id", e.ID, "early", early.String())
		s.giveBack(e, e.DueAt, e.PartsSent)
		return
	}
	a := delivery.Alert{ID: e.ID, Target: e.Target, DueAt: e.DueAt, Body: e.Body, Hops: e.Hops,
		Claim: e.Claim(), Failure: e.Failure, PartsSent: e.PartsSent}
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
		s.giveBack(e, retryAt, max(e.PartsSent, delivery.PartsSent(err)))
		return
	}
	s.metrics.handoffs.WithLabelValues(outcomeLabel(outcome)).Inc()
	if outcome == store.Delivered {
		s.metrics.lateness.Observe(max(start.Sub(e.DueAt), 0).Seconds())
	}
	s.release(e, outcome)
}

// release ends the claim of a hand-off that is done: the entry leaves the wheel stage
// and gets its done marker. This replica knows the outcome, so a release that fails
// (Redis cut off for a moment) is tried again until it lands, with the claim held and
// its lease kept alive meanwhile: left to its lease, the alert would be sent again by
// the replica that takes it over. Only a stop past its deadline gives up.
func (s *Scheduler) release(e store.Entry, outcome store.Outcome) {
	var lost int
	err := s.retryStore(s.handoffCtx, "release", 0, func(ctx context.Context) error {
		var err error
		lost, err = s.store.Release(ctx, outcome, e.Claim())
		return err
	})
	s.unhold(e.ID)
	switch {
	case err != nil:
		// Stopping past the deadline, or a Redis error that is not an outage: the lease
		// will expire and the entry be claimed again; the done marker or the noted failure
		// decides then (see delivery).
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

// giveBack returns a claimed entry to the due index for retryAt, noting the parts of a
// split alert delivered so far, if this claim still holds it, and puts it back in the
// wheel. A give-back that fails because Redis cannot be reached is tried again while the
// claim is held (the lease keeper keeps it alive), so a short outage costs about its own
// length, not a lease.
func (s *Scheduler) giveBack(e store.Entry, retryAt time.Time, partsSent int) {
	var ok bool
	err := s.retryStore(s.handoffCtx, "give_back", 0, func(ctx context.Context) error {
		if !s.holds(e.ID) {
			return backoff.Permanent(errClaimGone)
		}
		var err error
		ok, err = s.store.GiveBack(ctx, e.Claim(), retryAt, partsSent)
		return err
	})
	s.unhold(e.ID)
	if err != nil {
		s.logger.Warn("give-back failed; the lease will expire and the sweeper retry", "rd_id", e.ID, "err", err)
		return
	}
	if ok && !s.stopping() {
		_ = s.wheel.Add(e.ID, retryAt)
	}
}

// errClaimGone ends the retries of a give-back whose claim the lease keeper found taken
// over.
var errClaimGone = errors.New("the claim was taken over meanwhile")
