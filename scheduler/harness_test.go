package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/dingtalksim"
	"github.com/rocketdelay/rocketdelay/store"
)

// harness runs schedulers in-process against the local broker and Redis, on a topic,
// group and key prefix of the test's own.
type harness struct {
	t         *testing.T
	ns        string
	topic     string
	group     string
	ws        *store.WheelStage
	prefix    string // the Redis key prefix of this test
	levels    config.DelayLevels
	threshold time.Duration
	mode      string // scheduler.mode; "" is levels
	lease     time.Duration
	producer  *Producer
	rec       *recorder
	sim       *dingtalksim.Server // set by startSim
}

func newHarness(t *testing.T, threshold time.Duration) *harness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	h := &harness{
		t:         t,
		ns:        testenv.NameServer(t),
		topic:     testenv.Unique("rd_sched_"),
		group:     testenv.Unique("rd_sched_"),
		levels:    testenv.Levels(t),
		threshold: threshold,
		lease:     3 * time.Second,
		rec:       newRecorder(),
		prefix:    prefix,
	}
	h.ws = store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: h.lease})
	p, err := NewProducer(ProducerOptions{NameServers: []string{h.ns}, Topic: h.topic})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	h.producer = p
	return h
}

func (h *harness) options(name string) Options {
	return Options{
		NameServers:   []string{h.ns},
		Topic:         h.topic,
		Group:         h.group,
		Levels:        h.levels,
		Threshold:     h.threshold,
		Mode:          h.mode,
		Horizon:       24 * time.Hour,
		KnownTarget:   func(name string) bool { return name == "ops" },
		Brokers:       []string{testenv.Brokers(h.t)},
		SweepInterval: 200 * time.Millisecond,
		InstanceName:  testenv.Unique(name),
	}
}

// start runs a scheduler whose hand-offs go to the harness's recorder; it is stopped
// when the test ends unless the test stops it first.
func (h *harness) start(name string) (*Scheduler, *Metrics) {
	h.t.Helper()
	return h.startWith(name, h.rec)
}

func (h *harness) startWith(name string, handoff Delivery) (*Scheduler, *Metrics) {
	h.t.Helper()
	m := NewMetrics(prometheus.NewRegistry())
	s, err := New(h.options(name), h.ws, handoff, discardLogger().With("replica", name), m, time.Now)
	require.NoError(h.t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(h.t, s.Start(ctx))
	h.t.Cleanup(func() { stop(h.t, s) })
	return s, m
}

func stop(t *testing.T, s *Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}

func (h *harness) publish(id string, in time.Duration, body string) Published {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := h.producer.Publish(ctx, Publication{Target: "ops", ID: id, In: in, Body: []byte(body)})
	require.NoError(h.t, err)
	return pub
}

// publishAll publishes an alert for each of keys, the i-th due after delays[i] with the
// body "label key", and returns when each is due.
func (h *harness) publishAll(keys []string, delays []time.Duration, label string) map[string]time.Time {
	h.t.Helper()
	require.Len(h.t, delays, len(keys))
	due := make(map[string]time.Time, len(keys))
	for i, id := range keys {
		due[id] = h.publish(id, delays[i], label+" "+id).DeliverAt
	}
	return due
}

// every is n delays of d.
func every(n int, d time.Duration) []time.Duration {
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = d
	}
	return out
}

// discardLogger drops logs unless RD_TEST_LOG is set (testenv.Logger).
func discardLogger() *slog.Logger { return testenv.Logger() }

// recorder is a Delivery that records every hand-off with its time, and every
// rejection.
type recorder struct {
	mu       sync.Mutex
	rejected []delivery.Rejected
	at       map[string][]time.Time
	due      map[string]time.Time
	notify   chan struct{}
}

func newRecorder() *recorder {
	return &recorder{at: map[string][]time.Time{}, due: map[string]time.Time{}, notify: make(chan struct{}, 1)}
}

func (r *recorder) Reject(_ context.Context, rej delivery.Rejected) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, rej)
	return nil
}

func (r *recorder) Deliver(_ context.Context, a delivery.Alert) (store.Outcome, error) {
	now := time.Now()
	r.mu.Lock()
	r.at[a.ID] = append(r.at[a.ID], now)
	r.due[a.ID] = a.DueAt
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return store.Delivered, nil
}

func (r *recorder) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.at[id])
}

// countAll counts the ids handed off at least once.
func (r *recorder) countAll(ids []string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for _, id := range ids {
		if len(r.at[id]) > 0 {
			n++
		}
	}
	return n
}

// waitAll waits until every id was handed off at least once, or the deadline.
func (r *recorder) waitAll(t *testing.T, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		missing := 0
		for _, id := range ids {
			if len(r.at[id]) == 0 {
				missing++
			}
		}
		r.mu.Unlock()
		if missing == 0 {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d alerts were never handed off within %s", missing, len(ids), timeout)
		}
	}
}

// latenessReport checks that every id was handed off exactly once and never before its
// due time, and returns p50, p99 and max lateness.
func (r *recorder) latenessReport(t *testing.T, due map[string]time.Time) (p50, p99, worst time.Duration) {
	t.Helper()
	r.mu.Lock()
	defer r.mu.Unlock()
	var late []time.Duration
	for id, want := range due {
		got := r.at[id]
		require.Len(t, got, 1, "alert %s handed off %d times", id, len(got))
		require.False(t, got[0].Before(want), "alert %s handed off %s early", id, want.Sub(got[0]))
		require.Equal(t, want.UnixMilli(), r.due[id].UnixMilli(), "alert %s due time changed on the way", id)
		late = append(late, got[0].Sub(want))
	}
	slices.Sort(late)
	pct := func(p float64) time.Duration { return late[int(p*float64(len(late)-1))] }
	return pct(0.50), pct(0.99), late[len(late)-1]
}

// total sums every series of a counter or counter vector.
func total(c prometheus.Collector) float64 {
	ch := make(chan prometheus.Metric, 64)
	go func() { c.Collect(ch); close(ch) }()
	var sum float64
	for m := range ch {
		var pb dto.Metric
		_ = m.Write(&pb)
		sum += pb.GetCounter().GetValue()
	}
	return sum
}

func randomDelays(n int, maxDelay time.Duration, seed uint64) []time.Duration {
	rng := rand.New(rand.NewPCG(seed, 7))
	out := make([]time.Duration, n)
	for i := range out {
		out[i] = time.Duration(rng.Int64N(int64(maxDelay/time.Millisecond))) * time.Millisecond
	}
	return out
}

func ids(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = fmt.Sprintf("%s-%04d", prefix, i)
	}
	return out
}
