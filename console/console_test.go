package console_test

import (
	"context"
	"fmt"
	"html"
	"io"
	"log/slog"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

const token = "s3cret-admin-token-for-the-console"

// testTargets are the console's configured targets: a robot group and a topic target.
var testTargets = failed.Targets{
	"ops":    {Robots: []config.Robot{{Name: "r1"}, {Name: "r2"}}},
	"orders": {Topic: &config.TopicTarget{Name: "order-events", Tag: "delayed"}},
}

// testPolicies are the escalation policies: db pages ops at once, then lead after 10m.
var testPolicies = map[string]config.Policy{"db": {Steps: []config.EscalationStep{{Target: "ops"}, {After: 10 * time.Minute, Target: "lead"}}}}

// site is a console on a test server, with a browser-like client: a cookie jar, no
// automatic redirects, and the Origin header a browser sends with a form.
type site struct {
	t      *testing.T
	srv    *httptest.Server
	client *http.Client
	fs     *store.FailedSends
	ws     *store.WheelStage
	eps    *store.Episodes
	owners *store.Producers
}

func newSite(t *testing.T, tok config.Secret) *site {
	t.Helper()
	return newSiteBehind(t, tok, nil)
}

// newSiteBehind is a console that believes the forwarding headers of trusted.
func newSiteBehind(t *testing.T, tok config.Secret, trusted proxies.Trusted) *site {
	t.Helper()
	return newSiteWith(t, console.Access{Token: tok, Proxies: trusted})
}

// newSiteWith is a console with access (its Sessions in the test's Redis).
func newSiteWith(t *testing.T, access console.Access) *site {
	t.Helper()
	_, fs := testenv.FailedSends(t)
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	src := console.Sources{Wheel: ws, Pool: store.NewRobotPool(rdb, prefix, time.Minute),
		Targets: map[string]sender.Target{"ops": {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1"}, {Name: "r2", Limit: 10}}}}, Limit: 19,
		Mode: func() string { return "timer" }, Lateness: func() (uint64, time.Duration, time.Duration) {
			return 42, 5 * time.Millisecond, 50 * time.Millisecond
		}}
	owners := store.NewProducers(rdb, prefix, 1)
	alerts := console.AlertFinder{Inspector: failed.Inspector{Wheel: ws, Rows: fs, Config: config.Config{Targets: testTargets}.WithDefaults(), Owners: owners},
		Canceller: failed.Canceller{Stage: ws, Rows: fs}, Rescheduler: failed.Rescheduler{Stage: ws, Rows: fs, Reach: time.Minute, Horizon: 24 * time.Hour}, List: ws}
	// The escalator leaves what an acknowledgement names to carry out in the episode's
	// outbox (CarryLater), where the tests see it: it publishes and cancels nothing.
	eps := store.NewEpisodes(rdb, prefix, time.Hour)
	esc := escalation.New(escalation.Options{Policies: testPolicies, CarryLater: true}, eps, nil, nil, nil,
		slog.New(slog.NewTextHandler(io.Discard, nil)), nil, time.Now)
	srv := httptest.NewServer(console.Handler(fs, testTargets, alerts, src.State, esc, testRenderer{},
		withSessions(access, store.NewConsoleAccess(rdb, prefix)), slog.New(slog.NewTextHandler(io.Discard, nil))))
	t.Cleanup(srv.Close)
	return &site{t: t, srv: srv, client: browserClient(t), fs: fs, ws: ws, eps: eps, owners: owners}
}

// withSessions is a with s as its Sessions, unless a has some already.
func withSessions(a console.Access, s console.Sessions) console.Access {
	if a.Sessions == nil {
		a.Sessions = s
	}
	return a
}

// browserClient is a client with a cookie jar of its own that does not follow redirects.
func browserClient(t *testing.T) *http.Client {
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	return &http.Client{Jar: jar, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

// another is the same console seen from another browser: a cookie jar of its own.
func (s *site) another() *site {
	c := *s
	c.client = browserClient(s.t)
	return &c
}

// sessionCookie is the value of the client's console session cookie.
func (s *site) sessionCookie() string {
	s.t.Helper()
	u, err := url.Parse(s.srv.URL + "/ui/")
	require.NoError(s.t, err)
	for _, c := range s.client.Jar.Cookies(u) {
		if c.Name == "rd_console" {
			return c.Value
		}
	}
	s.t.Fatal("no session cookie")
	return ""
}

func (s *site) get(path string) (*http.Response, string) {
	s.t.Helper()
	resp, err := s.client.Get(s.srv.URL + path)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, string(b)
}

// post sends a form as a browser would from one of the console's pages.
func (s *site) post(path string, form url.Values, origin string) (*http.Response, string) {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+path, strings.NewReader(form.Encode()))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	if origin != "" {
		req.Header.Set("Origin", origin)
	}
	resp, err := s.client.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, string(b)
}

func (s *site) login() {
	s.t.Helper()
	resp, _ := s.post("/ui/login", url.Values{"token": {token}, "next": {"/ui/failed"}}, s.srv.URL)
	require.Equal(s.t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(s.t, "/ui/failed", resp.Header.Get("Location"))
}

var csrfRE = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

func (s *site) csrf(page string) string {
	s.t.Helper()
	m := csrfRE.FindStringSubmatch(page)
	require.NotNil(s.t, m, "the page carries no CSRF token")
	return m[1]
}

func (s *site) record(id, target, payload, class string) int64 {
	s.t.Helper()
	_, err := s.fs.Record(context.Background(), store.NewFailedSend{MessageID: id, Target: target, Payload: []byte(payload),
		ErrorClass: class, LastError: "HTTP 503 from DingTalk", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(s.t, err)
	rows, _, err := s.fs.List(context.Background(), store.Filter{Limit: 1000})
	require.NoError(s.t, err)
	for _, r := range rows {
		if r.MessageID == id {
			return r.ID
		}
	}
	s.t.Fatalf("no row for %s", id)
	return 0
}

// A topic target's row shows its kind and destination, and its body as the bytes it is
// (base64 when they are not UTF-8), not as a DingTalk message.
func TestConsoleShowsATopicTargetsRow(t *testing.T) {
	s := newSite(t, token)
	s.login()
	_, err := s.fs.Record(context.Background(), store.NewFailedSend{MessageID: "order-1-close", Target: "orders",
		Payload: []byte{0x0a, 0x01, 0xff}, Properties: map[string]string{"KEYS": "order-1"}, ErrorClass: "transient",
		LastError: "send to topic order-events failed: timeout", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	rows, _, err := s.fs.List(context.Background(), store.Filter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	resp, body := s.get(fmt.Sprintf("/ui/failed/%d", rows[0].ID))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<dd id="kind">topic</dd>`)
	require.Contains(t, body, `<dd id="destination">topic order-events, tag delayed</dd>`)
	require.Contains(t, body, "(3 bytes, not UTF-8, base64)")
	require.Contains(t, body, "<pre>CgH/</pre>")
	require.NotContains(t, body, "Not a valid DingTalk body")

	id := s.record("disk-full", "ops", `{"msgtype":"text","text":{"content":"disk full"}}`, "transient")
	_, body = s.get(fmt.Sprintf("/ui/failed/%d", id))
	require.Contains(t, body, `<dd id="kind">dingtalk</dd>`)
	require.Contains(t, body, `<dd id="destination">robots r1, r2</dd>`)
	require.Contains(t, body, "<pre>disk full</pre>")
}

// The search box finds an alert by id: its state and history; an alert not sent yet can
// be cancelled from its page, after a confirmation with a reason.
func TestConsoleFindsAndCancelsAnAlert(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	_, err := s.ws.Put(ctx, store.Entry{ID: "order-9-recheck", Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)

	resp, body := s.get("/ui/alerts?id=order-9-recheck")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<dd id="alert-state">waiting</dd>`)
	require.Contains(t, body, "waiting in the wheel stage, due in 59m")
	require.Contains(t, body, "entered the wheel stage after 0 broker hops")
	require.Contains(t, body, `href="/ui/alerts/order-9-recheck/cancel"`)

	_, body = s.get("/ui/alerts/order-9-recheck/cancel")
	csrf := s.csrf(body)
	resp, body = s.post("/ui/alerts/order-9-recheck/cancel", url.Values{"csrf": {csrf}}, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a reason is required")
	require.Contains(t, body, "Say why the alert is cancelled")
	resp, _ = s.post("/ui/alerts/order-9-recheck/cancel", url.Values{"csrf": {csrf}, "reason": {"order was paid"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, body = s.get(resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Cancelled: removed from the wheel stage.")
	require.Contains(t, body, `<dd id="alert-state">cancelled</dd>`)
	require.NotContains(t, body, `id="cancel"`, "nothing left to cancel")

	_, body = s.get("/ui/alerts?id=never-seen")
	require.Contains(t, body, `<dd id="alert-state">unknown</dd>`)
	resp, _ = s.get("/ui/alerts?id=has%20space")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// An alert whose send failed, waiting in failed_sends for a retry, can be cancelled from
// its page too: its row is cancelled with the console's reason, and the page says so.
func TestConsoleCancelsAFailedAlert(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	_, err := s.fs.Record(ctx, store.NewFailedSend{MessageID: "order-10-recheck", Target: "ops", Payload: []byte("x"),
		ErrorClass: "transient", LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Minute)})
	require.NoError(t, err)
	_, body := s.get("/ui/alerts?id=order-10-recheck")
	require.Contains(t, body, `<dd id="alert-state">failed</dd>`)
	require.Contains(t, body, `href="/ui/alerts/order-10-recheck/cancel"`)

	_, body = s.get("/ui/alerts/order-10-recheck/cancel")
	resp, _ := s.post("/ui/alerts/order-10-recheck/cancel", url.Values{"csrf": {s.csrf(body)}, "reason": {"order was paid"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	resp, body = s.get(resp.Header.Get("Location"))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "Cancelled: its send had failed; its failed_sends row is cancelled, so it will not be retried.")
	require.Contains(t, body, `<dd id="alert-state">cancelled</dd>`)
	require.Contains(t, body, "cancelled by admin (order was paid)")
	require.NotContains(t, body, `id="cancel"`, "nothing left to cancel")
}

// Bulk actions on the list's filter: a preview says how many rows match, the confirmed
// action changes exactly those; a filter is required.
func TestConsoleBulkActionsOnAFilter(t *testing.T) {
	s := newSite(t, token)
	s.login()
	for i := range 3 {
		s.record(fmt.Sprintf("storm-%d", i), "ops", "x", "throttled")
	}
	keep := s.record("other", "ops", "x", "transient")

	resp, body := s.get("/ui/failed?error_class=throttled")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `href="/ui/failed/bulk/discard?error_class=throttled"`)
	_, body = s.get("/ui/failed/bulk/discard?error_class=throttled")
	require.Contains(t, body, "<strong>3</strong> rows match.")
	form := s.previewForm(body)
	require.Equal(t, "throttled", form.Get("error_class"))
	resp, body = s.post("/ui/failed/bulk/discard", form, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "Say why these alerts are discarded")
	form.Set("reason", "storm from the test cluster")
	resp, _ = s.post("/ui/failed/bulk/discard", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "error_class=throttled")
	rows, _, err := s.fs.List(context.Background(), store.Filter{Status: store.StatusDiscarded, Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	other, err := s.fs.Get(context.Background(), keep)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, other.Status, "a row outside the filter is left alone")

	resp, body = s.get("/ui/failed/bulk/retry")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "needs a filter")
}

func TestConsoleIsOffWithoutAToken(t *testing.T) {
	s := newSite(t, "")
	resp, body := s.get("/ui/failed")
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode)
	require.Contains(t, body, "set admin.token")
}

func TestConsoleLoginAndHeaders(t *testing.T) {
	s := newSite(t, token)
	resp, _ := s.get("/ui/failed?status=pending")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "no session: to the login page")
	require.Equal(t, "/ui/login?next=%2Fui%2Ffailed%3Fstatus%3Dpending", resp.Header.Get("Location"))
	require.Equal(t, "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'",
		resp.Header.Get("Content-Security-Policy"))
	require.Equal(t, "DENY", resp.Header.Get("X-Frame-Options"))

	resp, body := s.post("/ui/login", url.Values{"token": {"wrong"}}, s.srv.URL)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
	require.Contains(t, body, "That is not an operator&#39;s token.")
	require.Empty(t, resp.Cookies())

	resp, _ = s.post("/ui/login", url.Values{"token": {token}, "next": {"https://evil.example/"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Equal(t, "/ui/failed", resp.Header.Get("Location"), "a redirect after login stays in the console")
	ck := resp.Cookies()
	require.Len(t, ck, 1)
	require.True(t, ck[0].HttpOnly)
	require.Equal(t, http.SameSiteStrictMode, ck[0].SameSite)
	require.NotContains(t, ck[0].Value, token, "the cookie is a signed session, not the token")

	resp, body = s.get("/ui/failed")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.NotContains(t, body, token, "no secret in a page")
	require.NotContains(t, body, "<script", "the console runs no script")

	// A forged cookie is no session.
	u, _ := url.Parse(s.srv.URL + "/ui/")
	s.client.Jar.SetCookies(u, []*http.Cookie{{Name: "rd_console", Value: "99999999999.deadbeef", Path: "/ui/"}})
	resp, _ = s.get("/ui/failed")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
}

func TestConsoleListFilterPageAndStats(t *testing.T) {
	s := newSite(t, token)
	s.login()
	for i := range 55 {
		s.record(fmt.Sprintf("page-%02d", i), "ops", "disk full", "transient")
	}
	s.record("other-target", "billing", "card expired", "throttled")
	_, body := s.get("/ui/failed")
	require.Equal(t, 50, strings.Count(body, `class="row-link"`), "a page holds 50 rows")
	m := regexp.MustCompile(`href="(/ui/failed\?after=\d+)" id="next"`).FindStringSubmatch(body)
	require.NotNil(t, m, "a next-page link")
	_, page2 := s.get(strings.ReplaceAll(m[1], "&amp;", "&"))
	require.Equal(t, 6, strings.Count(page2, `class="row-link"`))
	require.Contains(t, body, `data-status="pending">56<`, "the stats count every pending row")

	_, body = s.get("/ui/failed?target=billing")
	require.Equal(t, 1, strings.Count(body, `class="row-link"`))
	require.Contains(t, body, "other-target")
	_, body = s.get("/ui/failed?error_class=throttled&since=1h&status=pending")
	require.Equal(t, 1, strings.Count(body, `class="row-link"`))
	resp, body := s.get("/ui/failed?status=bogus")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, `unknown status &#34;bogus&#34;: want one of pending, dead, rejected, discarded, cancelled, delivered`)
	resp, body = s.get("/ui/failed?since=yesterday")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "nor a duration back from now (90m, 6h, 3d)")
	// The same filter as the API and the commands: days and RFC 3339 times too.
	for _, since := range []string{"3d", time.Now().Add(-time.Hour).UTC().Format(time.RFC3339)} {
		resp, body = s.get("/ui/failed?error_class=throttled&status=pending&since=" + url.QueryEscape(since))
		require.Equal(t, http.StatusOK, resp.StatusCode, since)
		require.Equal(t, 1, strings.Count(body, `class="row-link"`), since)
	}
}

func TestConsoleShowsBodiesInert(t *testing.T) {
	s := newSite(t, token)
	s.login()
	text := s.record("xss-text", "ops", `<script>alert("text")</script> disk full`, "transient")
	md := s.record("xss-md", "ops", `{"msgtype":"markdown","markdown":{"title":"<b>t</b>","text":"## Disk\n**full** <script>alert(1)</script> [x](javascript:alert(2))"}}`, "transient")

	_, body := s.get(fmt.Sprintf("/ui/failed/%d", text))
	require.NotContains(t, body, "<script>")
	require.Contains(t, body, "&lt;script&gt;alert(&#34;text&#34;)&lt;/script&gt; disk full", "text shows as text")

	_, body = s.get(fmt.Sprintf("/ui/failed/%d", md))
	require.Contains(t, body, "<h2>Disk</h2>", "markdown is rendered")
	require.Contains(t, body, "<strong>full</strong>")
	require.NotContains(t, body, "<script>", "raw HTML in markdown is left out")
	require.NotContains(t, body, "javascript:", "a javascript: link is not rendered")
	require.Contains(t, body, "&lt;b&gt;t&lt;/b&gt;", "the title is escaped")
}

func TestConsoleRetryAndDiscard(t *testing.T) {
	s := newSite(t, token)
	s.login()
	retry := s.record("to-retry", "ops", "retry me", "transient")
	discard := s.record("to-discard", "ops", "discard me", "transient")

	_, page := s.get(fmt.Sprintf("/ui/failed/%d/retry", retry))
	csrf := s.csrf(page)
	path := fmt.Sprintf("/ui/failed/%d/retry", retry)
	resp, _ := s.post(path, url.Values{}, s.srv.URL)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
	resp, _ = s.post(path, url.Values{"csrf": {csrf}}, "https://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "another origin")
	resp, _ = s.post(path, url.Values{"csrf": {csrf}}, "")
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no origin at all")
	row, err := s.fs.Get(context.Background(), retry)
	require.NoError(t, err)
	require.True(t, row.NextAttemptAt.After(time.Now().Add(30*time.Minute)), "refused requests changed nothing")

	resp, _ = s.post(path, url.Values{"csrf": {csrf}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body := s.get(resp.Header.Get("Location"))
	require.Contains(t, body, fmt.Sprintf("Retry: row %d", retry))
	require.Contains(t, body, `id="retried-by">admin, `, "the retry is the operator's")
	row, err = s.fs.Get(context.Background(), retry)
	require.NoError(t, err)
	require.False(t, row.NextAttemptAt.After(time.Now()), "due now for the retry job")
	require.Equal(t, "admin", *row.RetriedBy)

	path = fmt.Sprintf("/ui/failed/%d/discard", discard)
	resp, body = s.post(path, url.Values{"csrf": {csrf}}, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.Contains(t, body, "Say why the alert is discarded")
	resp, _ = s.post(path, url.Values{"csrf": {csrf}, "reason": {"duplicate of INC-7 <b>"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	_, body = s.get(resp.Header.Get("Location"))
	require.Contains(t, body, `id="discard-reason">duplicate of INC-7 &lt;b&gt;<`)
	require.Contains(t, body, `id="discarded-by">admin<`, "the discard is the operator's")
	row, err = s.fs.Get(context.Background(), discard)
	require.NoError(t, err)
	require.Equal(t, store.StatusDiscarded, row.Status)
	require.Equal(t, "admin", *row.DiscardedBy)
}

func TestConsoleSchedulerView(t *testing.T) {
	s := newSite(t, token)
	s.login()
	due := time.UnixMilli(time.Now().Add(time.Hour).UnixMilli())
	_, err := s.ws.Put(context.Background(), store.Entry{ID: "waiting-1", Target: "ops", DueAt: due, Body: []byte("x")})
	require.NoError(t, err)
	resp, body := s.get("/ui/scheduler")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `id="waiting">1<`)
	require.Contains(t, body, "<td>waiting-1</td><td>ops</td><td>"+due.UTC().Format("2006-01-02 15:04:05.000Z"))
	require.Contains(t, body, "ops: 1")
	require.Contains(t, body, "<td>ops</td><td>dingtalk</td><td>r1</td><td>19</td>", "r1 takes the default limit")
	require.Contains(t, body, "<td>ops</td><td>dingtalk</td><td>r2</td><td>10</td>")
	require.Contains(t, body, "p50 5ms, p99 50ms over 42 hand-offs")
	require.Contains(t, body, "<dd>timer</dd>")
}

// A POST needs the CSRF token of its own session: a wrong token, and the valid token of
// another session (two operators who logged in within the same second), are refused
// with 403 on every action, and nothing changes; the session's own token then works.
func TestConsoleRefusesForeignCSRFTokens(t *testing.T) {
	s := newSite(t, token)
	ctx := context.Background()
	// Two browsers log in within the same second (the session cookie starts with its
	// expiry, in seconds).
	var a, b *site
	for {
		a, b = s.another(), s.another()
		a.login()
		b.login()
		ea, _, _ := strings.Cut(a.sessionCookie(), ".")
		eb, _, _ := strings.Cut(b.sessionCookie(), ".")
		if ea == eb {
			break
		}
	}
	require.NotEqual(t, a.sessionCookie(), b.sessionCookie(), "two logins are two sessions")

	_, err := s.ws.Put(ctx, store.Entry{ID: "keep-waiting", Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	row := s.record("keep-pending", "ops", "x", "transient")
	before, err := s.fs.Get(ctx, row)
	require.NoError(t, err)
	_, page := a.get("/ui/alerts/keep-waiting/cancel")
	aToken := a.csrf(page)
	_, page = b.get("/ui/alerts/keep-waiting/cancel")
	bToken := b.csrf(page)

	actions := []struct {
		path string
		form url.Values
	}{
		{"/ui/alerts/keep-waiting/cancel", url.Values{"reason": {"forged"}}},
		{fmt.Sprintf("/ui/failed/%d/discard", row), url.Values{"reason": {"forged"}}},
		{fmt.Sprintf("/ui/failed/%d/retry", row), url.Values{}},
		{"/ui/failed/bulk/discard", url.Values{"target": {"ops"}, "reason": {"forged"}}},
		{"/ui/failed/bulk/retry", url.Values{"target": {"ops"}}},
	}
	for _, tok := range []struct{ what, value string }{
		{"a wrong token", strings.Repeat("0", len(bToken))},
		{"another session's token", aToken},
	} {
		for _, act := range actions {
			form := url.Values{"csrf": {tok.value}}
			for k, v := range act.form {
				form[k] = v
			}
			resp, body := b.post(act.path, form, s.srv.URL)
			require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s, %s", tok.what, act.path)
			require.Contains(t, body, "security token is missing or stale")
		}
	}
	cancelled, err := s.ws.IsCancelled(ctx, "keep-waiting")
	require.NoError(t, err)
	require.False(t, cancelled, "the alert was not cancelled")
	entries, err := s.ws.Peek(ctx, []string{"keep-waiting"})
	require.NoError(t, err)
	require.Len(t, entries, 1, "the alert still waits")
	after, err := s.fs.Get(ctx, row)
	require.NoError(t, err)
	require.Equal(t, before, after, "the row did not change")

	resp, _ := b.post("/ui/alerts/keep-waiting/cancel", url.Values{"csrf": {bToken}, "reason": {"paid"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the session's own token works")
	cancelled, err = s.ws.IsCancelled(ctx, "keep-waiting")
	require.NoError(t, err)
	require.True(t, cancelled)
}

// An alert id is escaped in every URL of the console: one holding "/" is found and
// cancelled, and a crafted one ("../failed/N/discard#", a valid id) cannot turn the
// cancel form into another action; ids that cannot be a path segment ("." and "..")
// are not ids at all.
func TestConsoleEscapesAlertIDsInURLs(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	row := s.record("bystander", "ops", "x", "transient")
	before, err := s.fs.Get(ctx, row)
	require.NoError(t, err)
	for _, id := range []string{"team/a/order-1", fmt.Sprintf("../failed/%d/discard#", row), "a?b=c&d%2Fe"} {
		_, err := s.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
		require.NoError(t, err)
		cancelPath := "/ui/alerts/" + url.PathEscape(id) + "/cancel"

		resp, body := s.get("/ui/alerts?" + url.Values{"id": {id}}.Encode())
		require.Equal(t, http.StatusOK, resp.StatusCode, id)
		require.Contains(t, body, `href="`+html.EscapeString(cancelPath)+`"`, id)
		resp, body = s.get(cancelPath)
		require.Equal(t, http.StatusOK, resp.StatusCode, id)
		require.Contains(t, body, `action="`+html.EscapeString(cancelPath)+`"`, id)
		require.Contains(t, body, `href="/ui/alerts?id=`+html.EscapeString(url.QueryEscape(id))+`"`, id)
		resp, _ = s.post(cancelPath, url.Values{"csrf": {s.csrf(body)}, "reason": {"paid"}}, s.srv.URL)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, id)
		loc, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Equal(t, id, loc.Query().Get("id"), "back to the alert's page")
		cancelled, err := s.ws.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.True(t, cancelled, id)
	}
	after, err := s.fs.Get(ctx, row)
	require.NoError(t, err)
	require.Equal(t, before, after, "the row the crafted id names did not change")

	for _, id := range []string{".", ".."} {
		resp, body := s.get("/ui/alerts?id=" + id)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, id)
		require.Contains(t, body, "That is not an alert id")
	}
}

var hiddenRE = regexp.MustCompile(`<input type="hidden" name="([^"]+)" value="([^"]*)">`)

// previewForm is the confirmation form of a bulk action's preview page: its hidden
// fields, as a browser would post them.
func (s *site) previewForm(page string) url.Values {
	s.t.Helper()
	form := url.Values{}
	for _, m := range hiddenRE.FindAllStringSubmatch(page, -1) {
		form.Set(m[1], html.UnescapeString(m[2]))
	}
	require.NotEmpty(s.t, form.Get("csrf"), "the page has a confirmation form")
	return form
}

// A bulk action changes the rows its preview counted, not what the filter matches when
// it is confirmed: a row recorded between the preview and the confirmation is left
// alone, and when a previewed row changed (so the set is not the one counted), the
// action is refused (409) with a new preview, and nothing changes.
func TestConsoleBulkActsOnThePreviewedRows(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	for _, action := range []string{"retry", "discard"} {
		var previewed []int64
		for i := range 3 {
			previewed = append(previewed, s.record(fmt.Sprintf("%s-storm-%d", action, i), "ops", "x", action+"-storm"))
		}
		resp, page := s.get("/ui/failed/bulk/" + action + "?since=1h&status=pending&error_class=" + action + "-storm")
		require.Equal(t, http.StatusOK, resp.StatusCode)
		require.Contains(t, page, "<strong>3</strong> rows match.")
		form := s.previewForm(page)
		since, err := time.Parse(time.RFC3339Nano, form.Get("since"))
		require.NoError(t, err, "the preview carries since as the time it meant: %q", form.Get("since"))
		require.WithinDuration(t, time.Now().Add(-time.Hour), since, time.Minute)
		form.Set("reason", "storm over")

		late := s.record(action+"-late", "ops", "x", action+"-storm") // matches the filter, after the preview
		lateBefore, err := s.fs.Get(ctx, late)
		require.NoError(t, err)
		resp, _ = s.post("/ui/failed/bulk/"+action, form, s.srv.URL)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode)
		flash, err := url.Parse(resp.Header.Get("Location"))
		require.NoError(t, err)
		require.Contains(t, flash.Query().Get("done"), "3 of the 3")
		for _, id := range previewed {
			row, err := s.fs.Get(ctx, id)
			require.NoError(t, err)
			if action == "retry" {
				require.False(t, row.NextAttemptAt.After(time.Now()), "row %d is due now", id)
			} else {
				require.Equal(t, store.StatusDiscarded, row.Status, "row %d", id)
			}
		}
		lateAfter, err := s.fs.Get(ctx, late)
		require.NoError(t, err)
		require.Equal(t, lateBefore, lateAfter, "the row recorded after the preview is untouched")
	}

	// A previewed row leaves the set (discarded meanwhile): the confirmation is refused.
	var rows []int64
	for i := range 3 {
		rows = append(rows, s.record(fmt.Sprintf("moved-%d", i), "ops", "x", "moved"))
	}
	_, page := s.get("/ui/failed/bulk/retry?status=pending&error_class=moved")
	form := s.previewForm(page)
	_, err := s.fs.Discard(ctx, rows[:1], "handled elsewhere")
	require.NoError(t, err)
	before := map[int64]store.FailedSend{}
	for _, id := range rows {
		before[id], err = s.fs.Get(ctx, id)
		require.NoError(t, err)
	}
	resp, page := s.post("/ui/failed/bulk/retry", form, s.srv.URL)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, page, "changed since the preview")
	require.Contains(t, page, "<strong>2</strong> rows match.", "a new preview")
	for _, id := range rows {
		row, err := s.fs.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, before[id], row, "row %d did not change", id)
	}
	resp, _ = s.post("/ui/failed/bulk/retry", s.previewForm(page), s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the new preview confirms")
	for _, id := range rows[1:] {
		row, err := s.fs.Get(ctx, id)
		require.NoError(t, err)
		require.False(t, row.NextAttemptAt.After(time.Now()), "row %d is due now", id)
	}
	row, err := s.fs.Get(ctx, rows[0])
	require.NoError(t, err)
	require.Equal(t, store.StatusDiscarded, row.Status, "the row that left the set was not retried")
}

// The Scheduled page counts and lists every pending alert, hours ahead included: by
// target, by hour, a page of 50 at a time with a link to the next, filtered by target
// and by how soon they are due; an id is text in the page and a query value in its link.
func TestConsoleScheduledPage(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	now := time.Now()
	for i := range 55 {
		require.NoError(t, s.ws.TraceHop(ctx, store.HopNote{ID: fmt.Sprintf("far-%02d", i), Target: "ops", Due: now.Add(3*time.Hour + time.Duration(i)*time.Second),
			Hops: 1, Delay: time.Hour, Principal: "billing"}))
	}
	hostile := `<b>x</b>&target=db`
	_, err := s.ws.Put(ctx, store.Entry{ID: hostile, Target: "db", DueAt: now.Add(10 * time.Second), Body: []byte("x")})
	require.NoError(t, err)

	resp, body := s.get("/ui/scheduled")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, `id="pending-total">56<`)
	require.Contains(t, body, `>ops: 55</a>`)
	require.Contains(t, body, `>db: 1</a>`)
	require.Contains(t, body, `href="/ui/alerts?id=`+strings.ToLower(url.QueryEscape(hostile))+`">`+html.EscapeString(hostile)+`</a>`)
	require.NotContains(t, body, "<b>x</b>")
	require.Equal(t, 50, strings.Count(body, `<td class="principal">`), "a page of 50")
	require.Contains(t, body, "<td>1</td>\n</tr>", "the hops")
	next := regexp.MustCompile(`href="([^"]+)" id="next-page"`).FindStringSubmatch(body)
	require.Len(t, next, 2, "a next page")
	resp, body = s.get(html.UnescapeString(next[1]))
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Equal(t, 6, strings.Count(body, `<td class="principal">`), "the other 6")
	require.Contains(t, body, ">far-54</a>")
	require.NotContains(t, body, `id="next-page"`)

	_, body = s.get("/ui/scheduled?within=1h")
	require.Equal(t, 1, strings.Count(body, `<td class="principal">`), "only the alert due in 10s")
	_, body = s.get("/ui/scheduled?target=ops&within=4h")
	require.Equal(t, 50, strings.Count(body, `<td class="principal">`))
	require.Contains(t, body, `href="/ui/scheduled/cancel?target=ops&amp;within=4h" id="bulk-cancel"`, "the filter carried to Cancel all…")
	require.NotContains(t, body, html.EscapeString(hostile)+"</a>")
	resp, _ = s.get("/ui/scheduled?within=soon")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	resp, _ = s.get("/ui/scheduled?cursor=zz")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
}

// "Cancel all…" on the Scheduled page cancels exactly the previewed alerts: a set that
// changed since the preview (another alert now matches) is refused with 409 and a new
// preview, nothing cancelled; the confirmed preview cancels every matching alert, hopping
// ones included, and nothing else. A reason is required, and a filter.
func TestConsoleCancelsThePreviewedScheduledAlerts(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	now := time.Now()
	hop := func(id, target string) {
		require.NoError(t, s.ws.TraceHop(ctx, store.HopNote{ID: id, Target: target, Due: now.Add(2 * time.Hour), Hops: 1, Delay: time.Hour}))
	}
	for i := range 5 {
		hop(fmt.Sprintf("db-%d", i), "db")
	}
	for i := range 3 {
		hop(fmt.Sprintf("ops-%d", i), "ops")
	}
	resp, body := s.get("/ui/scheduled/cancel?target=db")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<p id="count"><strong>5</strong> alerts match.</p>`)
	set := regexp.MustCompile(`name="set" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	require.Len(t, set, 2)
	csrf := s.csrf(body)

	hop("db-late", "db") // matches after the preview
	resp, body = s.post("/ui/scheduled/cancel", url.Values{"csrf": {csrf}, "target": {"db"}, "set": {set[1]}, "count": {"5"}, "reason": {"db retired"}}, s.srv.URL)
	require.Equal(t, http.StatusConflict, resp.StatusCode)
	require.Contains(t, body, "changed since the preview, which showed 5: nothing was changed")
	require.Contains(t, body, `<strong>6</strong> alerts match.`)
	c, err := s.ws.CountPending(ctx, now, 0)
	require.NoError(t, err)
	require.Equal(t, int64(9), c.Total, "nothing cancelled")

	set = regexp.MustCompile(`name="set" value="([0-9a-f]+)"`).FindStringSubmatch(body)
	resp, _ = s.post("/ui/scheduled/cancel", url.Values{"csrf": {csrf}, "target": {"db"}, "set": {set[1]}, "count": {"6"}}, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "no reason")
	resp, _ = s.post("/ui/scheduled/cancel", url.Values{"csrf": {csrf}, "target": {"db"}, "set": {set[1]}, "count": {"6"}, "reason": {"db retired"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "Cancelled+6+of+the+6+previewed+alerts")
	c, err = s.ws.CountPending(ctx, now, 0)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"ops": 3}, c.ByTarget)
	for _, id := range []string{"db-0", "db-4", "db-late"} {
		cancelled, err := s.ws.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.True(t, cancelled, id)
	}
	cancelled, err := s.ws.IsCancelled(ctx, "ops-0")
	require.NoError(t, err)
	require.False(t, cancelled)

	resp, _ = s.get("/ui/scheduled/cancel")
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "a bulk cancel needs a filter")
	resp, _ = s.post("/ui/scheduled/cancel", url.Values{"target": {"ops"}, "set": {"x"}, "count": {"3"}, "reason": {"r"}}, s.srv.URL)
	require.Equal(t, http.StatusForbidden, resp.StatusCode, "no CSRF token")
}

// "Reschedule all…" moves exactly the previewed pending alerts to the new due time, each
// as the operator's move: hopping alerts to a later time, a waiting one within the wheel
// stage's reach; a hopping alert cannot be moved earlier than its message carries, and
// the count says so.
func TestConsoleReschedulesThePreviewedScheduledAlerts(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	now := time.Now()
	for i := range 3 {
		require.NoError(t, s.ws.TraceHop(ctx, store.HopNote{ID: fmt.Sprintf("ops-%d", i), Target: "ops", Due: now.Add(2 * time.Hour), Hops: 1, Delay: time.Hour}))
	}
	preview := func() url.Values {
		_, body := s.get("/ui/scheduled/reschedule?target=ops")
		set := regexp.MustCompile(`name="set" value="([0-9a-f]+)"`).FindStringSubmatch(body)
		require.Len(t, set, 2)
		n := regexp.MustCompile(`<strong>([0-9]+)</strong> alerts match.`).FindStringSubmatch(body)
		require.Len(t, n, 2)
		return url.Values{"csrf": {s.csrf(body)}, "target": {"ops"}, "set": {set[1]}, "count": {n[1]}}
	}
	form := preview()
	form.Set("when", "soon")
	resp, _ := s.post("/ui/scheduled/reschedule", form, s.srv.URL)
	require.Equal(t, http.StatusBadRequest, resp.StatusCode, "not a time")
	form.Set("when", "3h")
	resp, _ = s.post("/ui/scheduled/reschedule", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "Rescheduled+3+of+the+3+previewed+alerts")
	c, err := s.ws.CountPending(ctx, now.Add(time.Minute), 3)
	require.NoError(t, err)
	require.Equal(t, []int64{0, 0, 3}, c.ByHour, "all three due in 3 hours")
	st, err := s.ws.Inspect(ctx, "ops-1")
	require.NoError(t, err)
	require.Equal(t, "admin", st.Moves[0].By, "the move is the operator's")

	// Earlier than the hopping alerts' messages carry: only the waiting one moves.
	_, err = s.ws.Put(ctx, store.Entry{ID: "ops-waiting", Target: "ops", DueAt: now.Add(30 * time.Second), Body: []byte("x")})
	require.NoError(t, err)
	form = preview()
	require.Equal(t, "4", form.Get("count"))
	form.Set("when", "45s")
	resp, _ = s.post("/ui/scheduled/reschedule", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.Contains(t, resp.Header.Get("Location"), "Rescheduled+1+of+the+4+previewed+alerts")
}
