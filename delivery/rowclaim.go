package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// rowClaim is the retry job's claim on a failed_sends row while the row's alert goes
// through Deliverer.DeliverWithin, the path every attempt takes: the row's claim token is
// confirmed before every request (store.FailedSends.Confirm), the alert is never parked,
// and a final failure is recorded on the row itself (RecordFailure): another retry after
// a backoff, or dead.
type rowClaim struct {
	j     *RetryJob
	row   store.FailedSend
	token string
	log   *slog.Logger
	// outcome is what RecordFailure did: tryRetried, tryDead or tryLost.
	outcome outcome
	// confirmed is set once a confirm landed: a request of the row's alert may be on
	// the wire from then on, and a stop lets it go on to its answer (RetryJob.try).
	confirmed atomic.Bool
}

// Confirm checks that the row is still this claim's and notes the parts of a split alert
// delivered so far.
func (c *rowClaim) Confirm(ctx context.Context, partsSent int) error {
	err := c.j.store.Confirm(ctx, c.row.ID, c.token, partsSent)
	if err == nil {
		c.confirmed.Store(true)
	}
	return err
}

// Park returns sender.ErrNoPark: a row's alert waits in this replica's queue.
func (*rowClaim) Park(context.Context, string) error { return sender.ErrNoPark }

// MarkFailed does nothing: the row is the failure's record (RecordFailure).
func (*rowClaim) MarkFailed(context.Context, []byte) error { return nil }

// RecordFailure marks the row after a failed attempt: dead when the failure is
// permanent, the row has had its attempts, or it is older than the job's MaxAge; else
// due again after its backoff (the failure's Retry-After, when longer). It is written
// even if ctx ends now: the attempt has happened.
func (c *rowClaim) RecordFailure(ctx context.Context, f *sender.Failure) (store.Receipt, error) {
	j, row := c.j, c.row
	j.metrics.attempted()
	a := attemptOf(f, row.PartsSent)
	attempts := row.Attempts + 1
	var reason string
	switch {
	case permanent(f):
		reason = "permanent failure"
	case attempts >= j.opts.MaxAttempts:
		reason = fmt.Sprintf("%d attempts", attempts)
	case j.now().Sub(row.CreatedAt) >= j.opts.MaxAge:
		reason = fmt.Sprintf("older than %s", j.opts.MaxAge)
	}
	if reason != "" {
		err := j.settle(ctx, func(ctx context.Context) error { return j.store.MarkDead(ctx, row.ID, c.token, attempts, a) })
		switch {
		case errors.Is(err, store.ErrNotHeld):
			return c.lost(a.Class)
		case err != nil:
			c.log.Error("cannot mark the row dead", "err", err)
		default:
			j.metrics.dead(a.Class)
			c.log.Warn("failed send is dead: no more retries", "reason", reason, "attempts", attempts,
				"class", a.Class, "err", a.LastError)
		}
		c.outcome = tryDead
		return store.Receipt{Outcome: store.Recorded}, nil
	}
	wait := Backoff(attempts, j.opts.BackoffBase, j.opts.BackoffCap)
	if f.RetryAfter > wait {
		wait = f.RetryAfter // e.g. every robot's circuit breaker is open for a while
	}
	err := j.settle(ctx, func(ctx context.Context) error { return j.store.MarkRetry(ctx, row.ID, c.token, attempts, wait, a) })
	switch {
	case errors.Is(err, store.ErrNotHeld):
		return c.lost(a.Class)
	case err != nil:
		c.log.Error("cannot record the failed retry; the row is tried again when its claim lease ends", "err", err)
	default:
		c.log.Info("retry failed; trying again later", "attempts", attempts, "next_in", wait.String(),
			"class", a.Class, "err", a.LastError)
	}
	c.outcome = tryRetried
	return store.Receipt{Outcome: store.Recorded}, nil
}

// lost is RecordFailure's answer when another claim took the row over (or an operator
// discarded it) during the attempt: its outcome is that claim's.
func (c *rowClaim) lost(class string) (store.Receipt, error) {
	c.log.Warn("row taken over by another instance (or discarded) during its send; its outcome is that instance's", "class", class)
	c.outcome = tryLost
	return store.Receipt{}, store.ErrNotHeld
}

// retrySoon hands the row back after Redis or Postgres failed the robot pick or the
// confirm: the platform was not asked, so it is no attempt. It keeps what was delivered
// of a split alert, and the row is due again at once.
func (c *rowClaim) retrySoon(ctx context.Context, cause error) outcome {
	a := attemptOf(cause, c.row.PartsSent)
	err := c.j.settle(ctx, func(ctx context.Context) error {
		return c.j.store.MarkRetry(ctx, c.row.ID, c.token, c.row.Attempts, 0, a)
	})
	switch {
	case errors.Is(err, store.ErrNotHeld):
		return tryLost
	case err != nil:
		c.log.Warn("cannot hand the row back after a store outage; it is tried again when its lease ends", "err", err)
	}
	return tryRetried
}
