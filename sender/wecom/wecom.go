// Package wecom is the WeCom (企业微信) group-robot channel: the messages producers
// publish and their validation, the rendering of the core's neutral message, WeCom's
// size rules (text content at most 2048 bytes, markdown content at most 4096), its
// mentions (mentioned_list and mentioned_mobile_list on text, <@userid> in markdown), the
// table from WeCom's answers to the core's failure classes, the simulator's rules
// (simrules.go), and its descriptor with its built-in Alertmanager template
// (platform.go). The pool, pacing, merging, splitting and retries are package sender's.
//
// A WeCom robot's key, in its webhook URL, is its only credential: there is no signing
// and no keyword. It never appears in a log line, a metric or an error.
package wecom

import (
	"bytes"
	"context"
	"encoding/json"
	"net/url"
	"slices"
	"strings"

	"github.com/rocketdelay/rocketdelay/sender"
)

// WeCom's size rules, bytes of content.
const (
	// MaxTextBytes bounds text.content.
	MaxTextBytes = 2048
	// MaxMarkdownBytes bounds markdown.content.
	MaxMarkdownBytes = 4096
	// MaxSplitBytes bounds a text or markdown alert, which is split into numbered parts;
	// a larger one is refused.
	MaxSplitBytes = 10 * MaxMarkdownBytes
	// maxNativeBytes bounds the JSON of the other message types (news, image, file,
	// template_card), which WeCom bounds field by field.
	maxNativeBytes = 1 << 20
)

// all is how WeCom's mention lists name everyone.
const all = "@all"

// Message types WeCom robots accept.
const (
	TypeText         = "text"
	TypeMarkdown     = "markdown"
	TypeMarkdownV2   = "markdown_v2"
	TypeImage        = "image"
	TypeNews         = "news"
	TypeFile         = "file"
	TypeVoice        = "voice"
	TypeTemplateCard = "template_card"
)

// Message is a WeCom robot message as producers publish it.
type Message struct {
	MsgType  string    `json:"msgtype"`
	Text     *Text     `json:"text,omitempty"`
	Markdown *Markdown `json:"markdown,omitempty"`
}

// Text is a text message's content and mentions.
type Text struct {
	Content string `json:"content"`
	// MentionedList are user ids to mention, "@all" for everyone.
	MentionedList []string `json:"mentioned_list,omitempty"`
	// MentionedMobileList are mobile numbers to mention, "@all" for everyone.
	MentionedMobileList []string `json:"mentioned_mobile_list,omitempty"`
}

// Markdown is a markdown message's content; it mentions with <@userid>.
type Markdown struct {
	Content string `json:"content"`
}

// Channel is the WeCom protocol of the sender core.
type Channel struct {
	base string
}

// New returns the WeCom channel that posts to the webhook at baseURL (no query; ""
// means DefaultBaseURL).
func New(baseURL string) *Channel {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	return &Channel{base: baseURL}
}

// Kind is Kind.
func (*Channel) Kind() string { return Kind }

// Parse reads a body as producers publish it: a WeCom message JSON object (an object
// with a "msgtype" key) or plain UTF-8 text, which becomes a text message. Text and
// markdown become the core's mergeable messages; the other types go as they are.
func (*Channel) Parse(body []byte) (sender.Message, error) {
	msg, typ, err := sender.ReadBody(body, "msgtype", "WeCom", MaxSplitBytes)
	switch {
	case err != nil:
		return sender.Message{}, err
	case typ != nil:
		return parseJSON(msg, typ)
	}
	return sender.Message{Format: sender.FormatText, Text: string(body), Type: TypeText}, nil
}

func parseJSON(body, rawType []byte) (sender.Message, error) {
	var msgType string
	if err := json.Unmarshal(rawType, &msgType); err != nil {
		return sender.Message{}, sender.Invalid("msgtype is not a string")
	}
	switch msgType {
	case TypeText, TypeMarkdown:
	case TypeMarkdownV2, TypeImage, TypeNews, TypeFile, TypeVoice, TypeTemplateCard:
		if len(body) > maxNativeBytes {
			return sender.Message{}, sender.Invalid("the %s message is %d bytes; at most %d are accepted", msgType, len(body), maxNativeBytes)
		}
		return sender.Message{Format: sender.FormatNative, Native: json.RawMessage(bytes.Clone(body)), Type: msgType}, nil
	case "":
		return sender.Message{}, sender.Invalid("msgtype is empty")
	default:
		return sender.Message{}, sender.Invalid("msgtype %q is not one of text, markdown, markdown_v2, image, news, file, voice, template_card", msgType)
	}
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return sender.Message{}, sender.Invalid("the WeCom message does not have the documented shape: %v", err)
	}
	if msgType == TypeText {
		if m.Text == nil || strings.TrimSpace(m.Text.Content) == "" {
			return sender.Message{}, sender.Invalid("a text message needs text.content")
		}
		if len(m.Text.Content) > MaxSplitBytes {
			return sender.Message{}, sender.Invalid("text.content is %d bytes; at most %d are split into parts", len(m.Text.Content), MaxSplitBytes)
		}
		return sender.Message{Format: sender.FormatText, Text: m.Text.Content, Type: msgType,
			Mentions: mentions(m.Text.MentionedList, m.Text.MentionedMobileList)}, nil
	}
	if m.Markdown == nil || strings.TrimSpace(m.Markdown.Content) == "" {
		return sender.Message{}, sender.Invalid("a markdown message needs markdown.content")
	}
	if len(m.Markdown.Content) > MaxSplitBytes {
		return sender.Message{}, sender.Invalid("markdown.content is %d bytes; at most %d are split into parts", len(m.Markdown.Content), MaxSplitBytes)
	}
	return sender.Message{Format: sender.FormatMarkdown, Text: m.Markdown.Content, Type: msgType}, nil
}

// mentions reads WeCom's mention lists.
func mentions(users, mobiles []string) sender.Mentions {
	var m sender.Mentions
	for _, u := range users {
		if u == all {
			m.All = true
		} else if u != "" {
			m.Users = append(m.Users, u)
		}
	}
	for _, p := range mobiles {
		if p == all {
			m.All = true
		} else if p != "" {
			m.Mobiles = append(m.Mobiles, p)
		}
	}
	return m
}

// render is the WeCom message of the core's message m, or m's own JSON when it is
// native. A markdown message mentions users with <@userid>; one that mentions everyone
// or a mobile number, which WeCom's markdown cannot, goes as text with mention lists.
func render(m sender.Message) any {
	if m.Format == sender.FormatNative {
		return m.Native
	}
	if m.Format == sender.FormatMarkdown && !m.Mentions.All && len(m.Mentions.Mobiles) == 0 {
		return Message{MsgType: TypeMarkdown, Markdown: &Markdown{Content: m.Text + userTags(m.Text, m.Mentions.Users)}}
	}
	t := &Text{Content: m.Text, MentionedList: slices.Clone(m.Mentions.Users), MentionedMobileList: slices.Clone(m.Mentions.Mobiles)}
	if m.Mentions.All {
		t.MentionedList = append(t.MentionedList, all)
	}
	return Message{MsgType: TypeText, Text: t}
}

// userTags is the <@userid> of each user that text does not mention already.
func userTags(text string, users []string) string {
	var b strings.Builder
	for _, u := range users {
		if tag := "<@" + u + ">"; !strings.Contains(text, tag) {
			if b.Len() == 0 {
				b.WriteString("\n")
			}
			b.WriteString(tag)
		}
	}
	return b.String()
}

// Body is m as the WeCom message JSON producers publish.
func (*Channel) Body(m sender.Message) ([]byte, error) { return sender.EncodeJSON(render(m)) }

// Room is what m's content leaves free of WeCom's limit for the type it renders as.
func (*Channel) Room(m sender.Message) int {
	switch r := render(m).(type) {
	case Message:
		if r.Markdown != nil {
			return MaxMarkdownBytes - len(r.Markdown.Content)
		}
		return MaxTextBytes - len(r.Text.Content)
	case json.RawMessage:
		return maxNativeBytes - len(r)
	}
	return -1
}

// KeywordRoom is 0: WeCom robots have no keyword.
func (*Channel) KeywordRoom(string) int { return 0 }

// SplitMax is MaxSplitBytes.
func (*Channel) SplitMax() int { return MaxSplitBytes }

// Style is WeCom's merged markdown: "#### n alerts", sections between grey rules, each
// ending with the <@userid> of its users that its text does not show.
func (*Channel) Style() sender.MergeStyle {
	return sender.MergeStyle{
		Heading:      sender.CountHeading,
		Separator:    "\n\n<font color=\"comment\">────────</font>\n\n",
		SectionTitle: func(title string) string { return "#### " + title },
		Hint:         func(text string, m sender.Mentions) string { return strings.TrimPrefix(userTags(text, m.Users), "\n") },
		Text:         Escape, // a text alert's <@userid> mentions nobody; merged into markdown it would
	}
}

// Post sends m through robot r (its key in the URL's query) and classifies the answer.
func (c *Channel) Post(ctx context.Context, client *sender.Client, r sender.Robot, m sender.Message) sender.Outcome {
	body, err := sender.EncodeJSON(render(m))
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: err.Error()}
	}
	u, err := url.Parse(c.base)
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: "wecom: base URL does not parse"}
	}
	u.RawQuery = url.Values{"key": {r.Token.Reveal()}}.Encode()
	o := failures.Classify(client.Post(ctx, r, u.String(), body), client.Now())
	o.Reason = r.Redact(o.Reason)
	return o
}

// WeCom errcodes the classifier knows by name.
const (
	ErrcodeOK             = 0
	ErrcodeBusy           = -1
	ErrcodeFreqOutOfLimit = 45009
	ErrcodeInvalidKey     = 93000
	ErrcodeBadMsgType     = 40008
	ErrcodeEmptyContent   = 44004
	ErrcodeBadParam       = 40058
)

// failures is WeCom's table: success is errcode 0 and nothing else; 45009 is a throttle
// (WeCom documents no lock-out: the core learns how long a robot stays refused); 93000
// (the key is invalid) takes the robot out of rotation; an errcode not here is
// transient.
var failures = sender.Failures{
	Name: "WeCom", CodeName: "errcode", OK: ErrcodeOK, NotAnswer: sender.ClassTransient,
	Read: readAnswer,
	Codes: map[int]sender.Class{
		ErrcodeBusy:           sender.ClassTransient,
		ErrcodeFreqOutOfLimit: sender.ClassThrottled,
		ErrcodeInvalidKey:     sender.ClassRobotBroken,
		ErrcodeBadMsgType:     sender.ClassPermanent,
		ErrcodeEmptyContent:   sender.ClassPermanent,
		ErrcodeBadParam:       sender.ClassPermanent,
	},
}

// readAnswer reads WeCom's JSON answer, {"errcode":…,"errmsg":…}.
func readAnswer(a sender.Answer) (int, string, bool) {
	var ans struct {
		Errcode *int   `json:"errcode"`
		Errmsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(a.Body), &ans); err != nil || ans.Errcode == nil {
		return 0, "", false
	}
	return *ans.Errcode, ans.Errmsg, true
}
