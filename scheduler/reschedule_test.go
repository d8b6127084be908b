package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// TestRescheduleWhileHopping moves alerts while their hop is in the broker: later is
// recorded and met when the alert reaches the wheel stage; earlier than the due time its
// message carries, its message is read back from the broker and a copy of a new
// generation published for the new time, and the copy still hopping is dropped when it
// arrives. Each is handed off once, at the due time it ends up with, never before (by
// the receiving side's clock).
func TestRescheduleWhileHopping(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("resched-hop")
	ctx := context.Background()

	later := h.publish("r-later", 12*time.Second, "moved later while hopping")
	earlier := h.publish("r-earlier", 14*time.Second, "moved earlier while hopping")
	hopping := func(id string) {
		require.Eventually(t, func() bool {
			st, err := h.ws.Inspect(ctx, id)
			return err == nil && st.Stage == "hopping"
		}, 20*time.Second, 20*time.Millisecond, "%s never hopped", id)
	}
	hopping("r-later")
	hopping("r-earlier")

	newLater := later.DeliverAt.Add(6 * time.Second).Truncate(time.Millisecond)
	res, err := h.ws.Reschedule(ctx, "r-later", newLater, h.threshold)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleHopMoved, DueAt: newLater}, res)

	// Far earlier than it carries, past the wheel stage's reach too: "page this in 2s".
	newEarlier := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	require.Greater(t, earlier.DeliverAt.Sub(newEarlier), h.threshold)
	res, err = h.reschedule(ctx, "r-earlier", newEarlier)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleRequeued, DueAt: newEarlier}, res)

	want := map[string]time.Time{"r-later": newLater, "r-earlier": newEarlier}
	h.rec.waitAll(t, []string{"r-later", "r-earlier"}, 60*time.Second)
	h.settle([]string{"r-later", "r-earlier"}, m)
	staleDropped(t, m, 1) // the copy that carried the old time, on its arrival
	h.rec.mu.Lock()
	first := h.rec.at["r-earlier"][0]
	h.rec.mu.Unlock()
	require.True(t, first.Before(earlier.DeliverAt), "handed off at %s, not before the time it was published with, %s",
		first.Format(time.StampMilli), earlier.DeliverAt.Format(time.StampMilli))
	_, p99, _ := h.rec.latenessReport(t, want) // once each, never early, carrying the due time it ended up with
	t.Logf("lateness p99 %s", p99)
	// Moved later, it is not left to a later hop: the last hop of each was to come back
	// before its due time, so it waited in the wheel stage for it.
	h.cameBackInTime(want)
}

// cameBackInTime checks that the last broker hop of each alert in due was to come back
// no later than its due time (the trace's plan, not a clock reading): what is handed
// off then waits in the wheel stage for its due time instead of a hop past it.
func (h *harness) cameBackInTime(due map[string]time.Time) {
	h.t.Helper()
	for id, at := range due {
		st, err := h.ws.Inspect(context.Background(), id)
		require.NoError(h.t, err)
		if st.Hops == 0 {
			continue // never hopped: published within the wheel stage's reach
		}
		require.False(h.t, st.NextArrival.After(at), "alert %s: its last hop (%d of them) came back at %s, past its due time %s",
			id, st.Hops, st.NextArrival.Format(time.StampMilli), at.Format(time.StampMilli))
	}
}

// TestRescheduleRacesDelivery moves alerts waiting in the wheel stage at the moment they
// fall due, while the scheduler claims and hands them off, for many alerts: each is
// handed off exactly once, never before the due time the reschedule answered (when it
// moved it) or its own (when it was too late), by the receiving side's clock.
func TestRescheduleRacesDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("resched-race")
	ctx := context.Background()

	const n = 60
	ids := ids("race", n)
	due := map[string]time.Time{}
	for i, id := range ids {
		// Spread by 19 ms so that the wheel's fires and the reschedules interleave; all
		// below the threshold, so each waits in the wheel stage within ms of its publish.
		due[id] = h.publish(id, 3500*time.Millisecond+time.Duration(i)*19*time.Millisecond, "race "+id).DeliverAt
	}

	var (
		mu      sync.Mutex
		answers = map[string]store.Rescheduled{}
		wg      sync.WaitGroup
	)
	for i, id := range ids {
		wg.Add(1)
		// At its due time, give or take a few ms, when the fire loop claims it.
		at := due[id].Add(time.Duration(i%7-3) * time.Millisecond)
		time.AfterFunc(time.Until(at), func() {
			defer wg.Done()
			res, err := h.ws.Reschedule(ctx, id, due[id].Add(700*time.Millisecond), h.threshold)
			if err != nil {
				res = store.Rescheduled{Result: store.RescheduleResult(0)}
			}
			mu.Lock()
			answers[id] = res
			mu.Unlock()
		})
	}
	wg.Wait()
	h.rec.waitAll(t, ids, 60*time.Second)
	h.settle(ids, m)

	want := map[string]time.Time{}
	counts := map[store.RescheduleResult]int{}
	for _, id := range ids {
		res := answers[id]
		counts[res.Result]++
		switch res.Result {
		case store.RescheduleMoved:
			want[id] = res.DueAt
		case store.RescheduleTooLate, store.RescheduleAlreadyDelivered:
			want[id] = due[id]
		default:
			t.Fatalf("%s: unexpected answer %s", id, res.Result)
		}
	}
	_, _, _ = h.rec.latenessReport(t, want) // exactly once, never early, the answered due time carried
	t.Logf("answers: %v", fmt.Sprint(counts))
}

// TestRescheduleEarlierMovesTheTimer moves an alert waiting in the wheel stage from 40s
// ahead to 2s ahead: the replica whose wheel holds its timer learns of the move at once
// (the reschedule announces it) and hands the alert off at its new time, never before.
// Nothing else could: its old timer fires at 40s, and the sweeper, with a grace of 30s,
// finds it overdue no sooner than 32s; so a hand-off within 20s of the new time is the
// moved timer's.
func TestRescheduleEarlierMovesTheTimer(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute)
	h.grace = 30 * time.Second
	_, m := h.start("resched-earlier")
	ctx := context.Background()

	h.publish("r-earlier-now", 40*time.Second, "moved earlier in the wheel stage")
	require.Eventually(t, func() bool {
		st, err := h.ws.Inspect(ctx, "r-earlier-now")
		return err == nil && st.Stage == "waiting"
	}, 20*time.Second, 20*time.Millisecond, "never reached the wheel stage")

	newDue := time.Now().Add(2 * time.Second).Truncate(time.Millisecond)
	res, err := h.ws.Reschedule(ctx, "r-earlier-now", newDue, h.threshold)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleMoved, DueAt: newDue}, res)

	h.rec.waitAll(t, []string{"r-earlier-now"}, time.Until(newDue.Add(20*time.Second)))
	h.settle([]string{"r-earlier-now"}, m)
	h.rec.latenessReport(t, map[string]time.Time{"r-earlier-now": newDue}) // once, never early
	require.Equal(t, 1.0, testutil.ToFloat64(m.movesApplied), "the wheel's timer was moved")
}
