package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// ackLink finds the acknowledgement link in a step's markdown.
var ackLink = regexp.MustCompile(`\[Acknowledge\]\((http://[^)\s]+)\)`)

// TestAcknowledgeInABrowser acknowledges an escalation the way on-call does, on a phone:
// an episode starts through the API, its first step reaches the chat (the simulator) with
// a link, the link opens in Chromium (a phone-sized viewport), the page shows the episode
// pending, a name is typed and Acknowledge clicked. Then the API says acknowledged by that
// name, the chat receives "Acknowledged by" it, and the second step is cancelled and never
// sent: a sentinel due after it arrives, the step does not. The link opened again says who
// acknowledged, with no form; a link with one character changed cannot acknowledge (404).
// The link is a capability: the page sends no referrer, and the token never reaches the
// service's log. ROCKETDELAY_SCREENSHOTS=docs/img (a directory, relative to the repository
// root) writes the page after acknowledging as ack.png there, for docs/oncall.md.
func TestAcknowledgeInABrowser(t *testing.T) {
	const (
		adminToken = "browser-admin-token-4c1d07"
		robotToken = "tok-ack-browser-1"
		who        = "Ana Lima"
	)
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: robotToken}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: robotToken}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Admin.Token = adminToken
	cfg.Ingress.Token = testIngestToken
	const secondStep = 20 * time.Second // time enough to open the link and acknowledge
	cfg.Escalations = map[string]config.Policy{"oncall": {Steps: []config.EscalationStep{
		{Target: "ops"}, {After: secondStep, Target: "ops", Mention: config.StepMention{All: true}}}, ReackAfter: time.Hour}}
	// The links point at the service itself: its listener comes first.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	cfg.Ingress.PublicURL = base
	require.NoError(t, cfg.Validate())
	logs := &lockedWriter{w: &bytes.Buffer{}}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
			Listener: ln})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	// The browser starts first: a cold Chromium must not eat the second step's time.
	b := newBrowser(t)
	b.run("phone", chromedp.EmulateViewport(390, 700, chromedp.EmulateMobile, chromedp.EmulateTouch, chromedp.EmulatePortrait))

	// An episode starts; its first step is due at once.
	key := "db-primary" // the test's own Redis key prefix keeps it apart
	code, out := apiJSON(t, "POST", base+ingress.EscalationsPath, testIngestToken,
		map[string]string{"key": key, "policy": "oncall", "title": "Primary database down", "text": "db-1 refuses connections"})
	require.Equal(t, http.StatusCreated, code, out)
	seq := int64(out["seq"].(float64))
	var step chatsim.Message
	require.Eventually(t, func() bool {
		for _, m := range sim.Accepted() {
			if strings.Contains(m.Text, "db-1 refuses connections") {
				step = m
				return true
			}
		}
		return false
	}, 30*time.Second, 50*time.Millisecond, "the first step reaches the chat")
	link := ackLink.FindStringSubmatch(step.Text)
	require.NotNil(t, link, "the step carries an acknowledgement link: %s", step.Text)
	url := link[1]
	require.True(t, strings.HasPrefix(url, base+escalation.AckPath), url)
	token := strings.TrimPrefix(url, base+escalation.AckPath)

	status, headers := b.open(url)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "no-referrer", headers["Referrer-Policy"], "the capability never leaves in a Referer")
	b.run("open the link", chromedp.WaitVisible(chromedp.CSS("#by")))
	require.Contains(t, b.text("#state"), "pending")
	require.Contains(t, b.text("#state"), key)
	require.Contains(t, b.text("h2"), "Primary database down", "the page says what is acknowledged")
	fits(t, b, "the form")
	screenshot(t, b, "ack-form", false)

	status = b.submit(chromedp.SendKeys(chromedp.CSS("#by"), who), chromedp.Click(chromedp.CSS("#ack")))
	require.Equal(t, http.StatusOK, status)
	b.run("acknowledged", chromedp.WaitVisible(chromedp.CSS("#done")))
	require.Contains(t, b.text("#done"), "Acknowledged by "+who)
	fits(t, b, "the confirmation")
	screenshot(t, b, "ack", true)

	// The API agrees; it was acknowledged before the second step fell due.
	code, out = apiJSON(t, "GET", base+ingress.EscalationsPath+"/"+key, testIngestToken, nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, store.EpisodeAcked, out["state"])
	require.Equal(t, who, out["ackedBy"])
	require.Equal(t, 1.0, out["sent"], "acknowledged after the first step only: the machine was too slow for this test")

	// The chat is told, on the first step's target.
	require.Eventually(t, func() bool { return len(accepted(sim, "Acknowledged by "+who)) == 1 }, 30*time.Second, 50*time.Millisecond,
		"the acknowledgement is announced")
	// A sentinel due after the second step: once it is delivered, a second step that was
	// not cancelled would have been delivered before it.
	started, err := time.Parse(time.RFC3339Nano, out["started"].(string))
	require.NoError(t, err)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Publish(context.Background(), wire.Publication{Target: "ops", At: started.Add(secondStep + 2*time.Second),
		Body: []byte("sentinel after the second step")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(accepted(sim, "sentinel after the second step")) > 0 }, 60*time.Second,
		50*time.Millisecond)
	require.Empty(t, accepted(sim, "**Escalation**, step 2"), "the second step is never sent")
	require.Len(t, accepted(sim, "db-1 refuses connections"), 1, "one step reached the chat")
	require.Len(t, accepted(sim, "Acknowledged by"), 1, "one announcement")

	// The second step is cancelled in the wheel stage, and the inspector says so.
	rdb, err := store.OpenRedisConfig(context.Background(), cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
	secondID := escalation.StepID(key, seq, 1)
	cancelled, err := ws.IsCancelled(context.Background(), secondID)
	require.NoError(t, err)
	require.True(t, cancelled, "the second step %s is cancelled", secondID)
	code, out = apiJSON(t, "GET", base+failed.AlertsPath+"/"+secondID, adminToken, nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, failed.StateCancelled, out["state"], out)

	// The link again: who acknowledged, and no form.
	status, headers = b.open(url)
	require.Equal(t, http.StatusOK, status)
	require.Equal(t, "no-referrer", headers["Referrer-Policy"])
	b.run("open the link again", chromedp.WaitVisible(chromedp.CSS("#done")))
	require.Equal(t, "Already acknowledged by "+who+".", b.text("#done"))
	forms, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.forms.length`))
	require.NoError(t, err)
	require.Zero(t, forms, "no form once acknowledged")

	// A link with one character changed, in its signature, acknowledges nothing.
	i, c := len(token)-10, byte('A')
	if token[i] == c {
		c = 'B'
	}
	tampered := token[:i] + string(c) + token[i+1:]
	require.NotEqual(t, token, tampered)
	status, headers = b.open(base + escalation.AckPath + tampered)
	require.Equal(t, http.StatusNotFound, status)
	require.Equal(t, "no-referrer", headers["Referrer-Policy"])
	require.Equal(t, "This link cannot acknowledge", b.text("h1"))
	forms, err = chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.forms.length`))
	require.NoError(t, err)
	require.Zero(t, forms)

	// The capability never reached the log (which did record the episode).
	log := logs.String()
	require.Contains(t, log, key, "the log is captured")
	require.NotContains(t, log, token, "the acknowledgement token is in the service's log")
	require.NotContains(t, log, token[strings.LastIndexByte(token, '.')+1:], "the link's signature is in the service's log")
}

// open loads url in b, bounded by stepTimeout, and returns the HTTP status and headers
// of the page.
func (b *browser) open(url string) (int, map[string]any) {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.Run(ctx, chromedp.NavigateResponse(url))
	require.NoError(b.t, err, "open %s", url)
	return int(resp.Status), resp.Headers
}

// submit runs steps that load a page (a click on a submit button), bounded by
// stepTimeout, and returns the HTTP status of the page.
func (b *browser) submit(steps ...chromedp.Action[chromedp.Void]) int {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	resp, err := chromedp.RunResponse(ctx, steps...)
	require.NoError(b.t, err, "submit on %s", b.location())
	return int(resp.Status)
}

// apiJSON sends a request with a bearer token (and body as JSON) and returns the status
// and the decoded answer.
func apiJSON(t *testing.T, method, url, token string, body any) (int, map[string]any) {
	t.Helper()
	var r *bytes.Reader
	if body != nil {
		j, err := json.Marshal(body)
		require.NoError(t, err)
		r = bytes.NewReader(j)
	} else {
		r = bytes.NewReader(nil)
	}
	req, err := http.NewRequest(method, url, r)
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var out map[string]any
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
	return resp.StatusCode, out
}

// accepted returns the messages the simulator accepted whose text contains s.
func accepted(sim *chatsim.Server, s string) []chatsim.Message {
	var out []chatsim.Message
	for _, m := range sim.Accepted() {
		if strings.Contains(m.Text, s) {
			out = append(out, m)
		}
	}
	return out
}

// fits checks that the page in b needs no sideways scrolling and that its controls are
// large enough to tap.
func fits(t *testing.T, b *browser, what string) {
	t.Helper()
	overflow, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](
		`document.documentElement.scrollWidth - document.documentElement.clientWidth`))
	require.NoError(t, err)
	require.LessOrEqual(t, overflow, 0, "%s scrolls sideways on a phone", what)
	small, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("input:not([type=hidden]), button")]
		.filter(e => e.getBoundingClientRect().height < 44).map(e => e.id)`))
	require.NoError(t, err)
	require.Empty(t, small, "%s has controls under 44px high, hard to tap", what)
}

// screenshot saves the page in b as name.png in the test's artifact directory; one for
// the docs also in $ROCKETDELAY_SCREENSHOTS (relative to the repository root) when that
// is set.
func screenshot(t *testing.T, b *browser, name string, docs bool) {
	t.Helper()
	png, err := chromedp.Run(b.ctx, chromedp.FullScreenshot(100)) // quality 100: PNG
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), name+".png"), png, 0o644))
	dir := os.Getenv("ROCKETDELAY_SCREENSHOTS")
	if !docs || dir == "" {
		return
	}
	if !filepath.IsAbs(dir) {
		dir = filepath.Join("..", dir) // tests run in the package's directory
	}
	require.Less(t, len(png), 100<<10, "a screenshot for the docs stays small")
	require.NoError(t, os.WriteFile(filepath.Join(dir, name+".png"), png, 0o644))
}

// TestAcknowledgeThroughASignInProxyInABrowser: an operator reaches the console through
// an authenticating proxy in front of it (a reverse proxy that sets X-Forwarded-User,
// as oauth2-proxy does; http.trustedProxies names it, admin.proxyUserHeader the header)
// and, in Chromium, with no login of the console's own, acknowledges a running episode
// from the Escalations page. The chat is told "Acknowledged by" that person, and the
// console's page and the API show them as the one who acknowledged. The same page
// reached directly, not through the proxy, with the header forged, asks for a login.
func TestAcknowledgeThroughASignInProxyInABrowser(t *testing.T) {
	const (
		robotToken = "tok-ack-proxy-1"
		person     = "ana.oncall@example.com"
	)
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: robotToken}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: robotToken}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Admin.Token = "browser-admin-token-proxy-5e21"
	cfg.Ingress.Token = testIngestToken
	cfg.Escalations = map[string]config.Policy{"oncall": config.Policy{Steps: []config.EscalationStep{
		{Target: "ops"}, {After: time.Hour, Target: "ops"}}}.WithDefaults()}
	// The proxy reaches the service from 127.0.0.2, the browser from 127.0.0.1: only the
	// proxy's address is trusted.
	cfg.HTTP.TrustedProxies = []string{"127.0.0.2/32"}
	cfg.Admin.ProxyUserHeader = "X-Forwarded-User"
	require.NoError(t, cfg.Validate())
	base := serveInTest(t, cfg)
	proxy := signInProxy(t, base, person)

	key := testenv.Unique("payments-")
	code, out := apiJSON(t, "POST", base+ingress.EscalationsPath, testIngestToken,
		map[string]string{"key": key, "policy": "oncall", "title": "Payments down", "text": "checkout fails"})
	require.Equal(t, http.StatusCreated, code, out)
	require.Eventually(t, func() bool { return len(accepted(sim, "checkout fails")) == 1 }, 30*time.Second, 50*time.Millisecond,
		"the first step reaches the chat")

	b := newBrowser(t)
	// Directly, a forged header is no one: the console asks for its own login.
	b.run("direct", chromedp.Navigate(base+"/ui/escalations"), chromedp.WaitVisible(chromedp.CSS("#token")))
	require.Contains(t, b.location(), "/ui/login")

	row := fmt.Sprintf(`//tr[td[1][text()=%q]]`, key)
	b.run("through the proxy", chromedp.Navigate(proxy+"/ui/escalations"), chromedp.WaitVisible(chromedp.Search(row)))
	require.Equal(t, proxy+"/ui/escalations", b.location(), "no login: the proxy says who")
	status := b.submit(chromedp.Click(chromedp.Search(row + `//button[text()="Acknowledge"]`)))
	require.Equal(t, http.StatusOK, status)
	b.run("acknowledged", chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, b.text("#flash"), "Acknowledged episode")
	require.Eventually(t, func() bool { return len(accepted(sim, "Acknowledged by "+person)) == 1 }, 30*time.Second, 50*time.Millisecond,
		"the chat is told who acknowledged")

	code, out = apiJSON(t, "GET", base+ingress.EscalationsPath+"/"+key, testIngestToken, nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, store.EpisodeAcked, out["state"])
	require.Equal(t, person, out["ackedBy"])
	b.run("the list again", chromedp.Navigate(proxy+"/ui/escalations"), chromedp.WaitVisible(chromedp.Search(row)))
	require.Contains(t, b.text("#episodes"), person, "the console shows who acknowledged")
}

// signInProxy stands for an authenticating proxy in front of the service at base: a
// reverse proxy that reaches it from 127.0.0.2 and names person in X-Forwarded-User on every request (and
// drops any such header the client sent), until the test ends. It returns its base URL.
func signInProxy(t *testing.T, base, person string) string {
	t.Helper()
	target, err := url.Parse(base)
	require.NoError(t, err)
	rp := &httputil.ReverseProxy{
		Rewrite: func(r *httputil.ProxyRequest) {
			r.SetURL(target)
			r.Out.Host = r.In.Host // the console checks Origin against the host the browser used
			r.Out.Header.Set("X-Forwarded-User", person)
		},
		Transport: &http.Transport{DialContext: (&net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}).DialContext},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	srv := &http.Server{Handler: rp, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return "http://" + ln.Addr().String()
}
