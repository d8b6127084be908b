package slack

import (
	_ "embed"
	"encoding/json"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

// Kind names Slack-compatible webhook groups (targets.NAME.kind).
const Kind = "slack"

// DefaultBaseURL is Slack's incoming-webhook endpoint; a webhook's T…/B…/… path follows
// it. Mattermost's and Rocket.Chat's are their server's /hooks.
const DefaultBaseURL = "https://hooks.slack.com/services"

// alertmanagerTemplate is the built-in template of Alertmanager notifications to Slack:
// mrkdwn text.
//
//go:embed alertmanager.tmpl
var alertmanagerTemplate string

// Platform is Slack-compatible incoming webhooks as everything outside this package
// knows them: about one message a second per webhook with short bursts (configured at
// 50 a minute and 1 a second, at most 60 and 2), HTTP 429 with Retry-After past it, no
// signing and no keyword; mentions by member id (slackUserId).
var Platform = sender.Platform{
	Config: config.ChatChannel{
		Kind: Kind, Name: "Slack", Section: "slack",
		Defaults: config.Platform{BaseURL: DefaultBaseURL, Limit: 50, LimitPerSecond: 1, Cooldown: 5 * time.Second},
		MaxLimit: 60, MaxPerSecond: 2, Host: "hooks.slack.com",
		Credential:     credential,
		CredentialName: "path after /services/ (or /hooks/)",
		CredentialPath: true,
		MemberID:       "slackUserId",
	},
	New:      func(baseURL string) sender.Protocol { return New(baseURL) },
	Failures: failures,
	Template: alertmanagerTemplate,
	Escape:   Escape,
	Link:     Link,
	Sim:      SimRules{},
}

func init() { config.RegisterChatChannels(Platform.Config) }

// credential is a webhook URL's credential: its path after /services/ (Slack) or
// /hooks/ (Mattermost, Rocket.Chat).
func credential(u *url.URL) string {
	for _, marker := range []string{"/services/", "/hooks/"} {
		if _, tok, ok := strings.Cut(u.Path, marker); ok {
			return strings.Trim(tok, "/")
		}
	}
	return ""
}

// markup are the characters Slack's mrkdwn reads as markup: <…> opens a mention, a
// channel link or a link, & an entity. Slack documents escaping them so.
var markup = strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;")

// Escape makes label text safe in Slack's mrkdwn: it opens no mention (<@U…>, <!here>,
// <!channel>) and no link.
func Escape(s string) string { return markup.Replace(s) }

// Link is text linked to target in mrkdwn: <target|text>.
func Link(text, target string) string { return "<" + target + "|" + text + ">" }

// failures is Slack's table. A webhook answers HTTP 200 "ok" on success (Slack,
// Mattermost) or HTTP 200 {"success":true} (Rocket.Chat), and nothing else; a refusal is
// an HTTP status with a plain-text word (Rocket.Chat's: {"success":false,"error":…}
// with HTTP 400): 400 invalid_payload or no_text refuses the message; 403
// action_prohibited, posting_to_general_channel_denied or invalid_token, 404
// channel_not_found or no_service, and 410 channel_is_archived take the webhook out of
// rotation; 429 (with Retry-After) throttles it; 5xx is transient.
var failures = sender.Failures{
	Name: "Slack", CodeName: "HTTP", CodeFirst: true, NotAnswer: sender.ClassTransient,
	Read: readAnswer,
	Codes: map[int]sender.Class{
		http.StatusBadRequest:          sender.ClassPermanent,
		http.StatusForbidden:           sender.ClassRobotBroken,
		http.StatusNotFound:            sender.ClassRobotBroken,
		http.StatusGone:                sender.ClassRobotBroken,
		http.StatusTooManyRequests:     sender.ClassThrottled,
		http.StatusInternalServerError: sender.ClassTransient,
		http.StatusBadGateway:          sender.ClassTransient,
		http.StatusServiceUnavailable:  sender.ClassTransient,
		http.StatusGatewayTimeout:      sender.ClassTransient,
	},
}

// rocketChatAnswer is Rocket.Chat's answer to a webhook post: {"success":true}, or
// {"success":false,"error":…}.
type rocketChatAnswer struct {
	Success *bool  `json:"success"`
	Error   string `json:"error"`
}

// readRocketChat reads body as Rocket.Chat's answer; false when it is not one.
func readRocketChat(body string) (rocketChatAnswer, bool) {
	var a rocketChatAnswer
	if !strings.HasPrefix(body, "{") || json.Unmarshal([]byte(body), &a) != nil || a.Success == nil {
		return rocketChatAnswer{}, false
	}
	return a, true
}

// readAnswer reads a webhook's answer: code 0 for a 200 "ok" or {"success":true}, else
// the HTTP status of a refusal with its word (Rocket.Chat's error); not an answer
// otherwise (no answer, a 2xx or 3xx of something else). Rocket.Chat refuses with
// {"success":false} and HTTP 400; such a refusal under another 2xx is judged as that 400.
func readAnswer(a sender.Answer) (int, string, bool) {
	word := strings.TrimSpace(string(a.Body))
	rc, isRC := readRocketChat(word)
	switch {
	case a.Status == http.StatusOK && (word == "ok" || isRC && *rc.Success):
		return 0, word, true
	case a.Status >= 200 && a.Status < 300 && isRC && !*rc.Success:
		return http.StatusBadRequest, rc.Error, true
	case a.Status >= 400:
		if isRC {
			return a.Status, rc.Error, true
		}
		if len(word) > 100 || strings.ContainsAny(word, "<{") {
			word = "" // a page, not Slack's word
		}
		return a.Status, word, true
	}
	return 0, "", false
}
