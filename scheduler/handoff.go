package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// handoffPool hands claimed entries to the Delivery: the work queue the fire loop and
// the sweeper fill, each target's share of the workers (gate.go), and the workers that
// hand each entry off and end its claim. What it holds stays this replica's for as long
// as the replica's liveness lasts (heartbeat.go): a backlog waiting for the sender never
// loses its claims to another replica's sweeper, whatever the lease.
type handoffPool struct {
	opts     Options
	store    WheelStage
	delivery Delivery
	logger   *slog.Logger
	metrics  *Metrics
	now      func() time.Time
	wheel    *timewheel.Wheel // given-back entries go back into it
	heart    *heartbeat       // beats when a claim found this replica lapsed

	work    chan store.Entry
	quit    chan struct{} // closed by drop: the workers drop what is queued, then end
	gate    *targetGate
	workers sync.WaitGroup
	running handing // the ids whose hand-offs run
	// ctx is every hand-off's and every retried write's; wait cancels it at its deadline.
	ctx      context.Context
	cancel   context.CancelFunc
	stopping atomic.Bool // set by drop: what is not handed off yet is dropped, to be handed back
	adopting adoptions   // hand-offs of alerts adopted from a park (share.go)
	releases *releaser   // ends the claims of finished hand-offs, many at once (release.go)
}

func newHandoffPool(opts Options, ws WheelStage, d Delivery, logger *slog.Logger, m *Metrics, now func() time.Time,
	wheel *timewheel.Wheel, heart *heartbeat) *handoffPool {
	p := &handoffPool{opts: opts, store: ws, delivery: d, logger: logger, metrics: m, now: now, wheel: wheel, heart: heart,
		work: make(chan store.Entry, opts.ClaimBatch), quit: make(chan struct{}), gate: newTargetGate(opts.HandoffsPerTarget),
		running: handing{ids: map[string]int{}}}
	p.ctx, p.cancel = context.WithCancel(context.Background())
	p.releases = newReleaser(p.ctx, ws, m)
	return p
}

// start runs the workers.
func (p *handoffPool) start() {
	for range p.opts.HandoffWorkers {
		p.workers.Add(1)
		go p.worker()
	}
}

// claim runs a claim, and runs it again with the same token while Redis cannot be
// reached: the claim may have landed with its reply lost, and a repeat returns what it
// took, so the entries are not left held by a claim nobody knows of. A claim refused
// because this replica had lapsed beats and claims again. It gives up after one lease,
// or when ctx ends.
func (p *handoffPool) claim(ctx context.Context, op string, claim func(context.Context) (store.Claimed, error)) (store.Claimed, error) {
	var c store.Claimed
	err := retryStore(ctx, p.metrics, op, p.store.Lease(), func(ctx context.Context) error {
		var err error
		c, err = p.heart.claimLive(ctx, claim)
		return err
	})
	return c, err
}

// claimKnown runs claim, one token's, until its outcome is known. A claim that failed
// with the store unavailable may still have run (its reply was lost, or Redis answered
// but the write fell short of redis.durability) and left entries in flight under the
// token: while this replica is live no other replica takes them over, and a claim of a
// new token does not return them, so they would wait until the replica stops. The same
// token run again returns them (the claim scripts return what the token holds), so it
// is repeated, failed told of each failure, until it succeeds, fails in a way that says
// it did not run, or ctx ends (the replica stops and hands back all it holds).
func (p *handoffPool) claimKnown(ctx context.Context, op string, claim func(context.Context) (store.Claimed, error), failed func(error)) (store.Claimed, error) {
	for {
		c, err := p.claim(ctx, op, claim)
		if err == nil || !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return c, err
		}
		failed(err)
		select {
		case <-ctx.Done():
			return c, ctx.Err()
		case <-time.After(claimAgainAfter):
		}
	}
}

// claimAgainAfter is the pause between two rounds of claimKnown (each round retries for
// a lease).
const claimAgainAfter = time.Second

// drop begins the stop, once nothing is claimed any more: the workers drop what is
// queued, and the Delivery ends the hand-offs that wait to be sent, which are dropped
// too. The replica hands all of it back at once (Scheduler.Stop), rather than one
// give-back per entry. It returns once the hand-offs it ended are over, or after
// settleWait.
func (p *handoffPool) drop() {
	p.stopping.Store(true)
	close(p.quit)
	p.delivery.Stop()
	p.running.settle(settleWait)
}

// settleWait bounds how long drop waits for the hand-offs the Delivery ended to return.
const settleWait = 200 * time.Millisecond

// handingOff lists the ids whose hand-offs still run.
func (p *handoffPool) handingOff() []string { return p.running.list() }

// wait waits for the hand-offs still running (requests on the wire) until ctx ends,
// then cancels them and waits a little more.
func (p *handoffPool) wait(ctx context.Context) {
	done := make(chan struct{})
	go func() { p.workers.Wait(); p.adopting.running.Wait(); p.releases.wait(); close(done) }()
	select {
	case <-done:
	case <-ctx.Done():
		p.logger.Warn("stop: hand-offs still running at the deadline; cancelling them")
		p.cancel()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			p.logger.Error("stop: a hand-off ignores cancellation; leaving it to the other replicas once this one's liveness lapses")
		}
	}
	p.cancel()
}

// enqueue hands claimed entries to the workers; when ctx ends (stopping), it drops the
// rest: the replica hands them back as it stops.
func (p *handoffPool) enqueue(ctx context.Context, entries []store.Entry) {
	for i, e := range entries {
		select {
		case p.work <- e:
		case <-ctx.Done():
			p.metrics.handoffs.WithLabelValues("stopping").Add(float64(len(entries) - i))
			return
		}
	}
}

// worker hands off what the queue holds, within each target's share of the workers
// (see targetGate): after a hand-off it takes the next entry its target queued, if any.
// Once stop began it drops what it takes, and ends when the queue is empty.
func (p *handoffPool) worker() {
	defer p.workers.Done()
	for {
		select {
		case e := <-p.work:
			p.handle(e)
		case <-p.quit:
			for {
				select {
				case e := <-p.work:
					p.handle(e)
				default:
					return
				}
			}
		}
	}
}

// handle hands off e, and then what its target queued behind it, or drops them when
// stopping.
func (p *handoffPool) handle(e store.Entry) {
	if !p.gate.enter(e) {
		return // queued behind its target's hand-offs in flight
	}
	for ok := true; ok; e, ok = p.gate.leave(e.Target) {
		if p.stopping.Load() {
			p.metrics.handoffs.WithLabelValues("stopping").Inc()
			continue
		}
		p.deliver(e, false)
	}
}

// deliver hands one claimed entry to the Delivery and ends its claim: released when the
// Delivery is done with it, given back (to be tried again after a backoff) when not,
// dropped when the claim was lost on the way (another replica has the entry), or when
// the replica is stopping (it hands the entry back with everything else).
func (p *handoffPool) deliver(e store.Entry, adopted bool) {
	p.running.add(e.ID)
	defer p.running.remove(e.ID)
	if early := e.DueAt.Sub(p.now()); early > 0 {
		// Not due yet by the reference clock as this replica knows it (the claim itself
		// judged by Redis's): the offset moved since. Never early by either.
		p.metrics.handoffs.WithLabelValues("not_due").Inc()
		p.logger.Debug("claimed alert not due yet by this replica's reference clock; given back until it is",
			"rd_id", e.ID, "early", early.String())
		p.giveBack(e, e.DueAt, e.PartsSent)
		return
	}
	// The release's slot first: what is sent and not released yet stays bounded
	// (release.go), a kill leaving at most that many to be sent again.
	if err := p.releases.reserve(); err != nil {
		p.metrics.handoffs.WithLabelValues("stopping").Inc()
		return
	}
	a := alertOf(e)
	a.Claim, a.Adopted = heldEntry{p: p, e: e}, adopted
	start := p.now()
	receipt, err := p.delivery.Deliver(p.ctx, a)
	if err != nil {
		p.releases.unreserve() // nothing to release: the slot goes back
	}
	switch {
	case errors.Is(err, delivery.ErrParked):
		p.metrics.handoffs.WithLabelValues("parked").Inc()
		return
	case errors.Is(err, store.ErrNotHeld):
		p.metrics.handoffs.WithLabelValues("claim_lost").Inc()
		p.metrics.claimsLost.Inc()
		p.logger.Warn("claim lost during the hand-off (this replica was paused or cut off from Redis "+
			"longer than its liveness); the replica that holds it now delivers it", "rd_id", e.ID)
		return
	case err != nil && p.stopping.Load():
		p.metrics.handoffs.WithLabelValues("stopping").Inc()
		return
	case err != nil:
		p.metrics.handoffs.WithLabelValues("error").Inc()
		retryAt := p.now().Add(p.opts.retryDelay(e.Tries))
		if errors.Is(err, store.ErrUnavailable) {
			// Redis or Postgres was cut off (the robot pick, the confirm, the record): the
			// alert itself is fine, so it does not back off as a failing one does; the
			// give-back lands once the store is back, and the alert goes a moment later.
			retryAt = p.now().Add(p.opts.RetryDelay)
		}
		p.logger.Warn("hand-off failed; will retry", "rd_id", e.ID, "tries", e.Tries+1,
			"retry_at", retryAt.UTC().Format(time.RFC3339Nano), "err", err)
		p.giveBack(e, retryAt, max(e.PartsSent, delivery.PartsSent(err)))
		return
	}
	p.metrics.handoffs.WithLabelValues(outcomeLabel(receipt.Outcome)).Inc()
	if receipt.Outcome == store.Delivered {
		p.metrics.lateness.Observe(max(start.Sub(e.DueAt), 0).Seconds())
	}
	receipt.Replica = p.opts.InstanceName
	p.release(e, receipt) // in the slot reserved
}

func outcomeLabel(o store.Outcome) string {
	if o == store.Recorded {
		return "recorded"
	}
	return "ok"
}

// release ends the claim of a hand-off that is done, in the slot the hand-off reserved
// (release.go): the entry leaves the wheel stage and gets its done marker, and its trace
// the receipt. It queues the release and returns; the alert counts as being handed off (running) until the
// release has landed or failed, so a stop keeps it (Scheduler.Stop). This replica knows
// the outcome, so a release that fails (Redis cut off for a moment) is tried again until
// it lands, the claim held meanwhile (this replica is live): taken over, the alert would
// be sent again. Only a stop past its deadline gives up.
func (p *handoffPool) release(e store.Entry, receipt store.Receipt) {
	p.running.add(e.ID) // this replica's until its release lands
	p.releases.release(store.Released{Claim: e.Claim(), Receipt: receipt, Target: e.Target, DueAt: e.DueAt}, func(lost bool, err error) {
		defer p.running.remove(e.ID)
		switch {
		case err != nil:
			// Stopping past the deadline, or a Redis error that is not an outage: the entry
			// is claimed again once this replica is gone (or its lease runs out); the done
			// marker or the noted failure decides then (see delivery).
			p.logger.Error("release after hand-off failed; the alert may be handed off again", "rd_id", e.ID, "err", err)
		case lost:
			p.logger.Warn("released an alert whose claim had run out; it is done, and the replica that took it over will not send it",
				"rd_id", e.ID)
		}
	})
}

// giveBack returns a claimed entry to the due index for retryAt, noting the parts of a
// split alert delivered so far, if this claim still holds it, and puts it back in the
// wheel. A give-back that fails because Redis cannot be reached is tried again while the
// claim is held (this replica is live), so a short outage costs about its own length.
func (p *handoffPool) giveBack(e store.Entry, retryAt time.Time, partsSent int) {
	var ok bool
	err := retryStore(p.ctx, p.metrics, "give_back", 0, func(ctx context.Context) error {
		var err error
		ok, err = p.store.GiveBack(ctx, e.Claim(), retryAt, partsSent)
		return err
	})
	if err != nil {
		p.logger.Warn("give-back failed; the entry is claimed again once this replica is gone, or its lease runs out",
			"rd_id", e.ID, "err", err)
		return
	}
	if ok && !p.stopping.Load() {
		_ = p.wheel.Add(e.ID, p.opts.fireAt(retryAt))
	}
}

// undone is entries but those whose done marker is left: taken over from a replica that
// delivered them and left their markers ahead of their releases (release.go), they are
// released, not sent again. When the markers cannot be read within a lease, all of
// entries are handed off.
func (p *handoffPool) undone(ctx context.Context, entries []store.Entry) []store.Entry {
	if len(entries) == 0 {
		return entries
	}
	ids := make([]string, len(entries))
	for i, e := range entries {
		ids[i] = e.ID
	}
	var done []store.Outcome
	err := retryStore(ctx, p.metrics, "sweep", p.store.Lease(), func(ctx context.Context) error {
		var err error
		done, err = p.store.Done(ctx, ids)
		return err
	})
	if err != nil {
		p.logger.Warn("cannot read the done markers of the entries swept; handing them all off", "entries", len(entries), "err", err)
		return entries
	}
	var out []store.Entry
	for i, e := range entries {
		if done[i] == 0 {
			out = append(out, e)
			continue
		}
		p.metrics.handoffs.WithLabelValues("done").Inc()
		p.logger.Info("swept an alert whose done marker is left (the replica that held it handed it off); released, not sent again",
			"rd_id", e.ID)
		if p.releases.reserve() == nil { // else past the stop's deadline: claimed again once this replica is gone
			p.release(e, store.Receipt{Outcome: done[i], Replica: p.opts.InstanceName})
		}
	}
	return out
}

// quarantine records claimed entries whose record cannot be decoded as rejected inputs
// (rejected_corrupt_entry, with the record as the payload) and releases them, so one
// damaged record never blocks the rest of its batch nor comes back forever. One whose
// rejection cannot be recorded now is given back for later.
func (p *handoffPool) quarantine(ctx context.Context, corrupt []store.Corrupt) {
	for _, c := range corrupt {
		p.quarantineOne(ctx, c)
	}
}

// quarantineOne records c as rejected and releases it, or gives it back; from the
// record on until its release lands it is this replica's (running), as a hand-off is,
// so a stop does not hand it back to be recorded again.
func (p *handoffPool) quarantineOne(ctx context.Context, c store.Corrupt) {
	p.running.add(c.Claim.ID)
	defer p.running.remove(c.Claim.ID)
	if err := p.releases.reserve(); err != nil {
		return // past the stop's deadline: claimed again once this replica is gone
	}
	err := p.delivery.Reject(ctx, delivery.Rejected{Alert: sender.Alert{ID: c.Claim.ID, Body: c.Record},
		Reason: rejectCorruptEntry, Detail: "the wheel stage's record of this alert cannot be decoded (" + c.Err.Error() +
			"): it was damaged in Redis or written by an unknown version; the record is kept as this row's payload"})
	entry := c.Claim.Entry()
	if err != nil {
		p.releases.unreserve()
		p.logger.Warn("cannot record a corrupt wheel-stage entry; it is given back and tried again", "rd_id", c.Claim.ID, "err", err)
		p.giveBack(entry, p.now().Add(p.opts.RetryMaxDelay), 0)
		return
	}
	p.metrics.quarantined.Inc()
	p.logger.Error("corrupt wheel-stage entry recorded as rejected and released", "rd_id", c.Claim.ID, "err", c.Err)
	p.release(entry, store.Receipt{Outcome: store.Recorded, Replica: p.opts.InstanceName})
}

// rejectCorruptEntry is the rejection reason of a wheel-stage record that cannot be
// decoded.
const rejectCorruptEntry = "corrupt_entry"

// retryStore runs write, and runs it again with backoff (50 ms doubling to 1 s) while
// it fails with store.ErrUnavailable, until it lands, another error comes back, more
// than within has passed (0: no bound), or ctx ends; m counts the retries under op.
func retryStore(ctx context.Context, m *Metrics, op string, within time.Duration, write func(context.Context) error) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 50*time.Millisecond, time.Second
	tries := 0
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		if tries++; tries > 1 {
			m.storeRetries.WithLabelValues(op).Inc()
		}
		err := write(ctx)
		if err != nil && !errors.Is(err, store.ErrUnavailable) {
			return struct{}{}, backoff.Permanent(err)
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(within))
	return err
}

// retryDelay is the wait before the next hand-off of an entry given back tries times:
// RetryDelay doubled per try, at most RetryMaxDelay.
func (o Options) retryDelay(tries int) time.Duration {
	d := o.RetryDelay
	for range min(tries, 30) {
		if d >= o.RetryMaxDelay {
			break
		}
		d *= 2
	}
	return min(d, o.RetryMaxDelay)
}

// handing is the set of ids whose hand-offs run.
type handing struct {
	mu  sync.Mutex
	ids map[string]int
}

func (h *handing) add(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.ids[id]++
}

func (h *handing) remove(id string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.ids[id]--; h.ids[id] <= 0 {
		delete(h.ids, id)
	}
}

func (h *handing) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.ids)
}

func (h *handing) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Collect(maps.Keys(h.ids))
}

// settle waits, at most for max, until the number of hand-offs running stops falling
// for a moment: those the Delivery just ended have returned.
func (h *handing) settle(max time.Duration) {
	const step = 10 * time.Millisecond
	deadline := time.Now().Add(max)
	for n := h.len(); time.Now().Before(deadline); {
		time.Sleep(step)
		m := h.len()
		if m == n {
			return
		}
		n = m
	}
}
