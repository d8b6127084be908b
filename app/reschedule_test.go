package app

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// `rocketdelay reschedule` moves an alert wherever it is and exits with cancel's codes:
// 0 moved, 2 a bad time or one it cannot reach, 3 unknown, 4 too late, 1 refused where it
// is, 5 a store down.
func TestRescheduleCommand(t *testing.T) {
	file, env, rdb, prefix := cliStack(t)
	ctx := context.Background()
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	for _, id := range []string{"order-1-waiting", "order-2-waiting"} {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(30 * time.Second), Body: []byte("x")})
		require.NoError(t, err)
	}
	_, err := ws.Put(ctx, store.Entry{ID: "order-3-delivered", Target: "ops", DueAt: time.Now(), Body: []byte("x")})
	require.NoError(t, err)
	c, err := ws.Claim(ctx, []string{"order-3-delivered"}, "replica-a")
	require.NoError(t, err)
	require.Len(t, c.Entries, 1)
	_, err = ws.Release(ctx, store.Delivered, c.Entries[0].Claim())
	require.NoError(t, err)
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-4-hopping", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1, Delay: 10 * time.Minute}))

	at := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	env["USER"] = "alice"
	out, _, err := run(t, env, "reschedule", "-f", file, "order-1-waiting", "--at", at.Format(time.RFC3339Nano))
	require.NoError(t, err)
	delete(env, "USER")
	require.Equal(t, "rescheduled order-1-waiting to "+at.Format(time.RFC3339Nano)+": moved in the wheel stage\n", out)
	st, err := ws.Inspect(ctx, "order-1-waiting")
	require.NoError(t, err)
	require.Equal(t, at, st.NextDue)
	// inspect keeps the due time it was accepted with and shows the move, who made it and when.
	out, _, err = run(t, env, "inspect", "-f", file, "order-1-waiting")
	require.NoError(t, err)
	require.Contains(t, out, "rescheduled by cli:alice from ")
	require.Contains(t, out, " to "+at.UTC().Format(time.RFC3339Nano))

	out, _, err = run(t, env, "reschedule", "-f", file, "order-4-hopping", "--in", "2h", "-o", "name")
	require.NoError(t, err)
	require.Equal(t, "order-4-hopping\n", out)

	out, _, err = run(t, env, "reschedule", "-f", file, "order-4-hopping", "--in", "1m", "-o", "json")
	require.Equal(t, ExitFailure, ExitCode(err), "%v", err)
	var view rescheduleView
	require.NoError(t, json.Unmarshal([]byte(out), &view))
	require.Equal(t, "in_hop", view.Result)
	require.NotNil(t, view.Earliest)
	require.Nil(t, view.Due)

	for _, tc := range []struct {
		args []string
		code int
		msg  string
	}{
		// Beyond the wheel stage's reach it goes back to RocketMQ, which is down here.
		{[]string{"order-2-waiting", "--in", "2h"}, ExitUnavailable, "send it back to RocketMQ"},
		{[]string{"order-2-waiting", "--in", "9000h"}, ExitUsage, "beyond the horizon"},
		{[]string{"order-2-waiting", "--at", "tomorrow"}, ExitUsage, "not an RFC 3339 time"},
		{[]string{"order-2-waiting", "--at", at.Format(time.RFC3339), "--in", "1m"}, ExitUsage, "not both"},
		{[]string{"order-2-waiting"}, ExitUsage, "give --in DURATION or --at TIME"},
		{[]string{"order-5-mistyped", "--in", "1m"}, ExitNotFound, "no alert of this id is known"},
		{[]string{"order-3-delivered", "--in", "1m"}, ExitTooLate, "too late, it was already delivered"},
	} {
		_, _, err := run(t, env, append([]string{"reschedule", "-f", file}, tc.args...)...)
		require.Equal(t, tc.code, ExitCode(err), "%v: %v", tc.args, err)
		require.ErrorContains(t, err, tc.msg, "%v", tc.args)
	}
	st, err = ws.Inspect(ctx, "order-2-waiting")
	require.NoError(t, err)
	require.Equal(t, "waiting", st.Stage, "a move RocketMQ refused changed nothing")
	_, _, err = run(t, map[string]string{"ROCKETDELAY_REDIS_URL": "redis://" + testenv.ClosedAddr(t), "ROCKETDELAY_POSTGRES_URL": env["ROCKETDELAY_POSTGRES_URL"]},
		"reschedule", "-f", file, "order-2-waiting", "--in", "1s")
	require.Equal(t, ExitUnavailable, ExitCode(err), "%v", err)
}
