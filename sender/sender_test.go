package sender_test

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	dto "github.com/prometheus/client_model/go"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// syncBuffer is a log sink safe for concurrent writers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// harness is a simulator, a robot pool on the local Redis and senders sharing it.
type harness struct {
	t       *testing.T
	sim     *chatsim.Server
	simURL  string
	pool    *store.RobotPool
	picks   *latchedPool // pool with a latch on Pick: what the senders use
	logs    *syncBuffer
	robots  []sender.Robot
	secrets []string
}

// latchedPool is the harness's robot pool with a latch on Pick: while the latch is
// held, every Pick waits, as behind a slow Redis, so that a test can have alerts queue
// up before any robot is picked for them, however slowly its goroutines run. Window is
// the pool's (the sender paces by it).
type latchedPool struct {
	*store.RobotPool
	mu       sync.Mutex
	open     chan struct{} // closed, or nil, when picks go through
	reserved atomic.Int64  // picks that found the bucket empty and reserved a token
	// fullWhenBusy counts the picks of full messages (store.Full) made after a pick had
	// reserved a token: the target was busy, and those picks must be paced.
	fullWhenBusy atomic.Int64
}

// hold makes every Pick from now on wait for release.
func (p *latchedPool) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.open = make(chan struct{})
}

// release lets the waiting Picks, and every later one, go through.
func (p *latchedPool) release() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.open != nil {
		close(p.open)
		p.open = nil
	}
}

func (p *latchedPool) Pick(ctx context.Context, target string, robots []store.PoolRobot, opts store.PickOptions) (store.Pick, error) {
	p.mu.Lock()
	open := p.open
	p.mu.Unlock()
	if open != nil {
		select {
		case <-open:
		case <-ctx.Done():
			return store.Pick{}, ctx.Err()
		}
	}
	if opts.Pacing == store.Full && p.reserved.Load() > 0 {
		p.fullWhenBusy.Add(1)
	}
	pick, err := p.RobotPool.Pick(ctx, target, robots, opts)
	if pick.Reserved {
		p.reserved.Add(1)
	}
	return pick, err
}

// robotSpec describes one test robot: r<i> with token "tok-<i>-c0ffee" and, when signed,
// secret "SECsecret-<i>".
type robotSpec struct {
	signed  bool
	keyword string
}

func newHarness(t *testing.T, window time.Duration, simLimit int, specs ...robotSpec) *harness {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	h := &harness{t: t, pool: store.NewRobotPool(rdb, prefix, window), logs: &syncBuffer{}}
	h.picks = &latchedPool{RobotPool: h.pool}
	var simRobots []chatsim.Robot
	for i, s := range specs {
		r := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("tok-%d-c0ffee", i+1)), Keyword: s.keyword}
		if s.signed {
			r.SigningSecret = config.Secret(fmt.Sprintf("SECsecret-%d", i+1))
			h.secrets = append(h.secrets, r.SigningSecret.Reveal())
		}
		h.secrets = append(h.secrets, r.Token.Reveal())
		h.robots = append(h.robots, r)
		simRobots = append(simRobots, chatsim.Robot{Name: r.Name, Token: r.Token.Reveal(), Secret: r.SigningSecret.Reveal(), Keyword: s.keyword})
	}
	h.sim, h.simURL = testenv.DingTalkSim(t, chatsim.Options{Robots: simRobots, Limit: simLimit, Window: window, Throttle: time.Minute})
	// Every test checks that no log line holds a token or a secret.
	t.Cleanup(func() {
		logs := h.logs.String()
		for _, s := range h.secrets {
			require.NotContains(t, logs, s, "a secret leaked into the log")
		}
	})
	return h
}

// options are fast test settings; change fields as needed.
func (h *harness) options(limit int) sender.Options {
	return sender.Options{
		Targets:     map[string]sender.Target{"ops": {Protocol: dingtalk.New(h.simURL), Robots: h.robots}},
		Limit:       limit,
		HTTPTimeout: 2 * time.Second,
		Cooldown:    time.Minute,
		DisableFor:  time.Hour,
		Attempts:    5,
		BackoffBase: 10 * time.Millisecond,
		BackoffMax:  100 * time.Millisecond,
		MaxInFlight: 8,
	}
}

func (h *harness) sender(opts sender.Options) (*sender.Chat, *prometheus.Registry) {
	h.t.Helper()
	reg := prometheus.NewRegistry()
	logger := slog.New(slog.NewJSONHandler(h.logs, &slog.HandlerOptions{Level: slog.LevelDebug}))
	s, err := sender.NewChat(opts, h.picks, logger, sender.NewMetrics(reg), time.Now)
	require.NoError(h.t, err)
	h.t.Cleanup(s.Close)
	return s, reg
}

func (h *harness) token(i int) string { return h.robots[i].Token.Reveal() }

func (h *harness) noSecretIn(s string) {
	h.t.Helper()
	for _, sec := range h.secrets {
		require.NotContains(h.t, s, sec)
	}
}

// send sends m, a DingTalk message, to target through s, as producers publish it.
func send(s *sender.Chat, ctx context.Context, target string, m dingtalk.Message) error {
	return sendAt(s, ctx, target, m, time.Time{})
}

// sendAt sends m as an alert due at due.
func sendAt(s *sender.Chat, ctx context.Context, target string, m dingtalk.Message, due time.Time) error {
	body, err := dingtalk.MarshalMessage(m)
	if err != nil {
		return err
	}
	_, err = s.Send(ctx, sender.Alert{Target: target, Body: body, Due: due})
	return err
}

// sendAlert sends a and returns only its error.
func sendAlert(s *sender.Chat, ctx context.Context, a sender.Alert) error {
	_, err := s.Send(ctx, a)
	return err
}

func text(s string) dingtalk.Message {
	return dingtalk.Message{MsgType: dingtalk.TypeText, Text: &dingtalk.Text{Content: s}}
}

func failure(t *testing.T, err error) *sender.Failure {
	t.Helper()
	var f *sender.Failure
	require.ErrorAs(t, err, &f)
	return f
}

func TestSendEveryMessageTypeSignedWithKeyword(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true, keyword: "ALERT"})
	s, reg := h.sender(h.options(19))
	ctx := context.Background()
	msgs := []dingtalk.Message{
		{MsgType: dingtalk.TypeText, Text: &dingtalk.Text{Content: "disk full"}, At: &dingtalk.At{AtMobiles: []string{"13800000000"}, IsAtAll: true}},
		{MsgType: dingtalk.TypeMarkdown, Markdown: &dingtalk.Markdown{Title: "t", Text: "# disk <full> & more"}, At: &dingtalk.At{AtUserIDs: []string{"u1"}}},
		{MsgType: dingtalk.TypeLink, Link: &dingtalk.Link{Title: "t", Text: "x", MessageURL: "https://example.com"}},
		{MsgType: dingtalk.TypeActionCard, ActionCard: &dingtalk.ActionCard{Title: "t", Text: "x", SingleTitle: "open", SingleURL: "https://example.com"}},
		{MsgType: dingtalk.TypeFeedCard, FeedCard: &dingtalk.FeedCard{Links: []dingtalk.FeedLink{{Title: "a", MessageURL: "https://e", PicURL: "https://p"}}}},
	}
	for _, m := range msgs {
		require.NoError(t, send(s, ctx, "ops", m))
	}
	require.NoError(t, s.SendBody(ctx, "ops", []byte("plain text alert")))
	got := h.sim.Accepted()
	require.Len(t, got, 6)
	for i, m := range got {
		require.Equal(t, "r1", m.Robot)
		require.Contains(t, m.Text, "ALERT", "message %d", i)
	}
	require.Equal(t, []string{"text", "markdown", "link", "actionCard", "feedCard", "text"},
		[]string{got[0].MsgType, got[1].MsgType, got[2].MsgType, got[3].MsgType, got[4].MsgType, got[5].MsgType})
	require.Contains(t, string(got[0].Body), `"at":{"atMobiles":["13800000000"],"isAtAll":true}`)
	require.Contains(t, string(got[1].Body), `"atUserIds":["u1"]`)
	require.Contains(t, string(got[1].Body), `# disk <full> & more`)
	require.Equal(t, 6.0, testutil.ToFloat64(prometheusCounter(t, reg, "rocketdelay_sender_delivered_total")))

	// Invalid input and unknown targets are permanent, without a request.
	f := failure(t, s.SendBody(ctx, "ops", []byte(`{"msgtype":"link"}`)))
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.ErrorIs(t, f, sender.ErrInvalidBody)
	f = failure(t, send(s, ctx, "nope", text("x")))
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.Equal(t, 6, h.sim.Stats().Requests)
}

// prometheusCounter sums a metric family of reg.
func prometheusCounter(t *testing.T, reg *prometheus.Registry, name string) prometheus.Collector {
	t.Helper()
	return gathered{reg: reg, name: name}
}

type gathered struct {
	reg  *prometheus.Registry
	name string
}

func (g gathered) Describe(chan<- *prometheus.Desc) {}
func (g gathered) Collect(ch chan<- prometheus.Metric) {
	fams, _ := g.reg.Gather()
	sum := 0.0
	for _, f := range fams {
		if f.GetName() != g.name {
			continue
		}
		for _, m := range f.GetMetric() {
			sum += m.GetCounter().GetValue() + m.GetGauge().GetValue()
		}
	}
	ch <- prometheus.MustNewConstMetric(prometheus.NewDesc(g.name, "sum", nil, nil), prometheus.UntypedValue, sum)
}

func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	return testutil.ToFloat64(prometheusCounter(t, reg, name))
}

func TestThrottledRobotIsCooledAndSkipped(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true}, robotSpec{}, robotSpec{})
	s, reg := h.sender(h.options(19))
	ctx := context.Background()
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: dingtalk.ErrcodeSendTooFast}))
	require.NoError(t, h.sim.Inject(h.token(1), chatsim.Fault{Kind: chatsim.FaultThrottle})) // 302 redirects

	for i := range 4 {
		require.NoError(t, send(s, ctx, "ops", text(fmt.Sprintf("m%d", i))))
	}
	for _, m := range h.sim.Accepted() {
		require.Equal(t, "r3", m.Robot)
	}
	require.Len(t, h.sim.Accepted(), 4)
	st, err := h.pool.State(ctx, "ops", []string{"r1", "r2", "r3"})
	require.NoError(t, err)
	require.False(t, st[0].CoolingUntil.IsZero(), "r1 answered 130101")
	require.False(t, st[1].CoolingUntil.IsZero(), "r2 answered 302")
	require.True(t, st[2].CoolingUntil.IsZero())
	require.Equal(t, 2.0, metric(t, reg, "rocketdelay_sender_cooldowns_total"))
	require.Equal(t, 0.0, metric(t, reg, "rocketdelay_sender_failures_total"))
	require.Contains(t, h.logs.String(), "robot throttled")
}

func TestBrokenRobotIsDisabled(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true}, robotSpec{keyword: "kw"})
	opts := h.options(19)
	// The first robot's secret is wrong in the sender's configuration: 310000.
	robots := []sender.Robot{h.robots[0], h.robots[1]}
	robots[0].SigningSecret = "SECwrong-secret"
	opts.Targets["ops"] = sender.Target{Protocol: dingtalk.New(h.simURL), Robots: robots}
	h.secrets = append(h.secrets, "SECwrong-secret")
	s, reg := h.sender(opts)
	ctx := context.Background()

	require.NoError(t, send(s, ctx, "ops", text("one")))
	require.NoError(t, send(s, ctx, "ops", text("two")))
	got := h.sim.Accepted()
	require.Len(t, got, 2)
	require.Equal(t, "r2", got[0].Robot)
	require.Equal(t, "r2", got[1].Robot)
	st, err := h.pool.State(ctx, "ops", []string{"r1", "r2"})
	require.NoError(t, err)
	require.True(t, st[0].Disabled)
	require.Equal(t, 1.0, metric(t, reg, "rocketdelay_sender_robots_disabled_total"))
	require.Contains(t, h.logs.String(), `"msg":"robot broken; taken out of rotation"`)
	require.Contains(t, h.logs.String(), `"robot":"r1"`)

	// When the last robot breaks too, the send fails as robot_broken.
	require.NoError(t, h.sim.Inject(h.token(1), chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: dingtalk.ErrcodeNotInGroup}))
	f := failure(t, send(s, ctx, "ops", text("three")))
	require.Equal(t, sender.ClassRobotBroken, f.Class)
	require.ErrorIs(t, f, store.ErrNoRobot)
	require.True(t, f.Class.Retryable())
	h.noSecretIn(f.Error())
}

// Each transient failure is retried: a busy errcode, a 503, a dropped connection and an
// answer that does not come within the HTTP timeout; the fifth request succeeds.
func TestTransientIsRetriedWithBackoffThenSucceeds(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true})
	opts := h.options(19) // HTTPTimeout 2s: every answer but the stalled one comes far sooner
	s, reg := h.sender(opts)
	tok := h.token(0)
	for _, f := range []chatsim.Fault{
		{Kind: chatsim.FaultErrcode, Errcode: dingtalk.ErrcodeBusy, Count: 1},
		{Kind: chatsim.FaultStatus, Status: 503, Count: 1},
		{Kind: chatsim.FaultDrop, Count: 1},
		// An answer that would come long after the timeout (the simulator gives up on it
		// when the client does): only the timeout ends this request.
		{Kind: chatsim.FaultSlow, Delay: 10 * time.Minute, Count: 1},
	} {
		require.NoError(t, h.sim.Inject(tok, f))
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute) // without a timeout the send would hang here
	defer cancel()
	require.NoError(t, send(s, ctx, "ops", text("eventually")))
	require.Len(t, h.sim.Accepted(), 1)
	require.Equal(t, 5, h.sim.Stats().Requests)
	require.Equal(t, 4.0, testutil.ToFloat64(gathered{reg, "rocketdelay_sender_requests_total"})-1)
	require.Contains(t, h.logs.String(), "send failed; retrying")

	// A Retry-After beyond the backoff cap ends the send with a failure that says when
	// to retry, rather than holding it.
	require.NoError(t, h.sim.Inject(tok, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 429, RetryAfter: time.Second, Count: 2}))
	f := failure(t, send(s, context.Background(), "ops", text("after 429")))
	require.Equal(t, sender.ClassTransient, f.Class)
	require.Equal(t, time.Second, f.RetryAfter)
	require.Equal(t, 429, f.HTTPStatus)

	// Within the cap, the retry waits at least Retry-After.
	opts.BackoffMax = 2 * time.Second
	s2, _ := h.sender(opts)
	start := time.Now()
	require.NoError(t, send(s2, context.Background(), "ops", text("after 429")))
	require.GreaterOrEqual(t, time.Since(start), time.Second)
}

func TestTransientGivesUpAfterAttempts(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{})
	opts := h.options(19)
	opts.Attempts = 3
	s, reg := h.sender(opts)
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: dingtalk.ErrcodeBusy}))
	f := failure(t, send(s, context.Background(), "ops", text("never")))
	require.Equal(t, sender.ClassTransient, f.Class)
	require.Equal(t, 3, f.Attempts)
	require.Equal(t, -1, f.Code)
	require.Equal(t, "r1", f.Robot)
	require.Equal(t, 3, h.sim.Stats().Requests)
	require.Equal(t, 1.0, metric(t, reg, "rocketdelay_sender_failures_total"))
	h.noSecretIn(f.Error())
}

func TestPermanentIsNotRetried(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{}, robotSpec{})
	s, _ := h.sender(h.options(19))
	for _, tok := range []string{h.token(0), h.token(1)} {
		require.NoError(t, h.sim.Inject(tok, chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: 430102}))
	}
	f := failure(t, send(s, context.Background(), "ops", text("rejected content")))
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.Equal(t, 430102, f.Code)
	require.False(t, f.Class.Retryable())
	require.Equal(t, 1, h.sim.Stats().Requests)

	h.sim.ClearFaults("")
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultStatus, Status: 404}))
	require.NoError(t, h.sim.Inject(h.token(1), chatsim.Fault{Kind: chatsim.FaultStatus, Status: 404}))
	f = failure(t, send(s, context.Background(), "ops", text("404")))
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.Equal(t, 404, f.HTTPStatus)
	require.Equal(t, 2, h.sim.Stats().Requests)

	// A link over the size limit is refused before any request.
	big := dingtalk.Message{MsgType: dingtalk.TypeLink, Link: &dingtalk.Link{Title: "t", Text: strings.Repeat("x", 25000), MessageURL: "https://e"}}
	f = failure(t, send(s, context.Background(), "ops", big))
	require.Equal(t, sender.ClassPermanent, f.Class)
	require.Equal(t, 2, h.sim.Stats().Requests)
}

func TestCircuitBreakerStopsHammeringAFailingRobot(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{}, robotSpec{})
	opts := h.options(19)
	opts.BreakerFailures = 2
	opts.Attempts = 10
	s, _ := h.sender(opts)
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultStatus, Status: 500}))
	for i := range 8 {
		require.NoError(t, send(s, context.Background(), "ops", text(fmt.Sprint(i))))
	}
	require.Len(t, h.sim.Accepted(), 8)
	// r1 failed twice in a row, then its breaker kept it out of this sender's picks.
	require.Equal(t, 8+2, h.sim.Stats().Requests)
	require.Contains(t, h.logs.String(), "circuit breaker changed state")
}

func TestSplitTextIsDeliveredInOrder(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{keyword: "告警"}, robotSpec{signed: true})
	s, _ := h.sender(h.options(19))
	var b strings.Builder
	for i := 0; b.Len() < 45*1024; i++ {
		fmt.Fprintf(&b, "line %05d: 磁盘使用率超过阈值 <host-%d> & \"quoted\"\n", i, i)
	}
	require.NoError(t, send(s, context.Background(), "ops", text(b.String())))
	got := h.sim.Accepted()
	require.Len(t, got, 3)
	var joined strings.Builder
	for i, m := range got {
		require.LessOrEqual(t, len(m.Body), dingtalk.MaxBodyBytes)
		label := fmt.Sprintf("(%d/3)\n", i+1)
		require.True(t, strings.HasPrefix(m.Text, label), "part %d starts with its number", i+1)
		c := strings.TrimPrefix(m.Text, label)
		if m.Robot == "r1" {
			c = strings.TrimSuffix(c, "\n告警")
		}
		joined.WriteString(c)
	}
	require.Equal(t, b.String(), joined.String())
}

func TestWaitsForAFreeRobotAndHonoursContext(t *testing.T) {
	h := newHarness(t, 2*time.Second, 20, robotSpec{})
	opts := h.options(2)
	s, reg := h.sender(opts)
	ctx := context.Background()
	require.NoError(t, send(s, ctx, "ops", text("1")))
	require.NoError(t, send(s, ctx, "ops", text("2")))
	// The third waits for the first to leave the window.
	require.NoError(t, send(s, ctx, "ops", text("3")))
	got := h.sim.Accepted()
	require.Len(t, got, 3)
	require.GreaterOrEqual(t, got[2].At.Sub(got[0].At), 2*time.Second-50*time.Millisecond)
	wait := histogram(t, reg, "rocketdelay_sender_robot_wait_seconds")
	require.EqualValues(t, 3, wait.GetSampleCount(), "every send's wait is observed")
	require.Greater(t, wait.GetSampleSum(), 1.5, "the third send waited for a window slot")

	cctx, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	defer cancel()
	require.NoError(t, send(s, ctx, "ops", text("4")))
	f := failure(t, send(s, cctx, "ops", text("5")))
	require.Equal(t, sender.ClassTransient, f.Class)
	require.True(t, errors.Is(f, context.DeadlineExceeded))

	opts.MaxWait = 10 * time.Millisecond
	s2, _ := h.sender(opts)
	f = failure(t, send(s2, ctx, "ops", text("6")))
	require.Equal(t, sender.ClassTransient, f.Class)
	require.Greater(t, f.RetryAfter, time.Duration(0))
}

// TestBurstAcrossFourSenders sends 1000 alerts through four senders sharing a pool of
// five robots (limit 19 per window, the simulator allowing 20), with coalescing off:
// DingTalk never sees a robot over its limit, and every alert arrives exactly once. The
// pool has its window guard, as in production (sender.windowGuard): the simulator counts
// a request when it arrives, a loaded machine's moment after the pick; without it one
// request in a run of make test arrived over the limit.
func TestBurstAcrossFourSenders(t *testing.T) {
	const (
		window = 2 * time.Second
		guard  = 200 * time.Millisecond
		alerts = 1000
	)
	h := newHarness(t, window, 20, robotSpec{signed: true}, robotSpec{}, robotSpec{keyword: "alert"}, robotSpec{signed: true}, robotSpec{})
	h.pool.WithGuard(guard)
	var senders []*sender.Chat
	opts := h.options(19)
	opts.Coalesce = config.CoalesceOff // every alert is one message here
	for range 4 {
		s, _ := h.sender(opts)
		senders = append(senders, s)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	var wg sync.WaitGroup
	errs := make(chan error, alerts)
	for i := range alerts {
		wg.Go(func() {
			if err := send(senders[i%4], ctx, "ops", text(fmt.Sprintf("alert-%04d", i))); err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	t.Logf("simulator: %+v", h.sim.Stats())
	for err := range errs {
		require.NoError(t, err)
	}
	elapsed := time.Since(start)

	stats := h.sim.Stats()
	require.Zero(t, stats.OverLimit, "DingTalk saw a robot over its limit")
	got := h.sim.Accepted()
	require.Len(t, got, alerts)
	seen := map[string]bool{}
	perRobot := map[string]int{}
	for _, m := range got {
		id := strings.TrimSuffix(m.Text, "\nalert")
		require.False(t, seen[id], "%s delivered twice", id)
		seen[id] = true
		perRobot[m.Robot]++
	}
	for i := range alerts {
		require.True(t, seen[fmt.Sprintf("alert-%04d", i)])
	}
	windows := elapsed.Seconds() / window.Seconds()
	t.Logf("%d alerts in %s = %.1f windows: %.1f sends per window (pool capacity %d); per robot %v",
		alerts, elapsed.Round(time.Millisecond), windows, float64(alerts)/windows, 5*19, perRobot)
}

// An alert whose Confirm refuses it right before the request is not sent, costs no slot
// of the robot's window, and fails with the confirm's error; one confirmed is sent. With
// coalescing on or off.
func TestConfirmGuardsEveryRequest(t *testing.T) {
	for _, coalesce := range []string{config.CoalesceAuto, config.CoalesceOff} {
		t.Run(coalesce, func(t *testing.T) {
			h := newHarness(t, time.Minute, 20, robotSpec{})
			opts := h.options(19)
			opts.Coalesce = coalesce
			s, _ := h.sender(opts)
			ctx := context.Background()
			errGone := errors.New("claim gone")
			err := sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("withdrawn"),
				Claim: sender.ConfirmFunc(func(context.Context, int) error { return errGone })})
			f := failure(t, err)
			require.ErrorIs(t, err, errGone)
			require.Equal(t, sender.ClassTransient, f.Class)
			confirmed := 0
			require.NoError(t, sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("kept"),
				Claim: sender.ConfirmFunc(func(context.Context, int) error { confirmed++; return nil })}))
			require.Equal(t, 1, confirmed)
			got := h.sim.Accepted()
			require.Len(t, got, 1)
			require.Equal(t, "kept", got[0].Text)
			st, err := h.pool.State(ctx, "ops", []string{"r1"})
			require.NoError(t, err)
			require.Equal(t, 1, st[0].InWindow, "the withdrawn alert took no slot of the window")
		})
	}
}

// histogram sums every series of the histogram name in reg: its sample count and sum.
func histogram(t *testing.T, reg *prometheus.Registry, name string) *dto.Histogram {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	var count uint64
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		require.Equal(t, dto.MetricType_HISTOGRAM, mf.GetType(), "%s is not a histogram", name)
		for _, m := range mf.GetMetric() {
			count += m.GetHistogram().GetSampleCount()
			sum += m.GetHistogram().GetSampleSum()
		}
	}
	return &dto.Histogram{SampleCount: &count, SampleSum: &sum}
}

// Robots shared with someone else (DingTalk allows them 4 per window; rocketdelay is
// configured for 19): with robotLimits learn the first robot (the scout) is throttled,
// the episode starts once (the other robot learns the limit from the scout instead of
// being throttled at its configured limit, which would start a second one), and both
// robots' limits in effect go down; with fixed limits no episode starts and the limits
// stay as configured. Judged by that state, not by how many requests fell into one
// window: the windows are real seconds of Redis's clock and the simulator's, and a
// loaded machine spreads the requests over them as it likes (how often each mode was
// throttled is logged).
func TestSharedRobotsLimitsAreLearned(t *testing.T) {
	for _, mode := range []string{config.RobotLimitsLearn, config.RobotLimitsFixed} {
		t.Run(mode, func(t *testing.T) {
			const window = time.Second
			h := newHarness(t, window, 20, robotSpec{}, robotSpec{})
			var simRobots []chatsim.Robot
			for _, r := range h.robots {
				simRobots = append(simRobots, chatsim.Robot{Name: r.Name, Token: r.Token.Reveal(), Limit: 4})
			}
			h.sim, h.simURL = testenv.DingTalkSim(t, chatsim.Options{Robots: simRobots, Window: window, Throttle: 400 * time.Millisecond})
			opts := h.options(19)
			opts.Cooldown = 400 * time.Millisecond
			opts.Coalesce = config.CoalesceOff // one request per alert: the robots' real limits bite
			opts.RobotLimits = mode
			// Fixed limits trip the robots again after every cool-down, and a send meets a
			// 130101 or a redirect each time it is picked then: give it attempts enough.
			opts.Attempts = 12
			s, reg := h.sender(opts)
			send := func(i int) error { return send(s, context.Background(), "ops", text(fmt.Sprintf("shared-%02d", i))) }
			// The first 9 go one after another. Learned limits: r1 scouts, takes 4 and meets a
			// 130101 with the 5th (or later, if the machine spread them over windows); r2
			// learns the count from it. Fixed limits alternate the robots: 8 fill both real
			// windows, the 9th meets a 130101, and the robots are tried again at the end of
			// each 400ms cool-down while their 1s windows are still full.
			for i := range 9 {
				require.NoError(t, send(i))
			}
			// The other 15 go at once: whenever a cool-down ends there are sends waiting for
			// it, and the learned limits have to hold against concurrent sends.
			var wg sync.WaitGroup
			errs := make([]error, 24)
			for i := 9; i < 24; i++ {
				wg.Go(func() { errs[i] = send(i) })
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "alert %d", i)
			}
			require.Len(t, h.sim.Accepted(), 24)
			st := h.sim.Stats().ByRobot
			episodes := strings.Count(h.logs.String(), "below its configured limit")
			lim := testenv.Metric(t, reg, "rocketdelay_sender_robot_effective_limit")
			t.Logf("%s: %+v, %d episodes logged, limits in effect %v in all", mode, st, episodes, lim)
			if mode == config.RobotLimitsFixed {
				require.Zero(t, episodes)
				require.Equal(t, 2*19.0, lim, "fixed limits stay as configured")
				return
			}
			require.Positive(t, st["r1"].TooFast, "r1, the scout, meets the real limit")
			require.Equal(t, 1, episodes, "one episode: r2 learned from the scout, not from a throttle of its own")
			require.Less(t, lim, 2*19.0, "the robots' effective limits went down")
		})
	}
}

// TestStopEndsWaitingSendsNotRequests: Stop ends at once, without a request, a send
// that waits for a robot (the only one is spent for the minute), and every later send,
// each with a transient Failure wrapping ErrStopping; a request on the wire at the stop
// goes on to its answer and is delivered.
func TestStopEndsWaitingSendsNotRequests(t *testing.T) {
	t.Parallel()
	h := newHarness(t, time.Minute, 0, robotSpec{})
	s, reg := h.sender(h.options(1))
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 500 * time.Millisecond, Count: 1}))
	ctx := context.Background()
	onTheWire := make(chan error, 1)
	go func() { onTheWire <- send(s, ctx, "ops", text("on the wire")) }()
	require.Eventually(t, func() bool { // picked and taken out of the queue: on the wire
		return testenv.Metric(t, reg, "rocketdelay_sender_inflight_requests") == 1 &&
			testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == 0
	}, 10*time.Second, 5*time.Millisecond)
	waiting := make(chan error, 1)
	go func() { waiting <- send(s, ctx, "ops", text("waiting")) }()
	require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == 1 },
		10*time.Second, 5*time.Millisecond)

	s.Stop()
	err := <-waiting
	require.ErrorIs(t, err, sender.ErrStopping)
	require.Equal(t, sender.ClassTransient, failure(t, err).Class)
	require.ErrorIs(t, send(s, ctx, "ops", text("later")), sender.ErrStopping)
	require.NoError(t, <-onTheWire, "the request on the wire was answered")
	got := h.sim.Accepted()
	require.Len(t, got, 1)
	require.Contains(t, got[0].Text, "on the wire")
}
