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

// TestTargetAddedOnOneReplicaFirst: a configuration rolled out replica by replica. A's
// configuration already has the new target newt, B's does not yet; both are one
// deployment and share the topic's queues. Every alert published for newt through A's
// API reaches newt's robot exactly once, none is rejected, and B, which consumed its
// share of them, sent them on (on the old code B rejected its share as unknown_target,
// measured 49 of 100). B's own API answers 503 for newt (try again), not 400; a name no
// replica has is refused at once; and a target whose last replica stopped saying it has
// it longer than scheduler.unknownTargetWait ago is rejected, saying so.
func TestTargetAddedOnOneReplicaFirst(t *testing.T) {
	// A 4s window stands for DingTalk's minute (20 messages each): the alerts that come
	// back one by one from B are not left waiting for a minute's window.
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "r-ops", Token: "roll-ops"}, {Name: "r-new", Token: "roll-new"}}, Window: 4 * time.Second})
	a := stackConfig(t)
	a.Sender.BaseURL = simURL
	a.Sender.Window = 4 * time.Second
	a.Ingress.Token = testIngestToken
	a.Targets = map[string]config.Target{
		"ops":  {Robots: []config.Robot{{Name: "r-ops", Token: "roll-ops"}}},
		"newt": {Robots: []config.Robot{{Name: "r-new", Token: "roll-new"}}},
	}
	b := a
	b.Targets = map[string]config.Target{"ops": a.Targets["ops"]}
	require.NoError(t, a.Validate())
	require.NoError(t, b.Validate())
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
	require.Positive(t, scrape(t, baseB, "rocketdelay_unknown_target_sent_on_total"),
		"B consumed some of newt's alerts and sent them on (else the test proves nothing)")

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
	code, answer = publishVia(t, baseB, "nobody-has-it", "nobody", "1s")
	require.Equal(t, http.StatusBadRequest, code, answer)
	require.Contains(t, answer, "unknown_target")

	// A target the last replica that had it stopped saying so an hour ago.
	opts, err := redis.ParseURL(a.Redis.URL.Reveal())
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	require.NoError(t, rdb.HSet(context.Background(), "{"+a.Redis.KeyPrefix+"}:targets", "gone",
		time.Now().Add(-time.Hour).UnixMilli()).Err())
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
