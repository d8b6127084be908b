package sender

import (
	"context"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// Protocol is one chat platform's side of a send: everything the core needs that
// differs between DingTalk, WeCom and Feishu. A channel package (dingtalk, wecom, feishu)
// implements it and holds nothing else but its simulator rules; the core (pool, pacing,
// queue, merging, splitting, learned limits, park and adopt, failure classes) is the
// same for all.
type Protocol interface {
	// Kind names the platform as targets.NAME.kind does: config.KindDingTalk,
	// config.KindWeCom, config.KindFeishu.
	Kind() string
	// Parse reads an alert body as producers publish it to a target of this platform:
	// the platform's message JSON, or plain UTF-8 text, which becomes a text message.
	// Every error wraps ErrInvalidBody and says what is wrong in words a producer can act
	// on.
	Parse(body []byte) (Message, error)
	// Body is the body a producer publishes for m: the platform's message JSON, which
	// Parse reads back as m (the ways in that render alerts, such as the Alertmanager
	// receiver, publish it).
	Body(m Message) ([]byte, error)
	// Room is how many bytes m leaves free under the platform's size limit for the
	// message it renders m as, without a keyword (negative: m is over the limit).
	Room(m Message) int
	// KeywordRoom is the most bytes adding keyword to a message may take.
	KeywordRoom(keyword string) int
	// SplitMax is the most bytes of text a text or markdown message may have to be split
	// into parts; a longer one is refused.
	SplitMax() int
	// Style says how the platform's merged messages look.
	Style() MergeStyle
	// Post sends m through robot r, with the keyword of r when it has one, using c for
	// the request, and classifies the answer. Its Reason never holds r's secrets.
	Post(ctx context.Context, c *Client, r Robot, m Message) Outcome
}

// BusyMoments is implemented by a platform that refuses more readily at known moments
// (Feishu at the top and the half of the hour): the core spreads a robot's sends then,
// when its budget allows.
type BusyMoments interface {
	// Busy returns the moments, with the rate-limit window standing for a minute.
	Busy(window time.Duration) Busy
}

// KeywordCarrier is implemented by a platform whose keyword takes a room that depends on
// the message (Feishu adds it to every language of a post), or that some messages cannot
// carry at all (Feishu's image and share_chat: a robot with a keyword refuses them with
// the answer of a robot whose keyword is wrong, which would take every robot of the
// target out of rotation one after the other). For a target with a keyword robot, the
// core (Chat.Check and Chat.Send) reserves that room for the message, or refuses it as
// an invalid body before any request.
type KeywordCarrier interface {
	// CarryKeyword is the most bytes adding keyword to m may take (0 for ""), or an
	// error wrapping ErrInvalidBody that says why m cannot carry it, without the keyword.
	CarryKeyword(m Message, keyword string) (int, error)
}

// Busy are a platform's busy moments: they recur Every from the epoch on and last For,
// during which a robot sends at most PerSecond per second (a sixtieth of the window).
type Busy struct {
	Every, For time.Duration
	PerSecond  int
}

// ErrInvalidBody is wrapped by every error a Protocol's Parse returns.
var ErrInvalidBody = errors.New("invalid alert body")

// Invalid returns an error wrapping ErrInvalidBody with the formatted detail.
func Invalid(format string, args ...any) error {
	return fmt.Errorf("%w: %s", ErrInvalidBody, fmt.Sprintf(format, args...))
}

// Format says how the core may treat a message.
type Format string

// The formats of a message.
const (
	// FormatText is plain text: it may be merged with others and split into parts.
	FormatText Format = "text"
	// FormatMarkdown is markdown with a title: it may be merged and split.
	FormatMarkdown Format = "markdown"
	// FormatNative is the platform's own message (a link, a card, a rich post): it is
	// sent as it is, alone, never merged nor split.
	FormatNative Format = "native"
)

// Message is a chat message as the core handles it, whatever the platform.
type Message struct {
	// Format says whether the core may merge and split it.
	Format Format
	// Title is a markdown message's title (DingTalk's markdown.title, a Feishu card's
	// header); platforms without one show it only when merged. "" for text.
	Title string
	// Text is the text or markdown content.
	Text string
	// Mentions are the people the message mentions.
	Mentions Mentions
	// Native is the platform's own message value when Format is FormatNative.
	Native any
	// Type is the platform's message type as published ("text", "actionCard", "post"),
	// for operators.
	Type string
}

// Mergeable reports whether m may be a section of a merged message.
func (m Message) Mergeable() bool { return m.Format == FormatText || m.Format == FormatMarkdown }

// Mentions say whom a message mentions; each platform renders them in its own syntax.
type Mentions struct {
	// All mentions everyone in the group.
	All bool `json:"all,omitempty"`
	// Users are user ids on the platform: DingTalk's userId, WeCom's userid, Feishu's
	// open_id.
	Users []string `json:"users,omitempty"`
	// Mobiles are mobile numbers (DingTalk, WeCom text messages).
	Mobiles []string `json:"mobiles,omitempty"`
}

// Empty reports whether m mentions nobody.
func (m Mentions) Empty() bool { return !m.All && len(m.Users) == 0 && len(m.Mobiles) == 0 }

// Add returns the mentions of m and o, each id once, in order.
func (m Mentions) Add(o Mentions) Mentions {
	out := Mentions{All: m.All || o.All}
	out.Users = appendNew(append([]string(nil), m.Users...), o.Users)
	out.Mobiles = appendNew(append([]string(nil), m.Mobiles...), o.Mobiles)
	return out
}

func appendNew(list, ids []string) []string {
	for _, id := range ids {
		if id == "" {
			continue
		}
		found := false
		for _, have := range list {
			if have == id {
				found = true
				break
			}
		}
		if !found {
			list = append(list, id)
		}
	}
	return list
}

// MergeStyle says how a platform's merged messages look: the core merges the sections
// of text and markdown alerts into one markdown message in this style.
type MergeStyle struct {
	// Heading starts the merged text, e.g. "#### 3 alerts".
	Heading func(n int) string
	// Separator goes between the heading and each section, e.g. "\n\n---\n\n".
	Separator string
	// SectionTitle renders a markdown alert's title at the top of its section, when its
	// text does not contain the title.
	SectionTitle func(title string) string
	// Hint renders, at the end of a section, the mentions of its alert that its text does
	// not show, so a reader sees whom each alert concerns; "" shows nothing.
	Hint func(text string, m Mentions) string
	// Text escapes a text alert's content for the merged markup: a text message shows
	// "<@all>" or "[x](url)" as written, and merged into markdown it must still, so that
	// merging never makes a mention, a link or an image. Nil: as it is, for a platform
	// whose text messages read the same markup as its merged ones.
	Text func(string) string
}

// Robot is one robot of a chat target as the core uses it.
type Robot struct {
	// Name identifies the robot in logs, metrics and errors.
	Name string
	// Token is the robot's credential in its webhook: DingTalk's access_token, WeCom's
	// key, Feishu's hook token.
	Token config.Secret
	// SigningSecret is the robot's signing secret; empty when it does not sign.
	SigningSecret config.Secret
	// Keyword is the robot's keyword; every message it sends contains it.
	Keyword string
	// Limit is how many messages it may send per window.
	Limit int
	// LimitPerSecond, when above 0, is how many it may send per second too (Feishu).
	LimitPerSecond int
}

// Redact removes the robot's secrets, and what may be derived from them, from s.
func (r Robot) Redact(s string) string {
	for _, v := range []string{r.Token.Reveal(), r.SigningSecret.Reveal()} {
		if len(v) < 4 {
			continue
		}
		s = strings.ReplaceAll(s, v, "<secret>")
		if esc := url.QueryEscape(v); esc != v {
			s = strings.ReplaceAll(s, esc, "<secret>")
		}
		if esc := url.PathEscape(v); esc != v {
			s = strings.ReplaceAll(s, esc, "<secret>")
		}
	}
	return s
}
