// Package dingtalk is the DingTalk custom-robot channel: the message model producers
// publish and its validation (message.go), the rendering of the core's neutral message,
// the 20000-byte size rule, keywords, signing (sign.go), the table from DingTalk's
// answers to the core's failure classes (classify.go), the simulator's rules
// (simrules.go), and its descriptor with its built-in Alertmanager template
// (platform.go). The pool, pacing, merging, splitting and retries are package sender's.
//
// It never puts a robot's token or signing secret in a log line, a metric or an error.
package dingtalk

import (
	"context"
	"strings"

	"github.com/rocketdelay/rocketdelay/sender"
)

// Channel is the DingTalk protocol of the sender core.
type Channel struct {
	base string
}

// New returns the DingTalk channel that posts to the webhook at baseURL (no query; ""
// means DefaultBaseURL).
func New(baseURL string) *Channel {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	return &Channel{base: baseURL}
}

// Kind is Kind.
func (*Channel) Kind() string { return Kind }

// Parse reads a body as producers publish it (see ParseBody) as the core's message:
// text and markdown stay mergeable, link, actionCard and feedCard go as they are.
func (*Channel) Parse(body []byte) (sender.Message, error) {
	m, err := ParseBody(body)
	if err != nil {
		return sender.Message{}, err
	}
	return neutral(m), nil
}

// Body is m as the DingTalk message JSON producers publish. A markdown message's text
// ends with the "@id" of the people it mentions that it does not name already: DingTalk
// highlights a mention in markdown only when the text names them too.
func (*Channel) Body(m sender.Message) ([]byte, error) {
	if m.Format == sender.FormatMarkdown {
		if hint := atHint(m.Text, m.Mentions); hint != "" {
			m.Text += "\n\n" + hint
		}
	}
	return encodeBody(render(m))
}

// neutral is m as the core's message.
func neutral(m Message) sender.Message {
	var mentions sender.Mentions
	if m.At != nil {
		mentions = sender.Mentions{All: m.At.IsAtAll, Users: m.At.AtUserIDs, Mobiles: m.At.AtMobiles}
	}
	switch {
	case m.MsgType == TypeText && m.Text != nil:
		return sender.Message{Format: sender.FormatText, Text: m.Text.Content, Mentions: mentions, Type: m.MsgType}
	case m.MsgType == TypeMarkdown && m.Markdown != nil:
		return sender.Message{Format: sender.FormatMarkdown, Title: m.Markdown.Title, Text: m.Markdown.Text,
			Mentions: mentions, Type: m.MsgType}
	}
	return sender.Message{Format: sender.FormatNative, Native: m, Type: m.MsgType}
}

// render is the DingTalk message of the core's message m.
func render(m sender.Message) Message {
	if m.Format == sender.FormatNative {
		if native, ok := m.Native.(Message); ok {
			return native
		}
	}
	var at *At
	if !m.Mentions.Empty() {
		at = &At{AtMobiles: m.Mentions.Mobiles, AtUserIDs: m.Mentions.Users, IsAtAll: m.Mentions.All}
	}
	if m.Format == sender.FormatMarkdown {
		return Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: m.Title, Text: m.Text}, At: at}
	}
	return Message{MsgType: TypeText, Text: &Text{Content: m.Text}, At: at}
}

// Room is what m's JSON body leaves free of MaxBodyBytes.
func (*Channel) Room(m sender.Message) int {
	body, err := encodeBody(render(m))
	if err != nil {
		return -1
	}
	return MaxBodyBytes - len(body)
}

// KeywordRoom is the most bytes addKeyword may add for keyword.
func (*Channel) KeywordRoom(keyword string) int {
	if keyword == "" {
		return 0
	}
	return sender.JSONStringLen("\n\n" + keyword)
}

// SplitMax is MaxSplitBytes.
func (*Channel) SplitMax() int { return MaxSplitBytes }

// Style is DingTalk's merged markdown: "#### n alerts", sections between horizontal
// rules, each ending with the "@mobile"/"@userId" of its mentions that its text does not
// show (DingTalk highlights a mention only when the text holds it).
func (*Channel) Style() sender.MergeStyle {
	return sender.MergeStyle{
		Heading:      sender.CountHeading,
		Separator:    "\n\n---\n\n",
		SectionTitle: func(title string) string { return "#### " + title },
		Hint:         atHint,
		Text:         Escape, // a text alert's [x](url) links nothing; merged into markdown it would
	}
}

// atHint is the "@id" of every mentioned mobile and user id that text does not show.
func atHint(text string, m sender.Mentions) string {
	var shown []string
	for _, id := range append(append([]string(nil), m.Mobiles...), m.Users...) {
		if id != "" && !strings.Contains(text, "@"+id) {
			shown = append(shown, "@"+id)
		}
	}
	return strings.Join(shown, " ")
}

// Post signs and sends m through robot r, with r's keyword added, and classifies the
// answer. The URL is built anew for every request: DingTalk accepts a signature within
// one hour of its clock.
func (c *Channel) Post(ctx context.Context, client *sender.Client, r sender.Robot, m sender.Message) sender.Outcome {
	body, err := encodeBody(addKeyword(render(m), r.Keyword))
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: err.Error()}
	}
	u, err := WebhookURL(c.base, r.Token.Reveal(), r.SigningSecret.Reveal(), client.Now())
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: err.Error()}
	}
	o := failures.Classify(client.Post(ctx, r, u, body), client.Now())
	o.Reason = r.Redact(o.Reason)
	return o
}

// encodeBody encodes m as the JSON body of a request, leaving <, > and & as they are,
// which keeps markdown small.
func encodeBody(m Message) ([]byte, error) { return sender.EncodeJSON(m) }

// addKeyword returns m with keyword added to its text when it does not contain it
// already: DingTalk refuses (310000) a message of a keyword robot without its keyword.
// m's own content is not modified.
func addKeyword(m Message, keyword string) Message {
	if keyword == "" {
		return m
	}
	switch m.MsgType {
	case TypeText:
		if m.Text != nil && !strings.Contains(m.Text.Content, keyword) {
			m.Text = &Text{Content: m.Text.Content + "\n" + keyword}
		}
	case TypeMarkdown:
		if md := m.Markdown; md != nil && !strings.Contains(md.Title, keyword) && !strings.Contains(md.Text, keyword) {
			m.Markdown = &Markdown{Title: md.Title, Text: md.Text + "\n\n" + keyword}
		}
	case TypeLink:
		if l := m.Link; l != nil && !strings.Contains(l.Title, keyword) && !strings.Contains(l.Text, keyword) {
			c := *l
			c.Text += " " + keyword
			m.Link = &c
		}
	case TypeActionCard:
		if a := m.ActionCard; a != nil && !strings.Contains(a.Title, keyword) && !strings.Contains(a.Text, keyword) {
			c := *a
			c.Text += "\n\n" + keyword
			m.ActionCard = &c
		}
	case TypeFeedCard:
		if f := m.FeedCard; f != nil && len(f.Links) > 0 {
			for _, l := range f.Links {
				if strings.Contains(l.Title, keyword) {
					return m
				}
			}
			links := append([]FeedLink(nil), f.Links...)
			links[0].Title += " " + keyword
			m.FeedCard = &FeedCard{Links: links}
		}
	}
	return m
}
