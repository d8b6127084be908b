package scheduler

import (
	"context"
	"slices"
	"sync"

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
// At most releaseOutstanding hand-offs are sending or have their release queued or on
// its way at once: a hand-off takes its release's slot before it sends (reserve), and
// past the bound it waits for one. That bounds what a replica killed mid-burst can have
// delivered without its release having landed (sent again once it is taken over), and
// what a slow Redis lets pile up.
type releaser struct {
	ctx     context.Context // every release's: the pool's, cancelled at the stop's deadline
	store   WheelStage
	metrics *Metrics
	slots   chan struct{}  // one per hand-off sending, or whose release is queued or on its way
	landing sync.WaitGroup // the releases queued or on their way

	mu       sync.Mutex
	queued   []*release
	flushers int // batches on their way
}

// release is one hand-off's release: the claim, how it ended, and whom to tell how the
// release went.
type release struct {
	r    store.Released
	done func(lost bool, err error)
}

const (
	// releaseFlushes bounds the batches of releases on their way to Redis at once.
	releaseFlushes = 2
	// releaseBatch bounds the releases of one script call.
	releaseBatch = 256
	// releaseOutstanding bounds the hand-offs sending or whose release is queued or on
	// its way.
	releaseOutstanding = releaseFlushes * releaseBatch
)

func newReleaser(ctx context.Context, ws WheelStage, m *Metrics) *releaser {
	return &releaser{ctx: ctx, store: ws, metrics: m, slots: make(chan struct{}, releaseOutstanding)}
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
	case rl.slots <- struct{}{}:
		return nil
	case <-rl.ctx.Done():
		return rl.ctx.Err()
	}
}

// unreserve gives back a slot reserve took for a hand-off that ended without a release.
func (rl *releaser) unreserve() { <-rl.slots }

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
	rl.mu.Lock()
	defer rl.mu.Unlock()
	rl.queued = append(rl.queued, &release{r: r, done: done})
	if rl.flushers < releaseFlushes {
		rl.flushers++
		go rl.flushQueued()
	}
}

// wait waits until every release queued so far has landed or failed.
func (rl *releaser) wait() { rl.landing.Wait() }

// flushQueued sends what is queued, a batch per call, until nothing is left.
func (rl *releaser) flushQueued() {
	rl.mu.Lock()
	for len(rl.queued) > 0 {
		n := min(len(rl.queued), releaseBatch)
		batch := slices.Clone(rl.queued[:n])
		rl.queued = slices.Delete(rl.queued, 0, n)
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
		rl.metrics.releasing.Dec()
		<-rl.slots
		rl.landing.Done()
	}
}
