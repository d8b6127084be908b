// Package feishu is the Feishu (飞书, Lark) custom-bot channel: the messages producers
// publish and their validation, the rendering of the core's neutral message (text, or a
// card with a markdown element), Feishu's 20 KB body, its mentions (<at user_id="…"> in
// text, <at id=…> in cards), its signing (timestamp and sign in the body), keywords, the
// table from Feishu's answers to the core's failure classes, the simulator's rules
// (simrules.go), and its descriptor with its built-in Alertmanager template
// (platform.go). The pool, pacing (100 per minute and 5 per second), merging, splitting
// and retries are package sender's.
//
// It never puts a bot's token or signing secret in a log line, a metric or an error.
package feishu

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
)

// Feishu's size rule.
const (
	// MaxBodyBytes bounds a request's body: 20 KB.
	MaxBodyBytes = 20 << 10
	// MaxSplitBytes bounds a text or markdown alert, which is split into numbered parts;
	// a larger one is refused.
	MaxSplitBytes = 10 * MaxBodyBytes
	// signRoom is the room the timestamp and sign fields take in a signed body.
	signRoom = 96
)

// Message types Feishu custom bots accept.
const (
	TypeText        = "text"
	TypePost        = "post"
	TypeInteractive = "interactive"
	TypeImage       = "image"
	TypeShareChat   = "share_chat"
)

// Sign returns Feishu's custom-bot signature of timestamp (Unix seconds):
// base64(HMAC-SHA256(key = timestamp + "\n" + secret, message = empty)).
func Sign(secret string, timestamp int64) string {
	mac := hmac.New(sha256.New, []byte(strconv.FormatInt(timestamp, 10)+"\n"+secret))
	return base64.StdEncoding.EncodeToString(mac.Sum(nil))
}

// envelope is a request's body: the message, and the signature fields of a signed bot.
type envelope struct {
	Timestamp string          `json:"timestamp,omitempty"`
	Sign      string          `json:"sign,omitempty"`
	MsgType   string          `json:"msg_type"`
	Content   json.RawMessage `json:"content,omitempty"`
	Card      json.RawMessage `json:"card,omitempty"`
}

// Channel is the Feishu protocol of the sender core.
type Channel struct {
	base string
}

// New returns the Feishu channel that posts to the hook at baseURL + "/" + token (""
// means DefaultBaseURL).
func New(baseURL string) *Channel {
	if baseURL == "" {
		baseURL = DefaultBaseURL
	}
	return &Channel{base: strings.TrimSuffix(baseURL, "/")}
}

// BusyPerSecond is how many messages a bot sends per second in Feishu's busy moments:
// the ten seconds after the top and the half of the hour, which Feishu asks senders to
// avoid (it answers 11232 more readily then).
const BusyPerSecond = 2

// Busy are Feishu's busy moments, with window standing for a minute: every 30 windows
// (:00 and :30), for 10 seconds (a sixth of the window), BusyPerSecond per second.
func (*Channel) Busy(window time.Duration) sender.Busy {
	return sender.Busy{Every: 30 * window, For: window / 6, PerSecond: BusyPerSecond}
}

// Kind is Kind.
func (*Channel) Kind() string { return Kind }

// Parse reads a body as producers publish it: a Feishu message JSON object (an object
// with a "msg_type" key) or plain UTF-8 text, which becomes a text message. Text becomes
// the core's mergeable text; post, interactive, image and share_chat go as they are.
func (*Channel) Parse(body []byte) (sender.Message, error) {
	msg, typ, err := sender.ReadBody(body, "msg_type", "Feishu", MaxSplitBytes)
	switch {
	case err != nil:
		return sender.Message{}, err
	case typ != nil:
		return parseJSON(msg)
	}
	return sender.Message{Format: sender.FormatText, Text: string(body), Type: TypeText}, nil
}

func parseJSON(body []byte) (sender.Message, error) {
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return sender.Message{}, sender.Invalid("the Feishu message does not have the documented shape: %v", err)
	}
	switch e.MsgType {
	case TypeText:
		var c struct {
			Text string `json:"text"`
		}
		if err := json.Unmarshal(e.Content, &c); err != nil || strings.TrimSpace(c.Text) == "" {
			return sender.Message{}, sender.Invalid("a text message needs content.text")
		}
		if len(c.Text) > MaxSplitBytes {
			return sender.Message{}, sender.Invalid("content.text is %d bytes; at most %d are split into parts", len(c.Text), MaxSplitBytes)
		}
		return sender.Message{Format: sender.FormatText, Text: c.Text, Type: TypeText}, nil
	case TypeInteractive:
		if len(e.Card) == 0 {
			return sender.Message{}, sender.Invalid("an interactive message needs card")
		}
		if m, ok := markdownOf(e.Card); ok {
			if len(m.Text) > MaxSplitBytes {
				return sender.Message{}, sender.Invalid("the card's markdown is %d bytes; at most %d are split into parts", len(m.Text), MaxSplitBytes)
			}
			return m, nil
		}
	case TypePost, TypeImage, TypeShareChat:
		if len(e.Content) == 0 {
			return sender.Message{}, sender.Invalid("a %s message needs content", e.MsgType)
		}
	case "":
		return sender.Message{}, sender.Invalid("msg_type is empty")
	default:
		return sender.Message{}, sender.Invalid("msg_type %q is not one of text, post, interactive, image, share_chat", e.MsgType)
	}
	if len(body)+signRoom > MaxBodyBytes {
		return sender.Message{}, sender.Invalid("the %s message is %d bytes; Feishu accepts at most %d", e.MsgType, len(body), MaxBodyBytes-signRoom)
	}
	e.Timestamp, e.Sign = "", ""
	return sender.Message{Format: sender.FormatNative, Native: e, Type: e.MsgType}, nil
}

// markdownCard is the card render makes of a markdown message, and nothing else.
type markdownCard struct {
	Config struct {
		WideScreenMode bool `json:"wide_screen_mode"`
	} `json:"config"`
	Header *struct {
		Title struct {
			Tag     string `json:"tag"`
			Content string `json:"content"`
		} `json:"title"`
	} `json:"header"`
	Elements []struct {
		Tag     string `json:"tag"`
		Content string `json:"content"`
	} `json:"elements"`
}

// markdownOf reads card as the markdown message render made it of (Body's inverse), so
// that the core may merge and split it; false for a card of any other shape, which stays
// the producer's own.
func markdownOf(card []byte) (sender.Message, bool) {
	dec := json.NewDecoder(bytes.NewReader(card))
	dec.DisallowUnknownFields()
	var c markdownCard
	if dec.Decode(&c) != nil || dec.More() || !c.Config.WideScreenMode || len(c.Elements) != 1 ||
		c.Elements[0].Tag != "markdown" || c.Elements[0].Content == "" {
		return sender.Message{}, false
	}
	m := sender.Message{Format: sender.FormatMarkdown, Type: TypeInteractive, Text: c.Elements[0].Content}
	if c.Header != nil {
		if c.Header.Title.Tag != "plain_text" || c.Header.Title.Content == "" {
			return sender.Message{}, false
		}
		m.Title = c.Header.Title.Content
	}
	return m, true
}

// render is the Feishu message of the core's message m, with keyword added where it is
// missing: text stays text (mentions as <at user_id="…"></at>); markdown becomes a card
// with its title as the header and its text as a markdown element (mentions as
// <at id=…></at>). Feishu's custom bots cannot mention by mobile number.
func render(m sender.Message, keyword string) (envelope, error) {
	switch m.Format {
	case sender.FormatNative:
		e, _ := m.Native.(envelope)
		return withKeyword(e, keyword)
	case sender.FormatMarkdown:
		text := m.Text + atTags(m.Text, m.Mentions, cardAt)
		if keyword != "" && !strings.Contains(m.Title, keyword) && !strings.Contains(text, keyword) {
			text += "\n\n" + keyword
		}
		card := map[string]any{"config": map[string]bool{"wide_screen_mode": true},
			"elements": []map[string]string{{"tag": "markdown", "content": text}}}
		if m.Title != "" {
			card["header"] = map[string]any{"title": map[string]string{"tag": "plain_text", "content": m.Title}}
		}
		raw, err := sender.EncodeJSON(card)
		return envelope{MsgType: TypeInteractive, Card: raw}, err
	}
	text := m.Text + atTags(m.Text, m.Mentions, textAt)
	if keyword != "" && !strings.Contains(text, keyword) {
		text += "\n" + keyword
	}
	raw, err := sender.EncodeJSON(map[string]string{"text": text})
	return envelope{MsgType: TypeText, Content: raw}, err
}

// textAt and cardAt are a mention of id in a text message and in a card's markdown.
func textAt(id string) string {
	if id == "all" {
		return `<at user_id="all">所有人</at>`
	}
	return `<at user_id="` + id + `"></at>`
}

func cardAt(id string) string { return "<at id=" + id + "></at>" }

// atTags is the mention of everyone and of each user of m that text does not show.
func atTags(text string, m sender.Mentions, at func(string) string) string {
	ids := m.Users
	if m.All {
		ids = append([]string{"all"}, ids...)
	}
	var b strings.Builder
	for _, id := range ids {
		if tag := at(id); !strings.Contains(text, tag) {
			b.WriteString(" " + tag)
		}
	}
	if b.Len() == 0 {
		return ""
	}
	return "\n" + strings.TrimPrefix(b.String(), " ")
}

// CarryKeyword is the most bytes adding keyword to m takes: KeywordRoom for text and
// markdown; for a card or a post, exactly what withKeyword adds (a post gets it in every
// language). An image or a share_chat message shows no text to carry it, and Feishu
// refuses it with 19024, the answer of a bot whose keyword is wrong: an error.
func (c *Channel) CarryKeyword(m sender.Message, keyword string) (int, error) {
	if keyword == "" {
		return 0, nil
	}
	if m.Format != sender.FormatNative {
		return c.KeywordRoom(keyword), nil
	}
	e, _ := m.Native.(envelope)
	with, err := withKeyword(e, keyword)
	if errors.Is(err, sender.ErrInvalidBody) {
		return 0, err
	}
	if err != nil {
		return 0, sender.Invalid("the %s message cannot take the keyword this target's bots require: %v", e.MsgType, err)
	}
	before, err := sender.EncodeJSON(e)
	if err != nil {
		return 0, sender.Invalid("the %s message: %v", e.MsgType, err)
	}
	after, err := sender.EncodeJSON(with)
	if err != nil {
		return 0, sender.Invalid("the %s message with the keyword: %v", e.MsgType, err)
	}
	return max(len(after)-len(before), 0), nil
}

// errNoKeyword is the refusal of a message of msgType, which cannot carry a keyword.
func errNoKeyword(msgType string) error {
	return sender.Invalid("a Feishu %s message cannot carry the keyword this target's bots require (Feishu would refuse it "+
		"with %d): send it to a target whose bots have no keyword, or send a post or a card", msgType, CodeKeywordMissing)
}

// withKeyword adds keyword to a native message that does not contain it: a line in a
// card, a paragraph in a post. An image or a share_chat message cannot carry it: an
// error (CarryKeyword refuses them before).
func withKeyword(e envelope, keyword string) (envelope, error) {
	if keyword == "" {
		return e, nil
	}
	if e.MsgType == TypeImage || e.MsgType == TypeShareChat {
		return e, errNoKeyword(e.MsgType)
	}
	if bytes.Contains(e.Card, []byte(keyword)) || bytes.Contains(e.Content, []byte(keyword)) {
		return e, nil
	}
	switch e.MsgType {
	case TypeInteractive:
		var card map[string]any
		if err := json.Unmarshal(e.Card, &card); err != nil {
			return e, err
		}
		elements, _ := card["elements"].([]any)
		card["elements"] = append(elements, map[string]string{"tag": "markdown", "content": keyword})
		raw, err := sender.EncodeJSON(card)
		e.Card = raw
		return e, err
	case TypePost:
		var content struct {
			Post map[string]map[string]any `json:"post"`
		}
		if err := json.Unmarshal(e.Content, &content); err != nil {
			return e, err
		}
		for _, locale := range content.Post {
			paragraphs, _ := locale["content"].([]any)
			locale["content"] = append(paragraphs, []map[string]string{{"tag": "text", "text": keyword}})
		}
		raw, err := sender.EncodeJSON(content)
		e.Content = raw
		return e, err
	}
	return e, nil
}

// Body is m as the Feishu message JSON producers publish.
func (*Channel) Body(m sender.Message) ([]byte, error) {
	e, err := render(m, "")
	if err != nil {
		return nil, err
	}
	return sender.EncodeJSON(e)
}

// Room is what m's body, signed, leaves free of MaxBodyBytes.
func (*Channel) Room(m sender.Message) int {
	e, err := render(m, "")
	if err != nil {
		return -1
	}
	body, err := sender.EncodeJSON(e)
	if err != nil {
		return -1
	}
	return MaxBodyBytes - signRoom - len(body)
}

// KeywordRoom is the most bytes adding keyword to a text or markdown message may take
// (a line of text, a card's markdown paragraph); CarryKeyword measures a card's or a
// post's, which may hold it more than once.
func (*Channel) KeywordRoom(keyword string) int {
	if keyword == "" {
		return 0
	}
	return sender.JSONStringLen(keyword) + 64 // the keyword, and a card element or post paragraph around it
}

// SplitMax is MaxSplitBytes.
func (*Channel) SplitMax() int { return MaxSplitBytes }

// Style is Feishu's merged card: "**n alerts**", sections between rules, each ending
// with the <at id=…> of its users that its text does not show. A text alert's content is
// escaped (cardText): its [x](url) and ![i](url) would be a link and an image in the
// card's markdown.
func (*Channel) Style() sender.MergeStyle {
	return sender.MergeStyle{
		Heading:      func(n int) string { return fmt.Sprintf("**%d alerts**", n) },
		Separator:    "\n\n────────\n\n",
		SectionTitle: func(title string) string { return "**" + title + "**" },
		Hint: func(text string, m sender.Mentions) string {
			return strings.TrimPrefix(atTags(text, sender.Mentions{Users: m.Users}, cardAt), "\n")
		},
		Text: cardText,
	}
}

// textMention is a mention in a text message: <at user_id="ou_…">name</at> (and the
// forms Feishu reads as it, by open_id or id).
var textMention = regexp.MustCompile(`<at\s+(?:user_id|open_id|id)\s*=\s*["']?([A-Za-z0-9_\-]+)["']?\s*>[^<]*</at>`)

// cardText is a text message's content as card markdown that shows what the text
// message shows: its mentions stay mentions (<at id=…></at>); everything else is
// escaped, so that its [x](url), ![i](url) and tags open no link, image or tag.
func cardText(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range textMention.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(Escape(s[last:m[0]]))
		b.WriteString(cardAt(s[m[2]:m[3]]))
		last = m[1]
	}
	b.WriteString(Escape(s[last:]))
	return b.String()
}

// Post signs (when r has a secret) and sends m through bot r, with r's keyword added,
// and classifies the answer.
func (c *Channel) Post(ctx context.Context, client *sender.Client, r sender.Robot, m sender.Message) sender.Outcome {
	e, err := render(m, r.Keyword)
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: "feishu: render: " + err.Error()}
	}
	if secret := r.SigningSecret.Reveal(); secret != "" {
		ts := client.Now().Unix()
		e.Timestamp, e.Sign = strconv.FormatInt(ts, 10), Sign(secret, ts)
	}
	body, err := sender.EncodeJSON(e)
	if err != nil {
		return sender.Outcome{Class: sender.ClassPermanent, Reason: err.Error()}
	}
	o := failures.Classify(client.Post(ctx, r, c.base+"/"+r.Token.Reveal(), body), client.Now())
	o.Reason = r.Redact(o.Reason)
	return o
}

// Feishu codes the classifier knows by name.
const (
	CodeOK             = 0
	CodeTooManyRequest = 9499
	CodeFreqLimited    = 11232
	CodeParamInvalid   = 19001
	CodeBotNotEnabled  = 19007
	CodeSignInvalid    = 19021
	CodeKeywordMissing = 19024
)

// failures is Feishu's table. Feishu answers some refusals with HTTP 400 and a JSON code
// (9499 "too many request"), so the code is read before the status: success is code 0
// (StatusCode 0 in older answers) in a 2xx and nothing else; 9499 and 11232 are
// throttles (Feishu documents no lock-out: the core learns how long a bot stays refused),
// 11232 the platform's busy moments, which teach no lower limit; 19021 (signature or
// timestamp), 19024 (keyword) and 19007 take the bot out of rotation; 19001 refuses the
// message, unless it says the token is invalid (the bot is broken); another code is
// transient.
var failures = sender.Failures{
	Name: "Feishu", CodeName: "code", OK: CodeOK, CodeFirst: true, Busy: CodeFreqLimited,
	Read: readAnswer,
	Codes: map[int]sender.Class{
		CodeTooManyRequest: sender.ClassThrottled,
		CodeFreqLimited:    sender.ClassThrottled,
		CodeBotNotEnabled:  sender.ClassRobotBroken,
		CodeSignInvalid:    sender.ClassRobotBroken,
		CodeKeywordMissing: sender.ClassRobotBroken,
		CodeParamInvalid:   sender.ClassPermanent,
	},
	Refine: func(o sender.Outcome, msg string, _ time.Time) sender.Outcome {
		if o.Code == CodeParamInvalid && strings.Contains(strings.ToLower(msg), "token") {
			o.Class = sender.ClassRobotBroken
		}
		return o
	},
}

// readAnswer reads Feishu's JSON answer: {"code":…,"msg":…}, or {"StatusCode":…,
// "StatusMessage":…} in older answers.
func readAnswer(a sender.Answer) (int, string, bool) {
	var ans struct {
		Code          *int   `json:"code"`
		Msg           string `json:"msg"`
		StatusCode    *int   `json:"StatusCode"`
		StatusMessage string `json:"StatusMessage"`
	}
	if json.Unmarshal(bytes.TrimSpace(a.Body), &ans) != nil {
		return 0, "", false
	}
	switch {
	case ans.Code != nil:
		return *ans.Code, ans.Msg, true
	case ans.StatusCode != nil:
		return *ans.StatusCode, ans.StatusMessage, true
	}
	return 0, "", false
}
