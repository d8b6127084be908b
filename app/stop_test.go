package app

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"regexp"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestStopHandsBackEverything: two replicas share a busy one-robot target (its alerts
// wait for the robot, parked by one replica and adopted by another); replica A stops, as
// at a SIGTERM, while it holds claims and parks. With leases of an hour, nothing could
// move them but A itself: when Serve returns, A is no longer live and nothing in the
// wheel stage names it (no claim token, no responsible replica, no holding), A logged
// what it handed back, and B delivers each alert once, the parked ones included. The
// time from the stop to B's delivery of what A held is logged.
func TestStopHandsBackEverything(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{{Name: "r1", Token: "tok-stop-4c2a"}},
		Window: time.Second,
	})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "tok-stop-4c2a"}}}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = time.Second
	cfg.Sender.Limit = 2
	cfg.Sender.CoalesceMax = 2 // four alerts a second: a backlog of twenty seconds
	cfg.Scheduler.Lease = time.Hour
	cfg.ShutdownTimeout = 20 * time.Second
	require.NoError(t, cfg.Validate())
	ctx := context.Background()
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	key := func(name string) string { return "{" + cfg.Redis.KeyPrefix + "}:" + name }

	logA := &lockedWriter{w: &strings.Builder{}}
	_, stopA := serveReplica(t, cfg, logA)
	live, err := rdb.ZRange(ctx, key("live"), 0, -1).Result()
	require.NoError(t, err)
	require.Len(t, live, 1)
	ridA := live[0]
	baseB := startReplica(t, cfg)

	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	const n = 80 // twenty seconds of backlog at four a second: A holds claims and parks together for seconds, however busy the machine
	var ids []string
	for i := range n {
		id := fmt.Sprintf("stop-%02d", i)
		_, err := p.Publish(ctx, wire.Publication{Target: "ops", In: 2 * time.Second, ID: id, Body: []byte("alert " + id)})
		require.NoError(t, err)
		ids = append(ids, id)
	}

	// A holds claims and parks of the busy target.
	var held []string
	require.Eventually(t, func() bool {
		members, err := rdb.ZRangeByLex(ctx, key("held"), &redis.ZRangeBy{Min: "[" + ridA + "/", Max: "(" + ridA + "0"}).Result()
		require.NoError(t, err)
		held = held[:0]
		parks := 0
		for _, m := range members {
			id := strings.TrimPrefix(m, ridA+"/")
			held = append(held, id)
			if owner, _ := rdb.HGet(ctx, key("owner"), id).Result(); owner == "parked:ops" {
				parks++
			}
		}
		return parks > 0 && len(held) > parks
	}, 30*time.Second, 5*time.Millisecond, "A never held both claims and parks: the test proves nothing")
	stopped := time.Now()
	claimedByB := watchHolder(t, rdb, key("by"), held, ridA)
	require.NoError(t, stopA())

	owners, err := rdb.HGetAll(ctx, key("owner")).Result()
	require.NoError(t, err)
	for id, token := range owners {
		require.False(t, strings.HasPrefix(token, ridA+"/"), "%s is still claimed by A (%s)", id, token)
	}
	by, err := rdb.HGetAll(ctx, key("by")).Result()
	require.NoError(t, err)
	for id, rid := range by {
		require.NotEqual(t, ridA, rid, "A is still responsible for %s", id)
	}
	left, err := rdb.ZLexCount(ctx, key("held"), "["+ridA+"/", "("+ridA+"0").Result()
	require.NoError(t, err)
	require.Zero(t, left, "A still holds alerts")
	live, err = rdb.ZRange(ctx, key("live"), 0, -1).Result()
	require.NoError(t, err)
	require.NotContains(t, live, ridA)
	require.Positive(t, handedBack(t, logA.String()), "A handed nothing back")

	accepted := func() map[string]int { return acceptedIDs(sim, regexp.MustCompile(`stop-\d\d`)) }
	require.Eventually(t, func() bool { return len(accepted()) == n }, 60*time.Second, 20*time.Millisecond)
	settle(t, cfg, ids, baseB)
	got := accepted()
	for _, id := range ids {
		require.Equal(t, 1, got[id], "alert %s accepted %d times", id, got[id])
	}
	firstAt := map[string]time.Time{}
	for _, m := range sim.Accepted() {
		for _, id := range regexp.MustCompile(`stop-\d\d`).FindAllString(m.Text, -1) {
			if _, ok := firstAt[id]; !ok {
				firstAt[id] = m.At
			}
		}
	}
	var late, taken []time.Duration
	for _, id := range held {
		if at := firstAt[id]; at.After(stopped) {
			late = append(late, at.Sub(stopped))
		}
	}
	for _, at := range claimedByB() {
		taken = append(taken, at.Sub(stopped))
	}
	slices.Sort(late)
	slices.Sort(taken)
	q, c := quantile.Summarize(late), quantile.Summarize(taken)
	t.Logf("A held %d alerts when it began to stop: another replica held %d of them %s (median), %s (last) after the stop began, "+
		"and delivered %d %s (median), %s (last) after it (the robot takes four a second)", len(held),
		len(taken), c.P50.Round(time.Millisecond), c.Max.Round(time.Millisecond),
		len(late), q.P50.Round(time.Millisecond), q.Max.Round(time.Millisecond))
	require.Zero(t, sim.Stats().OverLimit)
}

// handedBack sums what a replica's log (JSON lines) says it handed back as it stopped.
func handedBack(t *testing.T, log string) int {
	t.Helper()
	sum := 0
	lines := bufio.NewScanner(strings.NewReader(log))
	lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
	for lines.Scan() {
		var rec struct {
			Msg        string `json:"msg"`
			HandedBack int    `json:"handed_back"`
		}
		if json.Unmarshal(lines.Bytes(), &rec) == nil && rec.Msg == "stop: handed back to the other replicas" {
			sum += rec.HandedBack
		}
	}
	return sum
}

// watchHolder polls, until the test ends, which replica is responsible for each of ids
// (the by hash): it returns a function that lists when each id first had a responsible
// replica other than from.
func watchHolder(t *testing.T, rdb redis.UniversalClient, by string, ids []string, from string) func() []time.Time {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	var mu sync.Mutex
	at := map[string]time.Time{}
	done := make(chan struct{})
	go func() {
		defer close(done)
		for ctx.Err() == nil {
			now := time.Now()
			got, err := rdb.HMGet(ctx, by, ids...).Result()
			if err == nil {
				mu.Lock()
				for i, v := range got {
					if rid, ok := v.(string); ok && rid != from {
						if _, seen := at[ids[i]]; !seen {
							at[ids[i]] = now
						}
					}
				}
				mu.Unlock()
			}
			time.Sleep(2 * time.Millisecond)
		}
	}()
	t.Cleanup(func() { cancel(); <-done })
	return func() []time.Time {
		mu.Lock()
		defer mu.Unlock()
		return slices.Collect(maps.Values(at))
	}
}
