package sender

import (
	"net/http"
	"regexp"
	"strings"
	"time"
)

// SimRules are a chat platform's documented behaviour as the chat simulator (package
// chatsim) plays it: where its robots listen, how a request names its robot, what the
// platform checks and how it answers. A channel package gives them in its Platform; the
// simulator's engine, beside the channel packages, holds what every platform shares (the
// robots, their windows and lock-outs, injected faults, the record). No production code
// imports the simulator.
type SimRules interface {
	// Summary says in a few short lines (indented, no trailing newline) where its robots
	// listen and what the platform checks and answers, for `rocketdelay chat-sim --help`.
	Summary() string
	// Path is where the platform's robots receive messages; a path that ends in "/"
	// takes the robot's credential as what follows it (Feishu's hook, Slack's services).
	Path() string
	// Credential is the robot credential a request carries.
	Credential(r *http.Request) string
	// Limits are the platform's limits on one robot.
	Limits() SimLimits
	// Check judges a request: signature and its time window, keyword, size and the
	// message's shape. It returns what the robot would post in its group, or the
	// platform's refusal.
	Check(c SimRequest) (SimReceived, *SimReply)
	// Answer is the platform's answer of kind a.
	Answer(a SimAnswer) SimReply
}

// SimRequest is one request to a simulated robot, as SimRules.Check judges it.
type SimRequest struct {
	// Secret is the robot's signing secret ("" when it does not sign); Keyword its
	// keyword ("" for none).
	Secret, Keyword string
	// Request is the HTTP request, its body read into Body.
	Request *http.Request
	Body    []byte
	// Now is the simulator's clock; Skew how far a signature's time may be from it.
	Now  time.Time
	Skew time.Duration
}

// SimLimits are a platform's documented limits on one robot.
type SimLimits struct {
	// PerWindow is how many messages a robot accepts per window (a minute).
	PerWindow int
	// PerSecond, when above 0, is how many it accepts per sixtieth of the window too.
	PerSecond int
	// HotPerSecond, when above 0, is the per-second limit during the platform's busy
	// moments (Hot); past it the answer is SimBusy.
	HotPerSecond int
	// Hot, when set, reports whether now is one of the platform's busy moments (Feishu:
	// the top and the half of the hour).
	Hot func(now time.Time, window time.Duration) bool
	// Lockout is how long a robot that went over its limit stays throttled (answering
	// SimLocked); 0: the platform documents none, and answers over the limit only.
	Lockout time.Duration
}

// SimAnswerKind is a kind of answer every platform gives in its own words.
type SimAnswerKind int

// The kinds of answers.
const (
	// SimOK accepts the message.
	SimOK SimAnswerKind = iota
	// SimUnknown refuses a credential the platform does not know.
	SimUnknown
	// SimOverLimit refuses a message over the robot's per-window limit.
	SimOverLimit
	// SimOverSecond refuses a message over the robot's per-second limit.
	SimOverSecond
	// SimBusy refuses a message over the busy moments' per-second limit.
	SimBusy
	// SimLocked refuses any message while the robot is locked out.
	SimLocked
	// SimCode answers with the platform's error code SimAnswer.Code (an injected fault).
	SimCode
)

// SimAnswer is what a platform is to answer.
type SimAnswer struct {
	Kind SimAnswerKind
	// Code is the error code of SimCode.
	Code int
	// RetryAfter is how long the robot stays refused, for a platform that says so
	// (Slack's Retry-After); 0 when unknown.
	RetryAfter time.Duration
}

// SimReply is an HTTP answer of the simulator.
type SimReply struct {
	// Status is the HTTP status; 0 means 200.
	Status int
	// JSON is the body, encoded as JSON; nil for none (or Text).
	JSON any
	// Text is a plain-text body (Slack's "ok", "invalid_payload"), when JSON is nil.
	Text string
	// RetryAfter, when above 0, is sent as a Retry-After header, whole seconds.
	RetryAfter time.Duration
	// Location, when set, makes the reply a redirect there.
	Location string
}

// SimReceived is a message a platform accepted, as its group would show it.
type SimReceived struct {
	// MsgType is the message's type ("text", "markdown", "interactive", …).
	MsgType string
	// Text is its text: the content, or the title and text of the other types.
	Text string
	// Markup is what the group shows as markup rather than as text, in the order of the
	// text: "mention:WHO" (a person notified; "mention:all" for everyone),
	// "link:URL", "image:URL" and "heading:TEXT".
	Markup []string
}

// markdownLinks are markdown's links and images; markdownHeadings its ATX headings.
var (
	markdownLinks    = regexp.MustCompile(`(!?)\[([^\]\n]*)\]\(([^)\s]*)\)`)
	markdownHeadings = regexp.MustCompile(`(?m)^ {0,3}#{1,6}[ \t]+(.*)$`)
)

// SimMarkdown is the markup a group shows of markdown text (SimReceived.Markup): its
// links, images, headings (when the platform's markdown has them) and the mentions that
// mention matches (its first group names whom), each kind in the order of the text.
func SimMarkdown(text string, mention *regexp.Regexp, headings bool) []string {
	var out []string
	if mention != nil {
		for _, m := range mention.FindAllStringSubmatch(text, -1) {
			out = append(out, "mention:"+m[1])
		}
	}
	for _, m := range markdownLinks.FindAllStringSubmatch(text, -1) {
		if m[1] == "!" {
			out = append(out, "image:"+m[3])
		} else {
			out = append(out, "link:"+m[3])
		}
	}
	for _, m := range markdownHeadings.FindAllStringSubmatch(text, -1) {
		if headings {
			out = append(out, "heading:"+strings.TrimSpace(m[1]))
		}
	}
	return out
}

// SimThrottledPath is the simulator's page a locked-out robot's redirect leads to
// (DingTalk's HTTP 302 while it throttles a robot): not JSON.
const SimThrottledPath = "/throttled"
