package app

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// The console's Scheduled page with 10,000 pending alerts, in Chromium: the counts say
// 10,000 (by target and by hour), the first page lists the 50 due soonest, the next page
// the 50 after them, and a filter by target keeps only its alerts; then the Templates
// page, open with a sample. A screenshot of each lands in the test's artifact directory
// (docs/console has them).
func TestConsoleScheduledPageInABrowser(t *testing.T) {
	const adminToken = "browser-admin-token-5c1d77"
	cfg := stackConfig(t)
	cfg.Admin.Token = config.Secret(adminToken)
	ctx := context.Background()
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
	// 10,000 alerts hopping through the broker, one due every 2 seconds from 10 minutes
	// ahead (about 5.5 hours), a tenth of them for "db", as their hop notes list them.
	const n = 10000
	start := time.Now().Add(10 * time.Minute).Truncate(time.Second)
	var wg sync.WaitGroup
	errs := make(chan error, 8)
	for w := range 8 {
		wg.Go(func() {
			for i := w; i < n; i += 8 {
				target := "ops"
				if i%10 == 0 {
					target = "db"
				}
				if err := ws.TraceHop(ctx, store.HopNote{ID: fmt.Sprintf("sched-%05d", i), Target: target,
					Due: start.Add(time.Duration(i) * 2 * time.Second), Hops: 1, Delay: time.Hour, Principal: "billing"}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	require.NoError(t, <-errs)

	base := serveInTest(t, cfg)
	b := newBrowser(t)
	run, text := b.run, b.text
	run("log in", chromedp.Navigate(base+"/ui/scheduled"), chromedp.WaitVisible(chromedp.CSS("#token")),
		chromedp.SendKeys(chromedp.CSS("#token"), adminToken), chromedp.Click(chromedp.CSS("#login")),
		chromedp.WaitVisible(chromedp.CSS("#pending")))
	b.waitText("#pending tbody tr:first-child td:nth-child(2)", "sched-00000") // the whole page, parsed
	require.Equal(t, "10000", text("#pending-total"))
	require.Contains(t, text("#by-target"), "ops: 9000")
	require.Contains(t, text("#by-target"), "db: 1000")
	rows := func() []string {
		ids, err := chromedp.Run(b.ctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#pending tbody tr td:nth-child(2)")].map(td => td.textContent.trim())`))
		require.NoError(t, err)
		return ids
	}
	first := rows()
	require.Len(t, first, 50)
	require.Equal(t, "sched-00000", first[0])
	require.Equal(t, "sched-00049", first[49])
	hours, err := chromedp.Run(b.ctx, chromedp.Evaluate[int](`document.querySelectorAll("#by-hour tbody tr").length`))
	require.NoError(t, err)
	require.GreaterOrEqual(t, hours, 6, "5.5 hours of alerts, hour by hour")
	png, err := chromedp.Run(b.ctx, chromedp.CaptureScreenshot()) // the viewport: the counts and the first rows
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), "scheduled.png"), png, 0o644))

	run("next page", chromedp.Click(chromedp.CSS("#next-page")))
	b.waitText("#pending tbody tr:first-child td:nth-child(2)", "sched-00050")
	second := rows()
	require.Len(t, second, 50)
	require.Equal(t, "sched-00099", second[49])

	run("filter", chromedp.Navigate(base+"/ui/scheduled"), chromedp.WaitVisible(chromedp.CSS("#pending")),
		chromedp.SetValue(chromedp.CSS(`input[name="target"]`), "db"), chromedp.SetValue(chromedp.CSS(`input[name="within"]`), "1h"),
		chromedp.Click(chromedp.CSS(".filters button")))
	b.waitText("#alerts-heading", "Alerts matching the filter") // the filtered page, not the one before it
	got := rows()
	// Due within the hour: alerts 0 to 1,494 (10 minutes ahead, one every 2 seconds), of
	// which every tenth is db's: 150, in three pages of 50.
	require.Len(t, got, 50)
	for _, id := range got {
		var i int
		_, err := fmt.Sscanf(id, "sched-%05d", &i)
		require.NoError(t, err)
		require.Zero(t, i%10, "%s is not db's", id)
	}
	require.True(t, strings.HasSuffix(text("#next-page"), "Next page →"))

	// The Templates page opens with a sample rendered by the real receiver's template, as
	// DingTalk shows it.
	run("templates", chromedp.Navigate(base+"/ui/template"), chromedp.WaitVisible(chromedp.CSS("#as-shown")))
	require.Contains(t, text("#as-shown"), "DiskFull")
	require.Contains(t, text("#as-shown"), "db-3")
	require.Contains(t, text("#rendered-body"), `"msgtype": "markdown"`)
	png, err = chromedp.Run(b.ctx, chromedp.CaptureScreenshot())
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(t.ArtifactDir(), "template.png"), png, 0o644))
}
