package scheduler

import (
	"sync"

	"github.com/rocketdelay/rocketdelay/store"
)

// targetGate keeps one target from taking every hand-off worker. A target whose alerts
// wait for its robots (a flood, a throttled group, link cards that cannot be merged)
// holds at most its share of the workers; the rest of its due alerts queue here, still
// claimed (the replica's liveness keeps them), and the worker that finishes one of its
// hand-offs takes the next. The other targets keep the remaining workers, so a flood
// on one target does not make another's alerts late.
type targetGate struct {
	share    int // hand-offs in flight per target
	mu       sync.Mutex
	inflight map[string]int
	queued   map[string][]store.Entry
}

func newTargetGate(share int) *targetGate {
	return &targetGate{share: max(share, 1), inflight: map[string]int{}, queued: map[string][]store.Entry{}}
}

// enter reports whether e's target has a free share, taking it; otherwise e queues
// behind the target's hand-offs in flight.
func (g *targetGate) enter(e store.Entry) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.inflight[e.Target] < g.share {
		g.inflight[e.Target]++
		return true
	}
	g.queued[e.Target] = append(g.queued[e.Target], e)
	return false
}

// leave ends a hand-off of target: it returns the target's next queued entry, which
// keeps the share, or frees the share when none waits.
func (g *targetGate) leave(target string) (store.Entry, bool) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if q := g.queued[target]; len(q) > 0 {
		next := q[0]
		if len(q) == 1 {
			delete(g.queued, target)
		} else {
			g.queued[target] = q[1:]
		}
		return next, true
	}
	if g.inflight[target]--; g.inflight[target] <= 0 {
		delete(g.inflight, target)
	}
	return store.Entry{}, false
}
