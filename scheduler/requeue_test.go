package scheduler

import (
	"context"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// waiting waits until the alert id waits in the wheel stage.
func (h *harness) waiting(id string) {
	h.t.Helper()
	require.Eventually(h.t, func() bool {
		st, err := h.ws.Inspect(context.Background(), id)
		return err == nil && st.Stage == "waiting"
	}, 20*time.Second, 10*time.Millisecond, "%s never waited in the wheel stage", id)
}

// reschedule moves id to dueAt as failed.Rescheduler does (which imports this package):
// in the wheel stage, or beyond its reach, back to the broker: publish the copy, then
// settle it; a hopping alert moved earlier than its message carries is read back from
// the broker first.
func (h *harness) reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error) {
	res, err := h.ws.Reschedule(ctx, id, dueAt, h.threshold)
	switch {
	case err != nil:
		return res, err
	case res.Recall != nil:
		q := res.Recall
		msg, err := wire.Reader{}.Read(ctx, q.Msg)
		require.NoError(h.t, err)
		require.Equal(h.t, id, msg.GetProperty(wire.PropID))
		hops, _ := strconv.Atoi(msg.GetProperty(wire.PropHops))
		_, err = h.producer.PublishCopy(ctx, wire.Copy{ID: id, Target: msg.GetProperty(wire.PropTarget), At: q.DueAt,
			Body: msg.Body, Props: wire.CopyProps(msg), Hops: hops, Gen: q.Gen})
		return h.ws.SettleRequeue(ctx, id, q.Gen, q.DueAt, err == nil)
	case res.Requeue == nil:
		return res, nil
	}
	e := res.Requeue.Entry
	_, err = h.producer.PublishCopy(ctx, wire.Copy{ID: e.ID, Target: e.Target, At: e.DueAt, Body: e.Body, Props: e.Props,
		Hops: e.Hops, Gen: res.Requeue.Gen})
	return h.ws.SettleRequeue(ctx, id, res.Requeue.Gen, e.DueAt, err == nil)
}

// copyOf publishes the copy a requeue names, as the rescheduler does.
func (h *harness) copyOf(q store.Requeue) {
	h.t.Helper()
	e := q.Entry
	_, err := h.producer.PublishCopy(context.Background(), wire.Copy{ID: e.ID, Target: e.Target, At: e.DueAt, Body: e.Body,
		Props: e.Props, Hops: e.Hops, Gen: q.Gen})
	require.NoError(h.t, err)
}

// staleDropped waits until n stale copies were dropped.
func staleDropped(t *testing.T, m *Metrics, n int) {
	t.Helper()
	require.Eventually(t, func() bool {
		return testutil.ToFloat64(m.stored.WithLabelValues(store.PutStale.String())) >= float64(n)
	}, 30*time.Second, 20*time.Millisecond, "fewer than %d stale copies dropped", n)
}

// TestRescheduleBackToTheBroker moves alerts waiting in the wheel stage farther than it
// holds, and stages every point where a rescheduler can stop between its steps: each
// alert is handed off once, never before the due time it ends up with (the new one when
// the copy became the alert, the old one when it did not), and a copy that lost is
// dropped on arrival.
func TestRescheduleBackToTheBroker(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("requeue")
	ctx := context.Background()

	names := []string{"moved", "no-settle", "no-publish", "publish-failed"}
	old := map[string]time.Time{}
	for _, id := range names {
		old[id] = h.publish(id, 4*time.Second, "requeue "+id).DeliverAt
	}
	for _, id := range names {
		h.waiting(id)
	}
	far := time.Now().Add(12 * time.Second).Truncate(time.Millisecond)
	want := map[string]time.Time{}

	// The whole reschedule: the copy is the alert now.
	res, err := h.reschedule(ctx, "moved", far)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleRequeued, DueAt: far}, res)
	want["moved"] = far

	// Stopped after the publish: the copy hops on unsettled (no arrival reads the
	// records) and settles itself when it reaches the wheel stage, by which time the
	// alert went out at its old time: the copy is refused and dropped.
	got, err := h.ws.Reschedule(ctx, "no-settle", far, h.threshold)
	require.NoError(t, err)
	require.NotNil(t, got.Requeue)
	h.copyOf(*got.Requeue)
	want["no-settle"] = old["no-settle"]

	// Stopped before the publish: only a generation was allocated.
	got, err = h.ws.Reschedule(ctx, "no-publish", far, h.threshold)
	require.NoError(t, err)
	require.NotNil(t, got.Requeue)
	want["no-publish"] = old["no-publish"]

	// The publish reported an error though the copy landed (a lost reply): refused, the
	// alert keeps its time, and the copy, arriving after the refusal, is dropped.
	got, err = h.ws.Reschedule(ctx, "publish-failed", far, h.threshold)
	require.NoError(t, err)
	refused, err := h.ws.SettleRequeue(ctx, "publish-failed", got.Requeue.Gen, far, false)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooFar, refused.Result)
	h.copyOf(*got.Requeue)
	want["publish-failed"] = old["publish-failed"]

	h.rec.waitAll(t, names, 60*time.Second)
	h.settle(names, m)
	staleDropped(t, m, 1)
	// The original message of each moved alert is in the broker no more; a redelivery of
	// it (a consumer-group reset) is stale as well.
	r, err := h.ws.Routing(ctx, "moved")
	require.NoError(t, err)
	require.Equal(t, int64(1), r.Live)
	h.publish("moved", 0, "the original again")
	staleDropped(t, m, 2)
	_, p99, _ := h.rec.latenessReport(t, want) // once each, never early, carrying the due time it ended up with
	t.Logf("lateness p99 %s", p99)
	h.cameBackInTime(map[string]time.Time{"moved": far}) // (the copies that lost hopped too: their trace says so)
	// Those that kept their time went out from the wheel stage at it, not held until the
	// copy that lost came back.
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	for id, at := range want {
		if at.Equal(old[id]) {
			require.True(t, h.rec.at[id][0].Before(far), "alert %s kept its time %s but went out at %s, after its copy's %s",
				id, at.Format(time.StampMilli), h.rec.at[id][0].Format(time.StampMilli), far.Format(time.StampMilli))
		}
	}
}

// TestRescheduleBackToTheBrokerRacesDelivery moves alerts waiting in the wheel stage
// farther than it holds at the moment they fall due, while the scheduler claims and
// hands them off: each is handed off exactly once, at the due time the answer implies
// (requeued: the new one; too late or delivered: its own), never early.
func TestRescheduleBackToTheBrokerRacesDelivery(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("requeue-race")
	ctx := context.Background()

	const n = 30
	ids := ids("far-race", n)
	due := map[string]time.Time{}
	for i, id := range ids {
		due[id] = h.publish(id, 3500*time.Millisecond+time.Duration(i)*19*time.Millisecond, "far race "+id).DeliverAt
	}
	var (
		mu      sync.Mutex
		answers = map[string]store.Rescheduled{}
		wg      sync.WaitGroup
	)
	for i, id := range ids {
		wg.Add(1)
		at := due[id].Add(time.Duration(i%7-3) * time.Millisecond)
		time.AfterFunc(time.Until(at), func() {
			defer wg.Done()
			res, err := h.reschedule(ctx, id, due[id].Add(8*time.Second))
			if err != nil {
				res = store.Rescheduled{}
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
		case store.RescheduleRequeued:
			want[id] = res.DueAt
		case store.RescheduleTooLate, store.RescheduleAlreadyDelivered:
			want[id] = due[id]
		default:
			t.Fatalf("%s: unexpected answer %s", id, res.Result)
		}
	}
	_, _, _ = h.rec.latenessReport(t, want)
	t.Logf("answers: %v", fmt.Sprint(counts))
}
