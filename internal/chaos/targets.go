package chaos

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"text/template"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// The replicas' targets: a chat target of each kind with four robots, all served by the
// scenario's simulator, the one-robot DingTalk target "other" (kill-busy), and the topic
// target "orders" (the topic scenarios). A scenario sends its alerts to one of them: the
// chat target of its kind (scenarioKinds), or "orders".

// chatKinds lists the kinds of chat target, in the order of the registry
// (platforms.All): every chat platform has its target, its kill-one and its storm.
var chatKinds = platforms.Kinds()

// chatTargets names the chat target of each kind: "ops" for DingTalk's, "ops-KIND" for
// the others.
var chatTargets = func() map[string]string {
	out := map[string]string{}
	for _, kind := range chatKinds {
		out[kind] = "ops-" + kind
	}
	out[dingtalk.Kind] = "ops"
	return out
}()

// killOneOf and stormOf name the kill-one and the storm of kind's target: kill-one and
// storm for DingTalk's, kill-one-KIND and storm-KIND for the others.
func killOneOf(kind string) string { return scenarioOf(ScenarioKillOne, kind) }
func stormOf(kind string) string   { return scenarioOf(ScenarioStorm, kind) }

func scenarioOf(base, kind string) string {
	if kind == dingtalk.Kind {
		return base
	}
	return base + "-" + kind
}

// kindOf is the kind of the chat target of scenario's alerts: the platform a kill-one or
// a storm is of; DingTalk's for every other scenario but the topic scenarios.
func kindOf(scenario string) string {
	for _, kind := range chatKinds {
		if scenario == killOneOf(kind) || scenario == stormOf(kind) {
			return kind
		}
	}
	return dingtalk.Kind
}

// senderWindow is sender.window of the replicas and the simulator's window: the
// platforms' minute, compressed to a second; their per-second limits count in a
// sixtieth of it.
const senderWindow = time.Second

// senderWindowGuard is sender.windowGuard of the replicas (configData.WindowGuard).
const senderWindowGuard = 100 * time.Millisecond

// senderLimits are the replicas' limits per robot and window, by kind: the defaults of
// sender.limit and sender.KIND.limit (one below DingTalk's and WeCom's 20, five below
// Feishu's 100, …). The simulator holds each robot to its kind's: one request over it
// fails the scenario.
var senderLimits = func() map[string]int {
	out := map[string]int{}
	for _, p := range platforms.All {
		out[p.Kind()] = p.Config.Defaults.Limit
	}
	return out
}()

// chatRobots are the four robots of the chat target of kind, their tokens made from
// prefix: on a platform whose robots sign, the first signs; on one with keywords, the
// second has one, which no alert's text contains, so the sender adds it.
func chatRobots(prefix, kind string) []chatsim.Robot {
	p, _ := platforms.Of(kind)
	out := make([]chatsim.Robot, 4)
	for i := range out {
		rb := chatsim.Robot{Name: fmt.Sprintf("%s%d", robotLetter(kind), i+1), Kind: kind,
			Token: fmt.Sprintf("%s-%s-%d", prefix, kind, i+1), Limit: senderLimits[kind]}
		switch {
		case p.Config.Signs && i == 0:
			rb.Secret = "SEC" + prefix
		case p.Config.Keywords && i == 1:
			rb.Keyword = "alert"
		}
		out[i] = rb
	}
	return out
}

// otherRobot is the one robot of the DingTalk target "other".
func otherRobot(prefix string) chatsim.Robot {
	return chatsim.Robot{Name: "o1", Kind: dingtalk.Kind, Token: prefix + "-other-1", Limit: senderLimits[dingtalk.Kind]}
}

// robotLetter starts the names of kind's robots: r1…r4 (DingTalk), then the kind's
// first letter: w1…w4 (WeCom), f1…f4, s1…s4.
func robotLetter(kind string) string {
	if kind == dingtalk.Kind {
		return "r"
	}
	return kind[:1]
}

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
	// but the network is not (a send is held in flight from its pick to its answer; the
	// guard covers a request given up on), and a sixtieth of a second would be polled
	// too often by picks waiting for an answer.
	WindowGuard time.Duration
	// URLs are the base URL of each kind at the replica's own address of the simulator.
	URLs   map[string]string
	Limits map[string]int
	// Sections are the chat platforms with a section of their own under sender.
	Sections []configSection
	// Shards is redis.shards; 0 leaves it out.
	Shards int
}

// configSection is a chat platform's section under sender.
type configSection struct {
	Name, URL        string
	Limit, PerSecond int
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
{{- range .Sections}}
  {{.Name}}: {baseURL: {{printf "%q" .URL}}, limit: {{.Limit}}, limitPerSecond: {{.PerSecond}}, cooldown: 1s}
{{- end}}
  httpTimeout: 3s
  attempts: 4
  backoffBase: 200ms
  backoffMax: 2s
  cooldown: 3s
  disableFor: 5s
  breakerOpen: 3s
failedSends: {interval: 1s, backoffBase: 1s, backoffCap: 4s, maxAttempts: 1000, batchSize: 200, claimLease: {{.ClaimLease}}}
shutdownTimeout: 10s
{{- if .Shards}}
redis: {shards: {{.Shards}}}
{{- end}}
`))

// tokenPrefix is what every robot token of e's scenario starts with.
func (e *env) tokenPrefix() string { return "chaos-" + e.idPrefix }

// simRobots are every robot of e's configuration, for its simulator.
func (e *env) simRobots() []chatsim.Robot {
	var out []chatsim.Robot
	for _, kind := range chatKinds {
		out = append(out, chatRobots(e.tokenPrefix(), kind)...)
	}
	return append(append(out, otherRobot(e.tokenPrefix())), e.extraRobots...)
}

// writeConfig writes the configuration of replica instance, whose address of the
// simulator is root, at revision (e.reconfigure), and returns its path.
func (e *env) writeConfig(instance, root string, revision int) (string, error) {
	d := configData{Levels: e.r.stack.Env["ROCKETDELAY_LEVELS"], Lease: e.tuning.lease, RetryMaxDelay: e.tuning.retryMaxDelay,
		ClaimLease: e.tuning.claimLease, BizTopic: e.bizTopic(), TopicRate: topicRate, Window: senderWindow, WindowGuard: senderWindowGuard,
		URLs: map[string]string{}, Limits: senderLimits}
	for _, p := range platforms.All {
		kind := p.Kind()
		d.Targets = append(d.Targets, configTarget{Name: chatTargets[kind], Kind: kind, Robots: chatRobots(e.tokenPrefix(), kind)})
		d.URLs[kind] = e.sim.URL(root, kind)
		if p.Config.Section != "" {
			d.Sections = append(d.Sections, configSection{Name: p.Config.Section, URL: d.URLs[kind], Limit: senderLimits[kind],
				PerSecond: p.Config.Defaults.LimitPerSecond})
		}
	}
	d.Targets = append(d.Targets, configTarget{Name: "other", Kind: dingtalk.Kind, Robots: []chatsim.Robot{otherRobot(e.tokenPrefix())}})
	if e.reconfigure != nil {
		e.reconfigure(revision, &d)
	}
	var b strings.Builder
	if err := configTemplate.Execute(&b, d); err != nil {
		return "", err
	}
	path := filepath.Join(e.r.work, instance+".yaml")
	return path, os.WriteFile(path, []byte(b.String()), 0o600)
}

// alertBody is the body of valid alert i with id: plain text, or every third one the
// markdown message of the platform of kind, as its protocol publishes it.
func alertBody(kind, scenario, id string, i int) []byte {
	if i%3 != 1 {
		return []byte("chaos " + id)
	}
	p, _ := platforms.Of(kind)
	b, err := p.New("").Body(sender.Message{Format: sender.FormatMarkdown, Title: "chaos " + id,
		Text: fmt.Sprintf("### chaos %s\nrun %s", id, scenario)})
	if err != nil {
		panic(err) // a markdown message of two short lines: every platform takes it
	}
	return b
}
