package scheduler

import (
	"context"
	"errors"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestEndToEndRandomDelays sends 200 alerts with random delays of 0–90 s through the
// real broker (several hops each on the test levels) and Redis: each is handed off
// exactly once, never before its due time.
func TestEndToEndRandomDelays(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("e2e")

	const n = 200
	keys := ids("e2e", n)
	due := h.publishAll(keys, randomDelays(n, 90*time.Second, uint64(time.Now().UnixNano())), "alert")
	h.rec.waitAll(t, keys, 150*time.Second)
	h.settle(keys, m)
	p50, p99, worst := h.rec.latenessReport(t, due)
	t.Logf("%d alerts, delays 0–90s: lateness p50 %s, p99 %s, max %s", n, p50, p99, worst)

	require.Greater(t, total(m.hops), 0.0, "no hop was published")
	require.Equal(t, float64(n), testutil.ToFloat64(m.handoffs.WithLabelValues("ok")))
	// A hop whose publish timed out under load is retried by RocketMQ: allowed, and
	// harmless, as the exactly-once check above shows.
	t.Logf("messages handed back to RocketMQ for a retry: %.0f", total(m.retries))
}

// TestTwoReplicasNoDuplicates runs two replicas in one group: every alert is handed off
// exactly once.
func TestTwoReplicasNoDuplicates(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, ma := h.start("twin-a")
	_, mb := h.start("twin-b")

	const n = 200
	keys := ids("twin", n)
	due := h.publishAll(keys, randomDelays(n, 20*time.Second, 42), "alert")
	h.rec.waitAll(t, keys, 60*time.Second)
	h.settle(keys, ma, mb)
	p50, p99, worst := h.rec.latenessReport(t, due)
	a := testutil.ToFloat64(ma.handoffs.WithLabelValues("ok"))
	b := testutil.ToFloat64(mb.handoffs.WithLabelValues("ok"))
	t.Logf("replica a handed off %.0f, b %.0f; lateness p50 %s, p99 %s, max %s", a, b, p50, p99, worst)
	require.Equal(t, float64(n), a+b)
}

// TestTwoReplicasOnShards runs two replicas on a wheel stage split into three shards (on
// one Redis): every alert is handed off exactly once, the alerts spread over the shards
// (each shard's tag holds done markers), and a cancel finds its alert's shard from the id.
func TestTwoReplicasOnShards(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setShards(3)
	_, ma := h.start("shard-a")
	_, mb := h.start("shard-b")

	const n = 200
	keys := ids("shard", n)
	// Cancelled while it hops (due in 15s, threshold 5s): the tombstone lies in its shard,
	// where its arrival's put finds it.
	cancelled := "shard-cancelled"
	h.publish(cancelled, 15*time.Second, "never")
	r, err := h.ws.Cancel(context.Background(), cancelled)
	require.NoError(t, err)
	require.True(t, r.Cancelled(), "cancel answered %s", r)
	due := h.publishAll(keys, randomDelays(n, 20*time.Second, 7), "alert")
	h.rec.waitAll(t, keys, 60*time.Second)
	h.settle(keys, ma, mb)
	p50, p99, worst := h.rec.latenessReport(t, due)
	a := testutil.ToFloat64(ma.handoffs.WithLabelValues("ok"))
	b := testutil.ToFloat64(mb.handoffs.WithLabelValues("ok"))
	t.Logf("3 shards: replica a handed off %.0f, b %.0f; lateness p50 %s, p99 %s, max %s", a, b, p50, p99, worst)
	require.Equal(t, float64(n), a+b, "each alert once, the cancelled one never")
	require.Zero(t, h.rec.count(cancelled), "the cancelled alert was handed off")
	for i := range 3 {
		tag := "{" + store.ShardTag(h.prefix, i, 3) + "}"
		done, err := h.rdb.Keys(context.Background(), tag+":done:*").Result()
		require.NoError(t, err)
		require.NotEmpty(t, done, "shard %d (%s) delivered nothing", i, tag)
		require.Less(t, len(done), n, "shard %d holds every alert", i)
	}
}

// TestRestartDeliversWheelStageEntries stops a replica while its alerts wait in the
// wheel stage; a new replica loads them from Redis and delivers them.
func TestRestartDeliversWheelStageEntries(t *testing.T) {
	t.Parallel()
	// A threshold of 20s lets alerts due in 12s go straight to the wheel stage, and leaves
	// the first replica 12s to store them and stop before any falls due, however loaded
	// the machine.
	h := newHarness(t, 20*time.Second)
	first, _ := h.start("restart-1")

	const n = 20
	keys := ids("restart", n)
	due := h.publishAll(keys, every(n, 12*time.Second), "restart")
	require.Eventually(t, func() bool {
		waiting, _, err := h.ws.Stats(context.Background())
		return err == nil && waiting == n
	}, 20*time.Second, 50*time.Millisecond, "the alerts never reached the wheel stage")
	stop(t, first)
	require.Zero(t, h.rec.countAll(keys), "handed off before the restart")

	_, m := h.start("restart-2")
	h.rec.waitAll(t, keys, 30*time.Second)
	h.settle(keys, m)
	p50, p99, worst := h.rec.latenessReport(t, due)
	t.Logf("after restart: lateness p50 %s, p99 %s, max %s", p50, p99, worst)
}

// TestDuplicatePublishHandedOffOnce publishes the same RD_ID twice before and once after
// its hand-off: one hand-off.
func TestDuplicatePublishHandedOffOnce(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("dup")
	keys := []string{"dup-1", "dup-2"}

	first := h.publish("dup-1", 2*time.Second, "first")
	h.publish("dup-1", 2*time.Second, "second")
	h.publish("dup-2", 8*time.Second, "hops twice") // through a hop, duplicated
	h.publish("dup-2", 8*time.Second, "hops twice")
	h.rec.waitAll(t, keys, 40*time.Second)
	h.settle(keys, m)
	h.publish("dup-1", 0, "after delivery")
	// Every one of the five publishes reached the wheel stage's Put (stored, or dropped
	// there as a duplicate or as done): none is still on its way to a hand-off.
	puts := func(r store.PutResult) float64 { return testutil.ToFloat64(m.stored.WithLabelValues(r.String())) }
	require.Eventually(t, func() bool { return puts(store.PutStored)+puts(store.PutDone)+puts(store.PutDuplicate) >= 5 },
		40*time.Second, 50*time.Millisecond, "a publish never reached the wheel stage")
	h.settle(keys, m)

	require.Equal(t, 1, h.rec.count("dup-1"))
	require.Equal(t, 1, h.rec.count("dup-2"))
	require.False(t, h.rec.at["dup-1"][0].Before(first.DeliverAt))
	require.Equal(t, 2.0, puts(store.PutStored))
	require.GreaterOrEqual(t, puts(store.PutDone)+puts(store.PutDuplicate), 3.0)
}

// TestCancelBothStages cancels one alert waiting in the wheel stage and one still
// hopping through the broker; neither is handed off, a control alert is.
func TestCancelBothStages(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("cancel")
	ctx := context.Background()

	h.publish("c-wheel", 4*time.Second, "cancel me in the wheel stage")
	require.Eventually(t, func() bool {
		due, err := h.ws.DueWithin(ctx, time.Minute, 10)
		return err == nil && len(due) == 1 && due[0].ID == "c-wheel"
	}, 10*time.Second, 20*time.Millisecond)
	res, err := h.ws.Cancel(ctx, "c-wheel")
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, res)

	h.publish("c-hop", 12*time.Second, "cancel me while hopping")
	res, err = h.ws.Cancel(ctx, "c-hop")
	require.NoError(t, err)
	require.Equal(t, store.CancelTombstoned, res)

	h.publish("c-ok", 13*time.Second, "control")
	h.rec.waitAll(t, []string{"c-ok"}, 40*time.Second)
	// The alert cancelled while hopping ends at the wheel stage's Put, which drops it.
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.cancelled) >= 1 }, 40*time.Second, 50*time.Millisecond,
		"the alert cancelled while hopping never reached the wheel stage")
	h.settle([]string{"c-ok"}, m)
	require.Zero(t, h.rec.count("c-wheel"))
	require.Zero(t, h.rec.count("c-hop"))
	require.Equal(t, 1.0, testutil.ToFloat64(m.cancelled), "the alert cancelled while hopping was not dropped by the wheel stage")

	// Too late once delivered.
	res, err = h.ws.Cancel(ctx, "c-ok")
	require.NoError(t, err)
	require.Equal(t, store.CancelAlreadyDelivered, res)
}

// TestBadInputsAreRejected mixes every kind of bad input with a good alert: each bad one
// is counted under its reason and acknowledged, the good one is delivered.
func TestBadInputsAreRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("bad")
	now := time.Now()
	at := func(d time.Duration) string { return strconv.FormatInt(now.Add(d).UnixMilli(), 10) }

	bad := []struct {
		reason wire.RejectReason
		props  map[string]string
		body   string
	}{
		{wire.RejectMissingTarget, map[string]string{wire.PropDeliverAt: at(time.Second)}, "x"},
		{wire.RejectUnknownTarget, map[string]string{wire.PropTarget: "nobody", wire.PropDeliverAt: at(time.Second)}, "x"},
		{wire.RejectMissingDue, map[string]string{wire.PropTarget: "ops"}, "x"},
		{wire.RejectBadDue, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: "soon"}, "x"},
		{wire.RejectBadDue, map[string]string{wire.PropTarget: "ops", wire.PropDelay: "-5000"}, "x"},
		{wire.RejectBadDue, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: "99999999999999999"}, "x"},
		{wire.RejectBeyondHorizon, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(48 * time.Hour)}, "x"},
		{wire.RejectBadBody, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(time.Second)}, `{"msgtype":"text","text":{}}`},
		{wire.RejectBadBody, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(time.Second)}, `{"msgtype":"link","link":{"title":"t","text":"` + strings.Repeat("y", 20001) + `","messageUrl":"u"}}`},
		{wire.RejectBadBody, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(time.Second)}, "\xff\xfe bad utf-8"},
		{wire.RejectBadID, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(time.Second), wire.PropID: "has space"}, "x"},
		{wire.RejectBadID, map[string]string{wire.PropTarget: "ops", wire.PropDeliverAt: at(time.Second), wire.PropID: ".."}, "x"},
	}
	want := map[wire.RejectReason]float64{}
	ctx := context.Background()
	for i, b := range bad {
		msg := primitive.NewMessage(h.topic, []byte(b.body))
		msg.WithProperties(b.props)
		if _, ok := b.props[wire.PropID]; !ok {
			msg.WithProperty(wire.PropID, "bad-"+strconv.Itoa(i))
		}
		res, err := h.raw.SendSync(ctx, msg)
		require.NoError(t, err)
		require.Equal(t, primitive.SendOK, res.Status)
		want[b.reason]++
	}
	h.publish("good-after-bad", time.Second, "still works")
	h.rec.waitAll(t, []string{"good-after-bad"}, 30*time.Second)
	require.Eventually(t, func() bool {
		for reason, n := range want {
			if testutil.ToFloat64(m.rejected.WithLabelValues(string(reason))) != n {
				return false
			}
		}
		return true
	}, 10*time.Second, 50*time.Millisecond)
	for reason, n := range want {
		require.Equal(t, n, testutil.ToFloat64(m.rejected.WithLabelValues(string(reason))), string(reason))
	}
	require.Equal(t, 0.0, total(m.retries), "a rejected message was retried")
	require.Equal(t, 1, len(h.rec.at), "only the good alert is handed off")
}

// slowHandoff records like recorder but takes its time.
type slowHandoff struct {
	*recorder
	delay time.Duration
}

func (s slowHandoff) Deliver(ctx context.Context, a sender.Alert) (store.Receipt, error) {
	time.Sleep(s.delay)
	return s.recorder.Deliver(ctx, a)
}

// TestStopHandsBackClaimedEntries stops a replica while claimed alerts still wait for a
// slow hand-off: Stop finishes the running hand-offs and hands the queued ones back at
// once (in flight, owned by no claim, claimable now: the lease is an hour), the replica
// is gone, and a second replica's sweeper delivers them; every alert exactly once.
func TestStopHandsBackClaimedEntries(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setStage(time.Hour, h.liveness)
	opts := h.options("stop-1")
	opts.HandoffWorkers = 2
	s, err := New(opts, h.ws, slowHandoff{h.rec, 200 * time.Millisecond}, discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	require.NoError(t, s.Start(context.Background()))

	const n = 40
	keys := ids("stop", n)
	due := h.publishAll(keys, every(len(keys), 2*time.Second), "stop")
	// Wait until the first hand-offs happened: the rest are claimed and queued.
	require.Eventually(t, func() bool { h.rec.mu.Lock(); defer h.rec.mu.Unlock(); return len(h.rec.at) >= 2 },
		20*time.Second, 10*time.Millisecond)
	stopped := time.Now()
	stop(t, s)
	t.Logf("stopped in %s with %d of %d handed off", time.Since(stopped), len(h.rec.at), n)
	require.Less(t, len(h.rec.at), n, "everything was handed off before Stop: the test proves nothing")
	ctx := context.Background()
	require.Empty(t, h.heldBy(t, opts.InstanceName), "the stopped replica holds nothing")
	owners, err := h.rdb.HGetAll(ctx, "{"+h.prefix+"}:owner").Result()
	require.NoError(t, err)
	require.NotEmpty(t, owners, "nothing was in flight at the stop: the test proves nothing")
	now, err := h.ws.Time(ctx)
	require.NoError(t, err)
	for id, owner := range owners {
		require.Equal(t, "left:"+opts.InstanceName, owner, "%s", id)
		require.False(t, leaseEnd(t, h, id).After(now), "%s is claimable at once, not after its lease", id)
	}
	v, err := h.ws.Liveness(nil).View(ctx)
	require.NoError(t, err)
	require.Contains(t, v.Gone, opts.InstanceName)
	require.NotContains(t, v.Live, opts.InstanceName)

	_, m := h.start("stop-2")
	h.rec.waitAll(t, keys, 30*time.Second)
	h.settle(keys, m)
	h.rec.latenessReport(t, due)
	require.GreaterOrEqual(t, testutil.ToFloat64(m.recovered), float64(len(owners)),
		"the second replica's sweeper claimed what was handed back")
}

// leaseEnd is when the in-flight entry id's claim expires, by the Redis clock.
func leaseEnd(t *testing.T, h *harness, id string) time.Time {
	t.Helper()
	ms, err := h.rdb.ZScore(context.Background(), "{"+h.prefix+"}:inflight", id).Result()
	require.NoError(t, err)
	return time.UnixMilli(int64(ms))
}

// TestBacklogKeepsItsLeases makes one replica hold a backlog that takes longer than a
// lease to hand off, while a second replica sweeps: the holder is live, so its claims
// whose lease ran out are renewed, not taken over, and each alert is handed off once.
func TestBacklogKeepsItsLeases(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	opts := h.options("backlog-a")
	opts.HandoffWorkers = 2
	slow := slowHandoff{h.rec, 150 * time.Millisecond}
	ma := NewMetrics(prometheus.NewRegistry())
	a, err := New(opts, h.ws, slow, discardLogger(), ma, time.Now)
	require.NoError(t, err)
	require.NoError(t, a.Start(context.Background()))
	t.Cleanup(func() { stop(t, a) })

	const n = 60 // 60 × 150ms / 2 workers = 4.5s of hand-offs, longer than the 3s lease
	keys := ids("backlog", n)
	due := h.publishAll(keys, every(len(keys), 2*time.Second), "backlog")
	_, mb := h.start("backlog-b") // sweeps every 200ms, would take over expired leases
	h.rec.waitAll(t, keys, 60*time.Second)
	h.settle(keys, ma, mb)
	h.rec.latenessReport(t, due)
	require.Zero(t, testutil.ToFloat64(mb.recovered), "the other replica's sweeper took over alerts whose lease was kept")
}

// floodDelivery hands off like the recorder, but a hand-off of target "flood" takes
// slow, as when its robots are exhausted and its alerts cannot be merged. It counts the
// flood's hand-offs as they begin, and notes, for every alert of another target, how
// many had begun when its own hand-off did.
type floodDelivery struct {
	*recorder
	slow  time.Duration
	begun atomic.Int64

	mu    sync.Mutex
	ahead map[string]int64 // by id of an alert of another target
}

func (f *floodDelivery) Deliver(ctx context.Context, a sender.Alert) (store.Receipt, error) {
	if a.Target == "flood" {
		f.begun.Add(1)
		select {
		case <-time.After(f.slow):
		case <-ctx.Done():
			return store.Receipt{}, ctx.Err()
		}
	} else {
		f.mu.Lock()
		f.ahead[a.ID] = f.begun.Load()
		f.mu.Unlock()
	}
	return f.recorder.Deliver(ctx, a)
}

// floodSlow is how long one hand-off of the flood takes.
const floodSlow = 2 * time.Second

// floodRun runs one scheduler with 40 hand-off workers (the flood's share: 30 unless
// share says otherwise) on a harness of its own: floodN alerts of target "flood", each
// hand-off of which takes floodSlow, fall due at once, and 20 alerts of target "ops" (the
// calm ones) fall due one every 200ms from 1s after them. It returns when every alert was
// handed off and settled, with the calm alerts' due times, the flood's, and the delivery;
// floodSoFar is how many of the flood had been handed off when the last calm one was.
func floodRun(tb testing.TB, floodN, share int) (calmDue, floodDue map[string]time.Time, d *floodDelivery, h *harness, floodSoFar int) {
	tb.Helper()
	h = newHarness(tb, 5*time.Second)
	opts := h.options("flood")
	opts.KnownTarget = func(name string) bool { return name == "ops" || name == "flood" }
	opts.HandoffWorkers = 40
	opts.HandoffsPerTarget = share
	m := NewMetrics(prometheus.NewRegistry())
	d = &floodDelivery{recorder: h.rec, slow: floodSlow, ahead: map[string]int64{}}
	s, err := New(opts, h.ws, d, discardLogger(), m, time.Now)
	require.NoError(tb, err)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	require.NoError(tb, s.Start(ctx))
	defer stop(tb, s)

	// Due times are absolute (At), so that slow publishing cannot make a delay negative:
	// the calm alerts fall due 1s after the flood, or 1s after the last of the flood was
	// published when that took longer, one every 200ms, and each at least 1s after it is
	// published.
	flood := ids("flood", floodN)
	at := time.Now().Add(3 * time.Second)
	floodDue = map[string]time.Time{}
	for _, id := range flood {
		pub, err := h.producer.Publish(ctx, wire.Publication{Target: "flood", ID: id, At: at, Body: []byte("flood " + id)})
		require.NoError(tb, err)
		floodDue[id] = pub.DeliverAt
	}
	calmFrom := later(at, time.Now()).Add(time.Second)
	calm := ids("calm", 20)
	calmDue = map[string]time.Time{}
	for i, id := range calm {
		when := later(calmFrom.Add(time.Duration(i)*200*time.Millisecond), time.Now().Add(time.Second))
		pub, err := h.producer.Publish(ctx, wire.Publication{Target: "ops", ID: id, At: when, Body: []byte("calm " + id)})
		require.NoError(tb, err)
		calmDue[id] = pub.DeliverAt
	}
	h.rec.waitAll(tb, calm, 60*time.Second)
	floodSoFar = h.rec.countAll(flood)
	h.rec.waitAll(tb, flood, 90*time.Second)
	h.settle(append(flood, calm...), m)
	return calmDue, floodDue, d, h, floodSoFar
}

// TestFloodOnOneTargetLeavesOthersOnTime: 200 alerts of a target whose every hand-off
// takes 2s fall due at once; alerts of another target falling due meanwhile are handed
// off without waiting for the flood, because the flood holds only its share of the
// workers. Judged by order, not by lateness: a calm alert's hand-off begins while flood
// hand-offs due before it have still not begun (without the gate the flood takes every
// worker and the calm alert queues behind all of it: every flood hand-off has begun by
// then). BenchmarkFloodCalmLateness prints the lateness.
func TestFloodOnOneTargetLeavesOthersOnTime(t *testing.T) {
	t.Parallel()
	const floodN = 200
	// 200 hand-offs of 2s through the flood's 30 workers keep it busy for over 13s from its
	// due time; the calm target's 20 alerts fall due within 5s of it.
	calmDue, floodDue, d, h, floodSoFar := floodRun(t, floodN, 0)
	p50, p99, worst := h.rec.latenessReport(t, calmDue)
	t.Logf("calm target during the flood: lateness p50 %s, p99 %s, max %s; flood handed off by then: %d of %d",
		p50, p99, worst, floodSoFar, floodN)
	h.rec.latenessReport(t, floodDue) // the flood too: each alert once, none early
	require.Less(t, floodSoFar, floodN, "the flood was over before the calm alerts went out: the test proves nothing")
	d.mu.Lock()
	defer d.mu.Unlock()
	require.Len(t, d.ahead, len(calmDue))
	for id, begun := range d.ahead {
		require.Less(t, begun, int64(floodN), "calm alert %s was handed off after every flood hand-off had begun: it waited for the flood", id)
	}
}

// later is the later of a and b.
func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// retryLog records the scheduler's "handed back to RocketMQ for a retry" log lines: the
// stage and the error of each.
type retryLog struct {
	mu      sync.Mutex
	retries []handedBack
}

type handedBack struct{ stage, err string }

func (h *retryLog) Enabled(context.Context, slog.Level) bool { return true }
func (h *retryLog) Handle(_ context.Context, r slog.Record) error {
	if r.Message != "message handed back to RocketMQ for a retry" {
		return nil
	}
	var b handedBack
	r.Attrs(func(a slog.Attr) bool {
		switch a.Key {
		case "stage":
			b.stage = a.Value.String()
		case "err":
			b.err = a.Value.String()
		}
		return true
	})
	h.mu.Lock()
	h.retries = append(h.retries, b)
	h.mu.Unlock()
	return nil
}
func (h *retryLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h *retryLog) WithGroup(string) slog.Handler      { return h }

// of returns the recorded retries of stage.
func (h *retryLog) of(stage string) []handedBack {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []handedBack
	for _, b := range h.retries {
		if b.stage == stage {
			out = append(out, b)
		}
	}
	return out
}

// TestFirstHopsOfANewReplicaNeedNoRetry: alerts that need a hop reach a new replica
// one after another while the client is held in its route race (see slowRouteChange):
// the first hop opens the window, the next ones fall into it. Without the start-up probe
// that teaches the hop producer the topic's route before the consumer starts, those
// hops fail with "route info not found" and go back to RocketMQ for a retry. A hop whose
// publish timed out on a loaded machine goes back too; that is not the race, and is
// allowed.
func TestFirstHopsOfANewReplicaNeedNoRetry(t *testing.T) {
	observe(t, slowRouteChange{pause: time.Second}) // not parallel: the client's log is global
	h := newHarness(t, 5*time.Second)
	retries := &retryLog{}
	h.log = retries
	_, m := h.start("first")
	const n = 50
	keys := ids("first", n)
	due := map[string]time.Time{}
	for _, id := range keys {
		due[id] = h.publish(id, 9*time.Second, "first "+id).DeliverAt
		time.Sleep(40 * time.Millisecond)
	}
	h.rec.waitAll(t, keys, 90*time.Second)
	h.settle(keys, m)
	h.rec.latenessReport(t, due)
	require.GreaterOrEqual(t, total(m.hops), float64(n), "the alerts did not hop")
	hops := retries.of("hop")
	// The log holds every hop retry the metric counts: an empty list below means none met
	// the race, not that the log missed them.
	require.Equal(t, testutil.ToFloat64(m.retries.WithLabelValues("hop")), float64(len(hops)))
	for _, b := range hops {
		require.NotContains(t, b.err, "route info not found", "a first hop met the route race and was handed back to RocketMQ")
	}
	if len(hops) > 0 {
		t.Logf("hops handed back for another reason (allowed): %v", hops)
	}
}

// rejectFailsOnce records rejections like the recorder, but the first one fails, as when
// Postgres blips: the message goes back to RocketMQ for a retry.
type rejectFailsOnce struct {
	*recorder
	failed atomic.Bool
}

func (r *rejectFailsOnce) Reject(ctx context.Context, rej delivery.Rejected) error {
	if r.failed.CompareAndSwap(false, true) {
		return errors.New("postgres blipped")
	}
	return r.recorder.Reject(ctx, rej)
}

// TestFirstRetryOfANewGroupComesBackOnTime: a new consumer group's first retry comes back
// after its retry delay. RocketMQ keeps the retries of a group in its own topic
// (%RETRY%group), which the broker creates at the group's first heartbeat, often after
// the consumer has looked for its route; the client looks again only every 30s, and a
// retry of a new group waited that long (in one start of three, here). Start creates the
// retry topic, and waits for its route, before the consumer starts: judged by that order
// in the replica's log, whatever the machine's speed; how soon the retry came back is
// logged.
func TestFirstRetryOfANewGroupComesBackOnTime(t *testing.T) {
	t.Parallel()
	for i := range 5 {
		t.Run(strconv.Itoa(i), func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, 5*time.Second)
			log := &orderLog{}
			h.log = log
			d := &rejectFailsOnce{recorder: h.rec}
			_, m := h.startWith("retry", d)
			created, started := log.index("created topic", consumerRetryTopic(h.group)), log.index("scheduler started", "")
			require.NotEqual(t, -1, started)
			require.NotEqual(t, -1, created, "the group's retry topic was not created at start")
			require.Less(t, created, started, "the retry topic was created after the consumer started")
			msg := primitive.NewMessage(h.topic, []byte("x"))
			msg.WithProperties(map[string]string{wire.PropTarget: "nobody", wire.PropDeliverAt: "0", wire.PropID: "retry-1"})
			_, err := h.raw.SendSync(context.Background(), msg)
			require.NoError(t, err)
			require.Eventually(t, func() bool { return testutil.ToFloat64(m.retries.WithLabelValues("reject")) == 1 },
				20*time.Second, 20*time.Millisecond, "the first rejection did not fail")
			failed := time.Now()
			require.Eventually(t, func() bool { h.rec.mu.Lock(); defer h.rec.mu.Unlock(); return len(h.rec.rejected) == 1 },
				60*time.Second, 20*time.Millisecond, "the message never came back")
			t.Logf("the retry came back after %s (retry delay %s)", time.Since(failed), h.levels[0])
		})
	}
}

// orderLog is a slog handler that keeps, in order, the message and the topic attribute
// of every record.
type orderLog struct {
	mu      sync.Mutex
	records [][2]string
}

func (l *orderLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *orderLog) Handle(_ context.Context, r slog.Record) error {
	topic := ""
	r.Attrs(func(a slog.Attr) bool {
		if a.Key == "topic" {
			topic = a.Value.String()
		}
		return true
	})
	l.mu.Lock()
	defer l.mu.Unlock()
	l.records = append(l.records, [2]string{r.Message, topic})
	return nil
}
func (l *orderLog) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *orderLog) WithGroup(string) slog.Handler      { return l }

// index is the position of the first record with message msg (and topic, unless ""),
// or -1.
func (l *orderLog) index(msg, topic string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.IndexFunc(l.records, func(r [2]string) bool { return r[0] == msg && (topic == "" || r[1] == topic) })
}
