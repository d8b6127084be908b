package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/wire"
)

// raceWorld is two replicas of one deployment, A and B (one configuration, each on a port
// of its own), whose robot group "ops" sends to one simulator.
type raceWorld struct {
	t        *testing.T
	sim      *chatsim.Server
	replicas [2]string // base URLs of A and B
	delay    time.Duration
	client   *http.Client
	producer *wire.Producer
}

func startRaceWorld(t *testing.T, delay time.Duration) *raceWorld {
	t.Helper()
	var simRobots []chatsim.Robot
	var robots []config.Robot
	for i := range 10 {
		name, token := fmt.Sprintf("r%d", i), fmt.Sprintf("race-tok-%02d", i)
		simRobots = append(simRobots, chatsim.Robot{Name: name, Token: token})
		robots = append(robots, config.Robot{Name: name, Token: config.Secret(token)})
	}
	// Ten robots of 19 messages per 4s: the steps of a hundred groups falling due within
	// a few seconds go out as they fall due (some merged into one message when many wait
	// together: deliveries are counted per copy); delivery is not what this test measures.
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: simRobots, Limit: 19, Window: 4 * time.Second})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: robots}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 4 * time.Second
	cfg.Ingress.Token = testIngestToken
	require.NoError(t, cfg.Validate())
	w := &raceWorld{t: t, sim: sim, delay: delay,
		client: &http.Client{Timeout: 30 * time.Second, Transport: &http.Transport{MaxIdleConnsPerHost: 256}}}
	t.Cleanup(w.client.CloseIdleConnections)
	w.replicas[0] = startReplica(t, cfg)
	w.replicas[1] = startReplica(t, cfg)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	w.producer = p
	return w
}

// raceGroup names group g in every text the test sends, so a message the simulator
// accepted tells which group it is of (fixed width: no name is a prefix of another).
func raceGroup(g int) string { return fmt.Sprintf("race-%03d", g) }

// notification is Alertmanager's webhook payload (version 4) of group g, one alert,
// firing or resolved, whose summary is summary and the group's name.
func (w *raceWorld) notification(g int, status, summary string) []byte {
	w.t.Helper()
	name := raceGroup(g)
	a := ingress.Alert{Status: status, Labels: ingress.KV{"alertname": "RaceTest", "group": name},
		Annotations: ingress.KV{"summary": summary + " " + name}, StartsAt: time.Now().Add(-time.Minute).UTC(),
		Fingerprint: fmt.Sprintf("%016x", g)}
	if status == "resolved" {
		a.EndsAt = time.Now().UTC()
	}
	b, err := json.Marshal(ingress.Notification{Version: "4", GroupKey: fmt.Sprintf(`{}:{group=%q}`, name), Status: status,
		Receiver: "race", GroupLabels: ingress.KV{"group": name}, CommonLabels: a.Labels, Alerts: ingress.Alerts{a}})
	require.NoError(w.t, err)
	return b
}

// amAnswer is the receiver's answer to one notification.
type amAnswer struct {
	Outcome string `json:"outcome"`
	Episode string `json:"episode"`
	// sent and answered bound the moment the notification took effect.
	sent, answered time.Time
	// again counts the 503s answered first (sent again, as Alertmanager does).
	again int
}

// post posts a notification to the receiver of replica (0: A, 1: B) with ?delay=.
func (w *raceWorld) post(replica int, body []byte) (amAnswer, error) {
	a := amAnswer{sent: time.Now()}
	for {
		req, err := http.NewRequest(http.MethodPost, w.replicas[replica]+ingress.AlertmanagerPath+"/ops?delay="+w.delay.String(),
			bytes.NewReader(body))
		if err != nil {
			return a, err
		}
		req.Header.Set("Authorization", "Bearer "+testIngestToken)
		req.Header.Set("Content-Type", "application/json")
		resp, err := w.client.Do(req)
		if err != nil {
			return a, err
		}
		raw, err := io.ReadAll(resp.Body)
		resp.Body.Close()
		if err != nil {
			return a, err
		}
		if resp.StatusCode == http.StatusServiceUnavailable && a.again < 20 {
			a.again++
			continue
		}
		if resp.StatusCode != http.StatusOK {
			return a, fmt.Errorf("HTTP %d: %s", resp.StatusCode, raw)
		}
		a.answered = time.Now()
		return a, json.Unmarshal(raw, &a)
	}
}

// status reads episode key through replica's API.
func (w *raceWorld) status(replica int, key string) (escalation.Status, error) {
	var st escalation.Status
	req, err := http.NewRequest(http.MethodGet, w.replicas[replica]+ingress.EscalationsPath+"/"+key, nil)
	if err != nil {
		return st, err
	}
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	resp, err := w.client.Do(req)
	if err != nil {
		return st, err
	}
	defer resp.Body.Close()
	raw, err := io.ReadAll(resp.Body)
	if err != nil {
		return st, err
	}
	if resp.StatusCode != http.StatusOK {
		return st, fmt.Errorf("GET %s: HTTP %d: %s", key, resp.StatusCode, raw)
	}
	return st, json.Unmarshal(raw, &st)
}

// each runs f for the groups 0…n-1, a few at a time, and returns their answers.
func each[T any](t *testing.T, n int, f func(g int) (T, error)) []T {
	t.Helper()
	out, errs := make([]T, n), make([]error, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for g := range n {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			out[g], errs[g] = f(g)
		})
	}
	wg.Wait()
	for g, err := range errs {
		require.NoError(t, err, "group %d", g)
	}
	return out
}

// waitSentinel publishes a plain alert due at at and waits until the simulator accepted
// it: a step due before at and not withheld would have been sent before it.
func (w *raceWorld) waitSentinel(name string, at time.Time) {
	w.t.Helper()
	_, err := w.producer.Publish(context.Background(), wire.Publication{Target: "ops", At: at, Body: []byte(name)})
	require.NoError(w.t, err)
	require.Eventually(w.t, func() bool {
		return slices.ContainsFunc(w.sim.Accepted(), func(m chatsim.Message) bool { return m.Text == name })
	}, time.Until(at)+60*time.Second, 50*time.Millisecond, "%s never arrived", name)
}

// deliveries are the messages the simulator accepted that carry s, once per copy of s
// they carry (a merged message carries several alerts).
func deliveries(msgs []chatsim.Message, s string) []chatsim.Message {
	var out []chatsim.Message
	for _, m := range msgs {
		for range strings.Count(m.Text, s) {
			out = append(out, m)
		}
	}
	return out
}

// Issue 36: the concurrent update/resolve pairs, twice over the same groups, through two
// replicas. A hundred groups each have an escalation pending (?delay=15s); then, all at
// one moment, each gets a firing update (new summary) on one replica and a resolve on the
// other (update→A, resolve→B for the even groups, swapped for the odd ones). Judged at
// the simulator once every step would have been due: a resolve answered
// escalation_cancelled means that episode's step never arrives; an update answered
// escalation_started (it came after the resolve: a new episode) means its step arrives
// once, not before its own due time; a resolution_published means the step arrived once
// and the resolution after it. Every group is resolved, then fires again: a new episode
// each, whose step arrives exactly once and not before it is due (none dropped as a
// duplicate of the first round's ids), and whose resolution follows it.
//
// The old receiver (store.Escalations, before a1443cd) read the group's record, then
// cancelled and published, then wrote the record with a version check whose result it
// ignored: an update and a resolve that both read the pending record both answered
// (escalation_replaced, escalation_cancelled) while the update's new alert stayed
// published and was sent (17 of 100 groups, as issue 36 measured it), and the next round
// reused the ids published during the race (27 of 100 steps dropped as duplicates).
func TestEscalationUpdateResolveRaceTwoReplicas(t *testing.T) {
	const n = 100
	w := startRaceWorld(t, 15*time.Second)

	// Round 1: every group fires; its step is due 15s later.
	first := each(t, n, func(g int) (amAnswer, error) { return w.post(g%2, w.notification(g, "firing", "r1-first")) })
	firstDue := first[0].sent.Add(w.delay) // the earliest a step can be due
	for g, a := range first {
		require.Equal(t, "escalation_started", a.Outcome, "group %d", g)
		firstDue = minTime(firstDue, a.sent.Add(w.delay))
	}

	// The pairs: all at once, behind a barrier.
	updates, resolves := make([]amAnswer, n), make([]amAnswer, n)
	errs := make([]error, 2*n)
	var ready, done sync.WaitGroup
	start := make(chan struct{})
	for g := range n {
		up, res := 0, 1 // update → A, resolve → B
		if g%2 == 1 {
			up, res = 1, 0
		}
		jobs := []struct {
			replica int
			body    []byte
			out     *amAnswer
			err     *error
		}{
			{up, w.notification(g, "firing", "r1-update"), &updates[g], &errs[2*g]},
			{res, w.notification(g, "resolved", "r1-resolved"), &resolves[g], &errs[2*g+1]},
		}
		for _, j := range jobs {
			ready.Add(1)
			done.Go(func() {
				ready.Done()
				<-start
				*j.out, *j.err = w.post(j.replica, j.body)
			})
		}
	}
	ready.Wait()
	close(start)
	done.Wait()
	pairsStart, pairsEnd := updates[0].sent, updates[0].answered
	for g := range n {
		require.NoError(t, errs[2*g], "update of group %d", g)
		require.NoError(t, errs[2*g+1], "resolve of group %d", g)
		pairsStart = minTime(pairsStart, minTime(updates[g].sent, resolves[g].sent))
		pairsEnd = maxTime(pairsEnd, maxTime(updates[g].answered, resolves[g].answered))
	}

	// Each group's episode now: the first (resolved) or the one the update started.
	current := each(t, n, func(g int) (escalation.Status, error) { return w.status(g%2, first[g].Episode) })
	last := time.Now()
	for _, st := range current {
		last = maxTime(last, st.Started.Add(w.delay))
	}
	w.waitSentinel("sentinel-1", last.Add(3*time.Second))

	// Between the rounds every group resolves: the episodes the updates started were sent,
	// and their resolutions are published.
	ends1 := each(t, n, func(g int) (amAnswer, error) { return w.post((g+1)%2, w.notification(g, "resolved", "r1-end")) })

	// Round 2: every group fires again, a new episode each, left alone until due.
	second := each(t, n, func(g int) (amAnswer, error) { return w.post(g%2, w.notification(g, "firing", "r2-fire")) })
	again := each(t, n, func(g int) (escalation.Status, error) { return w.status((g+1)%2, second[g].Episode) })
	last = time.Now()
	for _, st := range again {
		last = maxTime(last, st.Started.Add(w.delay))
	}
	w.waitSentinel("sentinel-2", last.Add(3*time.Second))
	ends2 := each(t, n, func(g int) (amAnswer, error) { return w.post((g+1)%2, w.notification(g, "resolved", "r2-end")) })
	w.waitSentinel("sentinel-3", time.Now().Add(5*time.Second)) // past the resolutions' lag (2s)

	// Judge at the simulator.
	msgs := w.sim.Accepted()
	var bad []string
	fail := func(g int, format string, args ...any) {
		bad = append(bad, fmt.Sprintf("group %d (update %s, resolve %s): ", g, updates[g].Outcome, resolves[g].Outcome)+
			fmt.Sprintf(format, args...))
	}
	// once checks that one copy of s arrived, not before due, and returns it.
	once := func(g int, s string, due time.Time) chatsim.Message {
		got := deliveries(msgs, s)
		if len(got) != 1 {
			fail(g, "%q arrived %d times, want once", s, len(got))
			return chatsim.Message{}
		}
		if got[0].At.Before(due) {
			fail(g, "%q arrived at %s, %s before it was due", s, got[0].At.Format(time.StampMilli), due.Sub(got[0].At))
		}
		return got[0]
	}
	never := func(g int, s string) {
		if got := deliveries(msgs, s); len(got) > 0 {
			fail(g, "%q arrived %d times, want never", s, len(got))
		}
	}
	after := func(g int, m, before chatsim.Message, what string) {
		if m.Seq != 0 && before.Seq != 0 && m.Seq < before.Seq {
			fail(g, "%s arrived before the step (message %d, step %d)", what, m.Seq, before.Seq)
		}
	}
	// Each check counts the groups it applied to and those that passed it.
	type tally struct{ ok, of int }
	checks := []string{
		"round 1: resolve answered escalation_cancelled: that episode's step never arrived",
		"round 1: resolve answered resolution_published: the step arrived once, the resolution after it",
		"round 1: update answered escalation_started: the new episode's step arrived once, not early",
		"between: resolve answered resolution_published: the resolution arrived once, after the step",
		"between: resolve answered resolved_nothing_pending: no resolution arrived",
		"round 2: firing answered escalation_started (a new episode): its step arrived once, not early",
		"round 2: resolve answered resolution_published: the resolution arrived once, after the step",
	}
	tallies := make([]tally, len(checks))
	check := func(i int, f func()) {
		before := len(bad)
		f()
		tallies[i].of++
		if len(bad) == before {
			tallies[i].ok++
		}
	}
	type class struct{ route, update, resolve string }
	classes := map[class]int{}
	var earliest time.Duration = -1 // the smallest margin of a round-2 step after its due time
	for g := range n {
		name := raceGroup(g)
		up, res := updates[g].Outcome, resolves[g].Outcome
		route := "update→A resolve→B"
		if g%2 == 1 {
			route = "resolve→A update→B"
		}
		classes[class{route, up, res}]++
		firstStep, updStep := "r1-first "+name, "r1-update "+name
		// The first episode's step: its content is the update's when the update came
		// before the resolve, the first firing's otherwise.
		switch res {
		case "escalation_cancelled":
			check(0, func() {
				never(g, firstStep)
				if up == "escalation_updated" {
					never(g, updStep)
				}
				never(g, "r1-resolved "+name)
			})
		case "resolution_published":
			check(1, func() {
				got := deliveries(msgs, firstStep)
				if up == "escalation_updated" {
					got = append(got, deliveries(msgs, updStep)...)
				}
				if len(got) != 1 {
					fail(g, "the first episode's step arrived %d times, want once", len(got))
					return
				}
				if due := first[g].sent.Add(w.delay); got[0].At.Before(due) {
					fail(g, "the first episode's step arrived %s before it was due", due.Sub(got[0].At))
				}
				after(g, once(g, "r1-resolved "+name, time.Time{}), got[0], "the resolution")
			})
		default:
			fail(g, "unexpected resolve outcome")
		}
		// The episode the update started, when it came after the resolve.
		switch up {
		case "escalation_updated":
			check(4, func() {
				if ends1[g].Outcome != "resolved_nothing_pending" {
					fail(g, "the resolve between the rounds answered %s, want resolved_nothing_pending", ends1[g].Outcome)
				}
				never(g, "r1-end "+name)
			})
		case "escalation_started":
			var step chatsim.Message
			check(2, func() {
				if current[g].State != "pending" {
					fail(g, "no pending episode after the update started one: %+v", current[g].Episode)
				}
				step = once(g, updStep, current[g].Started.Add(w.delay))
			})
			check(3, func() {
				if ends1[g].Outcome != "resolution_published" {
					fail(g, "the resolve between the rounds answered %s, want resolution_published", ends1[g].Outcome)
				}
				after(g, once(g, "r1-end "+name, time.Time{}), step, "its resolution")
			})
		default:
			fail(g, "unexpected update outcome")
		}
		// Round 2: a new episode, its step once and not early, then its resolution.
		var step chatsim.Message
		check(5, func() {
			if second[g].Outcome != "escalation_started" || again[g].Seq <= current[g].Seq {
				fail(g, "round 2's firing answered %s, episode %d after %d: want a new episode", second[g].Outcome,
					again[g].Seq, current[g].Seq)
			}
			due := again[g].Started.Add(w.delay)
			step = once(g, "r2-fire "+name, due)
			if step.Seq != 0 && (earliest < 0 || step.At.Sub(due) < earliest) {
				earliest = step.At.Sub(due)
			}
		})
		check(6, func() {
			if ends2[g].Outcome != "resolution_published" {
				fail(g, "the resolve after round 2 answered %s, want resolution_published", ends2[g].Outcome)
			}
			after(g, once(g, "r2-end "+name, time.Time{}), step, "its resolution")
		})
	}

	againCount := 0
	for _, as := range [][]amAnswer{first, updates, resolves, ends1, second, ends2} {
		for _, a := range as {
			againCount += a.again
		}
	}
	t.Logf("round 1: %d groups fired; pairs (update→A, resolve→B for %d groups, swapped for %d) answered within %s, "+
		"the last %s before the first step was due", n, (n+1)/2, n/2, pairsEnd.Sub(pairsStart).Round(time.Millisecond),
		firstDue.Sub(pairsEnd).Round(time.Millisecond))
	t.Logf("  %-20s %-20s %-22s %6s", "pair", "update answered", "resolve answered", "groups")
	for _, c := range slices.SortedFunc(maps.Keys(classes), func(a, b class) int {
		return strings.Compare(a.route+a.update+a.resolve, b.route+b.update+b.resolve)
	}) {
		t.Logf("  %-20s %-20s %-22s %6d", c.route, c.update, c.resolve, classes[c])
	}
	t.Logf("  %-96s %s", "check", "passed")
	for i, c := range checks {
		t.Logf("  %-96s %d of %d", c, tallies[i].ok, tallies[i].of)
	}
	if earliest >= 0 {
		t.Logf("  the earliest round-2 step arrived %s after its due time", earliest.Round(time.Millisecond))
	}
	t.Logf("503s sent again: %d; simulator: %d messages accepted, %d over a robot's limit; violations: %d",
		againCount, len(msgs), w.sim.Stats().OverLimit, len(bad))
	require.Empty(t, bad[:min(len(bad), 20)], "%d violations, the first 20 shown", len(bad))
	require.Zero(t, w.sim.Stats().OverLimit)
}

func minTime(a, b time.Time) time.Time {
	if b.Before(a) {
		return b
	}
	return a
}

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}
