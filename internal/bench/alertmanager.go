package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/internal/localstack"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// AlertmanagerDoc is the long help of `rocketdelay bench alertmanager`.
const AlertmanagerDoc = `alertmanager fires a flood into a real Alertmanager (Debian's prometheus-alertmanager):
--groups alert groups at once, one alert each, grouped by the label group, one webhook
notification per group and receiver.

Per channel (unless --kinds is empty): this binary's serve has one target of each kind of
--kinds (dingtalk, wecom, feishu), one robot each, and Alertmanager one receiver per
target (/api/v1/alertmanager/ops-KIND), every group going to each of them; one chat
simulator serves the three platforms with their own limits (20 per minute for DingTalk
and WeCom, 100 per minute and 5 per second for Feishu). A proxy in front of serve notes
when each notification arrives. The table, per kind: groups delivered, the fewest
messages the groups need (the platform's size rule on the messages serve renders, and
sender.coalesceMax), messages the simulator accepted, lateness p50/p99 from a
notification's arrival at serve to the simulator accepting the message that carries it,
the limit of sender.pacing auto's bucket for those fewest messages, over-limit answers
(must be 0), and how long the notifications took to arrive.

Then (unless --naive=false) the DingTalk comparison: the receiver is, in turn,

  naive forwarder  what the common webhook bridges do: each notification becomes one
                   request to one robot, and a failed send is answered 400 (which
                   Alertmanager does not retry)
  rocketdelay      this binary's serve, the receiver at /api/v1/alertmanager/ops

with the robots behind it a DingTalk simulator that behaves like DingTalk: 20 messages per
minute per robot, then "send too fast" (130101), then 10 minutes of redirects; with one
robot and with three (--robots). The table: groups delivered, requests to the robots,
130101 and redirect answers, messages DingTalk accepted, and p99 lateness from the flood
to a group's delivery.

Each run lasts until every group was delivered, or --budget.`

// AlertmanagerOptions configure the Alertmanager benchmark. A zero field takes its
// default.
type AlertmanagerOptions struct {
	// Groups is the flood's alert groups. Default 200.
	Groups int
	// Budget bounds one run. Default 90s.
	Budget time.Duration
	// Kinds are the platforms of the per-channel flood, one target of one robot each; none:
	// no per-channel flood.
	Kinds []string
	// Naive runs the DingTalk comparison of the naive forwarder and rocketdelay.
	Naive bool
	// Robots are the robot counts of the DingTalk comparison. Default 1 and 3.
	Robots []int
	// Binary is the rocketdelay binary that serves. Default this process's executable.
	Binary string
	// Pacing is serve's sender.pacing in the per-channel flood. Default auto.
	Pacing string
}

type amRun struct {
	way                  string
	robots               int
	delivered            int
	requests, tooFast    int
	redirects, messages  int
	p99, worst, duration time.Duration
}

// Alertmanager runs the per-channel flood, then the DingTalk comparison, and prints their
// tables to out.
func Alertmanager(ctx context.Context, cfg config.Config, o AlertmanagerOptions, out io.Writer) error {
	config.Default(&o.Groups, 200)
	config.Default(&o.Budget, 90*time.Second)
	config.Default(&o.Pacing, config.PacingAuto)
	if len(o.Robots) == 0 {
		o.Robots = []int{1, 3}
	}
	if o.Binary == "" {
		exe, err := os.Executable()
		if err != nil {
			return err
		}
		o.Binary = exe
	}
	if len(o.Kinds) > 0 {
		if err := CheckKinds(o.Kinds); err != nil {
			return err
		}
		if err := amKinds(ctx, cfg, o, out); err != nil {
			return err
		}
	}
	if !o.Naive {
		return nil
	}
	var runs []amRun
	for _, robots := range o.Robots {
		for _, way := range []string{"naive forwarder", "rocketdelay"} {
			fmt.Fprintf(out, "%s, %d robot(s): %d groups at once\n", way, robots, o.Groups)
			r, err := amFlood(ctx, cfg, o, way, robots)
			if err != nil {
				return fmt.Errorf("bench: %s with %d robot(s): %w", way, robots, err)
			}
			runs = append(runs, r)
		}
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "receiver\trobots\tdelivered\trequests\t130101\tredirects\tmessages\tp99 late\tmax late\trun\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d\t%d/%d (%.0f%%)\t%d\t%d\t%d\t%d\t%s\t%s\t%s\t\n", r.way, r.robots, r.delivered, o.Groups,
			100*float64(r.delivered)/float64(o.Groups), r.requests, r.tooFast, r.redirects, r.messages,
			lateOrDash(r.p99, r.delivered), lateOrDash(r.worst, r.delivered), r.duration.Round(time.Second))
	}
	return tw.Flush()
}

func lateOrDash(d time.Duration, n int) string {
	if n == 0 {
		return "-"
	}
	return d.Round(100 * time.Millisecond).String()
}

// amTarget is a robot group of the serve the benchmark starts.
type amTarget struct {
	name, kind string
	robots     []chatsim.Robot
}

// amAlertmanagerConfig is Alertmanager's configuration: every group goes to each of
// receivers (name → webhook URL), authenticated with token.
func amAlertmanagerConfig(token string, receivers map[string]string) string {
	var routes, rcv strings.Builder
	for _, name := range slices.Sorted(maps.Keys(receivers)) {
		fmt.Fprintf(&routes, "    - {receiver: %s, continue: true}\n", name)
		fmt.Fprintf(&rcv, "  - name: %s\n    webhook_configs:\n      - url: %s\n        send_resolved: false\n"+
			"        http_config:\n          authorization: {credentials: %s}\n", name, receivers[name], token)
	}
	return fmt.Sprintf(`route:
  receiver: none
  group_by: [group]
  group_wait: 1s
  group_interval: 5m
  repeat_interval: 1h
  routes:
%sreceivers:
  - name: none
%s`, routes.String(), rcv.String())
}

// amFire posts the flood of groups alerts to Alertmanager at amURL.
func amFire(amURL string, groups int) error {
	var alerts []map[string]any
	for g := range groups {
		alerts = append(alerts, map[string]any{"labels": map[string]string{"alertname": "DataCheck", "group": fmt.Sprintf("g%04d", g),
			"severity": "warning"}, "annotations": map[string]string{"summary": fmt.Sprintf("history row %d is dirty", g)}})
	}
	b, _ := json.Marshal(alerts) // plain maps
	resp, err := http.Post(amURL+"/api/v2/alerts", "application/json", bytes.NewReader(b))
	if err != nil {
		return err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("alertmanager answered %s to the flood", resp.Status)
	}
	return nil
}

var amGroup = regexp.MustCompile(`group=(g\d{4})`)

// amKindRun is the outcome of one kind in the per-channel flood.
type amKindRun struct {
	kind                chatKind
	delivered, messages int
	minMessages         int
	perMessage          int
	overLimit, busy     int
	p50, p99, worst     time.Duration
	paced               time.Duration
	arrivals            time.Duration // first to last notification's arrival at serve
	timeline            []string      // each message: groups@seconds after the first arrival
}

// amKinds is the per-channel flood: one serve with a target of each kind, one robot
// each, behind a proxy that notes arrivals, and one simulator of the three platforms.
func amKinds(ctx context.Context, cfg config.Config, o AlertmanagerOptions, out io.Writer) error {
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	var targets []amTarget
	var simRobots []chatsim.Robot
	var served []sender.Platform
	for _, k := range o.Kinds {
		r := chatsim.Robot{Name: k + "-r1", Kind: k, Token: fmt.Sprintf("am-bench-%s-%s-1", suffix, k)}
		targets = append(targets, amTarget{name: "ops-" + k, kind: k, robots: []chatsim.Robot{r}})
		simRobots = append(simRobots, r)
		served = append(served, chatKinds[k].platform)
	}
	sim := chatsim.New(chatsim.Options{Platforms: served, Robots: simRobots, Window: time.Minute})
	root, stopSim, err := serveChatSim(ctx, sim)
	if err != nil {
		return err
	}
	defer stopSim()
	const token = "bench-ingest-token-0123456789"
	base, stop, err := startServe(ctx, cfg, o.Binary, sim, root, targets, token, suffix, o.Pacing)
	if err != nil {
		return err
	}
	defer stop()
	proxy, err := newArrivals(base)
	if err != nil {
		return err
	}
	defer proxy.close()
	receivers := map[string]string{}
	for _, t := range targets {
		receivers[t.kind] = proxy.url + ingress.AlertmanagerPath + "/" + t.name
	}
	am, err := localstack.StartAlertmanager(ctx, amAlertmanagerConfig(token, receivers))
	if err != nil {
		return err
	}
	defer am.Stop()

	fmt.Fprintf(out, "\nper channel: %d groups at once from Alertmanager to serve, one target of each kind (%s), one robot each, "+
		"sender defaults (window 60s, coalesceMax %d) but pacing %s\n", o.Groups, strings.Join(o.Kinds, ", "), config.DefaultSenderCoalesceMax, o.Pacing)
	start := time.Now()
	if err := amFire(am.URL, o.Groups); err != nil {
		return err
	}
	accepted := map[string]map[string]time.Time{} // kind → group → accepted
	for _, k := range o.Kinds {
		accepted[k] = map[string]time.Time{}
	}
	done := func() bool {
		for _, k := range o.Kinds {
			if len(accepted[k]) < o.Groups {
				return false
			}
		}
		return true
	}
	for time.Since(start) < o.Budget && !done() && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		for _, m := range sim.Accepted() {
			for _, g := range amGroup.FindAllStringSubmatch(m.Text, -1) {
				if _, seen := accepted[m.Kind][g[1]]; !seen {
					accepted[m.Kind][g[1]] = m.At
				}
			}
		}
	}
	if err := ctx.Err(); err != nil {
		return err
	}
	elapsed := time.Since(start)
	st := sim.Stats()
	var runs []amKindRun
	for _, t := range targets {
		k := chatKinds[t.kind]
		r := amKindRun{kind: k, delivered: len(accepted[t.kind])}
		for _, m := range sim.Accepted() {
			if m.Kind == t.kind {
				r.messages++
			}
		}
		for _, rb := range t.robots {
			r.overLimit += st.ByRobot[rb.Name].TooFast + st.ByRobot[rb.Name].Redirects
		}
		if k.perSecond > 0 {
			r.busy = st.Busy // only Feishu has busy moments
		}
		arrived := proxy.of(t.name)
		var late []time.Duration
		var first, last time.Time
		for g, at := range arrived {
			if first.IsZero() || at.Before(first) {
				first = at
			}
			last = latest(last, at)
			if acc, ok := accepted[t.kind][g]; ok {
				late = append(late, acc.Sub(at))
			}
		}
		r.arrivals = last.Sub(first)
		for _, m := range sim.Accepted() {
			if m.Kind == t.kind {
				groups := map[string]bool{}
				for _, g := range amGroup.FindAllStringSubmatch(m.Text, -1) {
					groups[g[1]] = true
				}
				r.timeline = append(r.timeline, fmt.Sprintf("%d@%.1fs", len(groups), m.At.Sub(first).Seconds()))
			}
		}
		q := quantile.Summarize(late)
		r.p50, r.p99, r.worst = q.P50, q.P99, q.Max
		if r.perMessage, err = amPerMessage(cfg, t, k, proxy.bodies(t.name)); err != nil {
			return fmt.Errorf("bench: %s: the fewest messages: %w", t.kind, err)
		}
		r.minMessages = (o.Groups + r.perMessage - 1) / r.perMessage
		r.paced = pacedLimit(r.minMessages, k.limit, config.DefaultSenderWindow)
		if o.Pacing == config.PacingBurst {
			r.paced = burstLimit(r.minMessages, k.limit, config.DefaultSenderWindow)
		}
		runs = append(runs, r)
	}
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tdelivered\tgroups/msg\tmin msgs\tmessages\tp50 late\tp99 late\tmax late\tpaced limit\tover-limit\tbusy\tarrivals over\t")
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%d/%d\t%d\t%d\t%d\t%s\t%s\t%s\t%s\t%d\t%d\t%s\t\n", r.kind.name, r.delivered, o.Groups, r.perMessage,
			r.minMessages, r.messages, lateOrDash(r.p50, r.delivered), lateOrDash(r.p99, r.delivered), lateOrDash(r.worst, r.delivered),
			r.paced.Round(100*time.Millisecond), r.overLimit, r.busy, r.arrivals.Round(10*time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	for _, r := range runs {
		fmt.Fprintf(out, "%s messages (groups@seconds after the first arrival): %s\n", r.kind.name, strings.Join(r.timeline, " "))
	}
	fmt.Fprintf(out, "run %s; lateness: a notification's arrival at serve → the simulator accepted the message carrying its group;\n"+
		"groups/msg: the most groups one merged message carries by the platform's size rule and coalesceMax, on the bodies serve renders;\n"+
		"min msgs: ⌈groups / groups/msg⌉; paced limit: when the last of min msgs may leave one robot under sender.pacing auto "+
		"(full messages at once while the robot's window has room, the last one, not full, one token's time after the bucket of "+
		"limit/%d tokens is spent) or burst (the limit at once, then the limit a window); "+
		"the platform itself takes up to its limit at once;\n"+
		"over-limit: DingTalk 130101 and redirects, WeCom 45009, Feishu 9499; busy: Feishu's 11232 of its busy moments.\n",
		elapsed.Round(time.Second), store.BucketShare)
	for _, r := range runs {
		fmt.Fprintf(out, "%s targets: every group delivered (%d/%d: %s), p99 ≤ 5s (%s: %s), messages ≤ min msgs + 1 (%d ≤ %d: %s), 0 over-limit (%d: %s)\n",
			r.kind.name, r.delivered, o.Groups, verdict(r.delivered == o.Groups), lateOrDash(r.p99, r.delivered),
			verdict(r.delivered > 0 && r.p99 <= 5*time.Second), r.messages, r.minMessages+1, verdict(r.messages <= r.minMessages+1),
			r.overLimit, verdict(r.overLimit == 0))
	}
	for _, r := range runs {
		if r.overLimit > 0 {
			return fmt.Errorf("bench: %s: %d over-limit answers", r.kind.name, r.overLimit)
		}
	}
	return nil
}

func latest(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// amPerMessage is how many of the groups, as serve renders them for target t (the
// notifications in bodies, by group, replayed into an ingress of the same
// configuration), one merged message of platform k carries at most.
func amPerMessage(cfg config.Config, t amTarget, k chatKind, bodies map[string][]byte) (int, error) {
	robots := []sender.Robot{{Name: "r1", Token: "render-only", Limit: k.limit, LimitPerSecond: k.perSecond}}
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{t.name: k.target("http://127.0.0.1/", robots, time.Minute)}},
		nil, slog.New(slog.DiscardHandler), nil, nil)
	if err != nil {
		return 0, err
	}
	c := cfg
	c.Targets = map[string]config.Target{t.name: {Kind: t.kind, Robots: []config.Robot{{Name: "r1", Token: "render-only"}}}}
	c.Ingress.Token = "render-only-token-0123456789"
	pub := &capture{}
	in, err := ingress.New(c, ingress.Deps{Publisher: pub, Chat: chat, Dedupe: firstCopy{}, Producers: anyOwner{},
		Logger: slog.New(slog.DiscardHandler), Now: time.Now},
		ingress.NewMetrics(nil))
	if err != nil {
		return 0, err
	}
	h := in.Handler()
	var ms []sender.Message
	for _, g := range slices.Sorted(maps.Keys(bodies)) {
		req := httptest.NewRequest(http.MethodPost, ingress.AlertmanagerPath+"/"+t.name, bytes.NewReader(bodies[g]))
		req.Header.Set("Authorization", "Bearer "+c.Ingress.Token.Reveal())
		w := httptest.NewRecorder()
		h.ServeHTTP(w, req)
		if w.Code != http.StatusOK || len(pub.bodies) != len(ms)+1 {
			return 0, fmt.Errorf("rendering group %s: %d %s", g, w.Code, w.Body.String())
		}
		m, err := k.channel("http://127.0.0.1/").Parse(pub.bodies[len(ms)])
		if err != nil {
			return 0, err
		}
		ms = append(ms, m)
	}
	if len(ms) == 0 {
		return 0, errors.New("no notification arrived")
	}
	return perMessage(k.channel("http://127.0.0.1/"), ms, config.DefaultSenderCoalesceMax), nil
}

// capture is a publisher that keeps the bodies published.
type capture struct{ bodies [][]byte }

func (c *capture) Publish(_ context.Context, p wire.Publication) (wire.Published, error) {
	c.bodies = append(c.bodies, p.Body)
	return wire.Published{ID: p.ID}, nil
}

// arrivals is a reverse proxy in front of serve that notes when each Alertmanager
// notification arrives, by target and group, and keeps its body.
type arrivals struct {
	url   string
	srv   *http.Server
	mu    sync.Mutex
	at    map[string]map[string]time.Time // target → group → first arrival
	body  map[string]map[string][]byte
	close func()
}

func newArrivals(serveURL string) (*arrivals, error) {
	u, err := url.Parse(serveURL)
	if err != nil {
		return nil, err
	}
	a := &arrivals{at: map[string]map[string]time.Time{}, body: map[string]map[string][]byte{}}
	rp := httputil.NewSingleHostReverseProxy(u)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	a.srv = &http.Server{ReadHeaderTimeout: 5 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		now := time.Now()
		b, err := io.ReadAll(r.Body)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var n struct {
			GroupLabels map[string]string `json:"groupLabels"`
		}
		if json.Unmarshal(b, &n) == nil && n.GroupLabels["group"] != "" {
			target, g := path.Base(r.URL.Path), n.GroupLabels["group"]
			a.mu.Lock()
			if a.at[target] == nil {
				a.at[target], a.body[target] = map[string]time.Time{}, map[string][]byte{}
			}
			if _, seen := a.at[target][g]; !seen {
				a.at[target][g], a.body[target][g] = now, b
			}
			a.mu.Unlock()
		}
		r.Body = io.NopCloser(bytes.NewReader(b))
		rp.ServeHTTP(w, r)
	})}
	go func() { _ = a.srv.Serve(ln) }()
	a.url = "http://" + ln.Addr().String()
	a.close = func() { _ = a.srv.Close() }
	return a, nil
}

// of returns when each group's notification to target arrived.
func (a *arrivals) of(target string) map[string]time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.at[target])
}

// bodies returns each group's notification to target.
func (a *arrivals) bodies(target string) map[string][]byte {
	a.mu.Lock()
	defer a.mu.Unlock()
	return maps.Clone(a.body[target])
}

// amFlood is one run of the DingTalk comparison: a simulator with robots, the receiver,
// an Alertmanager, the flood.
func amFlood(ctx context.Context, cfg config.Config, o AlertmanagerOptions, way string, robots int) (amRun, error) {
	r := amRun{way: way, robots: robots}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	var simRobots []chatsim.Robot
	for i := range robots {
		simRobots = append(simRobots, chatsim.Robot{Name: fmt.Sprintf("r%d", i+1), Token: fmt.Sprintf("am-bench-%s-%d", suffix, i+1)})
	}
	sim := chatsim.New(chatsim.Options{Platforms: []sender.Platform{dingtalk.Platform}, Robots: simRobots, Limit: dingtalk.Platform.Config.MaxLimit, Window: time.Minute, Throttle: 10 * time.Minute})
	root, stopSim, err := serveChatSim(ctx, sim)
	if err != nil {
		return r, err
	}
	defer stopSim()

	const token = "bench-ingest-token-0123456789"
	var receiverURL string
	switch way {
	case "rocketdelay":
		base, stop, err := startServe(ctx, cfg, o.Binary, sim, root, []amTarget{{name: "ops", kind: config.KindDingTalk, robots: simRobots}}, token, suffix, config.PacingAuto)
		if err != nil {
			return r, err
		}
		defer stop()
		receiverURL = base + ingress.AlertmanagerPath + "/ops"
	default:
		fw, stop, err := startNaiveForwarder(sim.URL(root, config.KindDingTalk), simRobots[0].Token)
		if err != nil {
			return r, err
		}
		defer stop()
		receiverURL = fw
	}
	am, err := localstack.StartAlertmanager(ctx, amAlertmanagerConfig(token, map[string]string{"dingtalk": receiverURL}))
	if err != nil {
		return r, err
	}
	defer am.Stop()

	start := time.Now()
	if err := amFire(am.URL, o.Groups); err != nil {
		return r, err
	}
	first := map[string]time.Time{}
	for time.Since(start) < o.Budget && len(first) < o.Groups && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		for _, m := range sim.Accepted() {
			for _, g := range amGroup.FindAllStringSubmatch(m.Text, -1) {
				if _, seen := first[g[1]]; !seen {
					first[g[1]] = m.At
				}
			}
		}
	}
	r.duration = time.Since(start)
	var late []time.Duration
	for _, at := range first {
		late = append(late, at.Sub(start))
	}
	q := quantile.Summarize(late)
	st := sim.Stats()
	r.delivered, r.requests, r.messages, r.p99, r.worst = len(first), st.Requests, st.Accepted, q.P99, q.Max
	for _, rs := range st.ByRobot {
		r.tooFast += rs.TooFast
		r.redirects += rs.Redirects
	}
	return r, nil
}

// startServe runs `binary serve` with the configured broker, Redis and Postgres, a topic,
// group and key prefix of its own, and targets, whose robots are sim's (served at root);
// it returns its base URL once it is ready.
func startServe(ctx context.Context, cfg config.Config, binary string, sim *chatsim.Server, root string, targets []amTarget,
	token, suffix, pacing string) (string, func(), error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "rocketdelay-bench-am-")
	if err != nil {
		return "", nil, err
	}
	var tb strings.Builder
	for _, t := range targets {
		fmt.Fprintf(&tb, "  %s:\n    kind: %s\n    robots:\n", t.name, t.kind)
		for _, r := range t.robots {
			fmt.Fprintf(&tb, "      - {name: %s, token: %s}\n", r.Name, r.Token)
		}
	}
	prefix := "rdbencham" + suffix
	yaml := fmt.Sprintf(`log: {level: warn}
http: {addr: %q}
rocketmq: {nameServers: [%s], brokers: [%s], topic: rd_bench_am_%s, group: rd_bench_am_%s}
scheduler: {levels: %q, threshold: %s}
redis: {url: %q, keyPrefix: %s}
postgres: {url: %q}
ingress: {token: %s}
sender: {pacing: %s, %s}
targets:
%s`, addr, strings.Join(cfg.RocketMQ.NameServers, ", "), strings.Join(cfg.RocketMQ.Brokers, ", "), suffix, suffix,
		cfg.Scheduler.Levels.String(), cfg.Scheduler.Threshold, cfg.Redis.URL.Reveal(), prefix, cfg.Postgres.URL.Reveal(),
		token, pacing, sim.SenderKeys(root), tb.String())
	path := filepath.Join(dir, "rocketdelay.yaml")
	if err := os.WriteFile(path, []byte(yaml), 0o600); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	logFile, err := os.Create(filepath.Join(dir, "serve.log"))
	if err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	if out, err := exec.CommandContext(ctx, binary, "migrate", "up", "-f", path).CombinedOutput(); err != nil {
		os.RemoveAll(dir)
		return "", nil, fmt.Errorf("migrate: %v: %s", err, lastLines(string(out), 3))
	}
	cmd := exec.Command(binary, "serve", "-f", path)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH")}
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return "", nil, err
	}
	stop := func() {
		_ = cmd.Process.Signal(os.Interrupt)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
		logFile.Close()
		if rdb, err := store.OpenRedis(context.Background(), cfg.Redis.URL.Reveal()); err == nil {
			_, _ = store.DeleteKeys(context.Background(), rdb, prefix)
			rdb.Close()
		}
		os.RemoveAll(dir)
	}
	base := "http://" + addr
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(base + "/readyz"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return base, stop, nil
			}
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			log, _ := os.ReadFile(filepath.Join(dir, "serve.log"))
			stop()
			return "", nil, fmt.Errorf("serve was not ready within 60s: %s", lastLines(string(log), 5))
		}
	}
}

func lastLines(s string, n int) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}

// startNaiveForwarder serves a webhook bridge as the common ones work: each Alertmanager
// notification is one markdown request to one robot; DingTalk's errcode 0 is answered
// 200, anything else 400 (the send failed, and Alertmanager does not retry a 4xx).
func startNaiveForwarder(simURL, robotToken string) (string, func(), error) {
	client := sender.NewClient(5*time.Second, time.Now)
	channel := dingtalk.New(simURL)
	robot := sender.Robot{Name: "r1", Token: config.Secret(robotToken)}
	mux := http.NewServeMux()
	mux.HandleFunc("POST /", func(w http.ResponseWriter, r *http.Request) {
		var n struct {
			Status string `json:"status"`
			Alerts []struct {
				Labels      map[string]string `json:"labels"`
				Annotations map[string]string `json:"annotations"`
			} `json:"alerts"`
		}
		if err := json.NewDecoder(r.Body).Decode(&n); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		var text strings.Builder
		fmt.Fprintf(&text, "### [%s:%d] notification\n", strings.ToUpper(n.Status), len(n.Alerts))
		for _, a := range n.Alerts {
			fmt.Fprintf(&text, "- %s group=%s: %s\n", a.Labels["alertname"], a.Labels["group"], a.Annotations["summary"])
		}
		m := sender.Message{Format: sender.FormatMarkdown, Title: "alert", Text: text.String()}
		if o := channel.Post(r.Context(), client, robot, m); !o.OK {
			http.Error(w, "send failed", http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusOK)
	})
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", nil, err
	}
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 5 * time.Second}
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String() + "/", func() { _ = srv.Close() }, nil
}

// firstCopy is the dedupe of the in-process ingress that renders the captured
// notifications: each is rendered once, so each is its own first copy.
type firstCopy struct{}

func (firstCopy) Once(_ context.Context, _, id string, _ time.Time, _ time.Duration) (string, error) {
	return id, nil
}

// anyOwner makes every principal the owner of what it asks for, and bounds no rate: the
// renderer only renders, for its one principal, with no Redis.
type anyOwner struct{}

func (anyOwner) Own(_ context.Context, _, _, principal string, _ time.Duration) (string, error) {
	return principal, nil
}
func (anyOwner) Owner(context.Context, string, string) (string, error) { return "", nil }
func (anyOwner) Extend(context.Context, string, string, time.Duration) (string, error) {
	return "", nil
}
func (anyOwner) Take(_ context.Context, _ string, _ float64, _, want int) (int, time.Duration, error) {
	return want, 0, nil
}
func (anyOwner) Publish(_ context.Context, principal string, _ float64, _, want int, _ string, _ time.Duration) (int, time.Duration, string, error) {
	return want, 0, principal, nil
}
func (anyOwner) OpenEpisode(context.Context, string, string, int) (bool, int, error) {
	return true, 0, nil
}
