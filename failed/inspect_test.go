package failed_test

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// inspectWorld is an Inspector on a wheel stage of the local Redis and a failed_sends
// table of the local Postgres, both of the test's own.
func inspectWorld(t *testing.T) (failed.Inspector, *store.WheelStage, *store.FailedSends) {
	t.Helper()
	_, fs := testenv.FailedSends(t)
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	cfg := config.Config{Targets: testTargets}.WithDefaults()
	cfg.Scheduler.Levels = config.DelayLevels{time.Second, 5 * time.Second, 10 * time.Second, 30 * time.Second}
	cfg.Scheduler.Threshold = 10 * time.Second
	return failed.Inspector{Wheel: ws, Rows: fs, Config: cfg, Now: time.Now}, ws, fs
}

// Every state an alert can be in, as Inspect names it from the wheel stage, the trace
// and the failed_sends rows.
func TestInspectNamesEveryState(t *testing.T) {
	t.Parallel()
	in, ws, fs := inspectWorld(t)
	ctx := context.Background()
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	entry := func(id string, due time.Time) store.Entry {
		return store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")}
	}
	claimed := func(id string) store.Claim {
		_, err := ws.Put(ctx, entry(id, due))
		require.NoError(t, err)
		c, err := ws.Claim(ctx, []string{id}, "replica-a/1")
		require.NoError(t, err)
		require.Len(t, c.Entries, 1, id)
		return c.Entries[0].Claim()
	}

	// Due in 45s: 30s, then 10s, then under 10s in the wheel stage, whatever a slow
	// machine takes between here and the trace (anything from 40s to 50s plans the same).
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "hopping", Due: time.Now().Add(45 * time.Second), Target: "ops", Hops: 1, Delay: 30 * time.Second}))
	_, err := ws.Put(ctx, entry("waiting", time.Now().Add(time.Minute)))
	require.NoError(t, err)
	claimed("handoff")
	_, err = ws.ReleaseReceipt(ctx, store.Receipt{Outcome: store.Delivered, Robot: "ops-2", Merged: 4, Parts: 1, Replica: "replica-a"},
		claimed("delivered"))
	require.NoError(t, err)
	_, err = ws.ReleaseReceipt(ctx, store.Receipt{Outcome: store.Recorded, Replica: "replica-a"}, claimed("failing"))
	require.NoError(t, err)
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "failing", Target: "ops", DueAt: &due, ErrorClass: "transient",
		LastError: "HTTP 503 from DingTalk", NextAttemptAt: time.Now().Add(10 * time.Minute)})
	require.NoError(t, err)
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "bad-one", Target: "opz", Rejected: true, ErrorClass: "rejected_unknown_target",
		LastError: `RD_TARGET "opz" is not a target in the configuration`})
	require.NoError(t, err)
	_, err = ws.Put(ctx, entry("cancelled", time.Now().Add(time.Minute)))
	require.NoError(t, err)
	_, err = ws.Cancel(ctx, "cancelled")
	require.NoError(t, err)

	for id, want := range map[string]struct{ state, says string }{
		"hopping":   {failed.StateHopping, "taking broker hops: 1 so far, the last back in 2"},
		"waiting":   {failed.StateWaiting, "waiting in the wheel stage, due in "},
		"handoff":   {failed.StateHandoff, "being handed off by replica-a"},
		"delivered": {failed.StateDelivered, "by robot ops-2"},
		"failing":   {failed.StateFailed, "its send failed (transient); failed_sends row"},
		"bad-one":   {failed.StateRejected, `rejected: RD_TARGET "opz" is not a target`},
		"cancelled": {failed.StateCancelled, "while it waited in the wheel stage"},
		"never":     {failed.StateUnknown, "older than the trace's life (scheduler.doneTTL, 168h0m0s)"},
	} {
		rep, err := in.Inspect(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, want.state, rep.State, "%s: %s", id, rep.Summary)
		require.Contains(t, rep.Summary, want.says, id)
	}

	rep, err := in.Inspect(ctx, "delivered")
	require.NoError(t, err)
	require.Equal(t, "dingtalk", rep.Kind)
	require.Len(t, rep.History, 3)
	require.Contains(t, rep.History[0].What, "accepted for ops")
	require.Contains(t, rep.History[2].What, "delivered by robot ops-2, merged with 3 other alerts")
	require.Contains(t, rep.History[2].What, "handed off by replica-a")
	rep, err = in.Inspect(ctx, "failing")
	require.NoError(t, err)
	require.Len(t, rep.Rows, 1)
	require.Contains(t, rep.Summary, "next attempt in ")
	rep, err = in.Inspect(ctx, "hopping")
	require.NoError(t, err)
	require.Contains(t, rep.History[0].What, "(planned: 2 broker hops, then ")

	// A row the retry job delivered later says so.
	rows, err := fs.ByMessageID(ctx, "failing")
	require.NoError(t, err)
	require.NoError(t, fs.MarkDelivered(ctx, rows[0].ID))
	rep, err = in.Inspect(ctx, "failing")
	require.NoError(t, err)
	require.Equal(t, failed.StateDelivered, rep.State, "the wheel stage's done marker says recorded; the row says delivered")
	require.Contains(t, rep.Summary, "delivered by the retry job")
	var b bytes.Buffer
	require.NoError(t, failed.WriteReport(&b, rep))
	require.Contains(t, b.String(), "failed_sends rows (rocketdelay failed show ID):")
}

// GET /api/v1/alerts/{id} answers the report, with the admin token.
func TestInspectAPI(t *testing.T) {
	t.Parallel()
	in, ws, _ := inspectWorld(t)
	_, err := ws.Put(context.Background(), store.Entry{ID: "api-1", Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	srv := httptest.NewServer(failed.InspectHandler(in, discardLogger(), adminToken))
	defer srv.Close()
	get := func(path, token string) (int, map[string]any) {
		req, err := http.NewRequest(http.MethodGet, srv.URL+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+token)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		var out map[string]any
		require.NoError(t, json.NewDecoder(resp.Body).Decode(&out))
		return resp.StatusCode, out
	}
	code, out := get("/api/v1/alerts/api-1", string(adminToken))
	require.Equal(t, http.StatusOK, code)
	require.Equal(t, failed.StateWaiting, out["state"])
	require.Equal(t, "ops", out["target"])
	code, _ = get("/api/v1/alerts/api-1", "wrong-token-0123456789")
	require.Equal(t, http.StatusUnauthorized, code)
	code, out = get("/api/v1/alerts/has%20space", string(adminToken))
	require.Equal(t, http.StatusBadRequest, code)
	require.Contains(t, out["error"], "printable")
}
