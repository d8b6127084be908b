package app

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
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
	// Hopping alerts whose last hop's message is on a broker that does not answer, and on
	// one that no longer has it.
	closedPort, brokerPort := portOf(t, testenv.ClosedAddr(t)), portOf(t, testenv.Brokers(t))
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-6-unreachable", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1,
		Delay: 10 * time.Minute, Msg: primitive.CreateMessageId([]byte{127, 0, 0, 1}, int32(closedPort), 0)}))
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-7-gone", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1,
		Delay: 10 * time.Minute, Msg: primitive.CreateMessageId([]byte{127, 0, 0, 1}, int32(brokerPort), 1<<50)}))

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
		{[]string{"order-6-unreachable", "--in", "1m"}, ExitUnavailable, "read its message back from RocketMQ"},
		{[]string{"order-7-gone", "--in", "1m"}, ExitFailure, "cannot be read back"},
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

// `rocketdelay reschedule --in 5s`, with the service running, of an alert waiting in the
// wheel stage (due in 45 s) and of one hopping two hours ahead: each is handed off once,
// at its new due time by the chat's clock (the replica holding the waiting one's timer
// learns of the move at once; the hopping one is read back from RocketMQ and published
// again as a new generation), and `inspect` keeps the time it was accepted with and
// shows the move and its author.
func TestRescheduleByTheCLIIsExact(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "resched-exact-1"},
		{Name: "r2", Token: "resched-exact-2"}}})
	env := stackEnv(t)
	cfg, err := config.Load("", func(k string) string { return env[k] })
	require.NoError(t, err)
	// A target each, of a robot each: two messages to one robot 20 ms apart would be
	// paced by the robot's rate, not by the reschedule.
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "resched-exact-1"}}},
		"dev": {Robots: []config.Robot{{Name: "r2", Token: "resched-exact-2"}}}}
	cfg.Sender.BaseURL = simURL
	cfg.ShutdownTimeout = 5 * time.Second
	cfg.Ingress.Token = testIngestToken
	base := startReplica(t, cfg)
	rdb, _ := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, env["ROCKETDELAY_REDIS_KEY_PREFIX"], store.WheelStageOptions{})
	ctx := context.Background()

	published := map[string]time.Time{}
	for id, in := range map[string]time.Duration{"exact-waiting": 45 * time.Second, "exact-hopping": 2 * time.Hour} {
		at := time.Now().Add(in).Truncate(time.Millisecond)
		published[id] = at
		target := map[string]string{"exact-waiting": "ops", "exact-hopping": "dev"}[id]
		body := fmt.Sprintf(`{"target":%q,"id":%q,"at":%q,"text":"%s"}`, target, id, at.Format(time.RFC3339Nano), id)
		code, out := call(t, http.MethodPost, base+ingress.AlertsPath, string(testIngestToken), []byte(body))
		require.Equal(t, http.StatusAccepted, code, out)
	}
	for id, stage := range map[string]string{"exact-waiting": "waiting", "exact-hopping": "hopping"} {
		require.Eventually(t, func() bool {
			st, err := ws.Inspect(ctx, id)
			return err == nil && st.Stage == stage
		}, 30*time.Second, 20*time.Millisecond, "%s never %s", id, stage)
	}

	env["USER"] = "alice"
	due := map[string]time.Time{}
	for _, id := range []string{"exact-waiting", "exact-hopping"} {
		out, _, err := run(t, env, "reschedule", id, "--in", "5s", "-o", "json")
		require.NoError(t, err, out)
		var view rescheduleView
		require.NoError(t, json.Unmarshal([]byte(out), &view), out)
		require.NotNil(t, view.Due, out)
		due[id] = *view.Due
	}
	require.Eventually(t, func() bool { return len(sim.Accepted()) >= 2 }, 30*time.Second, 10*time.Millisecond)
	got := acceptedIDs(sim, regexp.MustCompile(`exact-\w+`))
	require.Equal(t, map[string]int{"exact-waiting": 1, "exact-hopping": 1}, got)
	for _, m := range sim.Accepted() {
		id := regexp.MustCompile(`exact-\w+`).FindString(m.Text)
		late := m.At.Sub(due[id])
		t.Logf("%s: handed off %s after its new due time (by the chat's clock)", id, late)
		require.GreaterOrEqual(t, late, time.Duration(0), "%s early", id)
		// Bounded loosely against a loaded machine: a move the timer did not learn of waits
		// for the sweeper, past its grace (scheduler.grace, 2 s).
		require.Less(t, late, 1500*time.Millisecond, "%s: handed off as if its timer had not moved", id)
	}
	for id, first := range published {
		out, _, err := run(t, env, "inspect", id)
		require.NoError(t, err)
		require.Contains(t, out, "rescheduled by cli:alice from "+first.UTC().Format(time.RFC3339Nano), id)
		require.Contains(t, out, " to "+due[id].UTC().Format(time.RFC3339Nano), id)
	}
}

// portOf is the port of the address host:port.
func portOf(t *testing.T, addr string) int {
	t.Helper()
	_, p, err := net.SplitHostPort(addr)
	require.NoError(t, err)
	n, err := strconv.Atoi(p)
	require.NoError(t, err)
	return n
}
