package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func TestMain(m *testing.M) {
	scheduler.RouteClientLog(testenv.Logger())
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}

const ingestToken = "ingest-token-for-the-tests-0123"

// site is an Ingress on the local broker, Redis and Postgres: it publishes to a topic of
// its own, which a consumer reads back (by RD_ID), and cancels in a wheel stage and a
// failed_sends table of its own, as the service does (failed.Canceller).
type site struct {
	t        *testing.T
	srv      *httptest.Server
	rdb      redis.UniversalClient
	prefix   string
	ws       *store.WheelStage
	fs       *store.FailedSends
	stored   *sinktest.Sink
	signer   *escalation.Signer // signs the principals of what the site publishes
	cfg      config.Config
	clock    *clock
	esc      *escalation.Escalator
	episodes *store.Episodes
	metrics  *Metrics
	in       *Ingress
	owners   *store.Producers
}

// clock is the Ingress's clock in the tests: it stands still unless a test moves it, so
// that due times and the dedupe window's bucket are what the test computes, however long
// a request takes (a real clock can cross a minute between a send and the check).
type clock struct {
	mu  sync.Mutex
	now time.Time
}

// Now returns the clock's time.
func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

// advance moves the clock d on.
func (c *clock) advance(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = c.now.Add(d)
}

func newSite(t *testing.T, token config.Secret, configure ...func(*config.Config)) *site {
	t.Helper()
	if testing.Short() {
		t.Skip("needs RocketMQ and Redis")
	}
	ns := testenv.NameServer(t)
	delayTopic := testenv.Unique("rd_ing_")
	stored := sinktest.Start(t, ns, delayTopic)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{ns}, Topic: delayTopic})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	rdb, prefix := testenv.Redis(t)
	cfg := config.Config{Targets: map[string]config.Target{
		"ops":    {Robots: []config.Robot{{Name: "r1", Token: "t"}}},
		"orders": {Topic: &config.TopicTarget{Name: "order-events"}},
	}}
	cfg.Escalations = map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{Target: "ops"}, {After: 5 * time.Minute, Target: "ops", Mention: config.StepMention{All: true}}}}}
	cfg.Ingress.Token = token
	for _, c := range configure {
		c(&cfg)
	}
	cfg = cfg.WithDefaults()
	cfg.Ingress.MaxBody = 64 << 10
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: cfg.Redis.Shards})
	_, fs := testenv.FailedSends(t)
	// The real time to the millisecond (what RD_DELIVER_AT_MS carries), held still.
	s := &site{t: t, rdb: rdb, prefix: prefix, ws: ws, fs: fs, stored: stored, cfg: cfg, clock: &clock{now: time.Now().Truncate(time.Millisecond)},
		episodes: store.NewEpisodes(rdb, prefix, time.Hour), metrics: NewMetrics(nil)}
	cancels := failed.Canceller{Stage: ws, Rows: fs, Note: store.CancelNote{By: "ingress"}}
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops": {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	s.esc = escalation.New(escalation.Options{Policies: cfg.Escalations}, s.episodes, p, cancels, chat, testenv.Logger(), nil, s.clock.Now)
	moves := failed.Rescheduler{Stage: ws, Rows: fs, Publisher: p, Reach: cfg.Scheduler.Threshold, Horizon: cfg.Scheduler.Horizon}
	s.signer, err = escalation.NewSigner("the-test-site's-signing-key")
	require.NoError(t, err)
	in, err := New(cfg, Deps{Publisher: p, Wheel: cancels, Rescheduler: moves, Pending: ws, Escalations: s.esc, Dedupe: store.NewDedupe(rdb, prefix), Producers: store.NewProducers(rdb, prefix, cfg.Redis.Shards), Chat: chat,
		Signer: s.signer, Logger: testenv.Logger(), Now: s.clock.Now}, s.metrics)
	require.NoError(t, err)
	s.in, s.owners = in, store.NewProducers(rdb, prefix, cfg.Redis.Shards)
	s.srv = httptest.NewServer(in.Handler())
	t.Cleanup(s.srv.Close)
	return s
}

// with returns s for the subtest t: its requests fail t, not the test that made s.
func (s *site) with(t *testing.T) *site {
	c := *s
	c.t = t
	return &c
}

// do sends a request with the ingest token (unless auth is given) and returns the status
// and the decoded JSON answer.
func (s *site) do(method, path string, body any, auth ...string) (int, map[string]any) {
	s.t.Helper()
	var r io.Reader
	switch b := body.(type) {
	case nil:
	case []byte:
		r = bytes.NewReader(b)
	default:
		j, err := json.Marshal(b)
		require.NoError(s.t, err)
		r = bytes.NewReader(j)
	}
	req, err := http.NewRequest(method, s.srv.URL+path, r)
	require.NoError(s.t, err)
	req.Header.Set("Authorization", "Bearer "+ingestToken)
	if len(auth) > 0 {
		req.Header.Set("Authorization", auth[0])
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(s.t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// published waits for the message id in the topic and returns its properties and body.
func (s *site) published(id string) (map[string]string, []byte) {
	s.t.Helper()
	s.stored.WaitAll(s.t, []string{id}, 30*time.Second)
	m, _ := s.stored.First(id)
	return m.GetProperties(), m.Body
}

func TestPublishAPI(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)

	code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "90m", "id": "api-text-1", "text": "disk full on db-3"})
	require.Equal(t, http.StatusAccepted, code, out)
	require.Equal(t, "api-text-1", out["id"])
	due, err := time.Parse(time.RFC3339Nano, out["due"].(string))
	require.NoError(t, err)
	require.True(t, s.clock.Now().Add(90*time.Minute).Equal(due), "due %s", due)
	props, body := s.published("api-text-1")
	require.Equal(t, "ops", props[wire.PropTarget])
	require.Equal(t, strconv.FormatInt(due.UnixMilli(), 10), props[wire.PropDeliverAt])
	require.Equal(t, "disk full on db-3", string(body))

	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "at": "2030-01-02T03:04:05Z", "id": "api-md-1",
		"markdown": map[string]string{"title": "Order 4711", "text": "### still dirty"}})
	require.Equal(t, http.StatusBadRequest, code, "beyond the horizon: %v", out)
	require.Equal(t, string(wire.RejectBeyondHorizon), out["reason"])
	at := time.Now().Add(time.Hour).UTC().Format(time.RFC3339)
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "at": at, "id": "api-md-1",
		"markdown": map[string]string{"title": "Order 4711", "text": "### still dirty"}})
	require.Equal(t, http.StatusAccepted, code, out)
	_, body = s.published("api-md-1")
	require.JSONEq(t, `{"msgtype":"markdown","markdown":{"title":"Order 4711","text":"### still dirty"}}`, string(body))

	code, out = s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "30m", "id": "api-order-1",
		"bodyBase64": "CJYB/wA=", "tag": "close", "keys": []string{"order-1"}, "properties": map[string]string{"shop": "eu-1"}})
	require.Equal(t, http.StatusAccepted, code, out)
	props, body = s.published("api-order-1")
	require.Equal(t, []byte{0x08, 0x96, 0x01, 0xff, 0x00}, body)
	require.Equal(t, "close", props["TAGS"])
	require.Equal(t, "order-1 api-order-1", props["KEYS"])
	require.Equal(t, "eu-1", props["shop"])

	// What the consumer would reject is refused with the consumer's reason.
	for _, c := range []struct {
		body   map[string]any
		reason wire.RejectReason
		says   string
	}{
		{map[string]any{"in": "1m", "text": "x"}, wire.RejectMissingTarget, "target is required"},
		{map[string]any{"target": "opz", "in": "1m", "text": "x"}, wire.RejectUnknownTarget, `"opz" is not a target of the configuration (known: ops, orders)`},
		{map[string]any{"target": "ops", "text": "x"}, wire.RejectMissingDue, "give in"},
		{map[string]any{"target": "ops", "in": "soon", "text": "x"}, wire.RejectBadDue, `in "soon" is not a non-negative duration`},
		{map[string]any{"target": "ops", "in": "1m", "at": at, "text": "x"}, wire.RejectBadDue, "not both"},
		{map[string]any{"target": "ops", "at": "0001-01-01T00:00:00Z", "text": "x"}, wire.RejectBadDue, "outside the years 1970–9999"},
		{map[string]any{"target": "orders", "in": "1m", "text": "x", "properties": map[string]string{"shop": ""}}, wire.RejectDestination, "no value"},
		{map[string]any{"target": "ops", "in": "1m", "id": "has space", "text": "x"}, wire.RejectBadID, "printable characters"},
		{map[string]any{"target": "ops", "in": "1m"}, wire.RejectBadBody, "exactly one of text, markdown, body"},
		{map[string]any{"target": "ops", "in": "1m", "body": map[string]any{"msgtype": "link"}}, wire.RejectBadBody, "link"},
		{map[string]any{"target": "ops", "in": "1m", "text": "x", "tag": "t"}, wire.RejectBadBody, "for topic targets"},
		{map[string]any{"target": "orders", "in": "1m", "text": "x", "topic": "payments"}, wire.RejectDestination, "does not let a message choose"},
		{map[string]any{"target": "orders", "in": "1m", "bodyBase64": "%%%"}, wire.RejectBadBody, "not standard base64"},
	} {
		code, out := s.do("POST", AlertsPath, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%v: %v", c.body, out)
		require.Equal(t, string(c.reason), out["reason"], "%v", c.body)
		require.Contains(t, out["error"], c.says, "%v", c.body)
	}
	code, out = s.do("POST", AlertsPath, []byte(`{"target":"ops","in":"1m","text":"x","colour":"red"}`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"], `unknown field "colour"`)
	// One JSON value in valid UTF-8, and nothing after it.
	for body, says := range map[string]string{
		`{"target":"ops","in":"1m","text":"a"}{"target":"x"}`:  "something follows its value",
		`{"target":"ops","in":"1m","text":"a"} garbage`:        "something follows its value",
		"{\"target\":\"ops\",\"in\":\"1m\",\"text\":\"\xff\"}": "not valid UTF-8",
	} {
		code, out = s.do("POST", AlertsPath, []byte(body))
		require.Equal(t, http.StatusBadRequest, code, "%q: %v", body, out)
		require.Equal(t, "bad_json", out["reason"], "%q", body)
		require.Contains(t, out["error"], says, "%q", body)
	}
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "text": strings.Repeat("x", 70<<10)})
	require.Equal(t, http.StatusRequestEntityTooLarge, code)
	require.Contains(t, out["error"], "ingress.maxBody")
}

func TestIngestTokenIsRequired(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	for _, auth := range []string{"", "Bearer wrong-token-0123456789", "Basic " + ingestToken, "Bearer " + ingestToken + "x"} {
		code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "text": "x"}, auth)
		require.Equal(t, http.StatusUnauthorized, code, auth)
		require.NotContains(t, out["error"], ingestToken)
	}
	off := newSite(t, "")
	code, out := off.do("POST", AlertmanagerPath+"/ops", map[string]any{})
	require.Equal(t, http.StatusServiceUnavailable, code)
	require.Contains(t, out["error"], "set ingress.token")
}

// DELETE stops an alert waiting in the wheel stage, still on its way, or waiting in
// failed_sends after its send failed (200), and says when it is too late (409).
func TestCancelAPI(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	_, err := s.ws.Put(ctx, store.Entry{ID: "in-flight", Target: "ops", DueAt: time.Now().Add(-time.Second), Body: []byte("x")})
	require.NoError(t, err)
	got, err := s.ws.Claim(ctx, []string{"in-flight"}, "claimer")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	for _, id := range []string{"waiting", "team/a/waiting"} {
		_, err = s.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
		require.NoError(t, err)
	}
	require.NoError(t, s.ws.MarkDelivered(ctx, "sent"))
	_, err = s.fs.Record(ctx, store.NewFailedSend{MessageID: "failed", Target: "ops", Payload: []byte("x"),
		ErrorClass: "transient", NextAttemptAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)

	for id, want := range map[string]struct {
		code   int
		result string
	}{
		"waiting":        {http.StatusOK, "removed"},
		"team/a/waiting": {http.StatusOK, "removed"}, // an id is one path segment, escaped
		"hopping":        {http.StatusOK, "tombstoned"},
		"in-flight":      {http.StatusConflict, "too_late"},
		"sent":           {http.StatusConflict, "already_delivered"},
		"failed":         {http.StatusOK, "cancelled"},
	} {
		code, out := s.do("DELETE", AlertsPath+"/"+url.PathEscape(id), nil)
		require.Equal(t, want.code, code, "%s: %v", id, out)
		require.Equal(t, want.result, out["result"], id)
		require.NotEmpty(t, out["detail"])
	}
	cancelled, err := s.ws.IsCancelled(ctx, "hopping")
	require.NoError(t, err)
	require.True(t, cancelled)
}

// What the producer or the consumer would refuse, the HTTP ways in refuse at once: a 400
// with the consumer's reason and the words the producer and consumer use, and nothing
// reaches the topic. A permanent refusal is never "send it again" (a 503 that a client
// obeying it retries forever), nor a 2xx followed by a rejected row in failed_sends.
func TestPublishRefusesWhatTheSchedulerWouldReject(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	order := func(id string, set map[string]any) map[string]any {
		b := map[string]any{"target": "orders", "in": "1m", "id": id, "text": "x"}
		for k, v := range set {
			b[k] = v
		}
		return b
	}
	props := func(k, v string) map[string]any { return map[string]any{"properties": map[string]string{k: v}} }
	horizon, doneTTL := s.cfg.Scheduler.Horizon, s.cfg.Scheduler.DoneTTL
	far := (horizon + time.Hour).String()
	g := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"TooFar\"}"}
	firing, resolved := notification(t, "firing", g.key), notification(t, "resolved", g.key)
	amBody := func(n Notification) []byte {
		b, err := json.Marshal(n)
		require.NoError(t, err)
		return b
	}
	cases := []struct {
		name   string
		path   string
		body   any
		id     string // the RD_ID it would have been published with
		reason wire.RejectReason
		says   string
	}{
		{"rd property", AlertsPath, order("p-rd", props("RD_TARGET", "ops")), "p-rd",
			wire.RejectDestination, `property "RD_TARGET" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"tags property", AlertsPath, order("p-tags", props("TAGS", "t")), "p-tags",
			wire.RejectDestination, `property "TAGS" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"keys property", AlertsPath, order("p-keys", props("KEYS", "k")), "p-keys",
			wire.RejectDestination, `property "KEYS" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"unique key property", AlertsPath, order("p-uniq", props("UNIQ_KEY", "u")), "p-uniq",
			wire.RejectDestination, `property "UNIQ_KEY" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"delay level property", AlertsPath, order("p-delay", props("DELAY", "3")), "p-delay",
			wire.RejectDestination, `property "DELAY" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"timer property", AlertsPath, order("p-timer", props("__STARTDELIVERTIME", "1")), "p-timer",
			wire.RejectDestination, `property "__STARTDELIVERTIME" is reserved (rocketdelay's RD_* or the broker's own)`},
		{"properties over the broker's bound", AlertsPath, order("p-big", props("note", strings.Repeat("x", 40<<10))), "p-big",
			wire.RejectDestination, "at most 16384 are accepted"},
		{"empty key", AlertsPath, order("k-empty", map[string]any{"keys": []string{"order-1", ""}}), "k-empty",
			wire.RejectDestination, `key "" is empty or holds whitespace (keys are separated by spaces)`},
		{"key with a space", AlertsPath, order("k-space", map[string]any{"keys": []string{"order 1"}}), "k-space",
			wire.RejectDestination, `key "order 1" is empty or holds whitespace (keys are separated by spaces)`},
		{"empty property name", AlertsPath, order("n-empty", props("", "v")), "n-empty",
			wire.RejectDestination, `property name "" is empty or holds whitespace`},
		{"blank property name", AlertsPath, order("n-blank", props(" ", "v")), "n-blank",
			wire.RejectDestination, `property name " " is empty or holds whitespace`},
		{"property value with the separator", AlertsPath, order("v-sep", props("shop", "eu-1\x02RD_TARGET\x01ops")), "v-sep",
			wire.RejectDestination, `property "shop" holds \x01 or \x02, the separators of the broker's property encoding`},
		{"stale due time", AlertsPath, map[string]any{"target": "ops", "id": "stale-1", "text": "x",
			"at": time.Now().Add(-doneTTL - time.Hour).UTC().Format(time.RFC3339)}, "stale-1",
			wire.RejectStale, fmt.Sprintf("more than %s ago (scheduler.doneTTL)", doneTTL)},
		{"stale due time of a topic target", AlertsPath, map[string]any{"target": "orders", "id": "stale-2", "text": "x",
			"at": time.Now().Add(-doneTTL - time.Hour).UTC().Format(time.RFC3339)}, "stale-2",
			wire.RejectStale, fmt.Sprintf("more than %s ago (scheduler.doneTTL)", doneTTL)},
		{"delay past the horizon", AlertsPath, map[string]any{"target": "ops", "id": "far-1", "text": "x", "in": far}, "far-1",
			wire.RejectBeyondHorizon, fmt.Sprintf("more than %s ahead (scheduler.horizon)", horizon)},
		{"id that is a dot", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": ".", "text": "x"}, ".",
			wire.RejectBadID, `RD_ID "." is not an id: "." and ".." cannot stand in a URL path`},
		{"id that is two dots", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": "..", "text": "x"}, "..",
			wire.RejectBadID, `RD_ID ".." is not an id: "." and ".." cannot stand in a URL path`},
		{"alertmanager delay past the horizon", AlertmanagerPath + "/ops?delay=" + far, amBody(firing), "",
			wire.RejectBeyondHorizon, fmt.Sprintf("more than %s ahead (scheduler.horizon)", horizon)},
		{"alertmanager resolve with a delay past the horizon", AlertmanagerPath + "/ops?delay=" + far, amBody(resolved), "",
			wire.RejectBeyondHorizon, fmt.Sprintf("more than %s ahead (scheduler.horizon)", horizon)},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			code, out := s.with(t).do("POST", c.path, c.body)
			require.Equal(t, http.StatusBadRequest, code, "%v", out)
			require.Equal(t, string(c.reason), out["reason"], "%v", out)
			require.Contains(t, out["error"], c.says)
		})
	}
	_, err := s.episodes.Get(context.Background(), g.episode(escalation.DelayPolicy("ops", horizon+time.Hour)))
	require.ErrorIs(t, err, store.ErrNoEpisode, "no episode started")

	// Nothing was published: the ingress counts no stored publication but the one below,
	// and the topic holds none of the ids above once an alert published after them (due
	// an hour ago: late, not stale) has arrived.
	code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "id": "late-not-stale", "text": "x",
		"at": time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)})
	require.Equal(t, http.StatusAccepted, code, out)
	s.published("late-not-stale")
	require.Equal(t, 1.0, testutil.ToFloat64(s.metrics.requests.WithLabelValues("publish", "ok")))
	for _, outcome := range []string{"published", "escalation_started", "escalation_updated", "resolution_published"} {
		require.Zero(t, testutil.ToFloat64(s.metrics.requests.WithLabelValues("alertmanager", outcome)), outcome)
	}
	for _, c := range cases {
		require.Zero(t, s.stored.Copies(c.id), "%s: %s reached the topic", c.name, c.id)
	}
}
