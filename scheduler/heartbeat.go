package scheduler

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// The heartbeat: what this replica holds in the wheel stage (claims, parks) is its own as
// long as its liveness in Redis lasts (store.Liveness). It beats every sixth of the
// liveness period T, one round trip whatever it holds, and again 100 ms after a beat that
// failed, so a Redis blip of up to about T/2 lapses nobody; once it has not beaten for T
// the other replicas' sweepers take over everything it held at once, rather than after
// each holding's lease. A claim refused because this replica lapsed (store.ErrLapsed:
// it was paused or cut off past T) beats and claims again. A replica whose holdings were
// all taken over, or that left, is gone: one survivor loads the entries its wheel held,
// as a starting replica does, so they fire on time rather than once overdue, and takes
// over the failed-sends rows the departed one's retry job held (SetRetryJob).

// Liveness is this replica's heartbeat in the wheel stage; *store.Liveness implements it.
// It should reach Redis on connections of its own (store.OpenBeatRedis), so a beat never
// waits behind the hand-offs.
type Liveness interface {
	// Beat keeps replica live for one period from Redis now.
	Beat(ctx context.Context, replica string) (store.BeatResult, error)
	// TakeGone takes one replica that is gone, "" when none is.
	TakeGone(ctx context.Context) (string, error)
	// Leave hands back what replica holds, but keep; once it holds nothing it is gone.
	Leave(ctx context.Context, replica string, keep ...string) (ended, left int, err error)
	// Period is the liveness period T.
	Period() time.Duration
}

// beatRetry is how soon a beat that failed is tried again.
const beatRetry = 100 * time.Millisecond

// heartbeat beats for the scheduler's replica.
type heartbeat struct {
	s         *Scheduler
	mu        sync.Mutex // one beat at a time: the loop's, or one after a claim found this replica lapsed
	last      time.Time  // the last beat that landed (monotonic)
	gone      chan struct{}
	absent    atomic.Pointer[map[string]bool] // the other replicas the last beat reported absent
	rebalance chan struct{}                   // the absent replicas changed
	cancel    context.CancelFunc
	done      sync.WaitGroup
}

// every is the time between two beats: T/6.
func (h *heartbeat) every() time.Duration { return h.s.opts.Liveness.Period() / 6 }

// beat beats once, within a third of the period (a beat stuck on a dead connection gives
// up in time for the next try), and reports what it found: a lapse of this replica, and
// replicas gone, whose wheels' entries the gone loop loads.
func (h *heartbeat) beat(ctx context.Context) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	s := h.s
	ctx, cancel := context.WithTimeout(ctx, s.opts.Liveness.Period()/3)
	defer cancel()
	b, err := s.opts.Liveness.Beat(ctx, s.opts.InstanceName)
	if err != nil {
		s.metrics.beats.WithLabelValues("error").Inc()
		return err
	}
	now := time.Now()
	s.metrics.beats.WithLabelValues("ok").Inc()
	if !h.last.IsZero() {
		s.metrics.beatGap.Observe(now.Sub(h.last).Seconds())
	}
	h.last = now
	if b.Lapsed {
		s.metrics.lapses.Inc()
		s.logger.Warn("this replica's liveness had lapsed (it was paused, or cut off from Redis, for longer than "+
			"scheduler.liveness): the other replicas may have taken over what it held, and its claims of those are void",
			"liveness", s.opts.Liveness.Period().String())
	}
	if b.Gone > 0 {
		select {
		case h.gone <- struct{}{}:
		default:
		}
	}
	h.noteAbsent(b.Absent)
	return nil
}

// noteAbsent keeps the other replicas a beat reported absent, for the consumer's
// allocation (allocate.go), and has the consumer rebalance when they changed.
func (h *heartbeat) noteAbsent(replicas []string) {
	absent := make(map[string]bool, len(replicas))
	for _, r := range replicas {
		if r != h.s.opts.InstanceName {
			absent[r] = true
		}
	}
	if old := h.absent.Load(); old != nil && maps.Equal(*old, absent) || old == nil && len(absent) == 0 {
		return
	}
	h.absent.Store(&absent)
	select {
	case h.rebalance <- struct{}{}:
	default:
	}
}

// absentReplicas is what noteAbsent kept last.
func (h *heartbeat) absentReplicas() map[string]bool {
	if a := h.absent.Load(); a != nil {
		return *a
	}
	return nil
}

// first beats until one lands or ctx ends: nothing is claimed before.
func (h *heartbeat) first(ctx context.Context) error {
	for {
		err := h.beat(ctx)
		if err == nil {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("scheduler: first beat: %w", err)
		case <-time.After(beatRetry):
		}
	}
}

// start runs the beat loop, the gone loop and the rebalance loop until stop.
func (h *heartbeat) start() {
	ctx, cancel := context.WithCancel(context.Background())
	h.cancel = cancel
	h.done.Add(3)
	go h.loop(ctx)
	go h.goneLoop(ctx)
	go h.rebalanceLoop(ctx)
}

// rebalanceLoop rebalances the consumer each time the absent replicas changed, so that
// a lapsed or departed replica's queues move to the live consumers at once, and a
// replica back from a pause gets its share again.
func (h *heartbeat) rebalanceLoop(ctx context.Context) {
	defer h.done.Done()
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.rebalance:
		}
		if h.s.broker.rebalanceNow() {
			h.s.metrics.rebalances.Inc()
			h.s.logger.Info("the replicas absent from the wheel stage's liveness changed; rebalanced the consumer group",
				"absent", slices.Sorted(maps.Keys(h.absentReplicas())))
		}
	}
}

// stop ends the loops; the replica lapses a period after its last beat.
func (h *heartbeat) stop() {
	if h.cancel != nil {
		h.cancel()
		h.done.Wait()
	}
}

// loop beats every T/6, and 100 ms after a beat that failed.
func (h *heartbeat) loop(ctx context.Context) {
	defer h.done.Done()
	t := time.NewTimer(h.every())
	defer t.Stop()
	failing := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		next := h.every()
		if err := h.beat(ctx); err != nil {
			if ctx.Err() != nil {
				return
			}
			if !failing {
				h.s.logger.Warn("beat failed; trying again", "err", err)
			}
			failing, next = true, beatRetry
		} else if failing {
			h.s.logger.Info("beating again")
			failing = false
		}
		t.Reset(next)
	}
}

// goneLoop loads into the wheel the due-soon entries of the replicas that are gone, one
// by one, as the beats report them.
func (h *heartbeat) goneLoop(ctx context.Context) {
	defer h.done.Done()
	s := h.s
	for {
		select {
		case <-ctx.Done():
			return
		case <-h.gone:
		}
		for ctx.Err() == nil {
			replica, err := s.opts.Liveness.TakeGone(ctx)
			if err != nil {
				if ctx.Err() == nil {
					s.logger.Warn("cannot take a gone replica; its wheel's entries wait for the sweeper until the next beat", "err", err)
				}
				break
			}
			if replica == "" {
				break
			}
			s.metrics.departed.Inc()
			h.takeOverRows(ctx, replica)
			n, err := s.loadDue(ctx)
			if errors.Is(err, timewheel.ErrStopped) {
				return // stopping: this replica leaves too
			}
			if err != nil {
				s.logger.Warn("a replica is gone but its wheel's entries could not be loaded; the sweeper claims them once overdue",
					"replica", replica, "err", err)
				continue
			}
			s.logger.Info("a replica is gone (its holdings were taken over, or it left); loaded the entries its wheel held",
				"replica", replica, "due_soon", n)
		}
	}
}

// takeOverRows hands the failed-sends rows that the retry job of replica, which is gone,
// held to this replica's retry job, trying a few times; rows it cannot release wait for
// their lease (failedSends.claimLease).
func (h *heartbeat) takeOverRows(ctx context.Context, replica string) {
	s := h.s
	if s.retry == nil {
		return
	}
	wait := beatRetry
	for try := 1; ; try++ {
		n, err := s.retry.TakeOver(ctx, replica)
		if err == nil {
			if n > 0 {
				s.logger.Info("took over the failed sends a gone replica's retry job held", "replica", replica, "rows", n)
			}
			return
		}
		if try == 3 || ctx.Err() != nil {
			s.logger.Warn("cannot take over the failed sends a gone replica's retry job held; they wait for their lease",
				"replica", replica, "err", err)
			return
		}
		select {
		case <-ctx.Done():
		case <-time.After(wait):
		}
		wait *= 4
	}
}

// onLapsed runs after a claim was refused because this replica had lapsed: it beats, so
// that the claim can be tried again.
func (h *heartbeat) onLapsed(ctx context.Context) error {
	h.s.metrics.claimsLapsed.Inc()
	if err := h.beat(ctx); err != nil {
		return fmt.Errorf("scheduler: beat after a claim found this replica lapsed: %w", err)
	}
	return nil
}

// claimLive runs claim, and once more after a beat when it was refused because this
// replica had lapsed.
func (h *heartbeat) claimLive(ctx context.Context, claim func(context.Context) (store.Claimed, error)) (store.Claimed, error) {
	c, err := claim(ctx)
	if !errors.Is(err, store.ErrLapsed) {
		return c, err
	}
	if err := h.onLapsed(ctx); err != nil {
		return store.Claimed{}, err
	}
	return claim(ctx)
}
