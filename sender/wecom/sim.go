package wecom

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rocketdelay/rocketdelay/sender/chatsim"
)

// SimPath is where the simulator's WeCom robots receive messages.
const SimPath = "/cgi-bin/webhook/send"

// SimRules are WeCom's rules in the simulator (package chatsim): the key in the query,
// no signing, text content at most 2048 bytes and markdown at most 4096, 20 messages per
// minute answered over it with errcode 45009 and no lock-out (WeCom documents none;
// Options.Throttle adds one, for tests of a sender that learns it).
type SimRules struct{}

// NewSim returns a simulator of WeCom robots only.
func NewSim(opts chatsim.Options) *chatsim.Server {
	opts.Platforms = []chatsim.Rules{SimRules{}}
	return chatsim.New(opts)
}

// Kind is config.KindWeCom.
func (SimRules) Kind() string { return "wecom" }

// Path is SimPath.
func (SimRules) Path() string { return SimPath }

// Credential is the key parameter.
func (SimRules) Credential(r *http.Request) string { return r.URL.Query().Get("key") }

// Limits are 20 per minute, no lock-out.
func (SimRules) Limits() chatsim.Limits { return chatsim.Limits{PerWindow: 20} }

type simAnswer struct {
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

func refuse(code int, msg string) *chatsim.Reply {
	return &chatsim.Reply{JSON: simAnswer{Errcode: code, Errmsg: msg}}
}

// Answer is WeCom's answer: {"errcode":…,"errmsg":…}.
func (SimRules) Answer(a chatsim.Answer) chatsim.Reply {
	switch a.Kind {
	case chatsim.AnswerOK:
		return chatsim.Reply{JSON: simAnswer{Errmsg: "ok"}}
	case chatsim.AnswerUnknown:
		return *refuse(ErrcodeInvalidKey, "invalid webhook url")
	case chatsim.AnswerOverLimit, chatsim.AnswerOverSecond, chatsim.AnswerBusy, chatsim.AnswerLocked:
		return *refuse(ErrcodeFreqOutOfLimit, "api freq out of limit")
	}
	return *refuse(a.Code, "injected fault")
}

// Check checks the message's shape and its content's size.
func (SimRules) Check(_ chatsim.Robot, _ *http.Request, body []byte, _ time.Time, _ time.Duration) (chatsim.Received, *chatsim.Reply) {
	var m struct {
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content string `json:"content"`
		} `json:"text"`
		Markdown *struct {
			Content string `json:"content"`
		} `json:"markdown"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return chatsim.Received{}, refuse(ErrcodeBadParam, errors.New("body is not JSON").Error())
	}
	switch m.MsgType {
	case TypeText:
		switch {
		case m.Text == nil || m.Text.Content == "":
			return chatsim.Received{}, refuse(ErrcodeEmptyContent, "empty content")
		case len(m.Text.Content) > MaxTextBytes:
			return chatsim.Received{}, refuse(ErrcodeBadParam, fmt.Sprintf("text.content exceed max length %d", MaxTextBytes))
		}
		return chatsim.Received{MsgType: m.MsgType, Text: m.Text.Content}, nil
	case TypeMarkdown:
		switch {
		case m.Markdown == nil || m.Markdown.Content == "":
			return chatsim.Received{}, refuse(ErrcodeEmptyContent, "empty content")
		case len(m.Markdown.Content) > MaxMarkdownBytes:
			return chatsim.Received{}, refuse(ErrcodeBadParam, fmt.Sprintf("markdown.content exceed max length %d", MaxMarkdownBytes))
		}
		return chatsim.Received{MsgType: m.MsgType, Text: m.Markdown.Content}, nil
	case TypeMarkdownV2, TypeImage, TypeNews, TypeFile, TypeVoice, TypeTemplateCard:
		return chatsim.Received{MsgType: m.MsgType}, nil
	}
	return chatsim.Received{}, refuse(ErrcodeBadMsgType, fmt.Sprintf("invalid message type %q", m.MsgType))
}
