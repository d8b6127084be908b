package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// harness runs schedulers in-process against the local broker and Redis, on a topic,
// group and key prefix of the test's own.
type harness struct {
	t         testing.TB
	ns        string
	topic     string
	group     string
	ws        *store.WheelStage
	rdb       redis.UniversalClient // ws's client
	prefix    string                // the Redis key prefix of this test
	levels    config.DelayLevels
	threshold time.Duration
	mode      string // scheduler.mode; "" is levels
	lease     time.Duration
	liveness  time.Duration // T of ws: the scheduler.liveness of the tests' replicas
	shards    int           // ws's shards (redis.shards); 0 is 1
	producer  *wire.Producer
	raw       rocketmq.Producer // sends messages as they are, outside the wire contract
	rec       *recorder
	sim       *chatsim.Server // set by startSim
	topics    map[string]topic.Target
	log       slog.Handler  // the schedulers' log; nil drops it (unless RD_TEST_LOG)
	retry     RetryJob      // the replicas' retry job (SetRetryJob); nil: none
	replicas  []*replica    // the subprocesses started by startReplica
	grace     time.Duration // the replicas' scheduler.grace; 0 is the default
}

func newHarness(t testing.TB, threshold time.Duration) *harness {
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
		liveness:  config.DefaultLiveness,
		rec:       newRecorder(),
		prefix:    prefix,
		rdb:       rdb,
	}
	h.ws = store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: h.lease, Liveness: h.liveness})
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{h.ns}, Topic: h.topic})
	require.NoError(t, err)
	t.Cleanup(func() { p.Close() })
	h.producer = p
	raw, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{h.ns})),
		producer.WithGroupName("rocketdelay-test-raw"), producer.WithInstanceName(testenv.Unique("raw")))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	t.Cleanup(func() { _ = raw.Shutdown() })
	h.raw = raw
	return h
}

// setStage makes lease and liveness the wheel stage's, and so the replicas' the harness
// starts from here on (replicaConfig's too).
func (h *harness) setStage(lease, liveness time.Duration) {
	h.lease, h.liveness = lease, liveness
	h.ws = store.NewWheelStage(h.rdb, h.prefix, store.WheelStageOptions{Lease: lease, Liveness: liveness, Shards: h.shards})
}

// setShards splits the wheel stage of the replicas the harness starts from here on into n
// shards.
func (h *harness) setShards(n int) {
	h.shards = n
	h.setStage(h.lease, h.liveness)
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
		KnownTarget:   func(name string) bool { _, ok := h.topics[name]; return ok || name == "ops" },
		Topics:        h.topics,
		CheckBody:     dingTalkBodies(h.t),
		Brokers:       []string{testenv.Brokers(h.t)},
		SweepInterval: 200 * time.Millisecond,
		Grace:         h.grace,
		InstanceName:  testenv.Unique(name),
		Liveness:      heartOf(h.t, h.ws, nil),
	}
}

// heartOf returns ws's heartbeat on a Redis client of its own, as a replica has (see
// store.OpenBeatRedis): through proxy when it is not nil. The client is closed when the
// test ends.
func heartOf(t testing.TB, ws *store.WheelStage, proxy *testenv.Proxy) *store.Liveness {
	t.Helper()
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	if proxy != nil {
		opts.Addr = proxy.Addr()
	}
	opts.PoolSize, opts.MaxRetries, opts.ContextTimeoutEnabled = 2, -1, true
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return ws.Liveness(rdb)
}

// dingTalkBodies checks the bodies of every chat target of the tests (they are DingTalk
// robot groups) as the service checks them.
func dingTalkBodies(t testing.TB) func(target string, body []byte) error {
	t.Helper()
	s, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{"any": {Protocol: dingtalk.New(""),
		Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	return func(_ string, body []byte) error { return s.Check("any", body) }
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
	logger := discardLogger()
	if h.log != nil {
		logger = slog.New(h.log)
	}
	s, err := New(h.options(name), h.ws, handoff, logger.With("replica", name), m, time.Now)
	require.NoError(h.t, err)
	if h.retry != nil {
		s.SetRetryJob(h.retry)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(h.t, s.Start(ctx))
	h.t.Cleanup(func() { stop(h.t, s) })
	return s, m
}

func stop(t testing.TB, s *Scheduler) {
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	require.NoError(t, s.Stop(ctx))
}

func (h *harness) publish(id string, in time.Duration, body string) wire.Published {
	h.t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	pub, err := h.producer.Publish(ctx, wire.Publication{Target: "ops", ID: id, In: in, Body: []byte(body)})
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
	// explain, when set, says what is known of the ids waitAll gave up on.
	explain func(t testing.TB, missing []string)
}

func newRecorder() *recorder {
	return &recorder{at: map[string][]time.Time{}, due: map[string]time.Time{}, notify: make(chan struct{}, 1)}
}

// Stop does nothing: nothing waits to be sent in a recorder.
func (r *recorder) Stop() {}

func (r *recorder) Reject(_ context.Context, rej delivery.Rejected) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rejected = append(r.rejected, rej)
	return nil
}

func (r *recorder) Deliver(_ context.Context, a sender.Alert) (store.Receipt, error) {
	now := time.Now()
	r.mu.Lock()
	r.at[a.ID] = append(r.at[a.ID], now)
	r.due[a.ID] = a.Due
	r.mu.Unlock()
	select {
	case r.notify <- struct{}{}:
	default:
	}
	return store.Receipt{Outcome: store.Delivered}, nil
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
func (r *recorder) waitAll(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		r.mu.Lock()
		var missing []string
		for _, id := range ids {
			if len(r.at[id]) == 0 {
				missing = append(missing, id)
			}
		}
		r.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-r.notify:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			if r.explain != nil {
				r.explain(t, missing)
			}
			t.Fatalf("%d of %d alerts were never handed off within %s: %v", len(missing), len(ids), timeout,
				missing[:min(len(missing), 10)])
		}
	}
}

// settle waits until nothing of ids can be handed off again: the wheel stage holds
// nothing waiting or in flight, each id has the done marker of a delivery (a later copy
// of it, from a hop still in the broker or a duplicate publish, is then dropped by Put),
// and each running replica of ms finished the hand-off of every entry it claimed (none
// still queued in-process, where a claim that ran out would not stop a hand-off to the
// recorder). Checks for duplicates come after it; a fixed sleep would let a late
// duplicate through.
func (h *harness) settle(ids []string, ms ...*Metrics) {
	h.t.Helper()
	ctx := context.Background()
	why := ""
	settled := func() bool {
		waiting, inflight, err := h.ws.Stats(ctx)
		if err != nil || waiting != 0 || inflight != 0 {
			why = fmt.Sprintf("wheel stage: %d waiting, %d in flight (err %v)", waiting, inflight, err)
			return false
		}
		for _, id := range ids {
			if ok, err := h.ws.IsDelivered(ctx, id); err != nil || !ok {
				why = fmt.Sprintf("%s has no delivered done marker (err %v)", id, err)
				return false
			}
		}
		for i, m := range ms {
			claimed := testutil.ToFloat64(m.claims.WithLabelValues("won")) + testutil.ToFloat64(m.recovered) +
				testutil.ToFloat64(m.claims.WithLabelValues("adopted"))
			if done := total(m.handoffs); done != claimed {
				why = fmt.Sprintf("replica %d claimed %.0f entries and finished %.0f hand-offs", i, claimed, done)
				return false
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			h.t.Fatalf("not settled within 60s: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// latenessReport checks that every id was handed off exactly once and never before its
// due time, and returns p50, p99 and max lateness.
func (r *recorder) latenessReport(t testing.TB, due map[string]time.Time) (p50, p99, worst time.Duration) {
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
	q := quantile.Summarize(late)
	return q.P50, q.P99, q.Max
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
