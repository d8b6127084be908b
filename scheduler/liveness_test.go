package scheduler

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// freeze makes s look dead to the other replicas, as a SIGKILL would, while the test
// keeps the process: it stops beating, firing its wheel and sweeping (a sweep would beat
// again: a claim refused as lapsed beats and retries). Its consumer runs on; the test's
// cleanup stops it.
func freeze(s *Scheduler) {
	s.heart.stop()
	s.life.cancel()
	s.wheel.Stop()
}

// takenOver is a retry job that records the replicas whose rows it was told to take over.
type takenOver struct {
	mu       sync.Mutex
	replicas []string
}

func (r *takenOver) TakeOver(_ context.Context, replica string) (int, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.replicas = append(r.replicas, replica)
	return 0, nil
}

func (r *takenOver) taken() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return slices.Clone(r.replicas)
}

// TestSurvivorFiresDepartedReplicasDueSoon: entries that only a replica's wheel holds
// (stored, unclaimed, due in seconds) are fired on time by a survivor once that replica
// is gone: its liveness lapses, a sweep of the survivor takes over what it held (nothing)
// and marks it gone, the survivor's beat learns it and loads the due-soon entries into
// its own wheel, whose fire loop claims them at their due time. Without that load they
// wait for the survivor's sweeper, past their due time plus the grace period. The
// survivor also has its retry job take over the failed sends of the departed replica,
// once.
func TestSurvivorFiresDepartedReplicasDueSoon(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setStage(h.lease, time.Second)
	retry := &takenOver{}
	h.retry = retry
	a, _ := h.start("departed-a")
	_, mb := h.start("departed-b")

	ctx := context.Background()
	keys := ids("departed", 20)
	now, err := h.ws.Time(ctx)
	require.NoError(t, err)
	due := map[string]time.Time{}
	for i, id := range keys {
		// Due after A's liveness lapsed (1s) and B's next sweep and beat, within the
		// threshold and grace that B loads.
		at := now.Add(3*time.Second + time.Duration(i)*50*time.Millisecond).Truncate(time.Millisecond)
		_, err := h.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: at, Body: []byte("departed " + id)})
		require.NoError(t, err)
		require.NoError(t, a.wheel.Add(id, at)) // in A's wheel alone, as if A had consumed them
		due[id] = at
	}
	freeze(a)

	h.rec.waitAll(t, keys, 30*time.Second)
	h.settle(keys, mb)
	h.rec.latenessReport(t, due)
	require.Equal(t, float64(len(keys)), testutil.ToFloat64(mb.claims.WithLabelValues("won")),
		"B's fire loop claimed every entry A's wheel held")
	require.Zero(t, testutil.ToFloat64(mb.recovered), "none waited for B's sweeper (due + grace)")
	require.Equal(t, 1.0, testutil.ToFloat64(mb.departed), "B took A, gone")
	require.Equal(t, []string{a.InstanceName()}, retry.taken(), "B's retry job took over A's failed sends")
}

// TestLapsedConsumersQueuesMove: replica A is paused as a SIGSTOP would pause it (its
// beats, wheel and loops stop, and its consume handlers block) while its RocketMQ
// client stays connected, so the broker keeps listing its consumer (for two minutes
// after a real pause; here for good). Once A's liveness lapsed, B's beat reports A
// absent, B's allocation leaves A's consumer out and B rebalances at once: every alert
// published after the pause, those on A's queues too, is handed off by B, within
// seconds. Without the allocation, A's queues stay A's, and their alerts wait.
func TestLapsedConsumersQueuesMove(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setStage(h.lease, time.Second)
	a, ma := h.start("paused-a")
	_, mb := h.start("paused-b")
	// The group is balanced once each replica consumed some of the same round over the
	// queues: until then one of them may hold every queue (A before B joined, or B after
	// a rebalance), and the test would prove nothing (make test runs saw B hand everything
	// off with no rebalance).
	for round := 0; ; round++ {
		require.Less(t, round, 20, "after 20 rounds the replicas still do not share the queues")
		gotA, gotB := testutil.ToFloat64(ma.received), testutil.ToFloat64(mb.received)
		warm := ids(fmt.Sprintf("warm%02d", round), 16)
		for _, id := range warm {
			h.publish(id, 0, "warm "+id)
		}
		h.rec.waitAll(t, warm, 60*time.Second)
		if testutil.ToFloat64(ma.received) > gotA && testutil.ToFloat64(mb.received) > gotB {
			break
		}
	}

	freeze(a)
	a.broker.handling.Lock() // A's consume handlers block, as in a paused process
	t.Cleanup(a.broker.handling.Unlock)
	paused := time.Now()
	keys := ids("paused", 16) // round robin over the topic's queues: A's too
	for _, id := range keys {
		h.publish(id, 0, "paused "+id)
	}
	h.rec.waitAll(t, keys, 60*time.Second)
	t.Logf("all %d alerts published after A's pause handed off by B %.1fs after the pause (liveness %s)",
		len(keys), time.Since(paused).Seconds(), h.liveness)
	// B counts its rebalance once the client's rebalance call returned, and that call
	// asks the broker for each new queue's offset after it dispatched the pull of the
	// previous one: the hand-offs may come first (a make test run read 0 here).
	require.Eventually(t, func() bool { return testutil.ToFloat64(mb.rebalances) > 0 },
		30*time.Second, 10*time.Millisecond, "B rebalanced on A's lapse")
	h.settle(keys, mb)
}
