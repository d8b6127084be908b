package dingtalk

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
)

// SimPath is where the simulator's DingTalk robots receive messages.
const SimPath = "/robot/send"

// SimLockout is how long DingTalk throttles a robot that went over its limit: ten
// minutes of HTTP 302 redirects to a page that is not JSON.
const SimLockout = 10 * time.Minute

// SimRules are DingTalk's rules in the simulator (package chatsim, through the Platform): the access_token in
// the query, the signature (timestamp in milliseconds, within the skew), keywords, the
// 20000-byte body, the message's shape; 20 messages per minute, then 130101 once and
// redirects for SimLockout.
type SimRules struct{}

// Summary is the simulator's help line.
func (SimRules) Summary() string {
	return `/robot/send?access_token=T       signature (timestamp ms, within 1h), keyword,
            20000-byte body; 20 per minute, then errcode 130101 once and, for --throttle
            (default 10m), HTTP 302 to a page that is not JSON`
}

// Path is SimPath.
func (SimRules) Path() string { return SimPath }

// Credential is the access_token parameter.
func (SimRules) Credential(r *http.Request) string { return r.URL.Query().Get("access_token") }

// Limits are 20 per minute and the ten-minute lock-out.
func (SimRules) Limits() sender.SimLimits {
	return sender.SimLimits{PerWindow: 20, Lockout: SimLockout}
}

type simAnswer struct {
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

func refuse(code int, msg string) *sender.SimReply {
	return &sender.SimReply{JSON: simAnswer{Errcode: code, Errmsg: msg}}
}

// Answer is DingTalk's answer: {"errcode":…,"errmsg":…}, a redirect while locked out.
func (SimRules) Answer(a sender.SimAnswer) sender.SimReply {
	switch a.Kind {
	case sender.SimOK:
		return sender.SimReply{JSON: simAnswer{Errmsg: "ok"}}
	case sender.SimUnknown:
		return *refuse(ErrcodeTokenMissing, "token is not exist")
	case sender.SimOverLimit, sender.SimOverSecond, sender.SimBusy:
		return *refuse(ErrcodeSendTooFast, "send too fast, exceed 20 times per minute")
	case sender.SimLocked:
		return sender.SimReply{Location: sender.SimThrottledPath}
	}
	return *refuse(a.Code, "injected fault")
}

// Check checks the signature and its timestamp, the body's size and shape, and the
// keyword.
func (SimRules) Check(c sender.SimRequest) (sender.SimReceived, *sender.SimReply) {
	rb, r, body, now, skew := c, c.Request, c.Body, c.Now, c.Skew
	q := r.URL.Query()
	if rb.Secret != "" {
		ts, err := strconv.ParseInt(q.Get("timestamp"), 10, 64)
		if err != nil {
			return sender.SimReceived{}, refuse(ErrcodeSignMismatch, "sign not match: missing or invalid timestamp")
		}
		if d := now.Sub(time.UnixMilli(ts)); d > skew || d < -skew {
			return sender.SimReceived{}, refuse(ErrcodeSignMismatch, "sign not match: timestamp is more than 1 hour away")
		}
		mac := hmac.New(sha256.New, []byte(rb.Secret))
		mac.Write([]byte(strconv.FormatInt(ts, 10) + "\n" + rb.Secret))
		want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(q.Get("sign")), []byte(want)) {
			return sender.SimReceived{}, refuse(ErrcodeSignMismatch, "sign not match")
		}
	}
	if len(body) > MaxBodyBytes {
		return sender.SimReceived{}, refuse(ErrcodeTooLong, "message too long")
	}
	msgType, text, err := readSimMessage(body)
	if err != nil {
		return sender.SimReceived{}, refuse(40035, "invalid message: "+err.Error())
	}
	if rb.Keyword != "" && !strings.Contains(text, rb.Keyword) {
		return sender.SimReceived{}, refuse(ErrcodeSignMismatch, "keywords not in content")
	}
	return sender.SimReceived{MsgType: msgType, Text: text, Markup: simMarkup(msgType, text, body)}, nil
}

// simMarkup is what a group shows of a message as markup: the people the at field of a
// text or markdown message notifies (DingTalk notifies only those, whatever the text
// says; the other types have no at field, so one they carry notifies nobody) and, in
// markdown, its links, images and headings.
func simMarkup(msgType, text string, body []byte) []string {
	var out []string
	if msgType == TypeText || msgType == TypeMarkdown {
		var m struct {
			At struct {
				IsAtAll   bool     `json:"isAtAll"`
				AtMobiles []string `json:"atMobiles"`
				AtUserIDs []string `json:"atUserIds"`
			} `json:"at"`
		}
		_ = json.Unmarshal(body, &m) // read by readSimMessage already
		if m.At.IsAtAll {
			out = append(out, "mention:all")
		}
		for _, who := range append(m.At.AtMobiles, m.At.AtUserIDs...) {
			out = append(out, "mention:"+who)
		}
	}
	if msgType == TypeMarkdown || msgType == TypeActionCard {
		out = append(out, sender.SimMarkdown(text, nil, true)...)
	}
	return out
}

// readSimMessage checks a robot message and returns its type and its text: the fields a
// keyword is looked for in.
func readSimMessage(body []byte) (string, string, error) {
	var m struct {
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content string `json:"content"`
		} `json:"text"`
		Markdown *struct{ Title, Text string } `json:"markdown"`
		Link     *struct {
			Title, Text string
			MessageURL  string `json:"messageUrl"`
		} `json:"link"`
		ActionCard *struct{ Title, Text string } `json:"actionCard"`
		FeedCard   *struct {
			Links []struct{ Title string } `json:"links"`
		} `json:"feedCard"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return "", "", errors.New("body is not JSON")
	}
	switch m.MsgType {
	case TypeText:
		if m.Text == nil || m.Text.Content == "" {
			return "", "", errors.New("text.content is empty")
		}
		return m.MsgType, m.Text.Content, nil
	case TypeMarkdown:
		if m.Markdown == nil || m.Markdown.Title == "" || m.Markdown.Text == "" {
			return "", "", errors.New("markdown needs title and text")
		}
		return m.MsgType, m.Markdown.Title + "\n" + m.Markdown.Text, nil
	case TypeLink:
		if m.Link == nil || m.Link.Title == "" || m.Link.Text == "" || m.Link.MessageURL == "" {
			return "", "", errors.New("link needs title, text and messageUrl")
		}
		return m.MsgType, m.Link.Title + "\n" + m.Link.Text, nil
	case TypeActionCard:
		if m.ActionCard == nil || m.ActionCard.Title == "" || m.ActionCard.Text == "" {
			return "", "", errors.New("actionCard needs title and text")
		}
		return m.MsgType, m.ActionCard.Title + "\n" + m.ActionCard.Text, nil
	case TypeFeedCard:
		if m.FeedCard == nil || len(m.FeedCard.Links) == 0 {
			return "", "", errors.New("feedCard needs links")
		}
		var titles []string
		for _, l := range m.FeedCard.Links {
			titles = append(titles, l.Title)
		}
		return m.MsgType, strings.Join(titles, "\n"), nil
	}
	return "", "", fmt.Errorf("unknown msgtype %q", m.MsgType)
}
