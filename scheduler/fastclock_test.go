package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// A replica whose own clock runs 5s fast never hands an alert off before its due time
// by Redis's clock (here the test's own clock, which is Redis's host's): its claims are
// judged by Redis TIME, and its reference clock corrects it so it fires on time, not
// 5s early only to be refused. With the raw fast clock (no reference clock) the claim's
// check alone still keeps it from being early.
func TestFastClockNeverSendsEarly(t *testing.T) {
	t.Parallel()
	for _, corrected := range []bool{true, false} {
		h := newHarness(t, 5*time.Second)
		m := NewMetrics(prometheus.NewRegistry())
		fast := timewheel.ShiftedClock(5 * time.Second)
		var clock timewheel.Clock = fast
		if corrected {
			rc := NewRefClock(h.ws, fast, 0, discardLogger(), m)
			require.NoError(t, rc.Sync(context.Background()))
			require.InDelta(t, -5, rc.Offset().Seconds(), 0.1)
			clock = rc
		}
		opts := h.options("fast")
		opts.Wheel.Clock = clock
		s, err := New(opts, h.ws, h.rec, discardLogger(), m, clock.Now)
		require.NoError(t, err)
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		require.NoError(t, s.Start(ctx))
		cancel()

		ids := []string{"fast-1", "fast-2", "fast-3"}
		due := map[string]time.Time{}
		for i, id := range ids {
			// wire.Published by the producer's own (true) clock: due 2-4s from now.
			// The wire carries milliseconds, and so do the claim's scores.
			due[id] = h.publish(id, time.Duration(i+2)*time.Second, id).DeliverAt.Truncate(time.Millisecond)
		}
		h.rec.waitAll(t, ids, 30*time.Second)
		stop(t, s)
		h.rec.mu.Lock()
		for _, id := range ids {
			at := h.rec.at[id][0]
			require.False(t, at.Before(due[id]), "corrected %v: %s handed off %s early", corrected, id, due[id].Sub(at))
		}
		h.rec.mu.Unlock()
		if !corrected {
			// Its wheel fired each 5s early, and the claim refused each at least once.
			require.GreaterOrEqual(t, testutil.ToFloat64(m.claims.WithLabelValues("not_due")), float64(len(ids)))
		}
	}
}

// An alert claimed ahead of its due time by a replica that is gone before it falls due
// is taken over by another's sweeper, still not due: the survivor hands it off no
// sooner than its due time by Redis's clock, though its own clock runs 30s fast and
// uncorrected (only the wait the sweep's reply gives holds it back: the hand-off's own
// check, by the survivor's clock, finds it due; with a clock 5s fast it held back a
// take-over more than 5s before the due time, which is when the liveness take-over
// came, and a sweep that did not wait went unseen).
func TestATakeOverBeforeTheDueTimeIsNotEarly(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ctx := context.Background()
	_, err := h.ws.Liveness(nil).Beat(ctx, "gone")
	require.NoError(t, err)
	due := time.Now().Add(12 * time.Second).Truncate(time.Millisecond)
	_, err = h.ws.Put(ctx, store.Entry{ID: "taken-ahead", Target: "ops", DueAt: due, Body: []byte("x")})
	require.NoError(t, err)
	c, err := h.ws.ClaimAhead(ctx, []string{"taken-ahead"}, "gone/1", 15*time.Second)
	require.NoError(t, err)
	require.Len(t, c.Entries, 1, "claimed ahead by the replica about to be gone")

	m := NewMetrics(prometheus.NewRegistry())
	fast := timewheel.ShiftedClock(30 * time.Second)
	opts := h.options("survivor")
	opts.Wheel.Clock = fast
	s, err := New(opts, h.ws, h.rec, discardLogger(), m, fast.Now)
	require.NoError(t, err)
	startCtx, cancel := context.WithTimeout(ctx, 60*time.Second)
	defer cancel()
	require.NoError(t, s.Start(startCtx))
	t.Cleanup(func() { stop(t, s) })
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.recovered) == 1 }, 30*time.Second, 10*time.Millisecond)
	require.True(t, time.Now().Before(due), "swept only once due: the take-over before the due time this test is about did not happen")
	h.rec.waitAll(t, []string{"taken-ahead"}, 30*time.Second)
	h.rec.mu.Lock()
	at := h.rec.at["taken-ahead"][0]
	h.rec.mu.Unlock()
	require.False(t, at.Before(due), "handed off %s early", due.Sub(at))
}
