package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestMain(m *testing.M) {
	scheduler.RouteClientLog(testenv.Logger())
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}

const ingestToken = "ingest-token-for-the-tests-0123"

// site is an Ingress on the local broker and Redis: it publishes to a topic of its own,
// which a consumer reads back (by RD_ID), and cancels in a wheel stage of its own.
type site struct {
	t        *testing.T
	srv      *httptest.Server
	ws       *store.WheelStage
	stored   *sinktest.Sink
	cfg      config.Config
	clock    *clock
	escalate *store.Escalations
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

func newSite(t *testing.T, token config.Secret) *site {
	t.Helper()
	if testing.Short() {
		t.Skip("needs RocketMQ and Redis")
	}
	ns := testenv.NameServer(t)
	delayTopic := testenv.Unique("rd_ing_")
	stored := sinktest.Start(t, ns, delayTopic)
	p, err := scheduler.NewProducer(scheduler.ProducerOptions{NameServers: []string{ns}, Topic: delayTopic})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	cfg := config.Config{Targets: map[string]config.Target{
		"ops":    {Robots: []config.Robot{{Name: "r1", Token: "t"}}},
		"orders": {Topic: &config.TopicTarget{Name: "order-events"}},
	}}
	cfg.Ingress.Token = token
	cfg = cfg.WithDefaults()
	cfg.Ingress.MaxBody = 64 << 10
	// The real time to the millisecond (what RD_DELIVER_AT_MS carries), held still.
	s := &site{t: t, ws: ws, stored: stored, cfg: cfg, clock: &clock{now: time.Now().Truncate(time.Millisecond)},
		escalate: store.NewEscalations(rdb, prefix, time.Hour)}
	in, err := New(cfg, Deps{Publisher: p, Wheel: ws, Escalations: s.escalate, Logger: testenv.Logger(), Now: s.clock.Now}, NewMetrics(nil))
	require.NoError(t, err)
	s.srv = httptest.NewServer(in.Handler())
	t.Cleanup(s.srv.Close)
	return s
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
	require.Equal(t, "ops", props[scheduler.PropTarget])
	require.Equal(t, strconv.FormatInt(due.UnixMilli(), 10), props[scheduler.PropDeliverAt])
	require.Equal(t, "disk full on db-3", string(body))

	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "at": "2030-01-02T03:04:05Z", "id": "api-md-1",
		"markdown": map[string]string{"title": "Order 4711", "text": "### still dirty"}})
	require.Equal(t, http.StatusBadRequest, code, "beyond the horizon: %v", out)
	require.Equal(t, string(scheduler.RejectBeyondHorizon), out["reason"])
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
		reason scheduler.RejectReason
		says   string
	}{
		{map[string]any{"in": "1m", "text": "x"}, scheduler.RejectMissingTarget, "target is required"},
		{map[string]any{"target": "opz", "in": "1m", "text": "x"}, scheduler.RejectUnknownTarget, `"opz" is not a target of the configuration (known: ops, orders)`},
		{map[string]any{"target": "ops", "text": "x"}, scheduler.RejectMissingDue, "give in"},
		{map[string]any{"target": "ops", "in": "soon", "text": "x"}, scheduler.RejectBadDue, `in "soon" is not a non-negative duration`},
		{map[string]any{"target": "ops", "in": "1m", "at": at, "text": "x"}, scheduler.RejectBadDue, "not both"},
		{map[string]any{"target": "ops", "in": "1m", "id": "has space", "text": "x"}, scheduler.RejectBadID, "printable characters"},
		{map[string]any{"target": "ops", "in": "1m"}, scheduler.RejectBadBody, "exactly one of text, markdown, body"},
		{map[string]any{"target": "ops", "in": "1m", "body": map[string]any{"msgtype": "link"}}, scheduler.RejectBadBody, "link"},
		{map[string]any{"target": "ops", "in": "1m", "text": "x", "tag": "t"}, scheduler.RejectBadBody, "for topic targets"},
		{map[string]any{"target": "orders", "in": "1m", "text": "x", "topic": "payments"}, scheduler.RejectDestination, "does not let a message choose"},
		{map[string]any{"target": "orders", "in": "1m", "bodyBase64": "%%%"}, scheduler.RejectBadBody, "not standard base64"},
	} {
		code, out := s.do("POST", AlertsPath, c.body)
		require.Equal(t, http.StatusBadRequest, code, "%v: %v", c.body, out)
		require.Equal(t, string(c.reason), out["reason"], "%v", c.body)
		require.Contains(t, out["error"], c.says, "%v", c.body)
	}
	code, out = s.do("POST", AlertsPath, []byte(`{"target":"ops","in":"1m","text":"x","colour":"red"}`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"], `unknown field "colour"`)
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

// DELETE stops an alert waiting in the wheel stage or still on its way (200), and says
// when it is too late (409).
func TestCancelAPI(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	_, err := s.ws.Put(ctx, store.Entry{ID: "in-flight", Target: "ops", DueAt: time.Now().Add(-time.Second), Body: []byte("x")})
	require.NoError(t, err)
	got, err := s.ws.Claim(ctx, []string{"in-flight"}, "claimer")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	_, err = s.ws.Put(ctx, store.Entry{ID: "waiting", Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, s.ws.MarkDelivered(ctx, "sent"))

	for id, want := range map[string]struct {
		code   int
		result string
	}{
		"waiting":   {http.StatusOK, "removed"},
		"hopping":   {http.StatusOK, "tombstoned"},
		"in-flight": {http.StatusConflict, "too_late"},
		"sent":      {http.StatusConflict, "already_delivered"},
	} {
		code, out := s.do("DELETE", AlertsPath+"/"+id, nil)
		require.Equal(t, want.code, code, "%s: %v", id, out)
		require.Equal(t, want.result, out["result"], id)
		require.NotEmpty(t, out["detail"])
	}
	cancelled, err := s.ws.IsCancelled(ctx, "hopping")
	require.NoError(t, err)
	require.True(t, cancelled)
}
