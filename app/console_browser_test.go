package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestConsoleInABrowser drives the web console of a running service in Debian's Chromium
// (headless, through chromedp): log in, filter, open a row, retry it and see it delivered
// at the simulator, discard another with a reason, see the stats change, open a row
// whose body holds a <script> that must stay inert, find an alert with the search box and
// cancel it, discard every row of a filter after its count, log out, and be made to wait
// after five wrong tokens. A screenshot of each view lands in
// the test's artifact directory (go test -artifacts keeps them).
func TestConsoleInABrowser(t *testing.T) {
	const adminToken = "browser-admin-token-7f3a9c"
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "tok-browser-1"}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "tok-browser-1"}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Admin.Token = config.Secret(adminToken)
	cfg.FailedSends.Interval = 200 * time.Millisecond

	// Rows the console works on, recorded as the hand-off would, not due for an hour.
	pg, err := store.OpenPostgres(context.Background(), cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pg.Close()
	fs := store.NewFailedSends(pg, store.FailedSendsOptions{})
	later := time.Now().Add(time.Hour)
	for _, r := range []store.NewFailedSend{
		{MessageID: "retry-me", Target: "ops", Payload: []byte(`{"msgtype":"markdown","markdown":{"title":"Disk","text":"### Disk full\n**db-3** at 97%"}}`)},
		{MessageID: "discard-me", Target: "ops", Payload: []byte("stale alert")},
		{MessageID: "inert-script", Target: "ops", Payload: []byte(`<script>window.pwned = 1</script> CPU high`)},
		{MessageID: "billing-1", Target: "billing", Payload: []byte("card expired")},
	} {
		r.ErrorClass, r.LastError, r.NextAttemptAt = "transient", "HTTP 503 from DingTalk", later
		_, err := fs.Record(context.Background(), r)
		require.NoError(t, err)
	}

	base := serveInTest(t, cfg)
	b := newBrowser(t)
	bctx, run, text, location := b.ctx, b.run, b.text, b.location
	shots := t.ArtifactDir()
	shot := func(name string) chromedp.Action[chromedp.Void] {
		return chromedp.Func(func(ctx context.Context, tg *chromedp.Target) error {
			png, err := chromedp.FullScreenshot(100)(ctx, tg) // quality 100: PNG
			if err != nil {
				return err
			}
			return os.WriteFile(filepath.Join(shots, name+".png"), png, 0o644)
		})
	}

	// Log in: the console sends a stranger to the login page, and back after it.
	run("log in", chromedp.Navigate(base+"/ui/failed?target=ops"), chromedp.WaitVisible(chromedp.CSS("#token")), shot("login"),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#rows")))
	require.Equal(t, base+"/ui/failed?target=ops", location())
	rows := text("#rows tbody")
	require.Contains(t, rows, "retry-me")
	require.NotContains(t, rows, "billing-1", "filtered by target")

	// Filter on the form: status pending, target billing.
	run("filter", chromedp.SetValue(chromedp.CSS("#target"), "billing"), chromedp.SetValue(chromedp.CSS("#status"), "pending"),
		chromedp.Click(chromedp.CSS("#apply")))
	// The list page has #rows before and after: wait for the filtered page itself.
	require.Eventually(t, func() bool { return strings.Contains(location(), "status=pending") }, 10*time.Second, 50*time.Millisecond)
	run("filtered", chromedp.WaitVisible(chromedp.CSS("#rows")))
	require.Contains(t, text("#rows tbody"), "billing-1")
	require.NotContains(t, text("#rows tbody"), "retry-me")
	require.Equal(t, "4", text(`[data-status="pending"]`))
	run("list", chromedp.Navigate(base+"/ui/failed"), chromedp.WaitVisible(chromedp.CSS("#rows")), shot("failed-sends"))

	// Open a row and retry it; the retry job delivers it to the simulator.
	run("open", chromedp.Click(chromedp.Search(`//a[@class="row-link"][../../td[text()="retry-me"]]`)),
		chromedp.WaitVisible(chromedp.CSS("#body")), shot("detail"))
	require.Contains(t, text("#body"), "Disk full")
	run("retry", chromedp.Click(chromedp.CSS("#retry")), chromedp.WaitVisible(chromedp.CSS("#confirm")), shot("confirm-retry"),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Contains(t, text("#flash"), "Retry: row")
	require.Eventually(t, func() bool {
		for _, m := range sim.Accepted() {
			if strings.Contains(m.Text, "db-3") {
				return true
			}
		}
		return false
	}, 30*time.Second, 100*time.Millisecond, "the retried alert reaches the simulator")
	require.Eventually(t, func() bool {
		if chromedp.Do(bctx, chromedp.Reload(), chromedp.WaitVisible(chromedp.CSS("#row-status"))) != nil {
			return false
		}
		status, err := chromedp.Run(bctx, chromedp.Text(chromedp.CSS("#row-status")))
		return err == nil && strings.TrimSpace(status) == "delivered"
	}, 10*time.Second, 200*time.Millisecond, "the row shows delivered")

	// Discard another with a reason.
	run("discard", chromedp.Navigate(base+"/ui/failed?target=ops"), chromedp.WaitVisible(chromedp.CSS("#rows")),
		chromedp.Click(chromedp.Search(`//a[@class="row-link"][../../td[text()="discard-me"]]`)),
		chromedp.WaitVisible(chromedp.CSS("#discard")), chromedp.Click(chromedp.CSS("#discard")),
		chromedp.WaitVisible(chromedp.CSS("#reason")), chromedp.SendKeys(chromedp.CSS("#reason"), "duplicate of INC-42"),
		chromedp.Click(chromedp.CSS("#confirm")), chromedp.WaitVisible(chromedp.CSS("#discard-reason")))
	require.Equal(t, "duplicate of INC-42", text("#discard-reason"))
	require.Equal(t, "discarded", text("#row-status"))

	// The stats changed: one delivered, one discarded, two pending.
	run("stats", chromedp.Navigate(base+"/ui/failed"), chromedp.WaitVisible(chromedp.CSS("#stats")), shot("failed-sends-after"))
	require.Equal(t, "2", text(`[data-status="pending"]`))
	require.Equal(t, "1", text(`[data-status="delivered"]`))
	require.Equal(t, "1", text(`[data-status="discarded"]`))

	// A body with a <script> shows as text and never runs.
	run("inert", chromedp.Navigate(base+"/ui/failed?target=ops"), chromedp.WaitVisible(chromedp.CSS("#rows")),
		chromedp.Click(chromedp.Search(`//a[@class="row-link"][../../td[text()="inert-script"]]`)),
		chromedp.WaitVisible(chromedp.CSS("#body")), shot("detail-script-body"))
	scripts, err := chromedp.Run(bctx, chromedp.Evaluate[int](`document.scripts.length`))
	require.NoError(t, err)
	require.Zero(t, scripts)
	pwned, err := chromedp.Run(bctx, chromedp.Evaluate[string](`typeof window.pwned`))
	require.NoError(t, err)
	require.Equal(t, "undefined", pwned)
	require.Contains(t, text("#body"), "<script>window.pwned = 1</script> CPU high")

	// The scheduler view.
	run("scheduler", chromedp.Navigate(base+"/ui/scheduler"), chromedp.WaitVisible(chromedp.CSS("#robots")), shot("scheduler"))
	require.Contains(t, text("#robots tbody"), "r1")
	require.Equal(t, "0", text("#waiting"))

	// Find an alert with the search box, then cancel it, with a reason.
	rdb, err := store.OpenRedisConfig(context.Background(), cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
	_, err = ws.Put(context.Background(), store.Entry{ID: "order-4711-recheck", Target: "ops", DueAt: time.Now().Add(time.Hour),
		Body: []byte("order 4711 still dirty")})
	require.NoError(t, err)
	run("find", chromedp.SendKeys(chromedp.CSS(`header input[name="id"]`), "order-4711-recheck\n"),
		chromedp.WaitVisible(chromedp.CSS("#alert-state")), shot("alert"))
	require.Equal(t, "waiting", text("#alert-state"))
	require.Contains(t, text("#history"), "entered the wheel stage")
	run("cancel", chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#reason")),
		chromedp.SendKeys(chromedp.CSS("#reason"), "order paid meanwhile"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS("#flash")))
	require.Equal(t, "Cancelled: removed from the wheel stage.", text("#flash"))
	require.Equal(t, "cancelled", text("#alert-state"))

	// Discard every row a filter matches, after the count.
	run("bulk", chromedp.Navigate(base+"/ui/failed?target=billing"), chromedp.WaitVisible(chromedp.CSS("#bulk-discard")),
		chromedp.Click(chromedp.CSS("#bulk-discard")), chromedp.WaitVisible(chromedp.CSS("#count")))
	require.Equal(t, "1 rows match.", text("#count"))
	run("bulk discard", chromedp.SendKeys(chromedp.CSS("#reason"), "billing robots retired"), chromedp.Click(chromedp.CSS("#confirm")),
		chromedp.WaitVisible(chromedp.CSS(".flash")))
	require.Contains(t, text(".flash"), "Discard: 1 of the 1 previewed rows")
	require.Contains(t, text("#rows tbody"), "discarded")

	// Log out: back to the login page, and the console is closed to this browser.
	run("log out", chromedp.Click(chromedp.CSS(".logout button")), chromedp.WaitVisible(chromedp.CSS("#token")))
	run("after logout", chromedp.Navigate(base+"/ui/failed"), chromedp.WaitVisible(chromedp.CSS("#token")))
	require.Contains(t, location(), "/ui/login")

	// Five wrong tokens, then the sixth try waits, even with the right token.
	for i := range 5 {
		run("wrong token", chromedp.SendKeys(chromedp.CSS("#token"), fmt.Sprintf("wrong-%d", i)), chromedp.Click(chromedp.CSS("#login")))
		b.waitText("#error", "That is not an operator's token.")
		run("clear", chromedp.Navigate(base+"/ui/login"), chromedp.WaitVisible(chromedp.CSS("#token")))
	}
	run("locked out", chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Click(chromedp.CSS("#login")))
	run("locked out page", chromedp.WaitVisible(chromedp.CSS("#error")))
	require.Regexp(t, `^Too many failed logins: try again in [45]m[0-9]+s\.$`, text("#error"), "the rest of the window from the first failure")
	require.Contains(t, location(), "/ui/login", "no session while the client waits")

	files, err := filepath.Glob(filepath.Join(shots, "*.png"))
	require.NoError(t, err)
	require.Len(t, files, 8, fmt.Sprintf("screenshots in %s", shots))
}

// serveInTest runs the service on cfg until the test ends and returns its base URL once
// it is ready.
func serveInTest(t *testing.T, cfg config.Config) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == 200 }, 30*time.Second, 50*time.Millisecond)
	return base
}

// browser is one tab of Debian's Chromium, headless, driven through chromedp; it closes
// when the test ends.
type browser struct {
	t   *testing.T
	ctx context.Context
}

// stepTimeout bounds one step of a browser test: a page that never shows what a step
// waits for fails the step, not the whole run's deadline.
const stepTimeout = 20 * time.Second

func newBrowser(t *testing.T) *browser {
	t.Helper()
	path, err := exec.LookPath("chromium")
	require.NoError(t, err, "chromium is missing: deploy/local/up installs it (Debian package chromium)")
	alloc, cancelAlloc := chromedp.NewExecAllocator(context.Background(), append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(path), chromedp.NoSandbox, chromedp.DisableGPU, chromedp.WindowSize(1280, 900))...)
	t.Cleanup(cancelAlloc)
	ctx, cancel := chromedp.NewContext(alloc)
	t.Cleanup(cancel)
	require.NoError(t, chromedp.Do(ctx), "start the browser")
	return &browser{t: t, ctx: ctx}
}

// run carries out steps, each bounded by stepTimeout.
func (b *browser) run(what string, steps ...chromedp.Action[chromedp.Void]) {
	b.t.Helper()
	for _, step := range steps {
		ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
		err := chromedp.Do(ctx, step)
		cancel()
		require.NoError(b.t, err, "%s (on %s)", what, b.location())
	}
}

// text is the trimmed text of the element sel selects.
func (b *browser) text(sel string) string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	s, err := chromedp.Run(ctx, chromedp.Text(chromedp.CSS(sel)))
	require.NoError(b.t, err, "read "+sel)
	return strings.TrimSpace(s)
}

// waitText waits (up to stepTimeout) until the element sel selects reads want: after a
// navigation the old page's elements stay until the new page replaces them, and a poll
// inside the page ends with it, so the page is read again from here until it does.
func (b *browser) waitText(sel, want string) {
	b.t.Helper()
	q, err := json.Marshal(sel)
	require.NoError(b.t, err)
	// Only a page the browser has parsed whole counts: a server-rendered table streams in,
	// and its first row can read right while the rest are still arriving.
	expr := fmt.Sprintf(`document.readyState === "complete" ? (document.querySelector(%s)?.textContent ?? "").trim() : ""`, q)
	var got string
	require.Eventually(b.t, func() bool {
		ctx, cancel := context.WithTimeout(b.ctx, time.Second)
		defer cancel()
		got, err = chromedp.Run(ctx, chromedp.Evaluate[string](expr))
		return err == nil && got == want
	}, stepTimeout, 20*time.Millisecond, "wait for %s to read %q", sel, want)
}

// location is the tab's URL.
func (b *browser) location() string {
	b.t.Helper()
	ctx, cancel := context.WithTimeout(b.ctx, stepTimeout)
	defer cancel()
	loc, err := chromedp.Run(ctx, chromedp.Location())
	require.NoError(b.t, err)
	return loc
}

// TestConsoleCancelsAlertsWhoseIDsAreOddPaths cancels, from the alert's page in a
// browser, an alert whose id holds "/" and one whose id is crafted to steer the cancel
// form elsewhere ("../failed/5/discard#", a valid id): each cancel acts on its own alert
// and nothing else changes, neither the failed_sends row 5 the crafted id names nor any
// other row, nor a bystander alert.
func TestConsoleCancelsAlertsWhoseIDsAreOddPaths(t *testing.T) {
	const adminToken = "browser-admin-token-2b8e41"
	cfg := stackConfig(t)
	cfg.Admin.Token = config.Secret(adminToken)
	ctx := context.Background()
	pg, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pg.Close()
	fs := store.NewFailedSends(pg, store.FailedSendsOptions{})
	for i := range 6 {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprintf("row-%d", i+1), Target: "ops", Payload: []byte("x"),
			ErrorClass: "transient", LastError: "HTTP 503 from DingTalk", NextAttemptAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	rows, _, err := fs.List(ctx, store.Filter{Limit: 100})
	require.NoError(t, err)
	require.Len(t, rows, 6)
	_, err = fs.Get(ctx, 5)
	require.NoError(t, err, "the crafted id names row 5, which exists")

	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
	ids := []string{"team/a/order-1", "../failed/5/discard#"}
	for _, id := range append([]string{"bystander"}, ids...) {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
		require.NoError(t, err)
	}

	base := serveInTest(t, cfg)
	b := newBrowser(t)
	b.run("log in", chromedp.Navigate(base+"/ui/alerts"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#find")))
	for _, id := range ids {
		b.run("find "+id, chromedp.SendKeys(chromedp.CSS(`header input[name="id"]`), id+"\n"))
		b.waitText("#alert-id", id)
		require.Equal(t, "waiting", b.text("#alert-state"))
		b.run("cancel "+id, chromedp.Click(chromedp.CSS("#cancel")), chromedp.WaitVisible(chromedp.CSS("#reason")),
			chromedp.SendKeys(chromedp.CSS("#reason"), "cancelled from the browser"), chromedp.Click(chromedp.CSS("#confirm")),
			chromedp.WaitVisible(chromedp.CSS("#flash")))
		require.Equal(t, "Cancelled: removed from the wheel stage.", b.text("#flash"), id)
		require.Equal(t, id, b.text("#alert-id"), "back on the cancelled alert's page")
		require.Equal(t, "cancelled", b.text("#alert-state"), id)
		cancelled, err := ws.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.True(t, cancelled, id)
	}

	cancelled, err := ws.IsCancelled(ctx, "bystander")
	require.NoError(t, err)
	require.False(t, cancelled, "the bystander alert still waits")
	after, _, err := fs.List(ctx, store.Filter{Limit: 100})
	require.NoError(t, err)
	require.Equal(t, rows, after, "no failed_sends row changed")
}
