package delivery

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"time"
	"unicode/utf8"

	"github.com/cenkalti/backoff/v5"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// Defaults of RetryOptions that config does not set.
const (
	// DefaultRetrySendTimeout bounds one send of the retry job.
	DefaultRetrySendTimeout = time.Minute
	// maxLastError bounds the error text stored with a row.
	maxLastError = 2000
	// settleTimeout bounds one write of an attempt's outcome.
	settleTimeout = 10 * time.Second
)

// RetryOptions tune a Job. A zero field takes its default (config's defaults, and
// DefaultRetrySendTimeout).
type RetryOptions struct {
	// Interval is the time between two rounds of the job.
	Interval time.Duration
	// MaxAttempts is how many attempts a row gets before it is dead.
	MaxAttempts int
	// MaxAge is how long after it was recorded a row may still be retried.
	MaxAge time.Duration
	// BackoffBase is the wait after the first failed attempt; it doubles per attempt.
	BackoffBase time.Duration
	// BackoffCap caps the wait.
	BackoffCap time.Duration
	// BatchSize is how many rows one claim takes.
	BatchSize int
	// SendTimeout bounds one Send. It must be well below the store's claim lease: the
	// job starts no send once less than SendTimeout of the lease is left, and hands the
	// rest of the batch back.
	SendTimeout time.Duration
}

// RetryOptionsFromConfig returns the retry job's options from the config's failedSends
// section.
func RetryOptionsFromConfig(c config.FailedSends) RetryOptions {
	return RetryOptions{
		Interval:    c.Interval,
		MaxAttempts: c.MaxAttempts,
		MaxAge:      c.MaxAge,
		BackoffBase: c.BackoffBase,
		BackoffCap:  c.BackoffCap,
		BatchSize:   c.BatchSize,
	}
}

func (o RetryOptions) withDefaults() RetryOptions {
	config.Default(&o.Interval, config.DefaultFailedSendsInterval)
	config.Default(&o.MaxAttempts, config.DefaultFailedSendsMaxAttempts)
	config.Default(&o.MaxAge, config.DefaultFailedSendsMaxAge)
	config.Default(&o.BackoffBase, config.DefaultFailedSendsBackoffBase)
	config.Default(&o.BackoffCap, config.DefaultFailedSendsBackoffCap)
	config.Default(&o.BatchSize, config.DefaultFailedSendsBatchSize)
	config.Default(&o.SendTimeout, DefaultRetrySendTimeout)
	return o
}

// Backoff is the wait after the attempt-th failed attempt (1-based): base, 2·base,
// 4·base, …, never more than ceiling.
func Backoff(attempt int, base, ceiling time.Duration) time.Duration {
	if attempt < 1 {
		attempt = 1
	}
	d := base
	for i := 1; i < attempt; i++ {
		if d >= ceiling/2 {
			return ceiling
		}
		d *= 2
	}
	return min(d, ceiling)
}

// RetryJob is the retry job: every Interval it claims the due pending rows of
// failed_sends, in batches, and sends each through the Deliverer's sender; a row is
// marked delivered, retried later with exponential backoff, or dead. Every replica runs
// one; the store's claims make sure two jobs never send the same row at the same time.
type RetryJob struct {
	store   *store.FailedSends
	claims  Claims
	sender  Sender
	opts    RetryOptions
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// NewRetryJob returns the retry job of the rows d records; it sends through d's sender,
// reports to d's metrics and reads d's clock.
func NewRetryJob(d *Deliverer, opts RetryOptions) *RetryJob {
	return &RetryJob{store: d.failed, claims: d.claims, sender: d.sender, opts: opts.withDefaults(),
		logger: d.logger.With("component", "failed-retry"), metrics: d.metrics, now: d.now}
}

// Run runs a round every Interval, the first at once, until ctx ends; then it returns
// nil. Errors of a round (Postgres unavailable) are logged and the next round tries
// again.
func (j *RetryJob) Run(ctx context.Context) error {
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		if _, err := j.RunOnce(ctx); err != nil && ctx.Err() == nil {
			j.logger.Warn("retry round failed; trying again next round", "err", err, "next_in", j.opts.Interval.String())
		}
		if err := j.refreshMetrics(ctx); err != nil && ctx.Err() == nil {
			j.logger.Warn("cannot refresh the failed_sends metrics", "err", err)
		}
		t.Reset(j.opts.Interval)
	}
}

// Round counts what one round of the job did.
type Round struct {
	Delivered int // rows sent
	Retried   int // rows that failed and will be tried again
	Dead      int // rows given up
	Released  int // claimed rows handed back untried (shutdown, lease running out)
}

// RunOnce claims and tries due rows, batch after batch, until none is due; it returns
// early when ctx ends, handing unsent claimed rows back.
func (j *RetryJob) RunOnce(ctx context.Context) (Round, error) {
	var r Round
	for ctx.Err() == nil {
		claimedAt := j.now()
		rows, err := j.store.ClaimDue(ctx, j.opts.BatchSize, claimedAt)
		if err != nil {
			return r, err
		}
		leaseEnd := claimedAt.Add(j.store.ClaimLease())
		stopAt := leaseEnd.Add(-j.opts.SendTimeout)
		for i, row := range rows {
			if ctx.Err() != nil || !j.now().Before(stopAt) {
				j.release(ctx, rows[i:])
				r.Released += len(rows) - i
				return r, nil
			}
			switch j.try(ctx, row, leaseEnd) {
			case store.StatusDelivered:
				r.Delivered++
			case store.StatusDead:
				r.Dead++
			case store.StatusPending:
				r.Retried++
			default: // the attempt was cut short by ctx
				j.release(ctx, rows[i:])
				r.Released += len(rows) - i
				return r, nil
			}
		}
		if len(rows) < j.opts.BatchSize {
			break
		}
	}
	return r, nil
}

// try sends one claimed row, whose claim lease ends at leaseEnd, and records the
// outcome; it returns the row's new status, or "" when ctx ended during the send (the
// row is then released, not counted).
func (j *RetryJob) try(ctx context.Context, row store.FailedSend, leaseEnd time.Time) store.FailedStatus {
	log := j.logger.With("id", row.ID, "rd_id", row.MessageID, "target", row.Target)
	settle := func(write func(context.Context) error) error { return j.settle(ctx, leaseEnd, write) }
	// Delivered already, by a hand-off of the same alert or by an earlier attempt whose
	// MarkDelivered failed? The done marker says so: mark the row, do not send it again.
	switch delivered, err := j.claims.IsDelivered(ctx, row.MessageID); {
	case err != nil:
		log.Warn("cannot read the alert's done marker; trying the row later", "err", err)
		return ""
	case delivered:
		if err := settle(func(ctx context.Context) error { return j.store.MarkDelivered(ctx, row.ID) }); err != nil {
			log.Error("cannot mark a row delivered that was delivered already", "err", err)
		} else {
			log.Info("failed send was delivered already; marked delivered without sending it again")
		}
		return store.StatusDelivered
	}
	sendCtx, cancel := context.WithTimeout(ctx, j.opts.SendTimeout)
	err := j.sender.SendAlert(sendCtx, sender.Alert{Target: row.Target, Body: row.Payload, FromPart: row.PartsSent + 1})
	cancel()
	if err != nil && ctx.Err() != nil {
		return ""
	}
	j.metrics.attempted()
	// The outcome is recorded even if ctx ends now: the send has happened.
	if err == nil {
		j.metrics.delivered()
		// The done marker first: if the row cannot be marked, the next attempt sees it.
		if err := settle(func(ctx context.Context) error { return j.claims.MarkDelivered(ctx, row.MessageID) }); err != nil {
			log.Warn("delivered, but cannot leave the done marker", "err", err)
		}
		if err := settle(func(ctx context.Context) error { return j.store.MarkDelivered(ctx, row.ID) }); err != nil {
			log.Error("delivered, but cannot mark the row delivered; the next attempt finds the done marker", "err", err)
		} else {
			log.Info("failed send delivered on retry", "attempts", row.Attempts+1)
		}
		return store.StatusDelivered
	}

	attempts := row.Attempts + 1
	f := attemptOf(err, row.PartsSent)
	now := j.now()
	var reason string
	switch {
	case permanent(err):
		reason = "permanent failure"
	case attempts >= j.opts.MaxAttempts:
		reason = fmt.Sprintf("%d attempts", attempts)
	case now.Sub(row.CreatedAt) >= j.opts.MaxAge:
		reason = fmt.Sprintf("older than %s", j.opts.MaxAge)
	}
	if reason != "" {
		j.metrics.dead(f.Class)
		if err := settle(func(ctx context.Context) error { return j.store.MarkDead(ctx, row.ID, attempts, f) }); err != nil {
			log.Error("cannot mark the row dead", "err", err)
		} else {
			log.Warn("failed send is dead: no more retries", "reason", reason, "attempts", attempts,
				"class", f.Class, "err", f.LastError)
		}
		return store.StatusDead
	}
	wait := Backoff(attempts, j.opts.BackoffBase, j.opts.BackoffCap)
	if sf := (*sender.Failure)(nil); errors.As(err, &sf) && sf.RetryAfter > wait {
		wait = sf.RetryAfter // e.g. every robot's circuit breaker is open for a while
	}
	next := now.Add(wait)
	if err := settle(func(ctx context.Context) error { return j.store.MarkRetry(ctx, row.ID, attempts, next, f) }); err != nil {
		log.Error("cannot record the failed retry; the row is tried again when its claim lease ends",
			"lease_end", leaseEnd.UTC().Format(time.RFC3339), "err", err)
	} else {
		log.Info("retry failed; trying again later", "attempts", attempts, "next_attempt_at", next,
			"class", f.Class, "err", f.LastError)
	}
	return store.StatusPending
}

// settle writes the outcome of an attempt on a claimed row. Until it is written the row
// stays hidden behind its claim, so when Redis or Postgres cannot be reached (a restart,
// a failover) settle tries again, with backoff, until the claim lease ends at leaseEnd,
// rather than leave the row waiting out the whole lease. It stops early when ctx ends
// (after one try: the attempt has happened) or on an error other than ErrUnavailable.
func (j *RetryJob) settle(ctx context.Context, leaseEnd time.Time, write func(context.Context) error) error {
	try := func() (struct{}, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		err := write(wctx)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 5*time.Second
	_, err := backoff.Retry(ctx, try, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(max(leaseEnd.Sub(j.now()), time.Nanosecond)))
	return err
}

func (j *RetryJob) release(ctx context.Context, rows []store.FailedSend) {
	if len(rows) == 0 || rows[0].NextAttemptAt == nil {
		return
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := j.store.Release(rctx, ids, *rows[0].NextAttemptAt, j.now()); err != nil {
		j.logger.Warn("cannot hand claimed rows back; they are retried when their claim lease ends", "rows", len(ids), "err", err)
	}
}

func (j *RetryJob) refreshMetrics(ctx context.Context) error {
	if j.metrics == nil {
		return nil
	}
	st, err := j.store.Stats(ctx)
	if err != nil {
		return err
	}
	j.metrics.observe(st, j.now())
	return nil
}

// permanent reports whether trying err's send again cannot succeed.
func permanent(err error) bool {
	var f *sender.Failure
	return errors.As(err, &f) && !f.Class.Retryable()
}

// attemptOf describes a failed attempt for its row: the failure's class (transient when
// err is not a *sender.Failure), a bounded readable message, DingTalk's answer, and the
// parts of a split alert delivered so far (sent before the attempt, or by it).
func attemptOf(err error, sent int) store.FailedAttempt {
	a := store.FailedAttempt{Class: string(sender.ClassTransient), LastError: truncate(err.Error(), maxLastError), PartsSent: sent}
	var f *sender.Failure
	if errors.As(err, &f) {
		if f.Class != "" {
			a.Class = string(f.Class)
		}
		a.HTTPStatus, a.Errcode = nonZero(f.HTTPStatus), nonZero(f.Errcode)
		a.PartsSent = max(sent, partsSent(f))
	}
	return a
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut with "…".
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n - len("…")
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut] + "…"
}
