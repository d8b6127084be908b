package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// publishVia posts a text alert for target, due in in, through the API at base; it
// returns the status and the answer.
func publishVia(t *testing.T, base, target, id, in string) (int, string) {
	t.Helper()
	body, err := json.Marshal(map[string]string{"target": target, "id": id, "in": in, "text": id})
	require.NoError(t, err)
	return call(t, http.MethodPost, base+"/api/v1/alerts", testIngestToken, body)
}

// scrape is the value of the unlabelled metric name (or the sum of its series) in the
// /metrics of the replica at base.
func scrape(t *testing.T, base, name string) float64 {
	t.Helper()
	resp, err := http.Get(base + "/metrics")
	require.NoError(t, err)
	defer resp.Body.Close()
	text, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var sum float64
	for line := range strings.Lines(string(text)) {
		if strings.HasPrefix(line, name+" ") || strings.HasPrefix(line, name+"{") {
			v, err := strconv.ParseFloat(strings.TrimSpace(line[strings.LastIndexByte(line, ' '):]), 64)
			require.NoError(t, err, line)
			sum += v
		}
	}
	return sum
}

// twoRevisions are the configurations of two replicas of one deployment in the middle of
// a rollout: a has the targets ops and newt, b only ops, each target one robot of the
// returned simulator (tokens made from name). A 4s window stands for DingTalk's minute
// (20 messages each): alerts that come back one by one, or that the retry job sends one
// by one, are not left waiting for a minute's window.
func twoRevisions(t *testing.T, name string) (sim *chatsim.Server, a, b config.Config) {
	t.Helper()
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "r-ops", Token: name + "-ops"}, {Name: "r-new", Token: name + "-new"}}, Window: 4 * time.Second})
	a = stackConfig(t)
	a.Sender.BaseURL = simURL
	a.Sender.Window = 4 * time.Second
	a.Ingress.Token = testIngestToken
	a.Targets = map[string]config.Target{
		"ops":  {Robots: []config.Robot{{Name: "r-ops", Token: config.Secret(name + "-ops")}}},
		"newt": {Robots: []config.Robot{{Name: "r-new", Token: config.Secret(name + "-new")}}},
	}
	a.Escalations = map[string]config.Policy{"newpol": {Steps: []config.EscalationStep{{Target: "ops"}}}}
	a = a.WithDefaults()
	b = a
	b.Targets = map[string]config.Target{"ops": a.Targets["ops"]}
	b.Escalations = nil
	require.NoError(t, a.Validate())
	require.NoError(t, b.Validate())
	return sim, a, b
}

// goneAnHourAgo records in cfg's roster that the last replica that had target said so an
// hour ago.
func goneAnHourAgo(t *testing.T, cfg config.Config, target string) {
	t.Helper()
	opts, err := redis.ParseURL(cfg.Redis.URL.Reveal())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	require.NoError(t, rdb.HSet(context.Background(), "{"+cfg.Redis.KeyPrefix+"}:targets", target,
		time.Now().Add(-time.Hour).UnixMilli()).Err())
}

// TestTargetAddedOnOneReplicaFirst: a configuration rolled out replica by replica. A's
// configuration already has the new target newt, B's does not yet; both are one
// deployment and share the topic's queues. Every alert published for newt through A's
// API reaches newt's robot exactly once, none is rejected, and B, which consumed its
// share of them, sent them on (on the old code B rejected its share as unknown_target,
// measured 49 of 100). B's own API answers 503 for newt (try again), not 400; a name no
// replica has is refused at once; and a target whose last replica stopped saying it has
// it longer than scheduler.unknownTargetWait ago is rejected, saying so.
func TestTargetAddedOnOneReplicaFirst(t *testing.T) {
	sim, a, b := twoRevisions(t, "roll")
	baseA, baseB := startReplica(t, a), startReplica(t, b)

	// Both consume: warm-up alerts for ops (both have it) until each replica received some.
	for i := 0; scrape(t, baseA, "rocketdelay_messages_received_total") == 0 || scrape(t, baseB, "rocketdelay_messages_received_total") == 0; i++ {
		require.Less(t, i, 600, "after 60s one replica still consumes nothing")
		code, answer := publishVia(t, baseA, "ops", fmt.Sprintf("warm-%03d", i), "0s")
		require.Equal(t, http.StatusAccepted, code, answer)
		time.Sleep(100 * time.Millisecond)
	}

	const n = 100
	for i := range n {
		code, answer := publishVia(t, baseA, "newt", fmt.Sprintf("roll-%03d", i), "2s")
		require.Equal(t, http.StatusAccepted, code, answer)
	}
	counts := func() map[string]int {
		got := map[string]int{}
		for _, m := range sim.Accepted() {
			if m.Robot != "r-new" {
				continue
			}
			for line := range strings.Lines(m.Text) { // an alert's text is a line of its own; a merged message's title names the first
				if id := strings.TrimSpace(line); strings.HasPrefix(id, "roll-") {
					got[id]++
				}
			}
		}
		return got
	}
	require.Eventually(t, func() bool {
		c := counts()
		for i := range n {
			if c[fmt.Sprintf("roll-%03d", i)] == 0 {
				return false
			}
		}
		return true
	}, 3*time.Minute, 100*time.Millisecond, "every alert for newt reaches its robot")
	for id, c := range counts() {
		require.Equal(t, 1, c, "%s delivered %d times", id, c)
	}
	require.Zero(t, scrape(t, baseA, "rocketdelay_rejected_total")+scrape(t, baseB, "rocketdelay_rejected_total"), "nothing rejected")
	sentOn := scrape(t, baseB, "rocketdelay_unknown_target_sent_on_total")
	require.Positive(t, sentOn, "B consumed some of newt's alerts and sent them on (else the test proves nothing)")
	// B consumes about half of them (its share of the queues) and sends each on to a
	// queue of A's, once. Sent on to any queue (round robin), half would come back to B
	// each time, and B would send on about n in all (measured 92-111 before).
	t.Logf("B sent on %.0f of the %d alerts for newt", sentOn, n)
	require.LessOrEqual(t, sentOn, float64(n)*3/4, "B sends each alert on to A's queues, not back to its own")

	code, answer := publishVia(t, baseB, "newt", "via-b", "1s")
	require.Equal(t, http.StatusServiceUnavailable, code, answer)
	require.Contains(t, answer, "target_elsewhere")
	req, err := http.NewRequest(http.MethodPost, baseB+"/api/v1/alertmanager/newt", strings.NewReader(`{"version":"4","status":"firing","alerts":[]}`))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "Alertmanager sends it again")
	// So for an escalation policy A has and B not yet: through B's receiver or API, 503
	// (a 404 or 400 dropped the notification, the page).
	for path, body := range map[string]string{
		"/api/v1/alertmanager/ops?policy=newpol": `{"version":"4","status":"firing","receiver":"r","groupKey":"g","alerts":[{"status":"firing","labels":{"alertname":"X"},"fingerprint":"f","startsAt":"2026-12-05T10:00:00Z"}]}`,
		"/api/v1/escalations":                    `{"key":"roll-episode","policy":"newpol","text":"db down"}`,
	} {
		req, err := http.NewRequest(http.MethodPost, baseB+path, strings.NewReader(body))
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+testIngestToken)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		answer, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(t, http.StatusServiceUnavailable, resp.StatusCode, "%s: %s", path, answer)
		require.Contains(t, string(answer), "policy_elsewhere", path)
	}
	code, answer = publishVia(t, baseB, "nobody-has-it", "nobody", "1s")
	require.Equal(t, http.StatusBadRequest, code, answer)
	require.Contains(t, answer, "unknown_target")

	// A target the last replica that had it stopped saying so an hour ago.
	goneAnHourAgo(t, a, "gone")
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: a.RocketMQ.NameServers, Topic: a.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	gone, err := p.Publish(context.Background(), wire.Publication{Target: "gone", In: 0, Body: []byte("for a target removed an hour ago")})
	require.NoError(t, err)
	pool, err := store.OpenPostgres(context.Background(), a.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pool.Close()
	var class, detail string
	require.Eventually(t, func() bool {
		return pool.QueryRow(context.Background(), `SELECT error_class, last_error FROM failed_sends WHERE message_id = $1`,
			gone.ID).Scan(&class, &detail) == nil
	}, 30*time.Second, 50*time.Millisecond, "the alert for a target gone an hour is rejected")
	require.Equal(t, "rejected_unknown_target", class)
	require.Contains(t, detail, "the last replica that had it said so 1h0m0s ago")
}

// TestTargetOfAReplicaAwayWaitsForIt: during a rollout the only replica that has a
// target can be away for a while (restarted, rescheduled, rolled back and forth) while
// its alerts fall due. A (newt and ops) stores newt's alerts in the wheel stage and
// stops; B (ops only) takes over what A held and hands them off at their due time. B
// must not decide for a target it does not have: it keeps them as pending failed sends
// that only a replica that has newt retries (on the old code B recorded each as
// rejected, never to be sent), and A, back, sends each once. A pending row whose target
// no replica has had for scheduler.unknownTargetWait is given up, saying so.
func TestTargetOfAReplicaAwayWaitsForIt(t *testing.T) {
	sim, a, b := twoRevisions(t, "away")
	a.FailedSends.Interval, a.FailedSends.BackoffBase = 200*time.Millisecond, 200*time.Millisecond
	b.FailedSends = a.FailedSends
	baseA, stopA := serveReplica(t, a, io.Discard)
	t.Cleanup(func() { _ = stopA() })
	startReplica(t, b)

	const n = 20
	ids := make([]string, n)
	for i := range ids {
		ids[i] = fmt.Sprintf("away-%02d", i)
		code, answer := publishVia(t, baseA, "newt", ids[i], "8s")
		require.Equal(t, http.StatusAccepted, code, answer)
	}
	// Every alert reached the wheel stage (A stored it: B sends newt's alerts on), then A
	// stops, before any is due.
	require.Eventually(t, func() bool { return scrape(t, baseA, "rocketdelay_wheel_stage_puts_total") >= n },
		30*time.Second, 20*time.Millisecond, "A stored every alert for newt")
	require.NoError(t, stopA())

	pool, err := store.OpenPostgres(context.Background(), a.Postgres.URL.Reveal())
	require.NoError(t, err)
	defer pool.Close()
	rows := func(status string) int {
		var c int
		require.NoError(t, pool.QueryRow(context.Background(),
			`SELECT count(*) FROM failed_sends WHERE target = 'newt' AND status = $1`, status).Scan(&c))
		return c
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, [3]int{n, 0, 0}, [3]int{rows("pending"), rows("rejected"), rows("dead")}, "pending, rejected, dead")
	}, time.Minute, 50*time.Millisecond, "B, without newt, keeps each due alert for a replica that has it")
	require.Empty(t, sim.Accepted(), "nothing sent while no replica that has newt runs")

	startReplica(t, a) // A is back
	delivered := func() map[string]int {
		got := map[string]int{}
		for _, m := range sim.Accepted() {
			for line := range strings.Lines(m.Text) {
				if id := strings.TrimSpace(line); m.Robot == "r-new" && strings.HasPrefix(id, "away-") {
					got[id]++
				}
			}
		}
		return got
	}
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Len(c, delivered(), n)
	}, time.Minute, 50*time.Millisecond, "A, back, sends every alert for newt")
	for id, c := range delivered() {
		require.Equal(t, 1, c, "%s delivered %d times", id, c)
	}
	// The retry job marks a row delivered once the platform's answer is in: just after
	// the simulator counted it.
	require.EventuallyWithT(t, func(c *assert.CollectT) {
		assert.Equal(c, n, rows("delivered"))
	}, 30*time.Second, 50*time.Millisecond, "every row delivered")
	require.Zero(t, rows("rejected")+rows("dead"))

	// A row for a target the last replica that had it stopped saying so an hour ago.
	goneAnHourAgo(t, a, "gone")
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	now := time.Now()
	_, err = fs.Record(context.Background(), store.NewFailedSend{MessageID: "away-gone", Target: "gone", Payload: []byte("gone"),
		DueAt: &now, ErrorClass: "transient", LastError: "robot busy", NextAttemptAt: now})
	require.NoError(t, err)
	var status, last string
	require.Eventually(t, func() bool {
		return pool.QueryRow(context.Background(), `SELECT status, last_error FROM failed_sends WHERE message_id = 'away-gone'`).
			Scan(&status, &last) == nil && status != "pending"
	}, 30*time.Second, 50*time.Millisecond, "the row for a target gone an hour is given up")
	require.Equal(t, "dead", status)
	require.Contains(t, last, "the last replica that had it said so 1h0m0s ago")
}
