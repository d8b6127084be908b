package scheduler

import (
	"context"
	"slices"
	"sync"
	"sync/atomic"

	"github.com/rocketdelay/rocketdelay/store"
)

// releaser ends the claims of finished hand-offs in batches (a group commit): a worker
// queues its release and goes on to its next hand-off; up to releaseFlushes flushers
// send what is queued, up to releaseBatch releases per call, until nothing is left. A
// burst whose hand-offs finish together thus costs a few round trips to Redis instead of
// one per alert, and the hand-offs never wait for Redis's answer; one hand-off alone is
// released at once, as before. Each release is retried, with its batch, until it lands
// or ctx ends (retryStore): a release is idempotent, and this replica, being live, keeps
// its claims meanwhile (a repeat after a reply was lost, or after one shard's call
// failed, reports the claims that landed the first time as lost: a warning, nothing
// else).
//
// At most releaseOutstanding hand-offs are sending, or delivered with neither their
// release nor their done marker landed, at once: a hand-off takes its slot before it
// sends (reserve), and past the bound it waits for one. That bounds what a replica
// killed mid-burst can have delivered with nothing in Redis saying so (sent again once
// it is taken over), and what a slow Redis lets pile up.
//
// A release costs Redis many times what a done marker does (the entry, its claim state,
// its trace, the list of pending alerts), and in a burst the releases queue behind one
// another. So a delivered hand-off whose release finds every flusher on its way, and more
// than half the slots taken, has its done marker left ahead of its release: a marker
// sends the markers queued (up to maxMarks per call, a SET each), the flushers starting
// no release while it is on its way, and a hand-off's slot goes back once its marker or
// its release lands. A replica that takes such an alert over finds it done and releases
// it without sending it again (handoffPool.undone). The burst's hand-offs then wait for
// the markers, not for the releases, which follow; at most releaseBacklog hand-offs are
// sending or wait for their release, past which a hand-off waits too (Redis cannot keep
// up).
type releaser struct {
	ctx     context.Context // every release's: the pool's, cancelled at the stop's deadline
	store   WheelStage
	metrics *Metrics
	slots   chan struct{}  // one per hand-off sending, or delivered with nothing in Redis saying so yet
	backlog chan struct{}  // one per hand-off sending, or whose release has not landed
	landing sync.WaitGroup // the releases queued or on their way
	marking sync.WaitGroup // the marker on its way

	mu       sync.Mutex
	queued   []*release
	flushers int        // flushers on their way
	marks    []*release // delivered, queued while every flusher was on its way: their done markers go first
	marker   bool       // the marker is on its way; the flushers wait for it (marked)
	marked   *sync.Cond // of mu: the marker ended
}

// release is one hand-off's release: the claim, how it ended, and whom to tell how the
// release went; freed is set once its slot went back (its done marker or its release
// landed).
type release struct {
	r     store.Released
	done  func(lost bool, err error)
	freed atomic.Bool
}

const (
	// releaseFlushes bounds the batches of releases on their way to Redis at once.
	releaseFlushes = 2
	// releaseBatch bounds the releases of one script call.
	releaseBatch = 256
	// releaseOutstanding bounds the hand-offs sending, or delivered with neither their
	// release nor their done marker landed.
	releaseOutstanding = releaseFlushes * releaseBatch
	// maxMarks bounds the done markers of one marker call.
	maxMarks = 1000
	// releaseBacklog bounds the hand-offs sending or whose release has not landed, its
	// done marker left or not.
	releaseBacklog = 8192
)

func newReleaser(ctx context.Context, ws WheelStage, m *Metrics) *releaser {
	rl := &releaser{ctx: ctx, store: ws, metrics: m, slots: make(chan struct{}, releaseOutstanding),
		backlog: make(chan struct{}, releaseBacklog)}
	rl.marked = sync.NewCond(&rl.mu)
	return rl
}

// reserve takes the slot of a release to come, before its hand-off sends: it waits
// while releaseOutstanding are taken, and fails once the releaser's context ended (the
// stop's deadline), when nothing may be sent. The slot goes with release, or back with
// unreserve when the hand-off ends without one (not sent, parked, given back).
func (rl *releaser) reserve() error {
	if err := rl.ctx.Err(); err != nil {
		return err
	}
	select {
	case rl.backlog <- struct{}{}:
	case <-rl.ctx.Done():
		return rl.ctx.Err()
	}
	select {
	case rl.slots <- struct{}{}:
		return nil
	case <-rl.ctx.Done():
		<-rl.backlog
		return rl.ctx.Err()
	}
}

// unreserve gives back what reserve took for a hand-off that ended without a release.
func (rl *releaser) unreserve() {
	<-rl.slots
	<-rl.backlog
}

// free gives back the slot of req, once: its done marker or its release landed.
func (rl *releaser) free(req *release) {
	if req.freed.CompareAndSwap(false, true) {
		<-rl.slots
		rl.metrics.releasing.Dec()
	}
}

// release queues r's release, in the slot reserve took for it, and returns. done is told,
// once, whether r's claim had been lost on the way (another replica took the entry over
// after this claim's lease ran out), or the error that stopped the release (the
// releaser's context ended: the stop's deadline); it runs on a flusher's goroutine, or on
// the caller's when the context had ended. The caller holds no lock done takes.
func (rl *releaser) release(r store.Released, done func(lost bool, err error)) {
	if err := rl.ctx.Err(); err != nil {
		rl.unreserve()
		done(false, err)
		return
	}
	rl.landing.Add(1)
	rl.metrics.releasing.Inc()
	req := &release{r: r, done: done}
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.queued = append(rl.queued, req)
	switch {
	case rl.flushers < releaseFlushes:
		rl.flushers++
		go rl.flushQueued()
	case r.Receipt.Outcome == store.Delivered && len(rl.slots) > releaseOutstanding/2 && !rl.releasesDue():
		// It waits for a flusher, its slot held, and the slots run short: its done
		// marker goes ahead. (A failure recorded or a step withheld is noted under its
		// claim already: taken over, it is recorded or withheld again, never sent. While
		// slots are plenty, no marker's round trip is needed.)
		rl.marks = append(rl.marks, req)
		if !rl.marker {
			rl.marker = true
			rl.marking.Add(1)
			go rl.markQueued()
		}
	}
}

// wait waits until every release queued so far has landed or failed, and the marker
// has ended.
func (rl *releaser) wait() {
	rl.landing.Wait()
	rl.marking.Wait()
}

// markQueued leaves the done markers of the delivered hand-offs that wait for a flusher,
// a call at a time, until none is left, and then lets the flushers go on.
func (rl *releaser) markQueued() {
	defer rl.marking.Done()
	rl.mu.Lock()
	for len(rl.marks) > 0 && !rl.releasesDue() {
		batch := takeFirst(&rl.marks, maxMarks)
		rl.mu.Unlock()
		rl.mark(batch)
		rl.mu.Lock()
	}
	rl.marker = false
	rl.marked.Broadcast()
	rl.mu.Unlock()
}

// mark leaves the done markers of batch but those whose release landed meanwhile,
// retried while Redis cannot be reached, and gives back their slots. When it cannot
// (the stop's deadline), their releases give them back, or nothing does.
func (rl *releaser) mark(batch []*release) {
	ids := make([]string, 0, len(batch))
	for _, req := range batch {
		if !req.freed.Load() {
			ids = append(ids, req.r.Claim.ID)
		}
	}
	if len(ids) == 0 {
		return
	}
	err := retryStore(rl.ctx, rl.metrics, "mark", 0, func(ctx context.Context) error {
		return rl.store.MarkAllDelivered(ctx, ids)
	})
	if err != nil {
		return
	}
	rl.metrics.marked.Add(float64(len(ids)))
	for _, req := range batch {
		rl.free(req)
	}
}

// releasesDue reports whether the releases queued reach half the backlog: then the
// flushers go on, markers or not, so that a load the releases cannot keep up with
// settles there rather than holding every release until the backlog is full. Called
// with mu held.
func (rl *releaser) releasesDue() bool { return len(rl.queued) >= releaseBacklog/2 }

// flushQueued sends what is queued, a batch per call, until nothing is left; while the
// marker is on its way it starts no call, so that Redis takes the markers first.
func (rl *releaser) flushQueued() {
	rl.mu.Lock()
	for len(rl.queued) > 0 {
		if rl.marker {
			rl.marked.Wait()
			continue
		}
		batch := takeFirst(&rl.queued, releaseBatch)
		rl.mu.Unlock()
		rl.flush(batch)
		rl.mu.Lock()
	}
	rl.flushers--
	rl.mu.Unlock()
}

// flush releases a batch in one call per shard, retried while Redis cannot be reached,
// and tells each release how it ended.
func (rl *releaser) flush(batch []*release) {
	rs := make([]store.Released, len(batch))
	for i, req := range batch {
		rs[i] = req.r
	}
	var lost []bool
	err := retryStore(rl.ctx, rl.metrics, "release", 0, func(ctx context.Context) error {
		var err error
		lost, err = rl.store.ReleaseAll(ctx, rs)
		return err
	})
	rl.metrics.releaseBatch.Observe(float64(len(batch)))
	for i, req := range batch {
		req.done(err == nil && lost[i], err)
		rl.free(req)
		<-rl.backlog
		rl.landing.Done()
	}
}

// takeFirst removes up to n releases from the front of q and returns them.
func takeFirst(q *[]*release, n int) []*release {
	n = min(len(*q), n)
	batch := slices.Clone((*q)[:n])
	*q = slices.Delete(*q, 0, n)
	return batch
}
