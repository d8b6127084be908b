package app

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/amref"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Alertmanager's contract with real Alertmanagers (issue 45): every notification a
// single healthy Alertmanager sends arrives once, and a copy of one arrives zero more
// times, whatever ingress.dedupeWindow. An alert is its fingerprint and its episode (its
// start): a group whose alert resolves and fires again within the window is notified
// again. Judged at the chat simulator against the reference model of Alertmanager's
// decisions (internal/amref) fed the same timeline.
func TestAlertmanagerEpisodes(t *testing.T) {
	t.Run("ha-pair-without-gossip", func(t *testing.T) {
		t.Parallel()
		testAlertmanagerEpisodesHA(t)
	})
	t.Run("repeat", func(t *testing.T) {
		t.Parallel()
		testAlertmanagerRepeat(t)
	})
}

// epBehind is how much later the second member of the pair receives each post: it
// sends every notification that much late, as a member whose gossip failed does.
const epBehind = 8 * time.Second

// epEvent is one post to the pair at at (after the first): alert inst of group fires
// (a new episode unless it fires already) or resolves.
type epEvent struct {
	at      time.Duration
	group   string
	inst    string
	resolve bool
}

// The timeline of the pair: six groups, each through a receiver of its own (the label
// mode routes it). At once with send_resolved (flap, grow, endsat) or without it
// (quiet); escalated by ?delay=5s (esc-delay) or by a two-step policy (esc-policy). The
// flapping groups resolve and fire again within the dedupe window (5m); grow's firing
// set grows and shrinks; endsat is never resolved by a post: each member resolves it by
// its own resolve_timeout (5s), so their resolved copies carry different ends. The
// escalated groups resolve before their first step, fire again (a new episode whose
// steps must page) and resolve; the second member's copy of the first resolve comes
// while the new episode runs.
var epTimeline = []epEvent{
	{at: 0, group: "flap", inst: "x"}, {at: 0, group: "quiet", inst: "x"}, {at: 0, group: "grow", inst: "a"},
	{at: 0, group: "endsat", inst: "x"}, {at: 0, group: "esc-delay", inst: "x"}, {at: 0, group: "esc-policy", inst: "x"},
	{at: 2 * time.Second, group: "esc-delay", inst: "x", resolve: true}, {at: 2 * time.Second, group: "esc-policy", inst: "x", resolve: true},
	{at: 4 * time.Second, group: "grow", inst: "b"},
	{at: 6 * time.Second, group: "flap", inst: "x", resolve: true}, {at: 6 * time.Second, group: "quiet", inst: "x", resolve: true},
	{at: 8 * time.Second, group: "grow", inst: "b", resolve: true},
	{at: 8 * time.Second, group: "esc-delay", inst: "x"}, {at: 8 * time.Second, group: "esc-policy", inst: "x"},
	{at: 12 * time.Second, group: "flap", inst: "x"}, {at: 12 * time.Second, group: "quiet", inst: "x"}, {at: 12 * time.Second, group: "grow", inst: "c"},
	{at: 22 * time.Second, group: "esc-delay", inst: "x", resolve: true}, {at: 22 * time.Second, group: "esc-policy", inst: "x", resolve: true},
}

// epModes are the groups' receivers: the label mode of each group.
var epModes = map[string]string{"flap": "now", "grow": "now", "endsat": "now", "quiet": "quiet", "esc-delay": "delay", "esc-policy": "policy"}

// epPolicy's steps, after an episode's start.
var epSteps = []time.Duration{5 * time.Second, 8 * time.Second}

func testAlertmanagerEpisodesHA(t *testing.T) {
	robots := []chatsim.Robot{{Name: "e1", Token: "ep-tok-1"}, {Name: "e2", Token: "ep-tok-2"}}
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: robots, Limit: 19, Window: 4 * time.Second})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {
		Robots:       []config.Robot{{Name: "e1", Token: "ep-tok-1"}, {Name: "e2", Token: "ep-tok-2"}},
		Alertmanager: &config.AlertmanagerTarget{},
	}}
	cfg.Escalations = map[string]config.Policy{"flap-policy": config.Policy{Steps: []config.EscalationStep{
		{After: epSteps[0], Target: "ops"}, {After: epSteps[1], Target: "ops"}}}.WithDefaults()}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 4 * time.Second
	cfg.Ingress.Token = testIngestToken
	require.Equal(t, 5*time.Minute, cfg.Ingress.DedupeWindow, "the flapping groups fire again well within the window")
	require.NoError(t, cfg.Validate())
	replicas := [2]string{startReplica(t, cfg), startReplica(t, cfg)}
	amConfig := func(base string) string {
		receiver := func(name, query string, sendResolved bool) string {
			return fmt.Sprintf(`  - name: %s
    webhook_configs:
      - url: %s/api/v1/alertmanager/ops%s
        send_resolved: %t
        http_config:
          authorization: {credentials: %s}
`, name, base, query, sendResolved, testIngestToken)
		}
		return fmt.Sprintf(`global:
  resolve_timeout: 5s
route:
  receiver: now
  group_by: [group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - {matchers: ['mode="quiet"'], receiver: quiet}
    - {matchers: ['mode="delay"'], receiver: delayed}
    - {matchers: ['mode="policy"'], receiver: paged}
receivers:
%s%s%s%s`, receiver("now", "", true), receiver("quiet", "", false), receiver("delayed", "?delay="+epSteps[0].String(), true),
			receiver("paged", "?policy=flap-policy", true))
	}
	a := testenv.Alertmanager(t, amConfig(replicas[0]))
	b := testenv.Alertmanager(t, amConfig(replicas[1]))
	pair := &amPair{members: [2]string{a.URL, b.URL}, behind: epBehind}

	// Post the timeline; each alert's episode starts when it fires anew.
	t0 := time.Now()
	model := map[string]*amref.Model{}
	for g, mode := range epModes {
		model[g] = amref.New(mode != "quiet", time.Hour)
	}
	posted := map[string]time.Time{} // each group's last post, for "never early"
	episode := map[string]int{}      // group/inst -> its episode number
	starts := map[string]time.Time{} // group/inst -> its episode's start
	var expected []epSeen            // the model's at-once notifications
	for _, e := range epTimeline {
		time.Sleep(time.Until(t0.Add(e.at))) // the timeline's pace: the posts are the events under test
		now := time.Now()
		k := e.group + "/" + e.inst
		m := model[e.group]
		if e.resolve {
			m.Resolve(k, now)
		} else if !slices.ContainsFunc(m.Firing(now), func(a amref.Alert) bool { return a.Fingerprint == k }) {
			episode[k]++
			starts[k] = now.Truncate(time.Millisecond)
			m.Fire(k, starts[k], now)
		}
		alert := epAlert(e.group, e.inst, episode[k], starts[k], e.resolve, now)
		if e.group == "endsat" {
			delete(alert, "endsAt") // each member resolves it by its own resolve_timeout
		}
		pair.post(t, []map[string]any{alert}, nil)
		posted[e.group] = now
		if n, ok := m.Flush(now); ok && epModes[e.group] != "delay" && epModes[e.group] != "policy" {
			expected = append(expected, epSeenOf(e.group, n, episode))
		}
	}
	// endsat resolves at the first member by its resolve_timeout.
	model["endsat"].Resolve("endsat/x", t0.Add(5*time.Second))
	if n, ok := model["endsat"].Flush(t0.Add(6 * time.Second)); ok {
		expected = append(expected, epSeenOf("endsat", n, episode))
	}
	pair.posts.Wait()

	// Wait for the model's notifications and each escalation's steps and resolution,
	// then for anything late: a sentinel due after the last copy could have arrived.
	waitSeen(t, sim, expected, t0.Add(epTimeline[len(epTimeline)-1].at+epBehind+30*time.Second))
	deliverSentinel(t, cfg, sim, "sentinel-episodes", time.Now().Add(4*time.Second))

	got := epRecord(sim.Accepted())
	var problems []string
	for g, mode := range epModes {
		if mode == "delay" || mode == "policy" {
			continue
		}
		var want []string
		for _, e := range expected {
			if e.group == g {
				want = append(want, e.key())
			}
		}
		var have []string
		for _, s := range got[g] {
			have = append(have, s.key())
		}
		slices.Sort(want)
		slices.Sort(have)
		if !slices.Equal(want, have) {
			problems = append(problems, fmt.Sprintf("%s: the model sends %q, the chat received %q", g, want, have))
		}
	}
	// The escalated groups: the first episode resolved before its first step, so it pages
	// nothing; the second pages each step once, never before its due time by its own
	// start, saying the second episode; its resolution arrives once.
	refire := t0.Add(8 * time.Second)
	for _, g := range []string{"esc-delay", "esc-policy"} {
		steps := 1
		if g == "esc-policy" {
			steps = 2
		}
		counts := map[int]int{}
		resolutions := 0
		for _, s := range got[g] {
			switch {
			case s.step > 0:
				counts[s.step]++
				if s.at.Before(refire.Add(epSteps[s.step-1])) {
					problems = append(problems, fmt.Sprintf("%s: step %d at %s, before the second episode's due time", g, s.step, s.at.Sub(t0)))
				}
				if !slices.Equal(s.firing, []string{"x#2"}) {
					problems = append(problems, fmt.Sprintf("%s: step %d says %v, not the second episode (x#2)", g, s.step, s.firing))
				}
			case s.resolved != nil:
				resolutions++
			default:
				problems = append(problems, fmt.Sprintf("%s: an at-once message %v from an escalating receiver", g, s))
			}
		}
		for k := 1; k <= steps; k++ {
			if counts[k] != 1 {
				problems = append(problems, fmt.Sprintf("%s: step %d arrived %d times, not once", g, k, counts[k]))
			}
		}
		if resolutions != 1 {
			problems = append(problems, fmt.Sprintf("%s: %d resolutions, not 1", g, resolutions))
		}
	}
	t.Logf("the chat received, by group:\n%s", epTable(got, t0))
	require.Empty(t, problems)
	require.Zero(t, sim.Stats().OverLimit)
}

// epAlert is alert inst of group, episode n started at start, as Prometheus posts it at
// now: firing (its end a while ahead, re-sent before it) or resolved (ended now).
func epAlert(group, inst string, n int, start time.Time, resolved bool, now time.Time) map[string]any {
	end := now.Add(time.Hour)
	if resolved {
		end = now
	}
	return map[string]any{
		"labels":       map[string]string{"alertname": "Episode", "group": group, "instance": inst, "mode": epModes[group]},
		"annotations":  map[string]string{"summary": fmt.Sprintf("ep %s#%d", inst, n)},
		"startsAt":     start.UTC().Format(time.RFC3339Nano),
		"endsAt":       end.UTC().Format(time.RFC3339Nano),
		"generatorURL": "http://prometheus.example/graph",
	}
}

// epSeen is one notification of a group, as the chat received it or as the model sends
// it: the alerts firing and resolved, each inst#episode, sorted; step is the escalation
// step (from 1), 0 for an at-once message.
type epSeen struct {
	group            string
	at               time.Time
	step             int
	firing, resolved []string
}

func (s epSeen) key() string {
	return fmt.Sprintf("firing %s resolved %s", strings.Join(s.firing, ","), strings.Join(s.resolved, ","))
}

func epSeenOf(group string, n amref.Notification, episode map[string]int) epSeen {
	s := epSeen{group: group, at: n.At}
	name := func(a amref.Alert) string {
		inst := strings.TrimPrefix(a.Fingerprint, group+"/")
		return fmt.Sprintf("%s#%d", inst, episode[a.Fingerprint])
	}
	for _, a := range n.Firing {
		s.firing = append(s.firing, name(a))
	}
	for _, a := range n.Resolved {
		s.resolved = append(s.resolved, name(a))
	}
	return s
}

var (
	epSummary = regexp.MustCompile(`ep ([a-z]+#\d+)`)
	epGroup   = regexp.MustCompile(`\*\*Group:\*\* group=([a-z-]+)`)
)

// epRecord sorts the simulator's messages by group, section by section (a message sent
// while robots were busy merges several).
func epRecord(msgs []chatsim.Message) map[string][]epSeen {
	out := map[string][]epSeen{}
	for _, m := range msgs {
		for _, sec := range strings.Split(m.Text, "\n\n---\n\n") {
			g := epGroup.FindStringSubmatch(sec)
			if g == nil {
				continue
			}
			s := epSeen{group: g[1], at: m.At}
			if step := haStepLine.FindStringSubmatch(sec); step != nil {
				fmt.Sscan(step[1], &s.step)
			}
			firing, resolved, split := strings.Cut(sec, "**Resolved**")
			if !split && strings.Contains(sec, "[RESOLVED]") {
				firing, resolved = "", sec
			}
			for _, f := range epSummary.FindAllStringSubmatch(firing, -1) {
				s.firing = append(s.firing, f[1])
			}
			for _, r := range epSummary.FindAllStringSubmatch(resolved, -1) {
				s.resolved = append(s.resolved, r[1])
			}
			slices.Sort(s.firing)
			slices.Sort(s.resolved)
			out[s.group] = append(out[s.group], s)
		}
	}
	return out
}

// waitSeen waits until every notification of want has reached the simulator, or until
// deadline (then the judge names what is missing).
func waitSeen(t *testing.T, sim *chatsim.Server, want []epSeen, deadline time.Time) {
	t.Helper()
	for time.Now().Before(deadline) {
		got := epRecord(sim.Accepted())
		missing := false
		for _, w := range want {
			if !slices.ContainsFunc(got[w.group], func(s epSeen) bool { return s.key() == w.key() }) {
				missing = true
				break
			}
		}
		if !missing {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the simulator's record, bounded by deadline
	}
}

func epTable(got map[string][]epSeen, t0 time.Time) string {
	var b strings.Builder
	for _, g := range slices.Sorted(func(yield func(string) bool) {
		for g := range got {
			if !yield(g) {
				return
			}
		}
	}) {
		for _, s := range got[g] {
			fmt.Fprintf(&b, "  %-10s +%-8s step %d  %s\n", g, s.at.Sub(t0).Round(10*time.Millisecond), s.step, s.key())
		}
	}
	return b.String()
}

// A repeat after repeat_interval is a notification of its own: with the window shorter
// than the route's repeat_interval (as it must be: docs/design.md), the same alerts
// notified again arrive again. One Alertmanager, repeat_interval 6s, window 3s: the
// firing arrives, then its repeat 6 s later, then the resolution once.
func testAlertmanagerRepeat(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "p1", Token: "rep-tok-1"}}, Limit: 19, Window: 4 * time.Second})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "p1", Token: "rep-tok-1"}}, Alertmanager: &config.AlertmanagerTarget{}}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 4 * time.Second
	cfg.Ingress.Token = testIngestToken
	cfg.Ingress.DedupeWindow = 3 * time.Second
	require.NoError(t, cfg.Validate())
	base := startReplica(t, cfg)
	am := testenv.Alertmanager(t, fmt.Sprintf(`route:
  receiver: now
  group_by: [group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 6s
receivers:
  - name: now
    webhook_configs:
      - url: %s/api/v1/alertmanager/ops
        http_config:
          authorization: {credentials: %s}
`, base, testIngestToken))
	start := time.Now().Truncate(time.Millisecond)
	post := func(resolved bool) {
		a := epAlert("rep", "x", 1, start, resolved, time.Now())
		body, err := json.Marshal([]map[string]any{a})
		require.NoError(t, err)
		require.NoError(t, postAlerts(am.URL, body))
	}
	firings := func() []epSeen {
		var out []epSeen
		for _, s := range epRecord(sim.Accepted())["rep"] {
			if len(s.firing) > 0 {
				out = append(out, s)
			}
		}
		return out
	}
	post(false)
	require.Eventually(t, func() bool { return len(firings()) >= 2 }, 30*time.Second, 100*time.Millisecond, "the repeat did not arrive")
	post(true)
	require.Eventually(t, func() bool { return len(epRecord(sim.Accepted())["rep"]) > len(firings()) }, 30*time.Second, 100*time.Millisecond,
		"the resolution did not arrive")
	deliverSentinel(t, cfg, sim, "sentinel-repeat", time.Now().Add(3*time.Second))

	got := epRecord(sim.Accepted())["rep"]
	t.Logf("the chat received:\n%s", epTable(map[string][]epSeen{"rep": got}, start))
	f := firings()
	for i := 1; i < len(f); i++ {
		require.GreaterOrEqual(t, f[i].at.Sub(f[i-1].at), 5*time.Second,
			"firings %d and %d arrived %s apart: a copy, not Alertmanager's repeat", i-1, i, f[i].at.Sub(f[i-1].at))
	}
	require.Len(t, got, len(f)+1, "the firing, its repeats, and one resolution")
	require.Equal(t, []string{"x#1"}, got[len(got)-1].resolved)
}

// deliverSentinel publishes a message for target ops due at due and waits until sim
// accepted it: what was handed to the service before it and due earlier has arrived.
func deliverSentinel(t *testing.T, cfg config.Config, sim *chatsim.Server, sentinel string, due time.Time) {
	t.Helper()
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Publish(context.Background(), wire.Publication{Target: "ops", At: due, Body: []byte(sentinel)})
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		for _, m := range sim.Accepted() {
			if strings.Contains(m.Text, sentinel) {
				return true
			}
		}
		return false
	}, time.Until(due)+30*time.Second, 100*time.Millisecond, "the sentinel %s was not delivered", sentinel)
}
