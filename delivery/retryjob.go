package delivery

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strconv"
	"sync/atomic"
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
	// DefaultPurgeEvery is how often the job starts deleting the rows whose retention is
	// over.
	DefaultPurgeEvery = 10 * time.Minute
	// DefaultPurgePause is the wait between two passes of a purge that has rows left; a
	// round of retries runs after it, before the next pass.
	DefaultPurgePause = 250 * time.Millisecond
	// purgeCountLimit bounds the count of rows past their retention that tells a purge's
	// progress (store.FailedSends.PurgeBacklog): about a tenth of a second on a table of
	// millions.
	purgeCountLimit = 100_000
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
	// SendTimeout bounds one Send, the wait for a robot included.
	SendTimeout time.Duration
	// Retention and DeadRetention say which rows the job's purge deletes (config
	// failedSends.retention and failedSends.deadRetention; a zero DeadRetention keeps dead
	// rows).
	Retention, DeadRetention time.Duration
	// PurgeEvery is how often the job starts a purge. Default DefaultPurgeEvery.
	PurgeEvery time.Duration
	// PurgePass bounds the time one pass of a purge deletes for (store.PurgeOptions.Pass);
	// a purge with more to delete goes on, pass after pass, with a round of retries
	// between two passes, so a backlog of millions never stalls the retries. Default
	// store.DefaultPurgePass.
	PurgePass time.Duration
	// PurgePassRows, when above 0, bounds the rows one pass deletes as well.
	PurgePassRows int
	// PurgePause is the wait between two passes of a purge. Default DefaultPurgePause.
	PurgePause time.Duration
	// Replica is this replica's id (the scheduler's InstanceName), which starts the job's
	// claim tokens (Replica/n), so that a survivor releases the rows the job held once
	// this replica departed (TakeOver). Default: a name of the job's own (host name, pid
	// and a random suffix), whose rows only their lease frees.
	Replica string
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

		Retention:     c.Retention,
		DeadRetention: c.DeadRetention,
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
	config.Default(&o.Retention, config.DefaultFailedSendsRetention)
	config.Default(&o.PurgeEvery, DefaultPurgeEvery)
	config.Default(&o.PurgePass, store.DefaultPurgePass)
	config.Default(&o.PurgePause, DefaultPurgePause)
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
// one. The claims are fenced: each holds its rows by a token of its own with a lease on
// Postgres's clock, renewed while the batch is worked through and right before every
// request, and only the holder may settle a row, so two jobs never send the same row,
// whatever their clocks say or however long one of them was paused.
type RetryJob struct {
	store    *store.FailedSends
	claims   Claims
	d        *Deliverer // every attempt goes through its DeliverWithin
	opts     RetryOptions
	logger   *slog.Logger
	metrics  *Metrics
	now      func() time.Time
	instance string
	seq      atomic.Uint64
	kick     chan struct{} // TakeOver: run a round now
}

// NewRetryJob returns the retry job of the rows d records; every attempt goes through
// d.DeliverWithin, as a hand-off's does, and it reports to d's metrics and reads d's clock.
func NewRetryJob(d *Deliverer, opts RetryOptions) *RetryJob {
	instance := opts.Replica
	if instance == "" {
		instance = instanceName()
	}
	return &RetryJob{store: d.failed, claims: d.claims, d: d, opts: opts.withDefaults(),
		logger: d.logger.With("component", "failed-retry"), metrics: d.metrics, now: d.now, instance: instance,
		kick: make(chan struct{}, 1)}
}

// TakeOver releases the rows that the retry job of replica held (store.FailedSends.
// ReleaseReplica), once that replica departed (its liveness lapsed and its wheel-stage
// holdings were taken over, or it left), and has Run start a round at once, rather than
// leaving them to their lease and the next round. It returns how many rows it released.
func (j *RetryJob) TakeOver(ctx context.Context, replica string) (int, error) {
	n, err := j.store.ReleaseReplica(ctx, replica)
	if err != nil {
		return 0, fmt.Errorf("delivery: take over the failed sends of replica %s: %w", replica, err)
	}
	if n > 0 {
		select {
		case j.kick <- struct{}{}:
		default:
		}
	}
	return n, nil
}

// Run runs a round every Interval, the first at once, and one at once after a TakeOver
// released rows, until ctx ends; then it returns nil. Every PurgeEvery it starts a purge of the rows whose retention is over, a bounded
// pass after each round, and while the purge has rows left the next round comes after
// PurgePause: retries and passes take turns until a pass finds nothing left. Errors of a
// round (Postgres unavailable) are logged and the next round tries again; a purge that
// fails stops, and the next one starts PurgeEvery later.
func (j *RetryJob) Run(ctx context.Context) error {
	var lastPurge, lastMetrics time.Time // the first round refreshes the metrics and purges
	var purge *purging                   // the purge under way, if any
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		case <-j.kick:
			t.Stop()
		}
		if _, err := j.RunOnce(ctx); err != nil && ctx.Err() == nil {
			j.logger.Warn("retry round failed; trying again next round", "err", err, "next_in", j.opts.Interval.String())
		}
		if err := j.giveUpGone(ctx); err != nil && ctx.Err() == nil {
			j.logger.Warn("cannot check the failed sends of targets this replica does not have", "err", err)
		}
		if time.Since(lastMetrics) >= j.opts.Interval {
			lastMetrics = time.Now()
			if err := j.refreshMetrics(ctx); err != nil && ctx.Err() == nil {
				j.logger.Warn("cannot refresh the failed_sends metrics", "err", err)
			}
		}
		if purge == nil && time.Since(lastPurge) >= j.opts.PurgeEvery {
			lastPurge = time.Now()
			purge = &purging{}
		}
		next := j.opts.Interval
		if purge != nil {
			more, err := j.purgePass(ctx, purge)
			if err != nil && ctx.Err() == nil {
				j.logger.Warn("cannot purge failed_sends; trying again later", "err", err, "next_in", j.opts.PurgeEvery.String())
			}
			if more && err == nil {
				next = min(next, j.opts.PurgePause)
			} else {
				purge = nil
			}
		}
		t.Reset(next)
	}
}

// giveUpGone gives up the pending rows of targets no replica of the deployment has had
// for UnknownTargetWait (the job claims only rows of this replica's targets, and leaves
// the others to the replicas that have them): dead, saying so, for an operator to retry
// once a replica has the target again. Without the Deliverer's Roster it does nothing.
func (j *RetryJob) giveUpGone(ctx context.Context) error {
	roster := j.d.opts.Roster
	if roster == nil {
		return nil
	}
	targets, err := j.store.PendingElsewhere(ctx, j.d.senders.Targets())
	if err != nil {
		return err
	}
	for _, target := range targets {
		ago, known, err := roster.Known(ctx, target)
		if err != nil {
			return err
		}
		if known && ago <= j.d.opts.UnknownTargetWait {
			continue // a replica that has it retries them
		}
		n, err := j.store.GiveUpTarget(ctx, target, unknownTarget(target, ago, known, j.d.opts.UnknownTargetWait))
		if err != nil {
			return err
		}
		if n > 0 {
			j.metrics.gaveUp(n)
			j.logger.Warn("failed sends given up: no replica has their target", "target", target, "rows", n,
				"last_had_ago", ago.Round(time.Second).String(), "known", known)
		}
	}
	return nil
}

// purging is a purge under way: its passes so far, and what is known of the rows left.
type purging struct {
	passes int
	rows   int64 // deleted so far
	// left is how many rows past their retention are left, as last counted less what
	// was deleted since; a lower bound when atLeast (the count reached
	// purgeCountLimit). known is false until a count succeeded.
	left           int64
	known, atLeast bool
}

// purgePass runs one pass of purge p (store.FailedSends.Purge, bounded by PurgePass and
// PurgePassRows; one replica at a time), reports it to the metrics and the log, and says
// whether rows past their retention are left for another pass.
func (j *RetryJob) purgePass(ctx context.Context, p *purging) (more bool, err error) {
	opts := store.PurgeOptions{Retention: j.opts.Retention, DeadRetention: j.opts.DeadRetention,
		Pass: j.opts.PurgePass, PassRows: j.opts.PurgePassRows}
	if !p.known || (p.atLeast && p.left <= 0) {
		n, err := j.store.PurgeBacklog(ctx, opts, purgeCountLimit)
		if err != nil {
			return false, err
		}
		p.left, p.known, p.atLeast = n, true, n >= purgeCountLimit
	}
	pass, err := j.store.Purge(ctx, opts)
	if !pass.Ran {
		return false, err // another replica purges now
	}
	p.passes++
	p.rows += pass.Rows
	p.left = max(p.left-pass.Rows, 0)
	if pass.Done {
		p.left, p.atLeast = 0, false
	}
	bytes, serr := j.store.TableBytes(ctx)
	j.metrics.purgedRows(pass.Deleted, bytes, p.left)
	if pass.Rows > 0 {
		left := "rows_left"
		if p.atLeast {
			left = "rows_left_at_least"
		}
		j.logger.Info("failed_sends purge pass: rows past their retention deleted", "rows", pass.Rows, "by_status", pass.Deleted,
			"pass", p.passes, "rows_so_far", p.rows, left, p.left, "done", pass.Done, "table_bytes", bytes)
	}
	return !pass.Done, errors.Join(err, serr)
}

// Round counts what one round of the job did.
type Round struct {
	Delivered int // rows sent
	Retried   int // rows that failed and will be tried again
	Dead      int // rows given up
	Released  int // claimed rows handed back untried (shutdown)
	Lost      int // rows another instance took over (or discarded, or cancelled) before this one settled them
}

// outcome is how one try of a claimed row ended.
type outcome int

const (
	tryDelivered outcome = iota + 1
	tryRetried
	tryDead
	tryLost // another claim took the row over (or an operator discarded it, or its alert was cancelled)
	tryCut  // ctx ended first: the row is handed back
)

// RunOnce claims and tries due rows, batch after batch, until none is due; it returns
// early when ctx ends, handing unsent claimed rows back.
func (j *RetryJob) RunOnce(ctx context.Context) (Round, error) {
	var r Round
	for ctx.Err() == nil {
		token := j.instance + "/" + strconv.FormatUint(j.seq.Add(1), 36)
		rows, err := j.store.ClaimDue(ctx, j.opts.BatchSize, token, j.d.senders.Targets())
		if err != nil {
			return r, err
		}
		j.runBatch(ctx, rows, token, &r)
		if len(rows) < j.opts.BatchSize || ctx.Err() != nil {
			break
		}
	}
	return r, nil
}

// runBatch tries the rows one claim holds, keeping their leases alive meanwhile.
func (j *RetryJob) runBatch(ctx context.Context, rows []store.FailedSend, token string, r *Round) {
	if len(rows) == 0 {
		return
	}
	keepCtx, stopKeeper := context.WithCancel(ctx)
	keeperDone := make(chan struct{})
	go func() { defer close(keeperDone); j.keepLeases(keepCtx, rows, token) }()
	defer func() { stopKeeper(); <-keeperDone }()
	for i, row := range rows {
		if ctx.Err() != nil {
			j.release(ctx, rows[i:], token)
			r.Released += len(rows) - i
			return
		}
		switch j.try(ctx, row, token) {
		case tryDelivered:
			r.Delivered++
		case tryDead:
			r.Dead++
		case tryRetried:
			r.Retried++
		case tryLost:
			r.Lost++
		case tryCut:
			j.release(ctx, rows[i:], token)
			r.Released += len(rows) - i
			return
		}
	}
}

// keepLeases renews the leases of the batch's rows three times per lease until ctx
// ends, so rows waiting their turn (or for a robot) stay this claim's.
func (j *RetryJob) keepLeases(ctx context.Context, rows []store.FailedSend, token string) {
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	t := time.NewTicker(j.store.ClaimLease() / 3)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if _, err := j.store.ExtendClaims(ctx, ids, token); err != nil && ctx.Err() == nil {
			j.logger.Warn("cannot renew the leases of claimed rows; the confirm before each send still fences them", "rows", len(ids), "err", err)
		}
	}
}

// try sends one row held by token and settles the outcome.
func (j *RetryJob) try(ctx context.Context, row store.FailedSend, token string) outcome {
	log := j.logger.With("id", row.ID, "rd_id", row.MessageID, "target", row.Target)
	settle := func(write func(context.Context) error) error { return j.settle(ctx, write) }
	// Delivered already, by a hand-off of the same alert or by an earlier attempt whose
	// MarkDelivered failed? The done marker says so: mark the row, do not send it again.
	switch delivered, err := j.claims.IsDelivered(ctx, row.MessageID); {
	case err != nil:
		log.Warn("cannot read the alert's done marker; trying the row later", "err", err)
		return tryCut
	case delivered:
		if err := settle(func(ctx context.Context) error { return j.store.MarkDelivered(ctx, row.ID) }); err != nil {
			log.Error("cannot mark a row delivered that was delivered already", "err", err)
		} else {
			log.Info("failed send was delivered already; marked delivered without sending it again")
		}
		return tryDelivered
	}
	claim := &rowClaim{j: j, row: row, token: token, log: log}
	a := sender.Alert{ID: row.MessageID, Target: row.Target, Body: row.Payload, Props: row.Properties,
		PartsSent: row.PartsSent, Claim: claim}
	// A stop (ctx ends) cuts the attempt while it waits (for a robot, a backoff), and the
	// row is handed back; once a confirm landed, a request may be on the wire, and it goes
	// on to its answer (within SendTimeout), as a hand-off's does: cut, the platform may
	// have taken it, and the replica that takes the row would send it again.
	sendCtx, cut := context.WithCancel(context.WithoutCancel(ctx))
	defer cut()
	defer context.AfterFunc(ctx, func() {
		if !claim.confirmed.Load() {
			cut()
		}
	})()
	receipt, err := j.d.DeliverWithin(sendCtx, a, j.opts.SendTimeout)
	switch {
	case claim.outcome != 0:
		return claim.outcome // recorded by the claim: retried, dead, or taken over meanwhile
	case errors.Is(err, store.ErrNotHeld):
		log.Warn("row taken over by another instance (or discarded, or its alert cancelled); its outcome is that instance's")
		return tryLost
	case errors.Is(err, store.ErrUnavailable) && ctx.Err() == nil:
		return claim.retrySoon(ctx, err)
	case err != nil:
		if ctx.Err() == nil && !errors.Is(err, sender.ErrStopping) {
			log.Warn("row not delivered now (the escalation's gate, or the store, could not answer); trying it later", "err", err)
		}
		return tryCut
	}
	switch receipt.Outcome {
	case store.Delivered:
		return j.delivered(ctx, row, log)
	case store.Withheld:
		// A step of an escalation that ended: it is withheld for good, its row cancelled.
		note := store.CancelNote{By: "escalation", Reason: "a step of an escalation episode that ended before it was sent"}
		if _, err := j.store.Cancel(ctx, row.MessageID, note); err != nil {
			log.Warn("cannot cancel the row of a withheld escalation step; trying later", "err", err)
			return tryCut
		}
		log.Info("failed escalation step withheld: its episode ended; its row is cancelled")
		return tryLost
	}
	return tryRetried // Recorded: the row claim records every failure and set its outcome above; unreachable
}

// delivered notes row's alert delivered by this attempt: the done marker first (if the
// row cannot be marked, the next attempt sees it), then the row. It is written even if
// ctx ends now: the send has happened.
func (j *RetryJob) delivered(ctx context.Context, row store.FailedSend, log *slog.Logger) outcome {
	j.metrics.attempted()
	j.metrics.delivered()
	if err := j.settle(ctx, func(ctx context.Context) error { return j.claims.MarkDelivered(ctx, row.MessageID) }); err != nil {
		log.Warn("delivered, but cannot leave the done marker", "err", err)
	}
	if err := j.settle(ctx, func(ctx context.Context) error { return j.store.MarkDelivered(ctx, row.ID) }); err != nil {
		log.Error("delivered, but cannot mark the row delivered; the next attempt finds the done marker", "err", err)
	} else {
		log.Info("failed send delivered on retry", "attempts", row.Attempts+1)
	}
	return tryDelivered
}

// settle writes the outcome of an attempt on a claimed row. Until it is written the row
// stays hidden behind its claim, so when Redis or Postgres cannot be reached (a restart,
// a failover) settle tries again, with backoff, for up to one claim lease, rather than
// leave the row waiting out the whole lease. It stops on an error other than
// ErrUnavailable. It runs on for a while when ctx ends: the attempt has happened.
func (j *RetryJob) settle(ctx context.Context, write func(context.Context) error) error {
	try := func() (struct{}, error) {
		wctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
		defer cancel()
		err := write(wctx)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}
	// Once ctx ends (the service stops) it keeps trying for settleTimeout more, no longer:
	// a stop is bounded, and the claim's lease hands the row on.
	sctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	defer cancel()
	defer context.AfterFunc(ctx, func() { time.AfterFunc(settleTimeout, cancel) })()
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 100*time.Millisecond, 5*time.Second
	_, err := backoff.Retry(sctx, try, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(j.store.ClaimLease()))
	return err
}

func (j *RetryJob) release(ctx context.Context, rows []store.FailedSend, token string) {
	if len(rows) == 0 {
		return
	}
	ids := make([]int64, len(rows))
	for i, r := range rows {
		ids[i] = r.ID
	}
	rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), settleTimeout)
	defer cancel()
	if err := j.store.Release(rctx, ids, token); err != nil {
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
// err is not a *sender.Failure), a bounded readable message, the platform's answer, and the
// parts of a split alert delivered so far (sent before the attempt, or by it).
func attemptOf(err error, sent int) store.FailedAttempt {
	a := store.FailedAttempt{Class: string(sender.ClassTransient), LastError: truncate(err.Error(), maxLastError), PartsSent: sent}
	var f *sender.Failure
	if errors.As(err, &f) {
		if f.Class != "" {
			a.Class = string(f.Class)
		}
		a.HTTPStatus, a.Errcode = nonZero(f.HTTPStatus), nonZero(f.Code)
		a.PartsSent = max(sent, f.PartsSent())
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

// instanceName tells this process's retry-job claims apart from other replicas': the
// host name, the pid and a random suffix.
func instanceName() string {
	host, _ := os.Hostname()
	var b [4]byte
	_, _ = rand.Read(b[:])
	return fmt.Sprintf("%s-%d-%x", host, os.Getpid(), b)
}
