package scheduler

import (
	"context"
	"slices"
	"sync"

	"github.com/rocketdelay/rocketdelay/store"
)

// releaser ends the claims of finished hand-offs in batches (a group commit): a worker
// queues its release and waits for it to land; the first worker to find fewer than
// releaseFlushes batches on their way becomes a flusher, and sends everything queued,
// up to releaseBatch releases per call, until nothing is left. A burst whose hand-offs
// finish together thus costs a few round trips to Redis instead of one per alert, while
// one hand-off alone is released at once, as before. Each release is retried, with its
// batch, until it lands or ctx ends (retryStore): a release is idempotent, and this
// replica, being live, keeps its claims meanwhile (a repeat after a reply was lost, or
// after one shard's call failed, reports the claims that landed the first time as lost:
// a warning, nothing else). Under a sustained burst the flushers keep flushing until the
// queue is empty: up to releaseFlushes workers serve as the pool's flushers meanwhile.
type releaser struct {
	store   WheelStage
	metrics *Metrics

	mu       sync.Mutex
	queued   []*release
	flushers int // batches on their way
}

// release is one hand-off's release: the claim, how it ended, and once done whether its
// claim had been lost on the way, or the error that stopped it.
type release struct {
	r    store.Released
	lost bool
	err  error
	done chan struct{}
}

const (
	// releaseFlushes bounds the batches of releases on their way to Redis at once.
	releaseFlushes = 2
	// releaseBatch bounds the releases of one script call.
	releaseBatch = 256
)

// release ends r's claim and reports whether it had been lost (another replica took the
// entry over after this claim's lease ran out). ctx bounds the retries.
func (rl *releaser) release(ctx context.Context, r store.Released) (lost bool, err error) {
	req := &release{r: r, done: make(chan struct{})}
	rl.mu.Lock()
	rl.queued = append(rl.queued, req)
	if rl.flushers >= releaseFlushes {
		rl.mu.Unlock()
		select {
		case <-req.done:
			return req.lost, req.err
		case <-ctx.Done():
			return false, ctx.Err() // the flusher that takes it fails it at once
		}
	}
	rl.flushers++
	for len(rl.queued) > 0 {
		n := min(len(rl.queued), releaseBatch)
		batch := slices.Clone(rl.queued[:n])
		rl.queued = slices.Delete(rl.queued, 0, n)
		rl.mu.Unlock()
		rl.flush(ctx, batch)
		rl.mu.Lock()
	}
	rl.flushers--
	rl.mu.Unlock()
	<-req.done // flushed by this call, or by another flusher that took it first
	return req.lost, req.err
}

// flush releases a batch in one call per shard, retried while Redis cannot be reached,
// and tells each release how it ended.
func (rl *releaser) flush(ctx context.Context, batch []*release) {
	rs := make([]store.Released, len(batch))
	for i, req := range batch {
		rs[i] = req.r
	}
	var lost []bool
	err := retryStore(ctx, rl.metrics, "release", 0, func(ctx context.Context) error {
		var err error
		lost, err = rl.store.ReleaseAll(ctx, rs)
		return err
	})
	rl.metrics.releaseBatch.Observe(float64(len(batch)))
	for i, req := range batch {
		req.lost, req.err = err == nil && lost[i], err
		close(req.done)
	}
}
