package dingtalk

import (
	"encoding/json"
	"strings"

	"github.com/rocketdelay/rocketdelay/sender"
)

// MaxBodyBytes is DingTalk's limit on a robot message's JSON body; past it DingTalk
// answers errcode 460101.
const MaxBodyBytes = 20000

// MaxSplitBytes bounds a text or markdown alert, which the sender splits into numbered
// parts of at most MaxBodyBytes; a larger alert is rejected.
const MaxSplitBytes = 10 * MaxBodyBytes

// Message is a DingTalk robot message. Exactly one of the content fields is set, the one
// MsgType names.
type Message struct {
	MsgType    string      `json:"msgtype"`
	Text       *Text       `json:"text,omitempty"`
	Markdown   *Markdown   `json:"markdown,omitempty"`
	Link       *Link       `json:"link,omitempty"`
	ActionCard *ActionCard `json:"actionCard,omitempty"`
	FeedCard   *FeedCard   `json:"feedCard,omitempty"`
	// At mentions people; DingTalk honours it for text and markdown only.
	At *At `json:"at,omitempty"`
}

// Text is the content of a text message.
type Text struct {
	Content string `json:"content"`
}

// Markdown is the content of a markdown message.
type Markdown struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// Link is the content of a link message.
type Link struct {
	Title      string `json:"title"`
	Text       string `json:"text"`
	MessageURL string `json:"messageUrl"`
	PicURL     string `json:"picUrl,omitempty"`
}

// ActionCard is the content of an actionCard message: one button (SingleTitle and
// SingleURL) or several (Buttons).
type ActionCard struct {
	Title          string   `json:"title"`
	Text           string   `json:"text"`
	BtnOrientation string   `json:"btnOrientation,omitempty"`
	SingleTitle    string   `json:"singleTitle,omitempty"`
	SingleURL      string   `json:"singleURL,omitempty"`
	Buttons        []Button `json:"btns,omitempty"`
}

// Button is one button of an actionCard.
type Button struct {
	Title     string `json:"title"`
	ActionURL string `json:"actionURL"`
}

// FeedCard is the content of a feedCard message.
type FeedCard struct {
	Links []FeedLink `json:"links"`
}

// FeedLink is one entry of a feedCard.
type FeedLink struct {
	Title      string `json:"title"`
	MessageURL string `json:"messageURL"`
	PicURL     string `json:"picURL"`
}

// At says whom a text or markdown message mentions.
type At struct {
	AtMobiles []string `json:"atMobiles,omitempty"`
	AtUserIDs []string `json:"atUserIds,omitempty"`
	IsAtAll   bool     `json:"isAtAll,omitempty"`
}

// Message types DingTalk robots accept.
const (
	TypeText       = "text"
	TypeMarkdown   = "markdown"
	TypeLink       = "link"
	TypeActionCard = "actionCard"
	TypeFeedCard   = "feedCard"
)

// ParseBody reads an alert body as producers publish it: a DingTalk message JSON object
// (an object with a "msgtype" key), or plain UTF-8 text, which becomes a text message.
// It checks what DingTalk would refuse: unknown msgtype, missing required fields,
// mentions on types that cannot carry them, invalid UTF-8, and size (over MaxBodyBytes
// for link, actionCard and feedCard; over MaxSplitBytes for text and markdown, which are
// split into parts).
func ParseBody(body []byte) (Message, error) {
	msg, typ, err := sender.ReadBody(body, "msgtype", "DingTalk", MaxSplitBytes)
	switch {
	case err != nil:
		return Message{}, err
	case typ != nil:
		return parseJSONMessage(msg)
	}
	return Message{MsgType: TypeText, Text: &Text{Content: string(body)}}, nil
}

func parseJSONMessage(body []byte) (Message, error) {
	var m Message
	if err := json.Unmarshal(body, &m); err != nil {
		return Message{}, invalid("the DingTalk message does not have the documented shape: %v", err)
	}
	limit := MaxBodyBytes
	switch m.MsgType {
	case TypeText:
		if m.Text == nil || strings.TrimSpace(m.Text.Content) == "" {
			return Message{}, invalid("a text message needs text.content")
		}
		limit = MaxSplitBytes
	case TypeMarkdown:
		if m.Markdown == nil || m.Markdown.Title == "" || strings.TrimSpace(m.Markdown.Text) == "" {
			return Message{}, invalid("a markdown message needs markdown.title and markdown.text")
		}
		limit = MaxSplitBytes
	case TypeLink:
		if m.Link == nil || m.Link.Title == "" || m.Link.Text == "" || m.Link.MessageURL == "" {
			return Message{}, invalid("a link message needs link.title, link.text and link.messageUrl")
		}
	case TypeActionCard:
		c := m.ActionCard
		if c == nil || c.Title == "" || c.Text == "" {
			return Message{}, invalid("an actionCard message needs actionCard.title and actionCard.text")
		}
		single := c.SingleTitle != "" && c.SingleURL != ""
		if !single && len(c.Buttons) == 0 {
			return Message{}, invalid("an actionCard message needs singleTitle and singleURL, or btns")
		}
		for i, b := range c.Buttons {
			if b.Title == "" || b.ActionURL == "" {
				return Message{}, invalid("actionCard.btns[%d] needs title and actionURL", i)
			}
		}
	case TypeFeedCard:
		if m.FeedCard == nil || len(m.FeedCard.Links) == 0 {
			return Message{}, invalid("a feedCard message needs feedCard.links")
		}
		for i, l := range m.FeedCard.Links {
			if l.Title == "" || l.MessageURL == "" || l.PicURL == "" {
				return Message{}, invalid("feedCard.links[%d] needs title, messageURL and picURL", i)
			}
		}
	case "":
		return Message{}, invalid("msgtype is empty")
	default:
		return Message{}, invalid("msgtype %q is not one of text, markdown, link, actionCard, feedCard", m.MsgType)
	}
	if m.At != nil && m.MsgType != TypeText && m.MsgType != TypeMarkdown {
		return Message{}, invalid("at (mentions) is only honoured for text and markdown, not %s", m.MsgType)
	}
	if len(body) > limit {
		return Message{}, invalid("the %s message is %d bytes; DingTalk accepts at most %d", m.MsgType, len(body), limit)
	}
	return m, nil
}

func invalid(format string, args ...any) error { return sender.Invalid(format, args...) }

// MarshalMessage encodes m as the JSON body DingTalk expects.
func MarshalMessage(m Message) ([]byte, error) { return encodeBody(m) }
