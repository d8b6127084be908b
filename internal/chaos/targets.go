package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
)

// The replicas' targets: a chat target of each kind with four robots, all served by the
// scenario's simulator, the one-robot DingTalk target "other" (kill-busy), and the topic
// target "orders" (the topic scenarios). A scenario sends its alerts to one of them: the
// chat target of its kind (scenarioKinds), or "orders".

// chatTargets names the chat target of each kind.
var chatTargets = map[string]string{config.KindDingTalk: "ops", config.KindWeCom: "ops-wecom", config.KindFeishu: "ops-feishu"}

// chatKinds lists the kinds of chat target, in the order the configuration lists them.
var chatKinds = []string{config.KindDingTalk, config.KindWeCom, config.KindFeishu}

// scenarioKinds says which scenarios send every alert to the chat target of another kind
// than DingTalk's; every other scenario but the topic scenarios uses "ops".
var scenarioKinds = map[string]string{
	ScenarioKillOneWeCom: config.KindWeCom, ScenarioStormWeCom: config.KindWeCom,
	ScenarioKillOneFeishu: config.KindFeishu, ScenarioStormFeishu: config.KindFeishu,
}

// kindOf is the kind of the chat target of scenario's alerts.
func kindOf(scenario string) string {
	if k, ok := scenarioKinds[scenario]; ok {
		return k
	}
	return config.KindDingTalk
}

// senderWindow is sender.window of the replicas and the simulator's window: the
// platforms' minute, compressed to a second; their per-second limits count in a
// sixtieth of it.
const senderWindow = time.Second

// senderWindowGuard is sender.windowGuard of the replicas (configData.WindowGuard).
const senderWindowGuard = 100 * time.Millisecond

// senderLimits are the replicas' limits per robot and window, by kind: the defaults of
// sender.limit, sender.wecom.limit and sender.feishu.limit, one below DingTalk's and
// WeCom's 20 and five below Feishu's 100. The simulator holds each robot to its kind's:
// one request over it fails the scenario.
var senderLimits = map[string]int{
	config.KindDingTalk: config.DefaultSenderLimit,
	config.KindWeCom:    config.DefaultWeComLimit,
	config.KindFeishu:   config.DefaultFeishuLimit,
}

// feishuPerSecond is sender.feishu.limitPerSecond, the default: one below Feishu's own
// config.MaxFeishuPerSecond, which the simulator enforces (its rules) and checkLimits
// checks in what it accepted.
const feishuPerSecond = config.DefaultFeishuLimitPerSecond

// chatRobots are the four robots of the chat target of kind, their tokens made from
// prefix: DingTalk's first signs; WeCom's do not sign (WeCom has no signing); Feishu's
// first signs and its second has a keyword, which no alert's text contains, so the
// sender adds it.
func chatRobots(prefix, kind string) []chatsim.Robot {
	out := make([]chatsim.Robot, 4)
	for i := range out {
		rb := chatsim.Robot{Name: fmt.Sprintf("%s%d", robotLetters[kind], i+1), Kind: kind,
			Token: fmt.Sprintf("%s-%s-%d", prefix, kind, i+1), Limit: senderLimits[kind]}
		switch {
		case kind == config.KindDingTalk && i == 0:
			rb.Secret = "SEC" + prefix
		case kind == config.KindFeishu && i == 0:
			rb.Secret = "fsec-" + prefix
		case kind == config.KindFeishu && i == 1:
			rb.Keyword = "alert"
		}
		out[i] = rb
	}
	return out
}

// otherRobot is the one robot of the DingTalk target "other".
func otherRobot(prefix string) chatsim.Robot {
	return chatsim.Robot{Name: "o1", Kind: config.KindDingTalk, Token: prefix + "-other-1", Limit: senderLimits[config.KindDingTalk]}
}

// robotLetters start the names of each kind's robots: r1…r4 (DingTalk), w1…w4, f1…f4.
var robotLetters = map[string]string{config.KindDingTalk: "r", config.KindWeCom: "w", config.KindFeishu: "f"}

// configTarget is a chat target of the configuration.
type configTarget struct {
	Name, Kind string
	Robots     []chatsim.Robot
}

// configData fills configTemplate.
type configData struct {
	Levels                           string
	Lease, RetryMaxDelay, ClaimLease time.Duration
	Targets                          []configTarget
	BizTopic                         string
	TopicRate                        int
	Window                           time.Duration
	// WindowGuard is sender.windowGuard: the platforms' minute is compressed to a second,
	// but the time from a pick to the request's arrival is not, and on a loaded machine it
	// varies by tens of milliseconds, past the default of a sixtieth of the window.
	WindowGuard time.Duration
	// URLs are the base URL of each kind at the replica's own address of the simulator.
	URLs            map[string]string
	Limits          map[string]int
	FeishuPerSecond int
}

// configTemplate is a replica's configuration. Each replica instance has one of its own,
// whose base URLs are an address of the simulator of its own (simulator.listen), so that
// the simulator knows who sent what.
var configTemplate = template.Must(template.New("config").Parse(`log: {level: info, format: json}
scheduler: {levels: {{printf "%q" .Levels}}, threshold: 5s, grace: 1s, lease: {{.Lease}}, retryMaxDelay: {{.RetryMaxDelay}}}
targets:
{{- range .Targets}}
  {{.Name}}:
    kind: {{.Kind}}
    robots:
{{- range .Robots}}
      - {name: {{.Name}}, token: {{.Token}}{{if .Secret}}, signingSecret: {{.Secret}}{{end}}{{if .Keyword}}, keyword: {{.Keyword}}{{end}}}
{{- end}}
{{- end}}
  orders:
    topic: {name: {{.BizTopic}}, ratePerSecond: {{.TopicRate}}}
sender:
  baseURL: {{printf "%q" (index .URLs "dingtalk")}}
  window: {{.Window}}
  windowGuard: {{.WindowGuard}}
  limit: {{index .Limits "dingtalk"}}
  wecom: {baseURL: {{printf "%q" (index .URLs "wecom")}}, limit: {{index .Limits "wecom"}}, cooldown: 1s}
  feishu: {baseURL: {{printf "%q" (index .URLs "feishu")}}, limit: {{index .Limits "feishu"}}, limitPerSecond: {{.FeishuPerSecond}}, cooldown: 1s}
  httpTimeout: 3s
  attempts: 4
  backoffBase: 200ms
  backoffMax: 2s
  cooldown: 3s
  disableFor: 5s
  breakerOpen: 3s
failedSends: {interval: 1s, backoffBase: 1s, backoffCap: 4s, maxAttempts: 1000, batchSize: 200, claimLease: {{.ClaimLease}}}
shutdownTimeout: 10s
`))

// tokenPrefix is what every robot token of e's scenario starts with.
func (e *env) tokenPrefix() string { return "chaos-" + e.idPrefix }

// simRobots are every robot of e's configuration, for its simulator.
func (e *env) simRobots() []chatsim.Robot {
	var out []chatsim.Robot
	for _, kind := range chatKinds {
		out = append(out, chatRobots(e.tokenPrefix(), kind)...)
	}
	return append(out, otherRobot(e.tokenPrefix()))
}

// writeConfig writes the configuration of replica instance, whose address of the
// simulator is root, and returns its path.
func (e *env) writeConfig(instance, root string) (string, error) {
	d := configData{Levels: e.r.stack.Env["ROCKETDELAY_LEVELS"], Lease: e.tuning.lease, RetryMaxDelay: e.tuning.retryMaxDelay,
		ClaimLease: e.tuning.claimLease, BizTopic: e.bizTopic(), TopicRate: topicRate, Window: senderWindow, WindowGuard: senderWindowGuard,
		URLs: map[string]string{}, Limits: senderLimits, FeishuPerSecond: feishuPerSecond}
	for _, kind := range chatKinds {
		d.Targets = append(d.Targets, configTarget{Name: chatTargets[kind], Kind: kind, Robots: chatRobots(e.tokenPrefix(), kind)})
		d.URLs[kind] = e.sim.URL(root, kind)
	}
	d.Targets = append(d.Targets, configTarget{Name: "other", Kind: config.KindDingTalk, Robots: []chatsim.Robot{otherRobot(e.tokenPrefix())}})
	var b strings.Builder
	if err := configTemplate.Execute(&b, d); err != nil {
		return "", err
	}
	path := filepath.Join(e.r.work, instance+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// alertBody is the body of valid alert i with id: plain text, or every third one the
// JSON message of the platform of kind (DingTalk's and WeCom's markdown, a Feishu card
// with a markdown element, which goes as it is).
func alertBody(kind, scenario, id string, i int) []byte {
	if i%3 != 1 {
		return []byte("chaos " + id)
	}
	switch kind {
	case config.KindWeCom:
		return fmt.Appendf(nil, `{"msgtype":"markdown","markdown":{"content":"### chaos %s\nrun %s"}}`, id, scenario)
	case config.KindFeishu:
		return fmt.Appendf(nil, `{"msg_type":"interactive","card":{"header":{"title":{"tag":"plain_text","content":"chaos %s"}},"elements":[{"tag":"markdown","content":"**chaos %s**\nrun %s"}]}}`, id, id, scenario)
	}
	return fmt.Appendf(nil, `{"msgtype":"markdown","markdown":{"title":"chaos %s","text":"### chaos %s\nrun %s"}}`, id, id, scenario)
}
