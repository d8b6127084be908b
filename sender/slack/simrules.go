package slack

import (
	"encoding/json"
	"net/http"
	"regexp"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
)

// SimPath is where the simulator's Slack webhooks receive messages; the webhook's path
// (T…/B…/…) follows it.
const SimPath = "/services/"

// SimRocketChatPath is where they receive them when the simulator answers as Rocket.Chat
// does (SimRules.RocketChat); the integration's id and token follow it.
const SimRocketChatPath = "/hooks/"

// SimRules are Slack's rules in the simulator (package chatsim, through the Platform):
// the webhook's path after /services/, no signing and no keyword, a JSON body with text,
// blocks or attachments, the text shown truncated to its first TruncateChars characters;
// 60 messages a minute and bursts of 2 a second, answered over them with HTTP 429
// "rate_limited" and a Retry-After, and no lock-out besides.
type SimRules struct {
	// RocketChat makes the webhooks answer as Rocket.Chat's do: at SimRocketChatPath,
	// HTTP 200 {"success":true} on success and {"success":false,"error":WORD} with the
	// refusal's status.
	RocketChat bool
}

// Summary is the simulator's help line.
func (SimRules) Summary() string {
	return `/services/T/B/X                   JSON with text, blocks or attachments; 60 per
            minute and 2 per second, HTTP 429 rate_limited with Retry-After over them;
            refusals are HTTP 400/403/404/410 with a word (invalid_payload, no_service, …)`
}

// Path is SimPath, SimRocketChatPath for Rocket.Chat.
func (s SimRules) Path() string {
	if s.RocketChat {
		return SimRocketChatPath
	}
	return SimPath
}

// Credential is the path after Path.
func (s SimRules) Credential(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, s.Path()) }

// Limits are 60 a minute and 2 a second, no lock-out.
func (SimRules) Limits() sender.SimLimits { return sender.SimLimits{PerWindow: 60, PerSecond: 2} }

// words are Slack's plain-text answers by HTTP status.
var words = map[int]string{
	http.StatusBadRequest:      "invalid_payload",
	http.StatusForbidden:       "action_prohibited",
	http.StatusNotFound:        "channel_not_found",
	http.StatusGone:            "channel_is_archived",
	http.StatusTooManyRequests: "rate_limited",
}

func refuse(status int, word string) *sender.SimReply {
	return &sender.SimReply{Status: status, Text: word}
}

// rocketChatReply is Rocket.Chat's body of the reply r: {"success":true} for a 200 "ok",
// else {"success":false,"error":WORD}.
func rocketChatReply(r sender.SimReply) sender.SimReply {
	if r.Status == 0 || r.Status == http.StatusOK {
		r.JSON = map[string]any{"success": true}
	} else {
		r.JSON = map[string]any{"success": false, "error": r.Text}
	}
	r.Text = ""
	return r
}

// Answer is Slack's answer: "ok", or an HTTP status with its word; an injected code is
// an HTTP status. Rocket.Chat's words are JSON.
func (s SimRules) Answer(a sender.SimAnswer) sender.SimReply {
	r := answer(a)
	if s.RocketChat {
		r = rocketChatReply(r)
	}
	return r
}

func answer(a sender.SimAnswer) sender.SimReply {
	switch a.Kind {
	case sender.SimOK:
		return sender.SimReply{Text: "ok"}
	case sender.SimUnknown:
		return *refuse(http.StatusNotFound, "no_service")
	case sender.SimOverLimit, sender.SimOverSecond, sender.SimBusy, sender.SimLocked:
		return sender.SimReply{Status: http.StatusTooManyRequests, Text: "rate_limited", RetryAfter: max(a.RetryAfter, time.Second)}
	}
	word, ok := words[a.Code]
	if !ok {
		word = http.StatusText(a.Code)
	}
	return *refuse(a.Code, word)
}

// Check checks the message's shape: JSON with text, blocks or attachments.
func (s SimRules) Check(c sender.SimRequest) (sender.SimReceived, *sender.SimReply) {
	got, refusal := check(c)
	if refusal != nil && s.RocketChat {
		r := rocketChatReply(*refusal)
		refusal = &r
	}
	return got, refusal
}

func check(c sender.SimRequest) (sender.SimReceived, *sender.SimReply) {
	var m Message
	if err := json.Unmarshal(c.Body, &m); err != nil {
		return sender.SimReceived{}, refuse(http.StatusBadRequest, "invalid_payload")
	}
	switch {
	case len(m.Blocks) > 0 || len(m.Attachments) > 0:
		text := truncated(m.Text)
		return sender.SimReceived{MsgType: TypeBlocks, Text: text, Markup: simMarkup(text)}, nil
	case strings.TrimSpace(m.Text) == "":
		return sender.SimReceived{}, refuse(http.StatusBadRequest, "no_text")
	}
	text := truncated(m.Text)
	return sender.SimReceived{MsgType: TypeText, Text: text, Markup: simMarkup(text)}, nil
}

// truncated is text as Slack shows it: its first TruncateChars characters.
func truncated(text string) string {
	n := 0
	for i := range text {
		if n == TruncateChars {
			return text[:i]
		}
		n++
	}
	return text
}

// mrkdwnTag is Slack's markup in text: <@U…> a user, <!here>, <!channel>, <!everyone>
// and <!subteam^…> groups, <#C…> a channel, <URL|text> or <URL> a link.
var mrkdwnTag = regexp.MustCompile(`<([@!#]?)([^|>\s]+)(?:\|[^>]*)?>`)

// simMarkup is what a channel shows of mrkdwn text as markup: each mention and link.
func simMarkup(text string) []string {
	var out []string
	for _, m := range mrkdwnTag.FindAllStringSubmatch(text, -1) {
		switch m[1] {
		case "@":
			out = append(out, "mention:"+m[2])
		case "!":
			out = append(out, "mention:"+strings.TrimPrefix(m[2], "subteam^"))
		case "#":
			out = append(out, "link:#"+m[2])
		default:
			out = append(out, "link:"+m[2])
		}
	}
	return out
}
