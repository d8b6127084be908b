package sender

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// Robot is one DingTalk robot of a target as the sender uses it.
type Robot struct {
	// Name identifies the robot in logs, metrics and errors.
	Name string
	// Token is the robot's access_token (not its webhook URL).
	Token config.Secret
	// SigningSecret is the robot's signing secret; empty when it does not sign.
	SigningSecret config.Secret
	// Keyword is the robot's keyword; every message it sends contains it.
	Keyword string
	// Limit is how many messages it may send per window.
	Limit int
}

// redact removes the robot's secrets, and what may be derived from them, from s.
func (r Robot) redact(s string) string {
	for _, v := range []string{r.Token.Reveal(), r.SigningSecret.Reveal()} {
		if len(v) < 4 {
			continue
		}
		s = strings.ReplaceAll(s, v, "<secret>")
		if esc := url.QueryEscape(v); esc != v {
			s = strings.ReplaceAll(s, esc, "<secret>")
		}
	}
	return s
}

// maxAnswerBytes bounds how much of an answer is read.
const maxAnswerBytes = 64 << 10

// Client makes one request to a DingTalk robot webhook and classifies the answer. It
// signs every request anew, never follows redirects (DingTalk answers a throttled robot
// with one), and judges success by errcode 0 only.
type Client struct {
	base    string
	timeout time.Duration
	http    *http.Client
	now     func() time.Time
}

// NewClient returns a client of the webhook at baseURL (e.g.
// "https://oapi.dingtalk.com/robot/send") whose requests each take at most timeout.
// now is the clock of the signature timestamps; nil means time.Now.
func NewClient(baseURL string, timeout time.Duration, now func() time.Time) *Client {
	if now == nil {
		now = time.Now
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	return &Client{
		base:    baseURL,
		timeout: timeout,
		now:     now,
		http: &http.Client{
			Transport: tr,
			CheckRedirect: func(*http.Request, []*http.Request) error {
				return http.ErrUseLastResponse
			},
		},
	}
}

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Post sends body, a DingTalk message JSON, through robot r and classifies the answer.
// When ctx ends during the request, the outcome is transient and ctx.Err() tells why.
// The outcome's Reason never contains r's token or secret.
func (c *Client) Post(ctx context.Context, r Robot, body []byte) Outcome {
	u, err := WebhookURL(c.base, r.Token.Reveal(), r.SigningSecret.Reveal(), c.now())
	if err != nil {
		return Outcome{Class: ClassPermanent, Reason: err.Error()}
	}
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, u, bytes.NewReader(body))
	if err != nil {
		return Outcome{Class: ClassPermanent, Reason: r.redact("build request: " + err.Error())}
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := c.http.Do(req)
	if err != nil {
		return Classify(0, nil, nil, errors.New(r.redact(c.describe(ctx, err))), c.now())
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Classify(0, nil, nil, errors.New(r.redact("read answer: "+c.describe(ctx, err))), c.now())
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	o := Classify(resp.StatusCode, resp.Header, answer, nil, c.now())
	o.Reason = r.redact(o.Reason)
	return o
}

// describe says why a request failed without the URL (which holds the token).
func (c *Client) describe(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "cancelled: " + ctx.Err().Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within " + c.timeout.String()
	}
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}
