package feishu

import (
	"crypto/hmac"
	"encoding/json"
	"net/http"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
)

// SimPath is where the simulator's Feishu bots receive messages: SimPath + token.
const SimPath = "/open-apis/bot/v2/hook/"

// Feishu's busy moments in the simulator: the first SimHotSeconds seconds after the top
// and the half of the hour (of every 30 windows, with the simulator's window), when it
// accepts at most SimHotPerSecond messages per second and bot and answers 11232 past it.
const (
	SimHotSeconds   = 10
	SimHotPerSecond = 3
)

// SimRules are Feishu's rules in the simulator (package chatsim, through the Platform): the token as the last
// path element, the signature in the body (timestamp in seconds, within the skew), the
// keyword, the 20 KB body; 100 messages per minute and 5 per second, answered over them
// with HTTP 400 and code 9499, no lock-out; 11232 more readily at the top and the half of
// the hour.
type SimRules struct{}

// Summary is the simulator's help line.
func (SimRules) Summary() string {
	return `/open-apis/bot/v2/hook/T          signature in the body (timestamp s, within 1h),
            keyword, 20 KB body; 100 per minute and 5 per second, HTTP 400 code 9499 over
            them; code 11232 past 3 per second in the 10 s after :00 and :30`
}

// Path is SimPath.
func (SimRules) Path() string { return SimPath }

// Credential is the path's last element.
func (SimRules) Credential(r *http.Request) string { return strings.TrimPrefix(r.URL.Path, SimPath) }

// Limits are 100 per minute, 5 per second, 3 per second in the busy moments, no
// lock-out.
func (SimRules) Limits() sender.SimLimits {
	return sender.SimLimits{PerWindow: 100, PerSecond: 5, HotPerSecond: SimHotPerSecond, Hot: hot}
}

// hot reports whether now is within SimHotSeconds second-windows of a multiple of 30
// windows: 10 seconds after :00 and :30 with a one-minute window.
func hot(now time.Time, window time.Duration) bool {
	period := 30 * window
	return time.Duration(now.UnixNano())%period < SimHotSeconds*max(window/60, time.Millisecond)
}

type simAnswer struct {
	Code int            `json:"code"`
	Msg  string         `json:"msg"`
	Data map[string]any `json:"data"`
}

func refuse(status, code int, msg string) *sender.SimReply {
	return &sender.SimReply{Status: status, JSON: simAnswer{Code: code, Msg: msg, Data: map[string]any{}}}
}

// Answer is Feishu's answer: {"code":…,"msg":…,"data":{}}, HTTP 400 for 9499.
func (SimRules) Answer(a sender.SimAnswer) sender.SimReply {
	switch a.Kind {
	case sender.SimOK:
		return *refuse(0, 0, "success")
	case sender.SimUnknown:
		return *refuse(0, CodeParamInvalid, "param invalid: incoming webhook access token invalid")
	case sender.SimOverLimit, sender.SimOverSecond, sender.SimLocked:
		return *refuse(http.StatusBadRequest, CodeTooManyRequest, "too many request")
	case sender.SimBusy:
		return *refuse(0, CodeFreqLimited, "frequency limited")
	}
	return *refuse(0, a.Code, "injected fault")
}

// Check checks the signature and its timestamp, the body's size and shape, and the
// keyword.
func (SimRules) Check(c sender.SimRequest) (sender.SimReceived, *sender.SimReply) {
	rb, body, now, skew := c, c.Body, c.Now, c.Skew
	if len(body) > MaxBodyBytes {
		return sender.SimReceived{}, refuse(0, CodeParamInvalid, "param invalid: the request body is larger than 20 KB")
	}
	var e envelope
	if err := json.Unmarshal(body, &e); err != nil {
		return sender.SimReceived{}, refuse(http.StatusBadRequest, CodeParamInvalid, "param invalid: body is not JSON")
	}
	if rb.Secret != "" {
		ts, err := strconv.ParseInt(e.Timestamp, 10, 64)
		d := now.Sub(time.Unix(ts, 0))
		if err != nil || d > skew || d < -skew || !hmac.Equal([]byte(e.Sign), []byte(Sign(rb.Secret, ts))) {
			return sender.SimReceived{}, refuse(0, CodeSignInvalid, "sign match fail or timestamp is not within one hour from current time")
		}
	}
	text, md, ok := simText(e)
	if !ok {
		return sender.SimReceived{}, refuse(0, CodeParamInvalid, "param invalid: the message has no content of its msg_type")
	}
	noText := e.MsgType == TypeImage || e.MsgType == TypeShareChat // nothing to carry a keyword
	if rb.Keyword != "" && (noText || !strings.Contains(string(e.Content)+string(e.Card), rb.Keyword)) {
		return sender.SimReceived{}, refuse(0, CodeKeywordMissing, "Key Words Not Found")
	}
	var markup []string
	switch e.MsgType {
	case TypeText: // mentions, no markdown
		for _, m := range atTag.FindAllStringSubmatch(text, -1) {
			markup = append(markup, "mention:"+m[1])
		}
	case TypeInteractive: // the header's plain_text is no markup
		markup = sender.SimMarkdown(md, atTag, false)
	}
	return sender.SimReceived{MsgType: e.MsgType, Text: text, Markup: markup}, nil
}

// atTag is a mention in Feishu's texts and card markdown: <at user_id="ou_…"></at>,
// <at id=all></at> (everyone), <at email=…>.
var atTag = regexp.MustCompile(`<at\s+(?:user_id|id|open_id|email)\s*=\s*["']?([^"'\s>]+)["']?\s*>`)

// simText is what a bot would show of e: a text's text, a card's header and markdown, a
// post's title; md is the card's markdown alone (its header is plain text); false when e
// has no content of its type.
func simText(e envelope) (text, md string, ok bool) {
	switch e.MsgType {
	case TypeText:
		var c struct {
			Text string `json:"text"`
		}
		ok := json.Unmarshal(e.Content, &c) == nil && c.Text != ""
		return c.Text, "", ok
	case TypeInteractive:
		var card struct {
			Header struct {
				Title struct{ Content string } `json:"title"`
			} `json:"header"`
			Elements []struct {
				Tag     string `json:"tag"`
				Content string `json:"content"`
			} `json:"elements"`
		}
		if json.Unmarshal(e.Card, &card) != nil || len(card.Elements) == 0 {
			return "", "", false
		}
		var elements []string
		for _, el := range card.Elements {
			elements = append(elements, el.Content)
		}
		md = strings.Join(elements, "\n")
		return strings.TrimSpace(card.Header.Title.Content + "\n" + md), md, true
	case TypePost, TypeImage, TypeShareChat:
		return string(e.Content), "", len(e.Content) > 0
	}
	return "", "", false
}
