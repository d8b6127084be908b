package wecom

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"regexp"

	"github.com/rocketdelay/rocketdelay/sender"
)

// SimPath is where the simulator's WeCom robots receive messages.
const SimPath = "/cgi-bin/webhook/send"

// SimRules are WeCom's rules in the simulator (package chatsim, through the Platform): the key in the query,
// no signing, text content at most 2048 bytes and markdown at most 4096, 20 messages per
// minute answered over it with errcode 45009 and no lock-out (WeCom documents none;
// Options.Throttle adds one, for tests of a sender that learns it).
type SimRules struct{}

// Summary is the simulator's help line.
func (SimRules) Summary() string {
	return `/cgi-bin/webhook/send?key=K       text ≤ 2048 bytes, markdown ≤ 4096; 20 per
            minute, errcode 45009 over it, no lock-out`
}

// Path is SimPath.
func (SimRules) Path() string { return SimPath }

// Credential is the key parameter.
func (SimRules) Credential(r *http.Request) string { return r.URL.Query().Get("key") }

// Limits are 20 per minute, no lock-out.
func (SimRules) Limits() sender.SimLimits { return sender.SimLimits{PerWindow: 20} }

type simAnswer struct {
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

func refuse(code int, msg string) *sender.SimReply {
	return &sender.SimReply{JSON: simAnswer{Errcode: code, Errmsg: msg}}
}

// Answer is WeCom's answer: {"errcode":…,"errmsg":…}.
func (SimRules) Answer(a sender.SimAnswer) sender.SimReply {
	switch a.Kind {
	case sender.SimOK:
		return sender.SimReply{JSON: simAnswer{Errmsg: "ok"}}
	case sender.SimUnknown:
		return *refuse(ErrcodeInvalidKey, "invalid webhook url")
	case sender.SimOverLimit, sender.SimOverSecond, sender.SimBusy, sender.SimLocked:
		return *refuse(ErrcodeFreqOutOfLimit, "api freq out of limit")
	}
	return *refuse(a.Code, "injected fault")
}

// Check checks the message's shape and its content's size.
// markdownMention is a mention in WeCom markdown: <@userid> (<@all> for everyone).
var markdownMention = regexp.MustCompile(`<@([^>\s]+)>`)

func (SimRules) Check(c sender.SimRequest) (sender.SimReceived, *sender.SimReply) {
	body := c.Body
	var m struct {
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content       string   `json:"content"`
			Mentioned     []string `json:"mentioned_list"`
			MentionedTels []string `json:"mentioned_mobile_list"`
		} `json:"text"`
		Markdown *struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return sender.SimReceived{}, refuse(ErrcodeBadParam, errors.New("body is not JSON").Error())
	}
	switch m.MsgType {
	case TypeText:
		switch {
		case m.Text == nil || m.Text.Content == "":
			return sender.SimReceived{}, refuse(ErrcodeEmptyContent, "empty content")
		case len(m.Text.Content) > MaxTextBytes:
			return sender.SimReceived{}, refuse(ErrcodeBadParam, fmt.Sprintf("text.content exceed max length %d", MaxTextBytes))
		}
		var markup []string
		for _, who := range append(m.Text.Mentioned, m.Text.MentionedTels...) {
			if who == all {
				who = "all" // everyone, as every platform's simulator shows it (sender.SimReceived)
			}
			markup = append(markup, "mention:"+who)
		}
		return sender.SimReceived{MsgType: m.MsgType, Text: m.Text.Content, Markup: markup}, nil
	case TypeMarkdown:
		switch {
		case m.Markdown == nil || m.Markdown.Content == "":
			return sender.SimReceived{}, refuse(ErrcodeEmptyContent, "empty content")
		case len(m.Markdown.Content) > MaxMarkdownBytes:
			return sender.SimReceived{}, refuse(ErrcodeBadParam, fmt.Sprintf("markdown.content exceed max length %d", MaxMarkdownBytes))
		}
		return sender.SimReceived{MsgType: m.MsgType, Text: m.Markdown.Content,
			Markup: sender.SimMarkdown(m.Markdown.Content, markdownMention, true)}, nil
	case TypeMarkdownV2, TypeImage, TypeNews, TypeFile, TypeVoice, TypeTemplateCard:
		return sender.SimReceived{MsgType: m.MsgType}, nil
	}
	return sender.SimReceived{}, refuse(ErrcodeBadMsgType, fmt.Sprintf("invalid message type %q", m.MsgType))
}
