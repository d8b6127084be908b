package scheduler

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// blipAt is a Delivery that cuts its replica off Redis (a proxy taken down) at one
// hand-off, for blip, then lets it back: the next write of that hand-off (its release,
// or its give-back) fails until Redis is reachable again.
type blipAt struct {
	*recorder
	proxy   *testenv.Proxy
	blip    time.Duration
	fail    bool // the cut hand-off also fails (is given back)
	once    sync.Once
	restore sync.WaitGroup
}

func (b *blipAt) Deliver(ctx context.Context, a sender.Alert) (store.Receipt, error) {
	cut := false
	b.once.Do(func() {
		cut = true
		b.proxy.Down()
		b.restore.Go(func() { time.Sleep(b.blip); b.proxy.Up() })
	})
	if cut && b.fail {
		return store.Receipt{}, fmt.Errorf("robot pool: %w", store.ErrUnavailable)
	}
	return b.recorder.Deliver(ctx, a)
}

// proxiedStage returns a wheel stage on prefix whose connections go through a proxy the
// test can take down, with the lease and the liveness given, and its heartbeat, through
// the proxy too.
func proxiedStage(t *testing.T, prefix string, lease, liveness time.Duration) (*store.WheelStage, *store.Liveness, *testenv.Proxy) {
	t.Helper()
	rdb, proxy := testenv.ProxiedRedis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: lease, Liveness: liveness})
	return ws, heartOf(t, ws, proxy), proxy
}

// A release that fails because Redis is cut off right after a successful send is tried
// again until it lands, while the claim is held: the alert is released, and another
// replica's sweeper, which takes over what a replica holds once its liveness lapses (or
// a claim whose lease ran out), never sends it a second time. The blip (6s) outlasts
// go-redis's own retries (3 retries of 5 dials 100ms apart, with backoff: about 3.5s)
// and the lease (3s), and is shorter than the cut replica's liveness (10s), whose beats
// it cuts too. A cut longer than the liveness is a death: the claim is taken over, and
// the other replica may send again.
func TestReleaseAfterABlipLands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ws, heart, proxy := proxiedStage(t, h.prefix, 3*time.Second, 10*time.Second)
	cut := &blipAt{recorder: h.rec, proxy: proxy, blip: 6 * time.Second}
	ma := NewMetrics(prometheus.NewRegistry())
	opts := h.options("blip-a")
	opts.Liveness = heart
	a, err := New(opts, ws, cut, discardLogger(), ma, time.Now)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { stop(t, a) })
	_, mb := h.start("blip-b") // direct to Redis; its sweeper takes over whatever lease runs out

	h.publish("cut-release", time.Second, "x")
	h.rec.waitAll(t, []string{"cut-release"}, 30*time.Second)
	cut.restore.Wait()
	h.settle([]string{"cut-release"}, ma, mb)
	require.Equal(t, 1, h.rec.count("cut-release"), "handed off again after a release that failed")
}

// A give-back that fails because Redis is cut off is tried again while the claim is
// held, until it lands: the alert is handed off again after the blip plus its retry
// delay, not left to its lease. Judged by what the replica did (the give-back was
// retried, and never abandoned to the lease), not by how soon the alert came back: that
// is logged.
func TestGiveBackAfterABlipLands(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	const lease = 30 * time.Second
	ws, heart, proxy := proxiedStage(t, h.prefix, lease, 10*time.Second)
	const blip = 6 * time.Second // outlasts go-redis's own retries (about 3.5s), not the liveness
	cut := &blipAt{recorder: h.rec, proxy: proxy, blip: blip, fail: true}
	m := NewMetrics(prometheus.NewRegistry())
	logs := &logLines{}
	opts := h.options("blip-gb")
	opts.Liveness = heart
	a, err := New(opts, ws, cut, slog.New(logs), m, time.Now)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { stop(t, a) })

	due := h.publish("cut-give-back", time.Second, "x").DeliverAt
	h.rec.waitAll(t, []string{"cut-give-back"}, 2*lease)
	h.rec.mu.Lock()
	at := h.rec.at["cut-give-back"][0]
	h.rec.mu.Unlock()
	t.Logf("handed off again %s after its due time (blip %s, retry delay %s, lease %s)", at.Sub(due).Round(time.Millisecond),
		blip, DefaultRetryDelay, lease)
	h.settle([]string{"cut-give-back"}, m)
	require.Equal(t, 1, h.rec.count("cut-give-back"))
	require.False(t, logs.has("give-back failed; the entry is claimed again once this replica is gone, or its lease runs out"),
		"waited for the lease instead of the give-back")
	require.Positive(t, testutil.ToFloat64(m.storeRetries.WithLabelValues("give_back")), "the give-back never met the blip: the test proves nothing")
}

// logLines is a slog handler that keeps the message of every record.
type logLines struct {
	mu   sync.Mutex
	msgs []string
}

func (l *logLines) Enabled(context.Context, slog.Level) bool { return true }
func (l *logLines) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, r.Message)
	return nil
}
func (l *logLines) WithAttrs([]slog.Attr) slog.Handler { return l }
func (l *logLines) WithGroup(string) slog.Handler      { return l }

func (l *logLines) add(msg string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.msgs = append(l.msgs, msg)
}

// matching lists the records that contain s.
func (l *logLines) matching(s string) []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	var found []string
	for _, m := range l.msgs {
		if strings.Contains(m, s) {
			found = append(found, m)
		}
	}
	return found
}

// has reports whether a record with message msg was logged.
func (l *logLines) has(msg string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Contains(l.msgs, msg)
}

// An adopt whose reply is lost (the connection cut after the script ran; the client
// does not retry by itself here) is repeated with the same token: the alerts it adopted
// are handed off at once, not left in flight under a claim nobody knows of until the
// lease runs out.
func TestAdoptAfterALostReply(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ids := []string{"lost-adopt-1", "lost-adopt-2", "lost-adopt-3"}
	a, proxy := h.parkedForAdopt(ctx, "lost-adopt", ids, 30*time.Second)

	proxy.DropReply(func(req []byte) bool { return strings.Contains(string(req), h.prefix+"}:adopt:") })
	adopted, left, err := a.Adopt(ctx, "ops", 10)
	require.NoError(t, err)
	require.Equal(t, 3, adopted, "the repeat returns what the lost adopt took")
	require.Zero(t, left)
	h.rec.waitAll(t, ids, 20*time.Second) // well within the lease
	for _, id := range ids {
		require.Equal(t, 1, h.rec.count(id), id)
	}
}

// An adopt that ran but could not learn its outcome within a lease (its reply lost, then
// Redis out of reach for longer) fails for the sender that asked, and is repeated aside
// with the same token: what it took is handed off once Redis is back, not left in
// flight under a claim nobody knows of while the replica lives.
func TestAdoptWhoseOutcomeWasLostIsRepeated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	ids := []string{"orphan-adopt-1", "orphan-adopt-2", "orphan-adopt-3"}
	const lease = time.Second
	a, proxy := h.parkedForAdopt(ctx, "orphan-adopt", ids, lease)

	proxy.DropReplyAndGoDown(func(req []byte) bool { return strings.Contains(string(req), h.prefix+"}:adopt:") })
	_, _, err := a.Adopt(ctx, "ops", 10)
	require.ErrorIs(t, err, store.ErrUnavailable, "the adopt cannot learn its outcome within a lease")
	downAt := time.Now()
	require.Eventually(t, func() bool { return time.Since(downAt) > 3*lease }, 10*time.Second, 50*time.Millisecond)
	proxy.Up()
	h.rec.waitAll(t, ids, 60*time.Second) // while the replica that adopted them lives
	for _, id := range ids {
		require.Equal(t, 1, h.rec.count(id), id)
	}
}

// parkedForAdopt parks ids, due, for target "ops" under a replica "parker", and starts
// a replica whose claims have lease and whose Redis is reached through the proxy it
// returns.
func (h *harness) parkedForAdopt(ctx context.Context, name string, ids []string, lease time.Duration) (*Scheduler, *testenv.Proxy) {
	t := h.t
	t.Helper()
	due := time.Now().Add(-time.Second)
	_, err := h.ws.Liveness(nil).Beat(ctx, "parker")
	require.NoError(t, err)
	var parked []store.Parked
	for _, id := range ids {
		_, err := h.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
		c, err := h.ws.Claim(ctx, []string{id}, "parker")
		require.NoError(t, err)
		require.Len(t, c.Entries, 1)
		parked = append(parked, store.Parked{Claim: c.Entries[0].Claim(), DueAt: due})
	}
	_, err = h.ws.Park(ctx, "ops", time.Minute, parked...)
	require.NoError(t, err)

	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, opts.Addr)
	opts.Addr, opts.MaxRetries = proxy.Addr(), -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	a, err := New(h.options(name), store.NewWheelStage(rdb, h.prefix, store.WheelStageOptions{Lease: lease, Liveness: h.liveness}), h.rec,
		discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { stop(t, a) })
	return a, proxy
}

// A claim that ran but whose outcome the replica could not learn for longer than its
// retries last (the reply lost, then Redis unreachable past a lease; a write short of
// redis.durability does the same) leaves entries in flight under the claim's token,
// which no other replica takes over while this one is live. The replica repeats the
// same claim until it learns the outcome, and hands them off once Redis is back.
func TestClaimWhoseOutcomeWasLostIsRepeated(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	ids := []string{"orphan-claim-1", "orphan-claim-2", "orphan-claim-3"}
	due := time.Now().Add(-time.Second)
	for _, id := range ids {
		_, err := h.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
	}

	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, opts.Addr)
	opts.Addr, opts.MaxRetries = proxy.Addr(), -1
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	// The first request that names the alerts is a claim (the fire loop's or the
	// sweeper's) of some of them: it runs, its reply is lost, and Redis is out of the
	// replica's reach from that moment for three leases.
	var named atomic.Bool
	proxy.DropReplyAndGoDown(func(req []byte) bool {
		for _, id := range ids {
			if strings.Contains(string(req), id) {
				named.Store(true)
			}
		}
		return named.Load()
	})
	const lease = time.Second // how long a claim is retried before the old code gave up
	a, err := New(h.options("orphan-claim"), store.NewWheelStage(rdb, h.prefix, store.WheelStageOptions{Lease: lease, Liveness: h.liveness}), h.rec,
		discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	require.NoError(t, a.Start(ctx))
	t.Cleanup(func() { stop(t, a) })

	require.Eventually(t, named.Load, 30*time.Second, 5*time.Millisecond, "no claim named the alerts")
	downAt := time.Now()
	require.Eventually(t, func() bool { return time.Since(downAt) > 3*lease }, 10*time.Second, 50*time.Millisecond)
	proxy.Up()

	h.rec.waitAll(t, ids, 60*time.Second) // while the replica that holds them lives
	for _, id := range ids {
		require.Equal(t, 1, h.rec.count(id), id)
	}
}
