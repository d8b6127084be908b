package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/store"
)

// `rocketdelay alerts list` shows, from a running service, alerts hopping hours ahead
// with the due time they were published with, and keeps up as one is cancelled and one
// falls due (its send fails here: recorded in failed_sends, it is no longer pending).
func TestAlertsListShowsWhatIsScheduled(t *testing.T) {
	env := stackEnv(t)
	cfg, err := config.Load("", func(k string) string { return env[k] })
	require.NoError(t, err)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "t"}}}}
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Ingress.Token = testIngestToken
	base := startReplica(t, cfg)

	now := time.Now()
	due := map[string]time.Time{}
	for id, in := range map[string]time.Duration{"list-2h": 2 * time.Hour, "list-5m": 5 * time.Minute, "list-3s": 3 * time.Second} {
		at := now.Add(in).Truncate(time.Millisecond)
		due[id] = at
		body := fmt.Sprintf(`{"target":"ops","id":%q,"at":%q,"text":"disk full"}`, id, at.Format(time.RFC3339Nano))
		code, out := call(t, http.MethodPost, base+ingress.AlertsPath, string(testIngestToken), []byte(body))
		require.Equal(t, http.StatusAccepted, code, out)
	}
	list := func(args ...string) ingress.PendingResponse {
		out, _, err := run(t, env, append([]string{"alerts", "list", "-o", "json"}, args...)...)
		require.NoError(t, err)
		var res ingress.PendingResponse
		require.NoError(t, json.Unmarshal([]byte(out), &res), out)
		return res
	}
	ids := func(res ingress.PendingResponse) []string {
		var out []string
		for _, a := range res.Alerts {
			out = append(out, a.ID)
		}
		return out
	}
	// The two far alerts are listed once their first hop is noted (off the consume path).
	require.Eventually(t, func() bool {
		got := ids(list())
		return slices.Contains(got, "list-2h") && slices.Contains(got, "list-5m")
	}, 30*time.Second, 200*time.Millisecond)
	res := list("--due-after", "1m")
	require.Equal(t, []string{"list-5m", "list-2h"}, ids(res))
	for _, a := range res.Alerts {
		require.Equal(t, due[a.ID].UnixMilli(), a.DueAt.UnixMilli(), a.ID)
		require.Equal(t, "ops", a.Target)
		require.Equal(t, "hopping", a.Stage, a.ID)
	}

	code, out := call(t, http.MethodDelete, base+ingress.AlertsPath+"/list-5m", string(testIngestToken), nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"list-2h"}, ids(list("--due-after", "1m")), "a cancelled alert is no longer pending")

	// The alert due in 3 seconds falls due; its robot is not reachable here, so its send
	// is recorded in failed_sends and it leaves the list.
	require.Eventually(t, func() bool { return !slices.Contains(ids(list()), "list-3s") }, 60*time.Second, 250*time.Millisecond)
	res = list("--counts", "3", "--limit", "0")
	require.Empty(t, res.Alerts)
	require.NotNil(t, res.Counts)
	require.Equal(t, int64(1), res.Counts.Total)
	require.Equal(t, map[string]int64{"ops": 1}, res.Counts.ByTarget)
	require.Equal(t, []int64{0, 1, 0}, res.Counts.ByHour, "the 2-hour alert is due within its second hour from now")
}

// `rocketdelay alerts cancel` cancels every pending alert a filter matches, after a
// --dry-run that changes nothing; it needs a filter and a reason.
func TestAlertsCancelCommand(t *testing.T) {
	file, env, rdb, prefix := cliStack(t)
	env["USER"] = "alice"
	ctx := context.Background()
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	for i, target := range []string{"ops", "ops", "ops", "db"} {
		require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: fmt.Sprintf("bulk-%d", i), Target: target, Due: time.Now().Add(time.Hour),
			Hops: 1, Delay: time.Hour}))
	}

	_, _, err := run(t, env, "alerts", "cancel", "-f", file, "--reason", "x")
	require.ErrorIs(t, err, ErrUsage, "no filter")
	_, _, err = run(t, env, "alerts", "cancel", "-f", file, "--target", "ops")
	require.ErrorIs(t, err, ErrUsage, "no reason")
	out, _, err := run(t, env, "alerts", "cancel", "-f", file, "--target", "ops", "--dry-run")
	require.NoError(t, err)
	require.Equal(t, "3 pending alerts match (nothing changed: --dry-run)\n  bulk-0\n  bulk-1\n  bulk-2\n", out)
	c, err := ws.CountPending(ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, int64(4), c.Total, "a dry run changes nothing")

	out, _, err = run(t, env, "alerts", "cancel", "-f", file, "--target", "ops", "--reason", "maintenance window")
	require.NoError(t, err)
	require.Equal(t, "cancelled 3 of the 3 matching alerts\n", out)
	c, err = ws.CountPending(ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"db": 1}, c.ByTarget)
	cancelled, err := ws.IsCancelled(ctx, "bulk-1")
	require.NoError(t, err)
	require.True(t, cancelled)
}

// `alerts list --limit 0` prints only the counts, as its help says (it printed "no
// pending alert matches" with alerts pending), and --counts is bounded as the API's
// ?counts= is (a week of hours).
func TestAlertsListLimitZeroPrintsTheCounts(t *testing.T) {
	file, env, rdb, prefix := cliStack(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	for i := range 2 {
		require.NoError(t, ws.TraceHop(context.Background(), store.HopNote{ID: fmt.Sprintf("counted-%d", i), Target: "ops",
			Due: time.Now().Add(time.Hour), Hops: 1, Delay: time.Hour}))
	}
	out, _, err := run(t, env, "alerts", "list", "-f", file, "--limit", "0")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^pending +2$`, out)
	require.NotContains(t, out, "no pending alert matches")
	out, _, err = run(t, env, "alerts", "list", "-f", file, "--limit", "0", "-o", "json")
	require.NoError(t, err)
	var res ingress.PendingResponse
	require.NoError(t, json.Unmarshal([]byte(out), &res), out)
	require.NotNil(t, res.Counts, out)
	require.Equal(t, int64(2), res.Counts.Total)

	_, _, err = run(t, env, "alerts", "list", "-f", file, "--counts", fmt.Sprint(ingress.MaxCountHours+1))
	require.ErrorIs(t, err, ErrUsage)
}
