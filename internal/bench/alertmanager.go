package bench

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/localstack"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/notify"
	"github.com/rocketdelay/rocketdelay/notify/chatsim"
	"github.com/rocketdelay/rocketdelay/notify/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// AlertmanagerDoc is the long help of `rocketdelay bench alertmanager`.
const AlertmanagerDoc = `alertmanager fires a flood into a real Alertmanager (Debian's prometheus-alertmanager):
--groups alert groups at once, one alert each, grouped by the label group, one webhook
notification per group. Its receiver is, in turn:

  naive forwarder  what the common webhook bridges do: each notification becomes one
                   request to one robot, and a failed send is answered 400 (which
                   Alertmanager does not retry)
  rocketdelay      this binary's serve, the receiver at /api/v1/alertmanager/ops

with the robots behind it a DingTalk simulator that behaves like DingTalk: 20 messages per
minute per robot, then "send too fast" (130101), then 10 minutes of redirects. Each run
lasts until every group was delivered, or --budget. The table: groups delivered, requests
to the robots, 130101 and redirect answers, messages DingTalk accepted, and p99 lateness
from the flood to a group's delivery; with one robot and with three.`

// AlertmanagerOptions configure the Alertmanager benchmark. A zero field takes its
// default.
type AlertmanagerOptions struct {
	// Groups is the flood's alert groups. Default 200.
	Groups int
	// Budget bounds one run. Default 90s.
	Budget time.Duration
	// Robots are the robot counts to run with. Default 1 and 3.
	Robots []int
	// Binary is the rocketdelay binary that serves. Default this process's executable.
	Binary string
}

type amRun struct {
	way                  string
	robots               int
	delivered            int
	requests, tooFast    int
	redirects, messages  int
	p99, worst, duration time.Duration
}

// Alertmanager runs the flood through each receiver, with each robot count, and prints
// the table to out.
func Alertmanager(ctx context.Context, cfg config.Config, o AlertmanagerOptions, out io.Writer) error {
	config.Default(&o.Groups, 200)
	config.Default(&o.Budget, 90*time.Second)
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

// amFlood is one run: a simulator with robots, the receiver, an Alertmanager, the flood.
func amFlood(ctx context.Context, cfg config.Config, o AlertmanagerOptions, way string, robots int) (amRun, error) {
	r := amRun{way: way, robots: robots}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	var simRobots []chatsim.Robot
	for i := range robots {
		simRobots = append(simRobots, chatsim.Robot{Name: fmt.Sprintf("r%d", i+1), Token: fmt.Sprintf("am-bench-%s-%d", suffix, i+1)})
	}
	sim := dingtalk.NewSim(chatsim.Options{Robots: simRobots, Limit: config.MaxRobotLimit, Window: time.Minute, Throttle: 10 * time.Minute})
	simURL, stopSim, err := serveSim(ctx, sim)
	if err != nil {
		return r, err
	}
	defer stopSim()

	const token = "bench-ingest-token-0123456789"
	var receiverURL string
	switch way {
	case "rocketdelay":
		base, stop, err := startServe(ctx, cfg, o.Binary, simURL, simRobots, token, suffix)
		if err != nil {
			return r, err
		}
		defer stop()
		receiverURL = base + "/api/v1/alertmanager/ops"
	default:
		fw, stop, err := startNaiveForwarder(simURL, simRobots[0].Token)
		if err != nil {
			return r, err
		}
		defer stop()
		receiverURL = fw
	}
	am, err := localstack.StartAlertmanager(ctx, fmt.Sprintf(`route:
  receiver: dingtalk
  group_by: [group]
  group_wait: 1s
  group_interval: 5m
  repeat_interval: 1h
receivers:
  - name: dingtalk
    webhook_configs:
      - url: %s
        send_resolved: false
        http_config:
          authorization: {credentials: %s}
`, receiverURL, token))
	if err != nil {
		return r, err
	}
	defer am.Stop()

	var alerts []map[string]any
	for g := range o.Groups {
		alerts = append(alerts, map[string]any{"labels": map[string]string{"alertname": "DataCheck", "group": fmt.Sprintf("g%04d", g),
			"severity": "warning"}, "annotations": map[string]string{"summary": fmt.Sprintf("history row %d is dirty", g)}})
	}
	b, _ := json.Marshal(alerts) // plain maps
	start := time.Now()
	resp, err := http.Post(am.URL+"/api/v2/alerts", "application/json", bytes.NewReader(b))
	if err != nil {
		return r, err
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return r, fmt.Errorf("alertmanager answered %s to the flood", resp.Status)
	}
	first := map[string]time.Time{}
	for time.Since(start) < o.Budget && len(first) < o.Groups && ctx.Err() == nil {
		time.Sleep(200 * time.Millisecond)
		for _, m := range sim.Accepted() {
			for g := range o.Groups {
				id := fmt.Sprintf("group=g%04d", g)
				if _, seen := first[id]; !seen && strings.Contains(m.Text, id) {
					first[id] = m.At
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
// group and key prefix of its own, and the robot group ops on the simulator; it returns
// its base URL once it is ready.
func startServe(ctx context.Context, cfg config.Config, binary, simURL string, robots []chatsim.Robot, token, suffix string) (string, func(), error) {
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
	var rb strings.Builder
	for _, r := range robots {
		fmt.Fprintf(&rb, "      - {name: %s, token: %s}\n", r.Name, r.Token)
	}
	prefix := "rdbencham" + suffix
	yaml := fmt.Sprintf(`log: {level: warn}
http: {addr: %q}
rocketmq: {nameServers: [%s], brokers: [%s], topic: rd_bench_am_%s, group: rd_bench_am_%s}
scheduler: {levels: %q, threshold: %s}
redis: {url: %q, keyPrefix: %s}
postgres: {url: %q}
ingress: {token: %s}
sender: {baseURL: %q}
targets:
  ops:
    robots:
%s`, addr, strings.Join(cfg.RocketMQ.NameServers, ", "), strings.Join(cfg.RocketMQ.Brokers, ", "), suffix, suffix,
		cfg.Scheduler.Levels.String(), cfg.Scheduler.Threshold, cfg.Redis.URL.Reveal(), prefix, cfg.Postgres.URL.Reveal(),
		token, simURL, rb.String())
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
	client := notify.NewClient(5*time.Second, time.Now)
	channel := dingtalk.New(simURL)
	robot := notify.Robot{Name: "r1", Token: config.Secret(robotToken)}
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
		m := notify.Message{Format: notify.FormatMarkdown, Title: "alert", Text: text.String()}
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
