package app

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/wire"
)

const testIngestToken = "ingest-token-0123456789abcdef"

// amWorld is a running service whose robot group "ops" (three robots) sends to a
// simulator, and a real Alertmanager whose receivers post to the service.
type amWorld struct {
	t    *testing.T
	sim  *chatsim.Server
	am   string // Alertmanager's base URL
	base string // the service's base URL
	cfg  config.Config
}

// startAMWorld starts the service and an Alertmanager that groups by the label group
// and sends to the receiver URL path of the ops target: at once, or with ?delay=delay
// for alerts labelled escalate="yes".
func startAMWorld(t *testing.T, delay time.Duration) *amWorld {
	t.Helper()
	robots := []chatsim.Robot{{Name: "r1", Token: "am-tok-1"}, {Name: "r2", Token: "am-tok-2"}, {Name: "r3", Token: "am-tok-3"}}
	// A window of 4s stands for DingTalk's minute, so a flood drains in seconds; the
	// simulator enforces the sender's own limit, so one request over it shows.
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: robots, Limit: 19, Window: 4 * time.Second})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {
		Robots: []config.Robot{{Name: "r1", Token: "am-tok-1"}, {Name: "r2", Token: "am-tok-2"}, {Name: "r3", Token: "am-tok-3"}},
		Alertmanager: &config.AlertmanagerTarget{Mentions: []config.Mention{
			{Match: map[string]string{"severity": "critical"}, Mobiles: []string{"13800000000"}}}},
	}}
	cfg.Sender.BaseURL = simURL
	cfg.Sender.Window = 4 * time.Second
	cfg.Ingress.Token = testIngestToken
	require.NoError(t, cfg.Validate())
	base := startReplica(t, cfg)

	receiver := func(name, query string) string {
		return fmt.Sprintf(`  - name: %s
    webhook_configs:
      - url: %s/api/v1/alertmanager/ops%s
        send_resolved: true
        http_config:
          authorization: {credentials: %s}
`, name, base, query, testIngestToken)
	}
	am := testenv.Alertmanager(t, fmt.Sprintf(`route:
  receiver: now
  group_by: [group]
  group_wait: 1s
  group_interval: 1s
  repeat_interval: 1h
  routes:
    - matchers: ['escalate="yes"']
      receiver: later
receivers:
%s%s`, receiver("now", ""), receiver("later", fmt.Sprintf("?delay=%s", delay))))
	return &amWorld{t: t, sim: sim, am: am.URL, base: base, cfg: cfg}
}

// fire posts alerts to Alertmanager's API, as Prometheus does; resolved ones carry an
// end in the past.
func (w *amWorld) fire(alerts ...map[string]any) {
	w.t.Helper()
	for len(alerts) > 0 {
		n := min(len(alerts), 500)
		b, err := json.Marshal(alerts[:n])
		require.NoError(w.t, err)
		resp, err := http.Post(w.am+"/api/v2/alerts", "application/json", bytes.NewReader(b))
		require.NoError(w.t, err)
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		require.Equal(w.t, http.StatusOK, resp.StatusCode, "alertmanager: %s", body)
		alerts = alerts[n:]
	}
}

func alert(labels map[string]string, summary string, resolved bool) map[string]any {
	a := map[string]any{"labels": labels, "annotations": map[string]string{"summary": summary},
		"generatorURL": "http://prometheus.example/graph"}
	if resolved {
		a["startsAt"] = time.Now().Add(-time.Minute).UTC().Format(time.RFC3339Nano)
		a["endsAt"] = time.Now().Add(-time.Second).UTC().Format(time.RFC3339Nano)
	}
	return a
}

// accepted returns the texts the simulator accepted that contain s.
func (w *amWorld) accepted(s string) []chatsim.Message {
	var out []chatsim.Message
	for _, m := range w.sim.Accepted() {
		if strings.Contains(m.Text, s) {
			out = append(out, m)
		}
	}
	return out
}

// Alertmanager's real webhook, end to end: a group of two alerts becomes one rendered
// markdown message with its mention; a delayed group that resolves before its delay is
// never sent; a delayed group that changes while pending is sent once, with its newest
// content, at its first notification's due time.
func TestAlertmanagerThroughServe(t *testing.T) {
	// The updates below must reach serve before the delayed groups fall due: they are
	// sent about a second after the first notifications' delivery (group_interval 1s),
	// and the delay leaves a loaded machine well over ten seconds more. Should it stall
	// past that anyway, the test fails saying so (below), never passes unchecked.
	const delay = 20 * time.Second
	w := startAMWorld(t, delay)
	w.fire(
		alert(map[string]string{"alertname": "DiskFull", "group": "disk", "instance": "db-3", "severity": "critical"}, "disk full on db-3", false),
		alert(map[string]string{"alertname": "DiskFull", "group": "disk", "instance": "db-4", "severity": "critical"}, "disk full on db-4", false),
		alert(map[string]string{"alertname": "Flapping", "group": "flap", "escalate": "yes"}, "flapping once", false),
		alert(map[string]string{"alertname": "Growing", "group": "grow", "escalate": "yes", "instance": "a"}, "growing a", false),
	)
	start := time.Now()
	require.Eventually(t, func() bool { return len(w.accepted("disk full on db-3")) > 0 }, 30*time.Second, 50*time.Millisecond)
	m := w.accepted("disk full on db-3")
	require.Len(t, m, 1)
	require.Equal(t, "markdown", m[0].MsgType)
	require.Contains(t, m[0].Text, "[FIRING:2] DiskFull")
	require.Contains(t, m[0].Text, "disk full on db-4", "the group is one message")
	require.Contains(t, m[0].Text, "@13800000000")
	var body struct {
		At struct {
			AtMobiles []string `json:"atMobiles"`
		} `json:"at"`
	}
	require.NoError(t, json.Unmarshal(m[0].Body, &body))
	require.Equal(t, []string{"13800000000"}, body.At.AtMobiles)

	// The flapping group resolves before its delay ends; the growing one gains an alert.
	w.fire(alert(map[string]string{"alertname": "Flapping", "group": "flap", "escalate": "yes"}, "flapping once", true),
		alert(map[string]string{"alertname": "Growing", "group": "grow", "escalate": "yes", "instance": "b"}, "growing b", false))
	require.Less(t, time.Since(start), delay-5*time.Second,
		"premise: the updates must be on their way well before the groups fall due; the machine stalled past it")
	// A sentinel due after both escalations: once it is delivered, an escalation that was
	// not cancelled would have been delivered before it.
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: w.cfg.RocketMQ.NameServers, Topic: w.cfg.RocketMQ.Topic})
	require.NoError(t, err)
	defer p.Close()
	_, err = p.Publish(context.Background(), wire.Publication{Target: "ops", At: start.Add(delay + 6*time.Second), Body: []byte("sentinel")})
	require.NoError(t, err)
	require.Eventually(t, func() bool { return len(w.accepted("sentinel")) > 0 }, 60*time.Second, 50*time.Millisecond)

	require.Empty(t, w.accepted("Flapping"), "a group resolved before its delay is never sent")
	grow := w.accepted("growing a")
	require.Len(t, grow, 1, "the pending escalation was replaced, not doubled")
	require.Contains(t, grow[0].Text, "growing b", "with the newest content")
	require.Contains(t, grow[0].Text, "[FIRING:2] Growing")
	require.False(t, grow[0].At.Before(start.Add(delay)), "not before its delay")
	require.Zero(t, w.sim.Stats().OverLimit)
}

// A flood as a data-check scenario makes one: 5,000 alerts in 200 groups, one
// notification each, into a group of three robots. Every alert reaches DingTalk, merged
// into far fewer messages than notifications, none over a robot's limit.
func TestAlertmanagerFlood(t *testing.T) {
	w := startAMWorld(t, time.Minute)
	var alerts []map[string]any
	for g := range 200 {
		for i := range 25 {
			alerts = append(alerts, alert(map[string]string{"alertname": "DataCheck", "group": fmt.Sprintf("g%03d", g),
				"instance": fmt.Sprintf("row-%03d-%02d", g, i)}, "dirty", false))
		}
	}
	w.fire(alerts...)
	missing := func() []string {
		text := strings.Builder{}
		for _, m := range w.sim.Accepted() {
			text.WriteString(m.Text)
		}
		all := text.String()
		var out []string
		for g := range 200 {
			for i := range 25 {
				if inst := fmt.Sprintf("instance=row-%03d-%02d", g, i); !strings.Contains(all, inst) {
					out = append(out, inst)
				}
			}
		}
		return out
	}
	require.Eventually(t, func() bool { return len(missing()) == 0 }, 3*time.Minute, 200*time.Millisecond,
		"alerts never delivered: %d", len(missing()))
	st := w.sim.Stats()
	t.Logf("5000 alerts in 200 notifications: %d messages, %d over the limit", st.Accepted, st.OverLimit)
	require.Zero(t, st.OverLimit)
	require.Less(t, st.Accepted, 200, "notifications were merged")
}

// `config check` parses the Alertmanager templates the configuration names.
func TestConfigCheckParsesTemplates(t *testing.T) {
	dir := t.TempDir()
	tmpl := filepath.Join(dir, "ops.tmpl")
	require.NoError(t, os.WriteFile(tmpl, []byte(`{{define "dingtalk.text"}}{{.Status`), 0o600))
	file := filepath.Join(dir, "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`rocketmq: {nameServers: ["127.0.0.1:1"]}
redis: {url: "redis://127.0.0.1:1/0"}
postgres: {url: "postgres://u@127.0.0.1:1/db"}
targets:
  ops: {robots: [{name: r1, token: t1}], alertmanager: {template: %q}}
`, tmpl)), 0o600))
	_, _, err := run(t, nil, "config", "check", "-f", file)
	require.ErrorContains(t, err, "targets.ops.alertmanager.template")
	require.NoError(t, os.WriteFile(tmpl, []byte(`{{define "dingtalk.text"}}{{.Status}}{{end}}`), 0o600))
	_, _, err = run(t, nil, "config", "check", "-f", file)
	require.NoError(t, err)
}
