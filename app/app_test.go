package app

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"github.com/redis/go-redis/v9"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func TestMain(m *testing.M) {
	scheduler.RouteClientLog(slog.New(slog.NewTextHandler(io.Discard, nil)))
	goleak.VerifyTestMain(m, append(slices.Clone(testenv.RocketMQStragglers), goleak.Cleanup(func(code int) {
		if binaryDir != "" {
			_ = os.RemoveAll(binaryDir)
		}
		os.Exit(code)
	}))...)
}

func run(t *testing.T, env map[string]string, args ...string) (string, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := Run(context.Background(), args, IO{
		Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut,
		Getenv: func(k string) string { return env[k] },
	})
	return out.String(), errOut.String(), err
}

func TestUsageErrors(t *testing.T) {
	for _, args := range [][]string{{"--bogus"}, {"version", "extra"}, {"config", "check", "--nope"}} {
		_, _, err := run(t, nil, args...)
		require.Error(t, err, "%v", args)
		require.True(t, errors.Is(err, ErrUsage), "%v: %v", args, err)
	}
}

func TestConfigCheck(t *testing.T) {
	dir := t.TempDir()
	good := filepath.Join(dir, "good.yaml")
	require.NoError(t, os.WriteFile(good, []byte(`
rocketmq: {nameServers: ["127.0.0.1:9876"]}
redis: {url: "redis://:redis-pw-77@127.0.0.1:6379/0"}
postgres: {url: "postgres://u:pg-pw-88@127.0.0.1/db"}
`), 0o600))
	out, _, err := run(t, nil, "config", "check", "-f", good)
	require.NoError(t, err)
	require.Contains(t, out, "topic: guava")
	require.Contains(t, out, "url: <secret>")
	require.NotContains(t, out, "redis-pw-77")
	require.NotContains(t, out, "pg-pw-88")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("scheduler: {threshold: 10ms}\nrocketmq: {topik: x}\n"), 0o600))
	_, _, err = run(t, nil, "config", "check", "-f", bad)
	require.Error(t, err)
	require.False(t, errors.Is(err, ErrUsage))
	require.Contains(t, err.Error(), "topik")
	require.Contains(t, err.Error(), bad)

	_, _, err = run(t, nil, "config", "check", "-f", filepath.Join(dir, "missing.yaml"))
	require.ErrorContains(t, err, "missing.yaml")
}

func stackConfig(t *testing.T) config.Config {
	t.Helper()
	env := stackEnv(t)
	cfg, err := config.Load("", func(k string) string { return env[k] })
	require.NoError(t, err)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "t"}}}}
	cfg.ShutdownTimeout = 5 * time.Second
	return cfg
}

// stackEnv is the environment that points a configuration at the shared stack, with a
// schema, a topic, a group and a key prefix of the test's own.
func stackEnv(t *testing.T) map[string]string {
	t.Helper()
	dsn := testenv.MigratedPostgres(t)
	_, prefix := testenv.Redis(t) // its keys are deleted when the test ends
	env := map[string]string{
		"ROCKETDELAY_NAMESRV":          testenv.NameServer(t),
		"ROCKETDELAY_REDIS_URL":        testenv.RedisURL(t),
		"ROCKETDELAY_POSTGRES_URL":     dsn,
		"ROCKETDELAY_LEVELS":           testenv.Levels(t).String(),
		"ROCKETDELAY_BROKERS":          testenv.Brokers(t),
		"ROCKETDELAY_TOPIC":            testenv.Unique("rd_app_"),
		"ROCKETDELAY_GROUP":            testenv.Unique("rd_app_"),
		"ROCKETDELAY_REDIS_KEY_PREFIX": prefix,
	}
	return env
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	return call(t, http.MethodGet, url, "", nil)
}

// call makes a request with body (nil for none) and the bearer token auth ("" for
// none), and returns the status and the answer.
func call(t *testing.T, method, url, auth string, body []byte) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewReader(body))
	require.NoError(t, err)
	if auth != "" {
		req.Header.Set("Authorization", "Bearer "+auth)
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	answer, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	return resp.StatusCode, string(answer)
}

func TestServeHealthReadinessMetrics(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "tok-health-5e2d"}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "tok-health-5e2d"}}}}
	cfg.Sender.BaseURL = simURL
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()

	logs := &lockedWriter{w: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Listener: ln})
	}()

	// Alive from the start; ready once started.
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/healthz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 10*time.Second, 20*time.Millisecond)
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK },
		30*time.Second, 20*time.Millisecond)

	code, body := get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, body)
	var report readyReport
	require.NoError(t, json.Unmarshal([]byte(body), &report))
	require.Equal(t, map[string]string{"consumer": "ok", "redis": "ok", "postgres": "ok"}, report.Checks)

	code, body = get(t, base+"/metrics")
	require.Equal(t, http.StatusOK, code)
	require.Contains(t, body, `rocketdelay_build_info{goversion=`)
	require.Contains(t, body, `rocketdelay_dependency_up{dependency="redis"} 1`)
	require.Contains(t, body, `rocketdelay_dependency_up{dependency="postgres"} 1`)
	require.Contains(t, body, `rocketdelay_scheduler_mode{mode="levels"} 1`)

	// The console is mounted, and off without an admin token, like the API.
	code, body = get(t, base+"/ui/failed")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "set admin.token")

	// An alert published now goes through the running service to DingTalk.
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	pub, err := p.Publish(ctx, wire.Publication{Target: "ops", In: 500 * time.Millisecond, Body: []byte("serve works")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(sim.Accepted()) > 0 }, 30*time.Second, 20*time.Millisecond,
		"the published alert was never delivered")
	settle(t, cfg, []string{pub.ID}, base)
	got := sim.Accepted()
	require.Len(t, got, 1)
	require.Equal(t, "serve works", got[0].Text)
	require.False(t, got[0].At.Before(pub.DeliverAt), "delivered before its due time")

	// An alert for an unknown target is rejected and recorded in failed_sends.
	pool, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pool.Close()
	bad, err := p.Publish(ctx, wire.Publication{Target: "nobody", In: 0, Body: []byte("lost?")})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		var status, class string
		err := pool.QueryRow(ctx, `SELECT status, error_class FROM failed_sends WHERE message_id = $1`, bad.ID).Scan(&status, &class)
		return err == nil && status == "rejected" && class == "rejected_unknown_target"
	}, 20*time.Second, 50*time.Millisecond, "the rejected alert never reached failed_sends")

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(10 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
	require.NotContains(t, logs.String(), cfg.Postgres.URL.Reveal())
	require.Contains(t, logs.String(), `"msg":"stopped"`)
}

func TestReadinessOffWhileDraining(t *testing.T) {
	h := newHealth(prometheusRegistry(t), "", slog.New(slog.DiscardHandler), check{name: "dep", fn: func(context.Context) error { return nil }})
	srv := http.NewServeMux()
	srv.HandleFunc("GET /readyz", h.ready)
	rec := doRequest(srv, "/readyz")
	require.Equal(t, http.StatusOK, rec.code)
	h.drain()
	rec = doRequest(srv, "/readyz")
	require.Equal(t, http.StatusServiceUnavailable, rec.code)
	require.Contains(t, rec.body, "shutting down")
}

// TestReadinessReportsFailingDependency: /readyz names the failing dependency to anyone,
// but its error (here, where the dependency is) only to a caller with the admin token;
// the log has it.
func TestReadinessReportsFailingDependency(t *testing.T) {
	logs := &lockedWriter{w: new(strings.Builder)}
	h := newHealth(prometheusRegistry(t), "admin-secret", slog.New(slog.NewJSONHandler(logs, nil)),
		check{name: "good", fn: func(context.Context) error { return nil }},
		check{name: "bad", fn: func(context.Context) error { return errors.New("dial tcp 10.1.2.3:6379: connection refused") }},
	)
	ready := func(auth string) (int, readyReport) {
		req := httptest.NewRequest(http.MethodGet, "/readyz", nil)
		if auth != "" {
			req.Header.Set("Authorization", "Bearer "+auth)
		}
		rec := httptest.NewRecorder()
		h.ready(rec, req)
		var report readyReport
		require.NoError(t, json.Unmarshal(rec.Body.Bytes(), &report))
		return rec.Code, report
	}
	for _, auth := range []string{"", "wrong"} {
		code, report := ready(auth)
		require.Equal(t, http.StatusServiceUnavailable, code)
		require.Equal(t, failing, report.Checks["bad"])
		require.Equal(t, "ok", report.Checks["good"])
	}
	code, report := ready("admin-secret")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Equal(t, "dial tcp 10.1.2.3:6379: connection refused", report.Checks["bad"])
	require.Contains(t, logs.String(), "10.1.2.3:6379", "the error is logged")
}

func TestServeRefusesASchemaThatIsBehind(t *testing.T) {
	cfg := stackConfig(t)
	_, dsn := testenv.PostgresSchema(t) // no migrations applied
	cfg.Postgres.URL = config.Secret(dsn)
	cfg.HTTP.Addr = "127.0.0.1:0" // it listens while it starts
	err := Serve(context.Background(), cfg, ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	require.ErrorContains(t, err, "rocketdelay migrate up")
}

// TestSecondDeploymentOnAPrefixIsRefused: a replica of another consumer group on a Redis
// key prefix a deployment already uses does not start, naming the owner; the first
// deployment keeps running.
func TestSecondDeploymentOnAPrefixIsRefused(t *testing.T) {
	first := stackConfig(t)
	base := startReplica(t, first)
	second := first
	second.RocketMQ.Group = testenv.Unique("rd_app_")
	second.HTTP.Addr = "127.0.0.1:0"
	err := Serve(context.Background(), second, ServeOptions{Logger: slog.New(slog.DiscardHandler)})
	require.ErrorIs(t, err, store.ErrPrefixTaken)
	require.ErrorContains(t, err, first.RocketMQ.Topic+"/"+first.RocketMQ.Group)
	code, _ := get(t, base+"/readyz")
	require.Equal(t, http.StatusOK, code, "the first deployment runs on")
}

// TestAnotherShardCountMovesTheStage: a replica started with another redis.shards beside
// a running one starts the wheel stage's move instead of being refused (on the code
// before, it did not start): the layout is "1>3" while the replica of one shard runs
// on; a replica of the old count that starts during the move follows it; a replica that
// still acts in the old count alone once phase 2 began (it was away) stops with an
// error, to start again in the move, and the others go on to phase 2.
func TestAnotherShardCountMovesTheStage(t *testing.T) {
	ctx := context.Background()
	first := stackConfig(t)
	old, stopOld := serveReplica(t, first, io.Discard)
	second := first
	second.Redis.Shards = 3
	moved := startReplica(t, second)
	rdb, _ := testenv.Redis(t)
	l, ok, err := store.ReadLayout(ctx, rdb, first.Redis.KeyPrefix)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.Layout{Shards: 3, From: 1, Phase: 1}, l)
	code, _ := get(t, old+"/readyz")
	require.Equal(t, http.StatusOK, code, "the replica of one shard runs on beside it")
	follower := startReplica(t, first)
	phase := func(base string) string {
		_, metrics := get(t, base+"/metrics")
		for line := range strings.Lines(metrics) {
			if v, ok := strings.CutPrefix(line, "rocketdelay_shard_move_phase "); ok {
				return strings.TrimSpace(v)
			}
		}
		return ""
	}
	require.Equal(t, "1", phase(follower), "a replica of the old count started during the move follows it")
	require.Equal(t, "1", phase(moved))

	// Phase 2 begins while the first replica, in the old count alone, is away.
	l.Phase, l.Since = 2, time.Now()
	require.NoError(t, rdb.Set(ctx, "{"+first.Redis.KeyPrefix+"}:shards", l.String(), 0).Err())
	require.Eventually(t, func() bool {
		resp, err := http.Get(old + "/healthz")
		if err != nil {
			return true
		}
		_ = resp.Body.Close()
		return false
	}, time.Minute, 100*time.Millisecond, "it stops by itself")
	require.ErrorIs(t, stopOld(), store.ErrShardsChanged)
	for _, base := range []string{moved, follower} {
		require.Eventually(t, func() bool { return phase(base) == "2" }, time.Minute, 100*time.Millisecond)
	}
}

// TestServeWaitsForRedis: a replica started while Redis cannot be reached stays up: it
// is alive, not ready, /readyz names Redis (its error, without the password, only with
// the admin token), the API answers 503; once Redis answers it starts and is ready. On
// the code before, Serve returned at once and the process exited.
func TestServeWaitsForRedis(t *testing.T) {
	cfg := stackConfig(t)
	cfg.Admin.Token = "admin-token-for-readyz"
	opts, err := redis.ParseURL(cfg.Redis.URL.Reveal())
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, opts.Addr)
	proxy.Down()
	u, err := url.Parse(cfg.Redis.URL.Reveal())
	require.NoError(t, err)
	u.Host, u.User = proxy.Addr(), url.UserPassword("", "pw-never-shown")
	cfg.Redis.URL = config.Secret(u.String())
	r := startWaiting(t, cfg)

	r.waitsFor(t, "redis", proxy.Addr())
	code, body := r.readyz(t, cfg.Admin.Token.Reveal())
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.NotContains(t, body, "pw-never-shown")

	proxy.Up()
	r.becomesReady(t)
	require.Contains(t, r.logs.String(), "waiting for a store; trying again")
	require.NotContains(t, r.logs.String(), "pw-never-shown")
}

// A replica started while no RocketMQ name server answers waits, alive and not ready,
// /readyz saying it waits for RocketMQ, and starts once one answers (before: Serve
// returned at once, the topic "unknown to the name servers", and the process exited).
func TestServeWaitsForTheNameServers(t *testing.T) {
	cfg := stackConfig(t)
	cfg.Admin.Token = "admin-token-for-readyz"
	proxy := testenv.StartProxy(t, cfg.RocketMQ.NameServers[0])
	proxy.Down()
	cfg.RocketMQ.NameServers = []string{proxy.Addr()}
	r := startWaiting(t, cfg)

	r.waitsFor(t, "rocketmq", proxy.Addr())
	proxy.Up()
	r.becomesReady(t)
	require.Contains(t, r.logs.String(), "waiting for RocketMQ's name servers; trying again")
}

// waitingReplica is a replica Serve runs for a test that starts it while a dependency
// is away.
type waitingReplica struct {
	base string
	logs *lockedWriter
	done chan error
	stop context.CancelFunc
}

// startWaiting runs Serve with cfg on a listener of its own; the test's end stops it.
func startWaiting(t *testing.T, cfg config.Config) *waitingReplica {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	r := &waitingReplica{base: "http://" + ln.Addr().String(), logs: &lockedWriter{w: new(strings.Builder)},
		done: make(chan error, 1), stop: cancel}
	go func() {
		r.done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewJSONHandler(r.logs, nil)), Listener: ln})
	}()
	t.Cleanup(func() { cancel(); <-r.done })
	return r
}

// readyz is the replica's /readyz, asked with the admin token auth ("" for none).
func (r *waitingReplica) readyz(t *testing.T, auth string) (int, string) {
	t.Helper()
	return call(t, http.MethodGet, r.base+"/readyz", auth, nil)
}

// waitsFor checks that the replica waits for dependency: /readyz names it (and, to the
// admin, its error, which names addr), /healthz says it is alive, the API is 503, and
// Serve has not returned.
func (r *waitingReplica) waitsFor(t *testing.T, dependency, addr string) {
	t.Helper()
	require.Eventually(t, func() bool { _, body := r.readyz(t, ""); return strings.Contains(body, `"`+dependency+`"`) },
		60*time.Second, 20*time.Millisecond, "readyz names what the replica waits for")
	code, body := r.readyz(t, "")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, "starting")
	require.NotContains(t, body, addr, "only the admin sees the error")
	code, body = r.readyz(t, "admin-token-for-readyz")
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, body, addr, "the admin sees the error")
	code, _ = get(t, r.base+"/healthz")
	require.Equal(t, http.StatusOK, code, "alive while it waits")
	code, _ = get(t, r.base+"/api/v1/alerts/x")
	require.Equal(t, http.StatusServiceUnavailable, code)
	select {
	case err := <-r.done:
		t.Fatalf("Serve returned while %s was away: %v", dependency, err)
	default:
	}
}

// becomesReady waits for /readyz to answer 200, then stops the replica, which must end
// without an error.
func (r *waitingReplica) becomesReady(t *testing.T) {
	t.Helper()
	require.Eventually(t, func() bool { code, _ := r.readyz(t, ""); return code == http.StatusOK },
		90*time.Second, 50*time.Millisecond, "ready once the dependency answers")
	r.stop()
	require.NoError(t, <-r.done)
	r.done <- nil // for the cleanup
}

// TestServeDeliversToDingTalkThroughAnOutage runs two replicas against the DingTalk
// simulator: alerts are delivered; during an outage they land in failed_sends; when the
// simulator recovers, the retry jobs of both replicas deliver each exactly once.
func TestServeDeliversToDingTalkThroughAnOutage(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{
			{Name: "r1", Token: "tok-one-3f9a", Secret: "SECsecret-one-77"},
			{Name: "r2", Token: "tok-two-8c1b"},
		},
		Window: 2 * time.Second,
	})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{
		{Name: "r1", Token: "tok-one-3f9a", SigningSecret: "SECsecret-one-77"},
		{Name: "r2", Token: "tok-two-8c1b"},
	}}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 2 * time.Second
	cfg.Sender.Attempts = 2
	cfg.Sender.BackoffBase = 20 * time.Millisecond
	cfg.Sender.BreakerOpen = 2 * time.Second
	cfg.FailedSends.Interval = 200 * time.Millisecond
	cfg.FailedSends.BackoffBase = 300 * time.Millisecond
	cfg.FailedSends.BackoffCap = time.Second
	cfg.FailedSends.MaxAttempts = 1000 // the outage lasts many retry rounds
	require.NoError(t, cfg.Validate())

	logs := &lockedWriter{w: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	var done []chan error
	var bases []string
	for range 2 {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		require.NoError(t, err)
		bases = append(bases, "http://"+ln.Addr().String())
		ch := make(chan error, 1)
		done = append(done, ch)
		go func() {
			ch <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewJSONHandler(logs, nil)), Listener: ln})
		}()
	}
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	publish := func(prefix string, n int) []string {
		var ids []string
		for i := range n {
			pub, err := p.Publish(ctx, wire.Publication{Target: "ops", In: 300 * time.Millisecond,
				ID: fmt.Sprintf("%s-%d", prefix, i), Body: []byte(fmt.Sprintf("alert %s-%d", prefix, i))})
			require.NoError(t, err)
			ids = append(ids, pub.ID)
		}
		return ids
	}
	accepted := func() map[string]int { return acceptedIDs(sim, regexp.MustCompile(`(?:ok|outage)-\d+`)) }

	before := publish("ok", 10)
	require.Eventually(t, func() bool { return len(accepted()) == 10 }, 30*time.Second, 50*time.Millisecond)

	// Outage: every request answers 503.
	for _, tok := range []string{"tok-one-3f9a", "tok-two-8c1b"} {
		require.NoError(t, sim.Inject(tok, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}))
	}
	during := publish("outage", 10)
	pool, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pool.Close()
	require.Eventually(t, func() bool {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM failed_sends WHERE message_id LIKE 'outage-%'`).Scan(&n)
		return err == nil && n == 10
	}, 60*time.Second, 100*time.Millisecond, "the alerts sent during the outage never reached failed_sends")

	sim.ClearFaults("")
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		var n int
		err := pool.QueryRow(ctx, `SELECT count(*) FROM failed_sends WHERE message_id LIKE 'outage-%' AND status = 'delivered'`).Scan(&n)
		if err == nil && n == 10 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the retry jobs did not deliver the failed sends: %s\nlog:\n%s", dumpFailedSends(t, pool), logs.String())
		}
	}
	settle(t, cfg, append(before, during...), bases...)
	got := accepted()
	for _, id := range append(before, during...) {
		require.Equal(t, 1, got[id], "alert %s accepted %d times", id, got[id])
	}
	require.Zero(t, sim.Stats().OverLimit)

	cancel()
	for _, ch := range done {
		select {
		case err := <-ch:
			require.NoError(t, err)
		case <-time.After(20 * time.Second):
			t.Fatal("Serve did not return after cancel")
		}
	}
	for _, secret := range []string{"tok-one-3f9a", "tok-two-8c1b", "SECsecret-one-77", cfg.Postgres.URL.Reveal()} {
		require.NotContains(t, logs.String(), secret)
	}
}

func dumpFailedSends(t *testing.T, pool *pgxpool.Pool) string {
	rows, err := pool.Query(context.Background(), `SELECT message_id, status, attempts, error_class, last_error, next_attempt_at FROM failed_sends ORDER BY id`)
	require.NoError(t, err)
	defer rows.Close()
	var b strings.Builder
	var dbNow time.Time
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT now()`).Scan(&dbNow))
	fmt.Fprintf(&b, "db now %s, go now %s", dbNow, time.Now())
	for rows.Next() {
		var id, status, class, last string
		var attempts int
		var next *time.Time
		require.NoError(t, rows.Scan(&id, &status, &attempts, &class, &last, &next))
		fmt.Fprintf(&b, "\n%s %s attempts=%d %s %q next=%v", id, status, attempts, class, last, next)
	}
	return b.String()
}

// TestPostgresOutageWhileSendsFail cuts the service off Postgres while DingTalk fails:
// nothing is lost — the alerts stay in Redis (and the rejected input in RocketMQ) — and
// once Postgres is back their rows appear; once DingTalk is back each is delivered once.
func TestPostgresOutageWhileSendsFail(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{{Name: "r1", Token: "pg-tok-1"}, {Name: "r2", Token: "pg-tok-2"}},
		Window: 2 * time.Second,
	})
	for _, tok := range []string{"pg-tok-1", "pg-tok-2"} {
		require.NoError(t, sim.Inject(tok, chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}))
	}
	cfg := stackConfig(t)
	direct, err := store.OpenPostgres(context.Background(), cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer direct.Close()
	u, err := url.Parse(cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	cfg.Postgres.URL = config.Secret(u.String())
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "pg-tok-1"}, {Name: "r2", Token: "pg-tok-2"}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 2 * time.Second
	cfg.Sender.Attempts = 1
	cfg.Sender.BreakerOpen = time.Second
	cfg.FailedSends.Interval = 200 * time.Millisecond
	cfg.FailedSends.BackoffBase = 300 * time.Millisecond
	cfg.FailedSends.BackoffCap = time.Second
	cfg.FailedSends.MaxAttempts = 1000 // the outage lasts many retry rounds
	require.NoError(t, cfg.Validate())

	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln})
	}()
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	// The service is up once it hands off a first alert (delivered after the outage).
	require.Eventually(t, func() bool {
		resp, err := http.Get("http://" + ln.Addr().String() + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)

	proxy.Down()
	var ids []string
	for i := range 10 {
		pub, err := p.Publish(ctx, wire.Publication{Target: "ops", In: 300 * time.Millisecond,
			ID: fmt.Sprintf("pgout-%d", i), Body: []byte(fmt.Sprintf("alert pgout-%d", i))})
		require.NoError(t, err)
		ids = append(ids, pub.ID)
	}
	bad, err := p.Publish(ctx, wire.Publication{Target: "nobody", In: 0, ID: "pgout-bad", Body: []byte("x")})
	require.NoError(t, err)

	count := func(where string) int {
		var n int
		require.NoError(t, direct.QueryRow(ctx, `SELECT count(*) FROM failed_sends WHERE `+where).Scan(&n))
		return n
	}
	// Sends fail, and their failures cannot be recorded: each goes back to the wheel stage.
	base := "http://" + ln.Addr().String()
	recordErrors := regexp.MustCompile(`rocketdelay_failed_sends_record_errors_total\{kind="send_failure"\} [1-9]`)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, metrics := get(t, base+"/metrics"); recordErrors.MatchString(metrics) {
			break
		}
		require.True(t, time.Now().Before(deadline), "within 60s no failed send was found unrecordable")
	}
	require.Zero(t, count("true"), "rows written while Postgres was unreachable")
	require.Empty(t, sim.Accepted())

	proxy.Up()
	require.Eventually(t, func() bool {
		return count("message_id LIKE 'pgout-%' AND status IN ('pending','delivered')") == 10
	}, 60*time.Second, 100*time.Millisecond, "the failed sends' rows did not appear once Postgres was back")

	sim.ClearFaults("")
	require.Eventually(t, func() bool { return count("message_id LIKE 'pgout-%' AND status = 'delivered'") == 10 },
		60*time.Second, 100*time.Millisecond, "the retry job did not deliver the rows")
	// The rejected input comes back through RocketMQ's retry topic, whose route a new
	// consumer group learns on its next route refresh (up to 30s), after a retry delay.
	require.Eventually(t, func() bool {
		return count(fmt.Sprintf("message_id = '%s' AND status = 'rejected'", bad.ID)) == 1
	}, 120*time.Second, 200*time.Millisecond, "the rejected input's row did not appear once Postgres was back")
	settle(t, cfg, ids, base)
	got := acceptedIDs(sim, regexp.MustCompile(`pgout-\d+`))
	for _, id := range ids {
		require.Equal(t, 1, got[id], "alert %s accepted %d times", id, got[id])
	}

	cancel()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(20 * time.Second):
		t.Fatal("Serve did not return after cancel")
	}
}

// settle waits until nothing of ids can be sent again: the wheel stage of cfg holds
// nothing waiting or in flight, each id has the done marker of a delivery (a later copy
// is dropped by the wheel stage's Put, and a send confirms its claim first), and no
// replica (its base URL) has a request to DingTalk in flight or an alert waiting for
// one. Checks for duplicates come after it; a fixed sleep would let a late one through.
func settle(t *testing.T, cfg config.Config, ids []string, replicas ...string) {
	t.Helper()
	ctx := context.Background()
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
	why := ""
	settled := func() bool {
		waiting, inflight, err := ws.Stats(ctx)
		if err != nil || waiting != 0 || inflight != 0 {
			why = fmt.Sprintf("wheel stage: %d waiting, %d in flight (err %v)", waiting, inflight, err)
			return false
		}
		for _, id := range ids {
			if ok, err := ws.IsDelivered(ctx, id); err != nil || !ok {
				why = fmt.Sprintf("%s has no delivered done marker (err %v)", id, err)
				return false
			}
		}
		for _, base := range replicas {
			_, metrics := get(t, base+"/metrics")
			for _, name := range []string{"rocketdelay_sender_inflight_requests", "rocketdelay_sender_waiting_alerts"} {
				if n := gaugeSum(metrics, name); n != 0 {
					why = fmt.Sprintf("%s: %s %v", base, name, n)
					return false
				}
			}
		}
		return true
	}
	deadline := time.Now().Add(60 * time.Second)
	for !settled() {
		if time.Now().After(deadline) {
			t.Fatalf("not settled within 60s: %s", why)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// gaugeSum sums the series of the metric name in a /metrics page.
func gaugeSum(page, name string) float64 {
	sum := 0.0
	for _, line := range strings.Split(page, "\n") {
		rest, ok := strings.CutPrefix(line, name)
		if !ok || (rest == "" || (rest[0] != ' ' && rest[0] != '{')) {
			continue
		}
		var v float64
		if _, err := fmt.Sscan(rest[strings.LastIndex(rest, " ")+1:], &v); err == nil {
			sum += v
		}
	}
	return sum
}

// `rocketdelay robots` shows what the pool in Redis knows of each configured robot: a
// throttle below the configured limit appears as a learned limit and a doubt.
func TestRobotsCommand(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	dir := t.TempDir()
	file := filepath.Join(dir, "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:1"]}
redis: {keyPrefix: `+prefix+`}
postgres: {url: "postgres://u@127.0.0.1:1/db"}
targets:
  ops: {robots: [{name: r1, token: t1}, {name: r2, token: t2, limit: 10}]}
`), 0o600))
	env := map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t)}
	pool := store.NewRobotPool(rdb, prefix, time.Minute)
	ctx := context.Background()
	robots := []store.PoolRobot{{Name: "r1", Limit: 19}, {Name: "r2", Limit: 10}}
	var last store.Pick
	for range 4 {
		p, err := pool.Pick(ctx, "ops", robots[1:], store.PickOptions{Learn: true})
		require.NoError(t, err)
		last = p
	}
	_, err := pool.Settle(ctx, "ops", last, robots, store.Settlement{How: store.SettleThrottled,
		Throttle: store.ThrottleOptions{Cooldown: time.Minute, Learn: true}})
	require.NoError(t, err)

	out, _, err := run(t, env, "robots", "-f", file, "-o", "json")
	require.NoError(t, err)
	var rows []sender.RobotStatus
	require.NoError(t, json.Unmarshal([]byte(out), &rows))
	require.Len(t, rows, 2)
	require.Equal(t, sender.RobotStatus{Target: "ops", Kind: "dingtalk", Robot: "r1", Limit: 19, LearnedLimit: 3}, rows[0], "r2's sibling takes its count")
	require.Equal(t, "r2", rows[1].Robot)
	require.Equal(t, 10, rows[1].Limit)
	require.Equal(t, 3, rows[1].LearnedLimit, "3 went through")
	require.Equal(t, 3, rows[1].InWindow)
	require.True(t, rows[1].InDoubt)
	require.NotNil(t, rows[1].CoolingUntil)
	out, _, err = run(t, env, "robots", "-f", file)
	require.NoError(t, err)
	require.Contains(t, out, "TARGET  KIND      ROBOT  LIMIT  LEARNED")
}

// acceptedIDs counts, per alert id (matched by id), the messages the simulator accepted
// that carry it: an alert arrives alone or merged with others, and a merged message's
// title repeats its first alert, so each message counts once per id.
func acceptedIDs(sim *chatsim.Server, id *regexp.Regexp) map[string]int {
	got := map[string]int{}
	for _, m := range sim.Accepted() {
		inMessage := map[string]bool{}
		for _, x := range id.FindAllString(m.Text, -1) {
			inMessage[x] = true
		}
		for x := range inMessage {
			got[x]++
		}
	}
	return got
}

// publish refuses a target the configuration does not have (the consumer would reject the
// alert) and lists the known ones; the check comes before any connection.
func TestPublishRefusesAnUnknownTarget(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:1"]}
redis: {url: "redis://127.0.0.1:1/0"}
postgres: {url: "postgres://u@127.0.0.1:1/db"}
targets:
  ops: {robots: [{name: r1, token: t1}]}
  dev: {robots: [{name: r1, token: t2}]}
`), 0o600))
	_, _, err := run(t, nil, "publish", "-f", file, "--target", "opz", "--in", "1m", "--text", "x")
	require.ErrorIs(t, err, ErrUsage)
	require.ErrorContains(t, err, `--target "opz" is not a target of this configuration (known: dev, ops)`)
}

// A topic target end to end through the binary's own commands: `publish --body-file …
// --tag --keys --property` puts a business message through the running service, and a
// plain consumer of the business topic receives it with its bytes, tag, keys and
// property. Publish flags that do not fit the target's kind are usage errors.
func TestServeAndPublishToATopicTarget(t *testing.T) {
	cfg := stackConfig(t)
	biz := testenv.Unique("rd_app_orders_")
	cfg.Targets["orders"] = config.Target{Topic: &config.TopicTarget{Name: biz, Tag: "delayed"}}
	consumer := sinktest.Start(t, cfg.RocketMQ.NameServers[0], biz)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln})
	}()
	defer func() {
		cancel()
		require.NoError(t, <-done)
	}()

	dir := t.TempDir()
	file := filepath.Join(dir, "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`rocketmq: {nameServers: [%q], topic: %q}
redis: {url: %q}
postgres: {url: %q}
targets:
  ops: {robots: [{name: r1, token: t1}]}
  orders: {topic: {name: %s}}
`, cfg.RocketMQ.NameServers[0], cfg.RocketMQ.Topic, cfg.Redis.URL.Reveal(), cfg.Postgres.URL.Reveal(), biz)), 0o600))
	body := []byte{0x08, 0x96, 0x01, 0xff, 0x00, 'o', 'k'}
	bodyFile := filepath.Join(dir, "order.bin")
	require.NoError(t, os.WriteFile(bodyFile, body, 0o600))

	out, _, err := run(t, nil, "publish", "-f", file, "--target", "orders", "--in", "1s", "--id", "app-order-1",
		"--body-file", bodyFile, "--tag", "close", "--keys", "order-1,shop-9", "--property", "shop=eu-1")
	require.NoError(t, err)
	require.Contains(t, out, "published app-order-1 to orders")
	consumer.WaitAll(t, []string{"app-order-1"}, 60*time.Second)
	m, _ := consumer.First("app-order-1")
	require.Equal(t, body, m.Body)
	require.Equal(t, "close", m.GetTags())
	require.ElementsMatch(t, []string{"order-1", "shop-9", "app-order-1"}, strings.Fields(m.GetKeys()))
	require.Equal(t, "eu-1", m.GetProperty("shop"))
	require.Equal(t, "app-order-1", m.GetProperty("RD_ID"))
	require.Eventually(t, func() bool {
		_, metrics := get(t, "http://"+ln.Addr().String()+"/metrics")
		return strings.Contains(metrics, `rocketdelay_topic_messages_total{result="delivered",target="orders"} 1`)
	}, 10*time.Second, 50*time.Millisecond)

	for _, args := range [][]string{
		{"--target", "orders", "--json", bodyFile},
		{"--target", "orders"},
		{"--target", "ops", "--text", "x", "--tag", "close"},
		{"--target", "ops", "--body-file", bodyFile},
	} {
		_, _, err := run(t, nil, append([]string{"publish", "-f", file, "--in", "1m"}, args...)...)
		require.ErrorIs(t, err, ErrUsage, "%v", args)
	}
}
