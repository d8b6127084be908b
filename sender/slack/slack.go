// Package slack is the channel of Slack-compatible incoming webhooks (Slack, Mattermost,
// Rocket.Chat accept the same JSON): the messages producers publish and their
// validation, the rendering of the core's neutral message as mrkdwn text, the size rule
// (Slack truncates a text past 40,000 characters, so longer alerts are split first), its
// mentions (<@U…> for people, <!channel> for everyone, from configuration only), the
// table from its answers (an HTTP status and a plain-text word) to the core's failure
// classes, its simulator rules and its descriptor (platform.go). The pool, pacing,
// merging, splitting and retries are package sender's.
//
// A webhook's URL is its only credential (no signing, no keyword): the path after the
// base URL (Slack's T…/B…/…) never appears in a log line, a metric or an error.
package slack

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/sender"
)

// Slack's size rules, bytes of text.
const (
	// TruncateChars is where Slack cuts a text: it shows a longer one truncated to its
	// first 40,000 characters.
	TruncateChars = 40_000
	// MaxTextBytes bounds a message's text: Slack truncates a text past TruncateChars
	// characters, and a character is at least a byte.
	MaxTextBytes = 39_000
	// MaxSplitBytes bounds a text alert, which is split into numbered parts; a larger one
	// is refused.
	MaxSplitBytes = 10 * MaxTextBytes
	// maxNativeBytes bounds the JSON of a message with blocks or attachments, which goes
	// as it is.
	maxNativeBytes = 100 << 10
)

// Message types, as operators see them.
const (
	// TypeText is a message of text alone (mrkdwn).
	TypeText = "text"
	// TypeBlocks is a message with blocks or attachments: it goes as it is.
	TypeBlocks = "blocks"
)

// Message is a Slack incoming-webhook message as producers publish it: text, or blocks
// and attachments (with text as their notification fallback).
type Message struct {
	Text        string          `json:"text,omitempty"`
	Blocks      json.RawMessage `json:"blocks,omitempty"`
	Attachments json.RawMessage `json:"attachments,omitempty"`
}

// Channel is the Slack protocol of the sender core.
type Channel struct {
	base string
}

// New returns the Slack channel that posts to baseURL + "/" + the webhook's path (""
// means DefaultBaseURL).
func New(baseURL string) *Channel {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	return &Channel{base: strings.TrimSuffix(baseURL, "/")}
}

// Kind is Kind.
func (*Channel) Kind() string { return Kind }

// Parse reads a body as producers publish it: a Slack message JSON object (an object
// with "text", "blocks" or "attachments") or plain UTF-8 text. A message of text alone is
// the core's mergeable text; one with blocks or attachments goes as it is.
func (*Channel) Parse(body []byte) (sender.Message, error) {
	trimmed := bytes.TrimSpace(body)
	switch {
	case len(trimmed) == 0:
		return sender.Message{}, sender.Invalid("the body is empty")
	case !utf8.Valid(body):
		return sender.Message{}, sender.Invalid("the body is not valid UTF-8")
	}
	if trimmed[0] == '{' {
		var m Message
		err := json.Unmarshal(trimmed, &m)
		switch {
		case err == nil && (len(m.Blocks) > 0 || len(m.Attachments) > 0):
			if len(trimmed) > maxNativeBytes {
				return sender.Message{}, sender.Invalid("the message is %d bytes; at most %d are accepted", len(trimmed), maxNativeBytes)
			}
			return sender.Message{Format: sender.FormatNative, Native: json.RawMessage(bytes.Clone(trimmed)), Type: TypeBlocks}, nil
		case err == nil && strings.TrimSpace(m.Text) != "":
			body = []byte(m.Text)
		case err == nil:
			return sender.Message{}, sender.Invalid("a Slack message needs text, blocks or attachments")
		case bytes.Contains(trimmed, []byte(`"text"`)) || bytes.Contains(trimmed, []byte(`"blocks"`)):
			return sender.Message{}, sender.Invalid("the body looks like a Slack message but is not valid JSON: %v", err)
		}
	}
	if len(body) > MaxSplitBytes {
		return sender.Message{}, sender.Invalid("the text is %d bytes; at most %d are split into parts", len(body), MaxSplitBytes)
	}
	return sender.Message{Format: sender.FormatText, Text: string(body), Type: TypeText}, nil
}

// render is the Slack message of the core's message m: its text, a markdown message's
// title first in bold when the text does not start with it, then the mentions it does
// not show; m's own JSON when it is native.
func render(m sender.Message) any {
	if m.Format == sender.FormatNative {
		return m.Native
	}
	text := m.Text
	if m.Format == sender.FormatMarkdown && m.Title != "" && !strings.Contains(text, m.Title) {
		text = "*" + m.Title + "*\n" + text
	}
	if tags := mentionTags(text, m.Mentions); tags != "" {
		text += "\n" + tags
	}
	return Message{Text: text}
}

// mentionTags are the mentions of m that text does not show: <!channel> for everyone,
// <@U…> for each user. Slack mentions nobody by mobile number.
func mentionTags(text string, m sender.Mentions) string {
	var tags []string
	if m.All && !strings.Contains(text, "<!channel>") {
		tags = append(tags, "<!channel>")
	}
	for _, u := range m.Users {
		if tag := "<@" + u + ">"; !strings.Contains(text, tag) {
			tags = append(tags, tag)
		}
	}
	return strings.Join(tags, " ")
}

// Body is m as the Slack message JSON producers publish.
func (*Channel) Body(m sender.Message) ([]byte, error) { return sender.EncodeJSON(render(m)) }

// Room is what m leaves free of Slack's text limit, or of the bound of a native message.
func (*Channel) Room(m sender.Message) int {
	switch r := render(m).(type) {
	case Message:
		return MaxTextBytes - len(r.Text)
	case json.RawMessage:
		return maxNativeBytes - len(r)
	}
	return -1
}

// KeywordRoom is 0: Slack webhooks have no keyword.
func (*Channel) KeywordRoom(string) int { return 0 }

// SplitMax is MaxSplitBytes.
func (*Channel) SplitMax() int { return MaxSplitBytes }

// Style is Slack's merged mrkdwn: "*n alerts*", sections between rules of dashes, each
// titled in bold and ending with the mentions its text does not show.
func (*Channel) Style() sender.MergeStyle {
	return sender.MergeStyle{
		Heading:      func(n int) string { return fmt.Sprintf("*%d alerts*", n) },
		Separator:    "\n\n────────\n\n",
		SectionTitle: func(title string) string { return "*" + title + "*" },
		Hint:         func(text string, m sender.Mentions) string { return mentionTags(text, m) },
	}
}

// Post sends m through webhook r (its path after the base URL) and classifies the
// answer.
func (c *Channel) Post(ctx context.Context, client *sender.Client, r sender.Robot, m sender.Message) sender.Outcome {
	body, err := sender.EncodeJSON(render(m))
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: err.Error()}
	}
	o := failures.Classify(client.Post(ctx, r, c.base+"/"+r.Token.Reveal(), body), client.Now())
	o.Reason = r.Redact(o.Reason)
	return o
}
