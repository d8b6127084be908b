package app

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
)

// An Alertmanager HA pair in front of two replicas of the service (issue 36): each member
// of the pair sends every notification to a replica of its own. A clustered pair whose
// gossip works sends each notification once (the second member waits its peer timeout
// and finds it in the notification log); a pair whose gossip failed sends everything
// twice, the second copy a peer timeout (15 s) later. Either way each group's at-once
// notification arrives once, each step of an escalation arrives once and never early,
// and a resolve at any moment is never followed by a step. Everything is judged at the
// chat simulator's record.
func TestAlertmanagerHAPair(t *testing.T) {
	w := startHAWorld(t)
	t.Run("clustered", func(t *testing.T) {
		// peer_timeout 3s: the second member sends a notification the first did not
		// 3 s later; gossip shows it sent long before.
		members := testenv.AlertmanagerCluster(t, 3*time.Second, haAlertmanagerConfig(w.replicas[0]), haAlertmanagerConfig(w.replicas[1]))
		w.run(t, "clu", &amPair{members: [2]string{members[0].URL, members[1].URL}}, 60)
	})
	t.Run("no-gossip", func(t *testing.T) {
		// Two unclustered members; the second receives every alert 15 s after the first,
		// so it sends every notification 15 s late, as the second member of a pair
		// whose gossip failed does after its default peer_timeout.
		a := testenv.Alertmanager(t, haAlertmanagerConfig(w.replicas[0]))
		b := testenv.Alertmanager(t, haAlertmanagerConfig(w.replicas[1]))
		w.run(t, "nog", &amPair{members: [2]string{a.URL, b.URL}, behind: 15 * time.Second}, 120)
	})
}

// haPolicy is the escalation policy of the paged groups: two steps, haSteps after the
// episode's start.
const haPolicy = "twostep"

var haSteps = []time.Duration{8 * time.Second, 16 * time.Second}

// haResolveAt are the moments, from an episode's start, at which the paged groups that
// resolve do: before, around and after each step's due time. Each is early enough, or
// late enough, that the first member's resolve reaches the service away from the moment
// the second member of a pair without gossip sends its late firing (15 s after the
// first), so the resolve's answer can be read back from the episode.
var haResolveAt = []time.Duration{
	3 * time.Second, 5 * time.Second, 6 * time.Second, 7 * time.Second, 7500 * time.Millisecond,
	7800 * time.Millisecond, 8 * time.Second, 8200 * time.Millisecond, 8500 * time.Millisecond,
	9 * time.Second, 10 * time.Second, 12 * time.Second,
	15800 * time.Millisecond, 16 * time.Second, 16300 * time.Millisecond, 17 * time.Second, 18 * time.Second,
}

// haUnresolved counts the paged groups that never resolve: each of their steps is sent.
const haUnresolved = 8

// haWorld is two replicas of the service on one stack whose robot group "ops" sends to
// one simulator.
type haWorld struct {
	sim      *chatsim.Server
	cfg      config.Config
	replicas [2]string // base URLs
}

func startHAWorld(t *testing.T) *haWorld {
	t.Helper()
	robots := []chatsim.Robot{{Name: "r1", Token: "ha-tok-1"}, {Name: "r2", Token: "ha-tok-2"}, {Name: "r3", Token: "ha-tok-3"}}
	// A window of 4s stands for DingTalk's minute, so a burst drains in seconds.
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: robots, Limit: 19, Window: 4 * time.Second})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {
		Robots:       []config.Robot{{Name: "r1", Token: "ha-tok-1"}, {Name: "r2", Token: "ha-tok-2"}, {Name: "r3", Token: "ha-tok-3"}},
		Alertmanager: &config.AlertmanagerTarget{},
	}}
	cfg.Escalations = map[string]config.Policy{haPolicy: config.Policy{Steps: []config.EscalationStep{
		{After: haSteps[0], Target: "ops"}, {After: haSteps[1], Target: "ops"}}}.WithDefaults()}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 4 * time.Second
	cfg.Ingress.Token = testIngestToken
	require.NoError(t, cfg.Validate())
	w := &haWorld{sim: sim, cfg: cfg}
	for i := range w.replicas {
		w.replicas[i] = startReplica(t, cfg)
	}
	return w
}

// haAlertmanagerConfig routes groups (by the label group) to the ops target of the
// replica at base: at once, or by the policy haPolicy for alerts labelled
// escalate="yes".
func haAlertmanagerConfig(base string) string {
	receiver := func(name, query string) string {
		return fmt.Sprintf(`  - name: %s
    webhook_configs:
      - url: %s/api/v1/alertmanager/ops%s
        send_resolved: true
        http_config:
          authorization: {credentials: %s}
`, name, base, query, testIngestToken)
	}
	return fmt.Sprintf(`route:
  receiver: now
  group_by: [group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['escalate="yes"']
      receiver: paged
receivers:
%s%s`, receiver("now", ""), receiver("paged", "?policy="+haPolicy))
}

// amPair is an Alertmanager HA pair; members[i] sends to replica i.
type amPair struct {
	members [2]string
	// behind is how much later the second member receives what the first does: 0 for
	// a clustered pair, as Prometheus sends to both at once.
	behind time.Duration
	posts  sync.WaitGroup
}

// post posts alerts to both members as Prometheus does, the second behind later
// (through a timer; posts.Wait waits for it). then, when set, runs once the first member
// has them. It may run on any goroutine: it reports failures with t.Errorf.
func (p *amPair) post(t *testing.T, alerts []map[string]any, then func()) {
	body, err := json.Marshal(alerts)
	if err == nil {
		err = postAlerts(p.members[0], body)
	}
	if err != nil {
		t.Errorf("first member: %v", err)
		return
	}
	p.posts.Add(1)
	time.AfterFunc(p.behind, func() {
		defer p.posts.Done()
		if err := postAlerts(p.members[1], body); err != nil {
			t.Errorf("second member: %v", err)
		}
	})
	if then != nil {
		then()
	}
}

func postAlerts(am string, body []byte) error {
	resp, err := http.Post(am+"/api/v2/alerts", "application/json", bytes.NewReader(body))
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(resp.Body)
		return fmt.Errorf("alertmanager answered %s: %s", resp.Status, msg)
	}
	return nil
}

// haAlert is the alert of group as Prometheus sends it: started at startsAt; resolved
// when endsAt is set.
func haAlert(group string, paged bool, startsAt, endsAt time.Time) map[string]any {
	labels := map[string]string{"alertname": "HANow", "group": group, "instance": group + "-i1"}
	if paged {
		labels["alertname"], labels["escalate"] = "HAPaged", "yes"
	}
	a := map[string]any{"labels": labels, "annotations": map[string]string{"summary": "ha " + group},
		"startsAt": startsAt.UTC().Format(time.RFC3339Nano), "generatorURL": "http://prometheus.example/graph"}
	if !endsAt.IsZero() {
		a["endsAt"] = endsAt.UTC().Format(time.RFC3339Nano)
	}
	return a
}

// haEpisode is a paged group's episode, as GET /api/v1/escalations shows it.
type haEpisode struct {
	Key        string    `json:"key"`
	Seq        int64     `json:"seq"`
	State      string    `json:"state"`
	Started    time.Time `json:"started"`
	Sent       int       `json:"sent"`
	ResolvedAt time.Time `json:"resolvedAt"`
	Content    struct {
		Text string `json:"text"`
	} `json:"content"`
}

// haResolve is what a group's resolve did, read back from its episode.
type haResolve struct {
	at        time.Duration // after the episode's start
	episode   haEpisode     // once resolved
	restarted bool          // another episode of the key ran when it was read
}

var haGroupLine = regexp.MustCompile(`\*\*Group:\*\* group=([a-z0-9-]+)`)

// run fires nNow at-once groups and the paged groups through pair, resolves some paged
// groups at the moments haResolveAt, and judges what the simulator accepted.
func (w *haWorld) run(t *testing.T, name string, pair *amPair, nNow int) {
	nowGroups := make([]string, nNow)
	for i := range nowGroups {
		nowGroups[i] = fmt.Sprintf("%s-now-%03d", name, i)
	}
	paged := make([]string, len(haResolveAt)+haUnresolved)
	for i := range paged {
		paged[i] = fmt.Sprintf("%s-esc-%03d", name, i)
	}
	t0 := time.Now()
	startsAt := t0.Add(-30 * time.Second)
	var firing []map[string]any
	for _, g := range nowGroups {
		firing = append(firing, haAlert(g, false, startsAt, time.Time{}))
	}
	for _, g := range paged {
		firing = append(firing, haAlert(g, true, startsAt, time.Time{}))
	}
	pair.post(t, firing, nil)

	// Each paged group's episode, once the first member's notification started it.
	episodes := map[string]haEpisode{}
	require.Eventually(t, func() bool {
		for _, ep := range w.live(t) {
			if m := haGroupLine.FindStringSubmatch(ep.Content.Text); m != nil {
				episodes[m[1]] = ep
			}
		}
		for _, g := range paged {
			if _, ok := episodes[g]; !ok {
				return false
			}
		}
		return true
	}, 20*time.Second, 100*time.Millisecond, "the paged groups' episodes did not all start")

	// Resolve the first groups, each at its moment; read back what the resolve did.
	var mu sync.Mutex
	resolves := map[string]haResolve{}
	var resolving sync.WaitGroup
	for i, at := range haResolveAt {
		g, ep := paged[i], episodes[paged[i]]
		resolving.Add(1)
		time.AfterFunc(time.Until(ep.Started.Add(at)), func() {
			defer resolving.Done()
			now := time.Now()
			pair.post(t, []map[string]any{haAlert(g, true, startsAt, now.Add(-time.Second))}, func() {
				r := w.resolved(t, ep)
				r.at = at
				mu.Lock()
				resolves[g] = r
				mu.Unlock()
			})
		})
	}
	resolving.Wait()
	pair.posts.Wait()

	// Every resolution a resolve granted (a step was sent before it) is published due 2s
	// after the resolve reached the service: wait for them by the simulator's record,
	// bounded (the judge names one that never came), so the sentinel below cannot
	// overtake one on a loaded machine.
	waitResolutions(w.sim, resolves, 30*time.Second)

	// A sentinel due after everything the notifications could have caused: the last
	// post's notification, and every step of an episode the last firing could start.
	due := t0.Add(pair.behind + time.Second + haSteps[len(haSteps)-1] + 2*time.Second)
	if soon := time.Now().Add(2 * time.Second); due.Before(soon) {
		due = soon
	}
	deliverSentinel(t, w.cfg, w.sim, "sentinel-"+name, due)

	rec := haRecord(w.sim.Accepted())
	judge := haJudge{}
	for _, g := range nowGroups {
		judge.now(len(rec.of(g).firing))
	}
	for _, g := range paged {
		r, resolved := resolves[g]
		judge.paged(t, g, episodes[g], rec.of(g), r, resolved)
	}
	t.Logf("%s pair (second member %s behind), judged at the simulator:\n%s", name, pair.behind, judge.table())
	require.Zero(t, judge.atOnce.twice, "at-once groups that arrived twice")
	require.Zero(t, judge.atOnce.missing, "at-once groups that never arrived")
	for _, s := range []haCounts{judge.steps, judge.resolved} {
		require.Zero(t, s.twice, "steps that arrived twice")
		require.Zero(t, s.missing, "steps that never arrived")
		require.Zero(t, s.early, "steps that arrived early")
	}
	require.Zero(t, judge.resolved.afterResolve, "steps after a resolve")
	require.Zero(t, judge.resolved.resolutionWrong, "groups whose RESOLVED message did not match the steps sent")
	require.Zero(t, w.sim.Stats().OverLimit)
}

// waitResolutions waits, at most within, until the simulator has the RESOLVED message of
// every group whose resolve granted one (its episode had sent a step).
func waitResolutions(sim *chatsim.Server, resolves map[string]haResolve, within time.Duration) {
	deadline := time.Now().Add(within)
	for time.Now().Before(deadline) {
		rec := haRecord(sim.Accepted())
		missing := false
		for g, r := range resolves {
			if r.episode.Sent > 0 && len(rec.of(g).resolved) == 0 {
				missing = true
				break
			}
		}
		if !missing {
			return
		}
		time.Sleep(100 * time.Millisecond) // polling the simulator's record, bounded by within
	}
}

// live returns the live episodes (GET /api/v1/escalations) of the first replica.
func (w *haWorld) live(t *testing.T) []haEpisode {
	var out struct {
		Episodes []haEpisode `json:"episodes"`
	}
	w.getJSON(t, w.replicas[0]+"/api/v1/escalations?limit=1000", &out)
	return out.Episodes
}

// resolved reads episode ep back until it is resolved (the first member's resolve
// reached the service), or another episode of its key runs.
func (w *haWorld) resolved(t *testing.T, ep haEpisode) haResolve {
	var r haResolve
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		w.getJSON(t, w.replicas[0]+"/api/v1/escalations/"+ep.Key, &r.episode)
		if r.episode.Seq != ep.Seq {
			r.restarted = true
			return r
		}
		if r.episode.State == "resolved" {
			return r
		}
		time.Sleep(50 * time.Millisecond) // polling the episode, bounded by deadline
	}
	t.Errorf("episode %s was not resolved within 10s", ep.Key)
	return r
}

// getJSON decodes the answer of GET url (with the ingest token) into v. It reports
// failures with t.Errorf: it runs on timers' goroutines too.
func (w *haWorld) getJSON(t *testing.T, url string, v any) {
	req, err := http.NewRequest(http.MethodGet, url, nil)
	if err != nil {
		t.Error(err)
		return
	}
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Error(err)
		return
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Errorf("GET %s: %s", url, resp.Status)
		return
	}
	if err := json.NewDecoder(resp.Body).Decode(v); err != nil {
		t.Errorf("GET %s: %v", url, err)
	}
}

// haSeen is what the simulator accepted for one group: its at-once firing messages,
// its steps (by number, from 0) and its RESOLVED messages, each by the simulator's clock.
type haSeen struct {
	firing, resolved []time.Time
	steps            map[int][]time.Time
}

var haStepLine = regexp.MustCompile(`\*\*Escalation\*\*, step (\d+) \(policy`)

// haSeenByGroup is what the simulator accepted, by group.
type haSeenByGroup map[string]*haSeen

// of returns what the simulator accepted for group g (nothing when it accepted nothing).
func (r haSeenByGroup) of(g string) *haSeen {
	s := r[g]
	if s == nil {
		s = &haSeen{steps: map[int][]time.Time{}}
		r[g] = s
	}
	return s
}

// haRecord sorts the simulator's messages by group, section by section: a message sent
// while robots were busy merges several alerts, separated as DingTalk's merge style
// separates them.
func haRecord(msgs []chatsim.Message) haSeenByGroup {
	rec := haSeenByGroup{}
	for _, m := range msgs {
		for _, sec := range strings.Split(m.Text, "\n\n---\n\n") {
			g := haGroupLine.FindStringSubmatch(sec)
			if g == nil {
				continue
			}
			s := rec.of(g[1])
			switch step := haStepLine.FindStringSubmatch(sec); {
			case step != nil:
				k, _ := strconv.Atoi(step[1])
				s.steps[k-1] = append(s.steps[k-1], m.At)
			case strings.Contains(sec, "[RESOLVED]"):
				s.resolved = append(s.resolved, m.At)
			case strings.Contains(sec, "[FIRING:"):
				s.firing = append(s.firing, m.At)
			}
		}
	}
	return rec
}

// haCounts count messages of one scenario as judged.
type haCounts struct {
	groups, once, twice, missing, early, afterResolve, resolutionWrong int
}

// haJudge judges each group of a run: at once, paged and never resolved, paged and
// resolved; details lists the resolved groups.
type haJudge struct {
	atOnce, steps, resolved haCounts
	details                 []string
}

func (j *haJudge) now(n int) {
	j.atOnce.groups++
	count(&j.atOnce, n)
}

func count(c *haCounts, n int) {
	switch {
	case n == 0:
		c.missing++
	case n == 1:
		c.once++
	default:
		c.twice++
	}
}

// paged judges a paged group whose episode is ep and whose resolve, when resolved, did
// r: every step granted before the resolve arrives once and never early; a step not
// granted before it, or any step accepted after the group's RESOLVED message, is a step
// after the resolve; a RESOLVED message arrives iff a step was granted, once.
func (j *haJudge) paged(t *testing.T, g string, ep haEpisode, seen *haSeen, r haResolve, resolved bool) {
	c := &j.steps
	sent := len(haSteps)
	var resolution time.Time // the first RESOLVED message
	if resolved {
		c = &j.resolved
		if r.restarted {
			t.Errorf("group %s: another episode ran when its resolve was read back", g)
		}
		sent = r.episode.Sent
		if len(seen.resolved) > 0 {
			resolution = seen.resolved[0]
		}
		if len(seen.resolved) != min(sent, 1) {
			c.resolutionWrong++
		}
	}
	c.groups++
	for k, after := range haSteps {
		before := 0
		for _, at := range seen.steps[k] {
			if at.Before(ep.Started.Add(after)) {
				c.early++
			}
			if k >= sent || (!resolution.IsZero() && at.After(resolution)) {
				c.afterResolve++
				continue
			}
			before++
		}
		if k < sent {
			count(c, before)
		}
	}
	if resolved {
		j.details = append(j.details, fmt.Sprintf("  %-12s resolve at +%-6s granted %d  steps seen %d/%d  RESOLVED %d  resolved %s after start",
			g, r.at, sent, len(seen.steps[0]), len(seen.steps[1]), len(seen.resolved), r.episode.ResolvedAt.Sub(ep.Started).Round(time.Millisecond)))
	}
}

func (j *haJudge) table() string {
	var b strings.Builder
	fmt.Fprintf(&b, "  %-22s %6s %6s %6s %8s %6s %14s %15s\n", "scenario", "groups", "once", "twice", "missing", "early", "after-resolve", "RESOLVED-wrong")
	row := func(name string, c haCounts) {
		fmt.Fprintf(&b, "  %-22s %6d %6d %6d %8d %6d %14d %15d\n", name, c.groups, c.once, c.twice, c.missing, c.early, c.afterResolve, c.resolutionWrong)
	}
	row("(a) at once", j.atOnce)
	row("(b) steps, no resolve", j.steps)
	row("(c) resolve at moments", j.resolved)
	b.WriteString("  (b), (c): once, twice, missing count the steps granted before any resolve; after-resolve, step messages\n")
	for _, d := range j.details {
		b.WriteString(d + "\n")
	}
	return b.String()
}
