package scheduler

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
)

// replica is a `rocketdelay serve` subprocess.
type replica struct {
	cmd  *exec.Cmd
	done chan struct{}
	log  logLines // the messages of its log
	raw  logLines // its log lines as written
}

func (h *harness) replicaConfig(t *testing.T, simURL string) string {
	path := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	cfg := fmt.Sprintf(`log: {level: info, format: json}
http: {addr: "127.0.0.1:0"}
scheduler: {levels: %q, threshold: %s, grace: 1s, lease: %s, liveness: %s}
targets:
  ops:
    robots:
      - {name: r1, token: kill-token-1, signingSecret: SECkill-secret-1}
      - {name: r2, token: kill-token-2}
      - {name: r3, token: kill-token-3}
sender: {baseURL: %q, window: 1s, limit: 19}
shutdownTimeout: 10s
`, h.levels.String(), h.threshold, h.lease, h.liveness, simURL)
	require.NoError(t, os.WriteFile(path, []byte(cfg), 0o600))
	return path
}

// killID is the id of an alert of TestKilledReplicaLosesNothing.
var killID = regexp.MustCompile(`kill-\d{4}`)

// startSim starts a DingTalk simulator whose robots match replicaConfig, and feeds what
// it accepts into the harness's recorder: a hand-off counts once DingTalk has it.
func (h *harness) startSim(t *testing.T) string {
	sim, url := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{
			{Name: "r1", Token: "kill-token-1", Secret: "SECkill-secret-1"},
			{Name: "r2", Token: "kill-token-2"},
			{Name: "r3", Token: "kill-token-3"},
		},
		Window: time.Second,
	})
	done := make(chan struct{})
	t.Cleanup(func() { close(done) })
	go func() {
		seen := 0
		for {
			msgs := sim.Accepted()
			for _, m := range msgs[seen:] {
				// An alert arrives alone or merged with others; a merged message's title
				// repeats its first alert.
				inMessage := map[string]bool{}
				for _, id := range killID.FindAllString(m.Text, -1) {
					inMessage[id] = true
				}
				h.rec.mu.Lock()
				for id := range inMessage {
					h.rec.at[id] = append(h.rec.at[id], m.At)
				}
				h.rec.mu.Unlock()
			}
			seen = len(msgs)
			select {
			case <-done:
				return
			case <-time.After(50 * time.Millisecond):
			}
		}
	}()
	h.sim = sim
	return url
}

// startReplica starts `rocketdelay serve` with the configuration at cfgPath, the
// harness's topic and group, the key prefix and Postgres given, and env (KEY=value) on
// top of the test's environment.
func (h *harness) startReplica(t *testing.T, cfgPath, prefix, postgresURL string, env ...string) *replica {
	t.Helper()
	cmd := exec.Command(binary(t), "serve", "-f", cfgPath)
	cmd.Env = append(append(os.Environ(),
		"ROCKETDELAY_TOPIC="+h.topic,
		"ROCKETDELAY_GROUP="+h.group,
		"ROCKETDELAY_REDIS_KEY_PREFIX="+prefix,
		"ROCKETDELAY_POSTGRES_URL="+postgresURL,
	), env...)
	stderr, err := cmd.StderrPipe()
	require.NoError(t, err)
	require.NoError(t, cmd.Start())
	r := &replica{cmd: cmd, done: make(chan struct{})}
	h.replicas = append(h.replicas, r)
	h.rec.explain = h.explainMissing
	go func() {
		defer close(r.done)
		lines := bufio.NewScanner(stderr)
		lines.Buffer(make([]byte, 0, 64<<10), 1<<20)
		for lines.Scan() {
			var rec struct{ Msg string }
			r.raw.add(lines.Text())
			if json.Unmarshal(lines.Bytes(), &rec) == nil && rec.Msg != "" {
				r.log.add(rec.Msg)
			}
		}
		_, _ = io.Copy(io.Discard, stderr)
	}()
	t.Cleanup(func() { r.kill() })
	return r
}

// explainMissing logs what Redis and the replicas' logs know of each missing id: the
// wheel stage's keys that name it and every log line that mentions it.
func (h *harness) explainMissing(t testing.TB, missing []string) {
	ctx := context.Background()
	keys, err := h.rdb.Keys(ctx, "{"+h.prefix+"}:*").Result()
	if err != nil {
		t.Logf("explain: list keys: %v", err)
		return
	}
	for _, id := range missing[:min(len(missing), 5)] {
		t.Logf("explain %s:", id)
		for _, k := range keys {
			switch typ := h.rdb.Type(ctx, k).Val(); typ {
			case "hash":
				if v, err := h.rdb.HGet(ctx, k, id).Result(); err == nil {
					t.Logf("  %s[%s] = %q", k, id, v)
				}
			case "zset":
				members, _, _ := h.rdb.ZScan(ctx, k, 0, "*"+id+"*", 100).Result()
				for i := 0; i+1 < len(members); i += 2 {
					t.Logf("  %s has %q at %s", k, members[i], members[i+1])
				}
			case "string":
				if strings.Contains(k, id) {
					t.Logf("  %s = %q", k, h.rdb.Get(ctx, k).Val())
				}
			default:
				if strings.Contains(k, id) {
					t.Logf("  %s (%s)", k, typ)
				}
			}
		}
		for i, r := range h.replicas {
			for _, line := range r.raw.matching(id) {
				t.Logf("  replica %d: %s", i, line)
			}
		}
	}
}

// kill sends SIGKILL: no graceful stop, no give-back, no offset commit.
func (r *replica) kill() {
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
	_ = r.cmd.Wait()
}

// TestKilledReplicaLosesNothing runs two `rocketdelay serve` processes in one group,
// sending to the DingTalk simulator, and SIGKILLs one of them twice mid-run (restarting
// it each time): DingTalk receives every alert, none early, none twice but where a kill
// came between its send and its release, and none later than the takeover of a dead
// replica's work allows.
func TestKilledReplicaLosesNothing(t *testing.T) {
	t.Parallel()
	const downtime = 2 * time.Second // from a kill to the restart
	h := newHarness(t, 5*time.Second)
	// The subprocesses need the topic to exist (ROCKETDELAY_BROKERS lets them create it);
	// they share the harness's key prefix through the environment.
	cfg := h.replicaConfig(t, h.startSim(t))
	prefix := h.prefix
	pg := testenv.MigratedPostgres(t)
	a := h.startReplica(t, cfg, prefix, pg)
	h.startReplica(t, cfg, prefix, pg)

	const n = 300
	keys := ids("kill", n)
	start := time.Now()
	due := h.publishAll(keys, randomDelays(n, 30*time.Second, 7), "kill")
	// A kill can leave an alert sent but not released only while the killed replica held
	// its claim: what it holds when it is reaped (read long before its lease runs out and
	// a survivor takes it over) is all a kill can excuse.
	type kill struct {
		sent, gone time.Time // SIGKILL sent; the process reaped
		held       map[string]bool
	}
	var kills []kill
	for _, at := range []time.Duration{6 * time.Second, 15 * time.Second} {
		rid := h.ridOf(t, a)
		time.Sleep(time.Until(start.Add(at)))
		sent := time.Now()
		a.kill()
		k := kill{sent: sent, gone: time.Now(), held: map[string]bool{}}
		for _, id := range h.heldBy(t, rid) {
			k.held[id] = true
		}
		kills = append(kills, k)
		time.Sleep(downtime)
		a = h.startReplica(t, cfg, prefix, pg)
	}
	h.rec.waitAll(t, keys, 90*time.Second)
	// Nothing waits or is in flight and every alert has its done marker: no copy can come
	// later (the replicas confirm their claim right before a send).
	h.settle(keys)

	// What DingTalk accepted, per alert (a merged message carries several).
	got := map[string][]time.Time{}
	for _, m := range h.sim.Accepted() {
		inMessage := map[string]bool{}
		for _, id := range killID.FindAllString(m.Text, -1) {
			inMessage[id] = true
		}
		for id := range inMessage {
			got[id] = append(got[id], m.At)
		}
	}
	// The lateness a kill can cause, path by path: an alert the killed replica had claimed
	// waits for its lease to run out and the survivor's next sweep; one in the killed
	// replica's wheel, unclaimed, waits out the grace period and a sweep; one in a message
	// it had consumed but not acknowledged comes back once its queue has a consumer again,
	// at the latest the restarted replica, downtime after the kill. Even added up they
	// come to takeover = 6.5s. Reported here against twice that; judged (with a recorded
	// seed, PASS or FAIL) by make chaos's kill scenarios, since a loaded machine stretches
	// it.
	const (
		lease, grace, sweep = 3 * time.Second, time.Second, DefaultSweepInterval // replicaConfig's
		takeover            = downtime + lease + grace + sweep
		bound               = 2 * takeover
	)
	require.Equal(t, lease, h.lease, "the replicas' lease (replicaConfig)")
	var killed []string
	for _, k := range kills {
		killed = append(killed, fmt.Sprintf("%s–%s holding %d", k.sent.Format(time.StampMilli), k.gone.Format(time.StampMilli), len(k.held)))
	}
	duplicates := 0
	var worst time.Duration
	for id, want := range due {
		at := got[id]
		require.NotEmpty(t, at, "alert %s lost", id)
		slices.SortFunc(at, time.Time.Compare)
		excused := make([]bool, len(kills)) // each kill excuses one extra copy of an alert it held
		for i, c := range at {
			require.False(t, c.Before(want), "alert %s handed off %s early", id, want.Sub(c))
			worst = max(worst, c.Sub(want))
			if i == 0 {
				continue
			}
			// A second copy is the known ambiguity only when the killed replica held the
			// alert's claim when it died and the kill came between the two copies: it sent
			// the first and died before releasing it, and the replica that took its claim
			// over sent it again.
			duplicates++
			explained := false
			for k, kl := range kills {
				if !excused[k] && kl.held[id] && !at[i-1].After(kl.gone) && !c.Before(kl.sent) {
					excused[k], explained = true, true
					break
				}
			}
			require.True(t, explained, "alert %s accepted at %s and again at %s, and no kill between them found it held by the killed replica (kills: %v)",
				id, at[i-1].Format(time.StampMilli), c.Format(time.StampMilli), killed)
		}
	}
	verdict := "PASS"
	if worst >= bound {
		verdict = "FAIL"
	}
	t.Logf("%d alerts, 2 SIGKILLs: lost 0, duplicates at DingTalk %d (each of an alert the killed replica held), max lateness %s (report: bound %s, %s)",
		n, duplicates, worst, bound, verdict)
	require.Zero(t, h.sim.Stats().OverLimit, "the robots' rate limit was exceeded")
}

// ridOf is the liveness id of the replica r (its instance name holds its pid), once it
// beats.
func (h *harness) ridOf(t *testing.T, r *replica) string {
	t.Helper()
	pid := fmt.Sprintf("-%d-", r.cmd.Process.Pid)
	var rid string
	require.Eventually(t, func() bool {
		live, err := h.rdb.ZRange(context.Background(), "{"+h.prefix+"}:live", 0, -1).Result()
		require.NoError(t, err)
		for _, m := range live {
			if strings.Contains(m, pid) {
				rid = m
			}
		}
		return rid != ""
	}, 60*time.Second, 50*time.Millisecond, "replica %d never beat", r.cmd.Process.Pid)
	return rid
}

// heldBy lists the ids the wheel stage says replica rid holds (claims and parks).
func (h *harness) heldBy(t *testing.T, rid string) []string {
	t.Helper()
	members, err := h.rdb.ZRangeByLex(context.Background(), "{"+h.prefix+"}:held",
		&redis.ZRangeBy{Min: "[" + rid + "/", Max: "(" + rid + "0"}).Result()
	require.NoError(t, err)
	for i, m := range members {
		members[i] = strings.TrimPrefix(m, rid+"/")
	}
	return members
}

// acceptedAt is when DingTalk first accepted each alert, by id.
func (h *harness) acceptedAt() map[string][]time.Time {
	got := map[string][]time.Time{}
	for _, m := range h.sim.Accepted() {
		inMessage := map[string]bool{}
		for _, id := range killID.FindAllString(m.Text, -1) {
			inMessage[id] = true
		}
		for id := range inMessage {
			got[id] = append(got[id], m.At)
		}
	}
	for _, at := range got {
		slices.SortFunc(at, time.Time.Compare)
	}
	return got
}

// TestKilledReplicaHoldingsMoveByLiveness: with leases of an hour, what a SIGKILLed
// replica held (alerts claimed and waiting for slow robots, or in a request to them,
// or parked) reaches DingTalk through the other replica within a minute of the kill,
// each once (but one whose request DingTalk took just before the kill): only the
// liveness of the dead replica, lapsed after 1s, can have moved them. The dead replica
// ends gone, holding nothing. The time from the kill to the survivor's delivery of what
// the dead one held is logged.
func TestKilledReplicaHoldingsMoveByLiveness(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setStage(time.Hour, time.Second)
	cfg := h.replicaConfig(t, h.startSim(t))
	pg := testenv.MigratedPostgres(t)
	a := h.startReplica(t, cfg, h.prefix, pg)
	b := h.startReplica(t, cfg, h.prefix, pg)
	ridA, ridB := h.ridOf(t, a), h.ridOf(t, b)
	robots := []string{"kill-token-1", "kill-token-2", "kill-token-3"}
	for _, token := range robots { // every request takes 2s: the alerts wait at their replicas
		require.NoError(t, h.sim.Inject(token, chatsim.Fault{Kind: chatsim.FaultSlow, Delay: 2 * time.Second}))
	}

	const n = 80
	keys := ids("kill", n)
	due := h.publishAll(keys, every(n, 3*time.Second), "kill")
	var held []string
	require.Eventually(t, func() bool { held = h.heldBy(t, ridA); return len(held) >= 5 }, 60*time.Second, 10*time.Millisecond,
		"the replica to kill never held alerts")
	killed := time.Now()
	a.kill()
	reaped := time.Now()
	for _, token := range robots {
		h.sim.ClearFaults(token)
	}
	// The lease is an hour: only the liveness takes the dead replica's holdings over. The
	// wait is long for a loaded machine: alerts still in the dead replica's queues come
	// back when the broker rebalances them, which rocketmq-client-go also does on its own
	// every 20s when a notification is missed (a make test run once saw one alert wait
	// longer than a minute; explainMissing says what the stage and the logs knew of it).
	h.rec.waitAll(t, keys, 3*time.Minute)
	h.settle(keys)

	got := h.acceptedAt()
	var late []time.Duration
	for _, id := range held {
		late = append(late, got[id][0].Sub(killed))
	}
	slices.Sort(late)
	q := quantile.Summarize(late)
	t.Logf("replica A held %d alerts at the kill; the survivor delivered them %s (median) to %s after it",
		len(held), q.P50.Round(time.Millisecond), q.Max.Round(time.Millisecond))
	for id, at := range got {
		require.False(t, at[0].Before(due[id]), "alert %s accepted %s early", id, due[id].Sub(at[0]))
		if len(at) > 1 {
			require.False(t, at[0].After(reaped), "alert %s accepted at %s and again at %s: the first copy was not on the wire at the kill",
				id, at[0].Format(time.StampMilli), at[1].Format(time.StampMilli))
		}
	}
	require.Empty(t, h.heldBy(t, ridA), "the dead replica holds nothing")
	by, err := h.rdb.HGetAll(context.Background(), "{"+h.prefix+"}:by").Result()
	require.NoError(t, err)
	for id, rid := range by {
		require.NotEqual(t, ridA, rid, "%s still names the dead replica", id)
	}
	live, err := h.rdb.ZRange(context.Background(), "{"+h.prefix+"}:live", 0, -1).Result()
	require.NoError(t, err)
	require.Equal(t, []string{ridB}, live, "the dead replica is no longer live")
}

// TestBlipCausesNoTakeOver: both replicas are cut off Redis for 5s, two and a half
// times their liveness (2s), while alerts are due, and one of them gets back 0.5s after
// the other (its reconnect was slower): every replica's liveness runs out in the blip,
// yet none takes over anything of another (Redis's silence opens a quiet window of T,
// in which every replica beats again), no claim is lost, and DingTalk receives every
// alert once. The second replica has three quarters of T to beat again once its proxy
// is back (a liveness of 1s left it a half, which a loaded machine's reconnect spent).
func TestBlipCausesNoTakeOver(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.setStage(6*time.Second, 2*time.Second)
	cfg := h.replicaConfig(t, h.startSim(t))
	pg := testenv.MigratedPostgres(t)
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	var proxies []*testenv.Proxy
	var replicas []*replica
	for range 2 {
		proxy := testenv.StartProxy(t, opts.Addr)
		u, err := url.Parse(testenv.RedisURL(t))
		require.NoError(t, err)
		u.Host = proxy.Addr()
		proxies = append(proxies, proxy)
		replicas = append(replicas, h.startReplica(t, cfg, h.prefix, pg, "ROCKETDELAY_REDIS_URL="+u.String()))
	}
	for _, r := range replicas {
		h.ridOf(t, r)
	}

	const n = 150
	keys := ids("kill", n)
	start := time.Now()
	due := h.publishAll(keys, randomDelays(n, 12*time.Second, 38), "kill")
	time.Sleep(time.Until(start.Add(6 * time.Second)))
	for _, p := range proxies {
		p.Down()
	}
	time.Sleep(5 * time.Second)
	proxies[0].Up()
	time.Sleep(500 * time.Millisecond)
	proxies[1].Up()
	h.rec.waitAll(t, keys, 90*time.Second)
	h.settle(keys)

	got := h.acceptedAt()
	for id := range due {
		require.Len(t, got[id], 1, "alert %s accepted %d times", id, len(got[id]))
	}
	for i, r := range replicas {
		require.True(t, r.log.has("beat failed; trying again"), "replica %d never met the blip: the test proves nothing", i)
		require.False(t, r.log.has("a replica is gone (its holdings were taken over, or it left); loaded the entries its wheel held"),
			"replica %d took another over", i)
		require.False(t, r.log.has("claim lost during the hand-off (this replica was paused or cut off from Redis "+
			"longer than its liveness); the replica that holds it now delivers it"), "replica %d lost a claim", i)
	}
}

// TestDeadConsumersQueuesMove measures how long the queues of a replica's consumer wait
// for the survivor once that replica dies (SIGKILL: the kernel closes its connections and
// the broker tells the group at once) or hangs (SIGSTOP: its connections stay open, and
// the broker lists its consumer for about two minutes): alerts due at once, published
// right after the fault round robin over the topic's queues (the dead consumer's too),
// all reach DingTalk through the survivor, the hung replica's within about its liveness
// (3s; allocate.go leaves its consumer out once it lapsed). The time from the fault to
// the last of them is logged.
func TestDeadConsumersQueuesMove(t *testing.T) {
	t.Parallel()
	for _, fault := range []string{"SIGKILL", "SIGSTOP"} {
		t.Run(fault, func(t *testing.T) {
			t.Parallel()
			h := newHarness(t, 5*time.Second)
			cfg := h.replicaConfig(t, h.startSim(t))
			pg := testenv.MigratedPostgres(t)
			a := h.startReplica(t, cfg, h.prefix, pg)
			b := h.startReplica(t, cfg, h.prefix, pg)
			h.ridOf(t, a)
			h.ridOf(t, b)
			warm, keys := make([]string, 16), make([]string, 16) // kill-0000…, kill-1000…
			for i := range warm {
				warm[i], keys[i] = fmt.Sprintf("kill-%04d", i), fmt.Sprintf("kill-%04d", 1000+i)
			}
			// One round over every queue: the group is balanced.
			h.publishAll(warm, every(len(warm), 0), "warm")
			h.rec.waitAll(t, warm, time.Minute)

			at := time.Now()
			if fault == "SIGKILL" {
				a.kill()
			} else {
				require.NoError(t, a.cmd.Process.Signal(syscall.SIGSTOP))
				t.Cleanup(func() { _ = a.cmd.Process.Signal(syscall.SIGCONT) })
			}
			h.publishAll(keys, every(len(keys), 0), "after")
			h.rec.waitAll(t, keys, time.Minute) // the broker alone would keep a hung consumer's queues for two
			got := h.acceptedAt()
			var late []time.Duration
			for _, id := range keys {
				late = append(late, got[id][0].Sub(at))
			}
			q := quantile.Summarize(late)
			t.Logf("%s of a replica: the %d alerts published after it reached DingTalk %s (median) to %s (max) after the %s (liveness %s)",
				fault, len(keys), q.P50.Round(time.Millisecond), q.Max.Round(time.Millisecond), fault, h.liveness)
		})
	}
}

// A replica that dies with alerts delivered and their done markers left ahead of their
// releases (a burst's releases queued behind one another, release.go) leaves them in
// flight under its claims: the survivor's sweeper takes them over, finds them done and
// releases them without sending them again; the one without a marker it hands off.
func TestSweptAlertsWhoseMarkersAreLeftAreNotSentAgain(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	ctx := context.Background()
	_, err := h.ws.Liveness(nil).Beat(ctx, "dead")
	require.NoError(t, err)
	keys := []string{"swept-done-1", "swept-done-2", "swept-undone"}
	for _, id := range keys {
		_, err := h.ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(-time.Second), Body: []byte("x")})
		require.NoError(t, err)
	}
	c, err := h.ws.Claim(ctx, keys, "dead/1")
	require.NoError(t, err)
	require.Len(t, c.Entries, len(keys))
	require.NoError(t, h.ws.MarkAllDelivered(ctx, keys[:2]))

	_, m := h.start("survivor") // "dead" beats no more: its liveness lapses, its holdings are swept
	h.rec.waitAll(t, keys[2:], 30*time.Second)
	h.settle(keys, m)
	require.Zero(t, h.rec.count("swept-done-1"))
	require.Zero(t, h.rec.count("swept-done-2"))
	require.Equal(t, 1, h.rec.count("swept-undone"))
	require.EqualValues(t, 2, testutil.ToFloat64(m.handoffs.WithLabelValues("done")))
}
