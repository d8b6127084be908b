package sender

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"
)

// maxAnswerBytes bounds how much of an answer is read.
const maxAnswerBytes = 64 << 10

// Client makes the HTTP requests of every chat platform: a JSON POST whose answer it
// reads (at most 64 KiB), never following redirects (DingTalk answers a throttled robot
// with one), and whose errors never show the URL (which holds a robot's token). It
// speaks HTTP/1.1 only, one request per connection, so that a request whose confirm
// fence no longer holds (fence.go) is stopped by closing its own connection.
type Client struct {
	timeout time.Duration
	http    *http.Client
	now     func() time.Time
}

// NewClient returns a client whose requests each take at most timeout. now is the clock
// of signatures and Retry-After dates; nil means time.Now.
func NewClient(timeout time.Duration, now func() time.Time) *Client {
	if now == nil {
		now = time.Now
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConnsPerHost = 64
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return &Client{
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

// Now is the client's clock.
func (c *Client) Now() time.Time { return c.now() }

// Close closes the client's idle connections.
func (c *Client) Close() { c.http.CloseIdleConnections() }

// Answer is what one request got back: an HTTP answer, or Err when there was none
// (network error, timeout, cancelled). Err never holds the URL.
type Answer struct {
	Status int
	Header http.Header
	Body   []byte
	Err    error
}

// Post sends body, a JSON document, to rawURL, through robot r: r's secrets are redacted
// from every error. A send's fence (fence.go) that no longer holds when the request has
// its connection stops the request before any of it is written.
func (c *Client) Post(ctx context.Context, r Robot, rawURL string, body []byte) Answer {
	rctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	if f := fenceOf(ctx); f != nil {
		var stop context.CancelFunc
		rctx, stop = context.WithCancel(rctx)
		defer stop()
		rctx = fenced(rctx, f, stop)
	}
	req, err := http.NewRequestWithContext(rctx, http.MethodPost, rawURL, bytes.NewReader(body))
	if err != nil {
		return Answer{Err: errors.New(r.Redact("build request: " + stripURL(err)))}
	}
	req.Header.Set("Content-Type", "application/json; charset=utf-8")
	resp, err := c.http.Do(req)
	if err != nil {
		if stale := fenceOf(ctx).stale(); stale != nil {
			return Answer{Err: stale}
		}
		return Answer{Err: errors.New(r.Redact(c.describe(ctx, err)))}
	}
	defer resp.Body.Close()
	answer, err := io.ReadAll(io.LimitReader(resp.Body, maxAnswerBytes))
	if err != nil {
		return Answer{Err: errors.New(r.Redact("read answer: " + c.describe(ctx, err)))}
	}
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, maxAnswerBytes))
	return Answer{Status: resp.StatusCode, Header: resp.Header, Body: answer}
}

// describe says why a request failed without the URL (which holds the token).
func (c *Client) describe(ctx context.Context, err error) string {
	switch {
	case ctx.Err() != nil:
		return "cancelled: " + ctx.Err().Error()
	case errors.Is(err, context.DeadlineExceeded):
		return "no answer within " + c.timeout.String()
	}
	return stripURL(err)
}

func stripURL(err error) string {
	var ue *url.Error
	if errors.As(err, &ue) {
		err = ue.Err
	}
	return err.Error()
}

// ClassifyHTTP is the class of an answer by its HTTP status alone, for what every
// platform answers the same: network errors, 408, 407, 429 and 5xx are transient, a
// redirect is a throttle (DingTalk's gateway), another 4xx refuses the request. It
// returns false for a 2xx, whose body the platform's table judges. name says whose
// answer it is ("DingTalk").
func ClassifyHTTP(a Answer, name string, now time.Time) (Outcome, bool) {
	if a.Err != nil {
		return Outcome{Class: ClassTransient, Reason: "request failed: " + a.Err.Error()}, true
	}
	o := Outcome{HTTPStatus: a.Status, RetryAfter: RetryAfter(a.Header.Get("Retry-After"), now)}
	switch status := a.Status; {
	case status == http.StatusTooManyRequests:
		o.Class, o.Reason = ClassTransient, "HTTP 429 too many requests"
	case status == http.StatusRequestTimeout, status == http.StatusProxyAuthRequired:
		// A timeout, or a proxy on the way that wants credentials: the message itself is
		// fine, so it is tried again rather than refused for good.
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
	case status >= 500:
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("HTTP %d from %s", status, name)
	case status >= 300 && status < 400:
		o.Class, o.Reason = ClassThrottled, fmt.Sprintf("HTTP %d redirect (%s throttles the robot)", status, name)
	case status >= 400:
		o.Class, o.Reason = ClassPermanent, fmt.Sprintf("HTTP %d refused the request", status)
	case status < 200:
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("unexpected HTTP %d", status)
	default:
		return Outcome{}, false
	}
	return o, true
}

// DescribeBody says what an answer's body is without showing it: its content type and
// size.
func DescribeBody(a Answer) string {
	ct := a.Header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("%s, %d bytes", ct, len(a.Body))
}

// RetryAfter parses a Retry-After value: seconds or an HTTP date.
func RetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return 0
	}
	if s, err := strconv.Atoi(v); err == nil {
		if s <= 0 {
			return 0
		}
		return time.Duration(s) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil && t.After(now) {
		return t.Sub(now)
	}
	return 0
}

// Truncate cuts s to at most n bytes on a rune boundary, marking the cut with "…".
func Truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && s[n]&0xC0 == 0x80 {
		n--
	}
	return s[:n] + "…"
}
