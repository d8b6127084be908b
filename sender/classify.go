package sender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"
)

// Class says what a failed send means and what the sender does about it.
type Class string

// The classes of a failed send. Their values are metric labels.
const (
	// ClassThrottled: DingTalk throttled the robot (130101, 410100, an HTTP redirect, a
	// page that is not JSON from the gateway). The robot cools down; the message moves to
	// another robot at once and the attempt does not count.
	ClassThrottled Class = "throttled"
	// ClassTransient: a passing fault (-1 system busy, HTTP 407, 408, 429, 5xx, network errors,
	// timeouts, and any errcode this package does not know). Retried with exponential
	// backoff and full jitter, honouring Retry-After, a bounded number of times.
	ClassTransient Class = "transient"
	// ClassRobotBroken: the robot cannot send (signature, keyword or IP mismatch, token
	// missing, robot disabled, not in the group, group dissolved). The robot is taken out
	// of rotation; the message moves to another robot.
	ClassRobotBroken Class = "robot_broken"
	// ClassPermanent: the message itself is refused (too large, content rejected, HTTP
	// 400/401/403/404 and other 4xx, an invalid body, an unknown target). Not retried.
	ClassPermanent Class = "permanent"
)

// Retryable reports whether sending the same message later may succeed: every class
// but ClassPermanent.
func (c Class) Retryable() bool { return c != ClassPermanent }

// DingTalk errcodes the classifier knows by name.
const (
	ErrcodeOK              = 0
	ErrcodeBusy            = -1
	ErrcodeSendTooFast     = 130101
	ErrcodeSendTooFastNew  = 410100
	ErrcodeSignMismatch    = 310000
	ErrcodeTokenMissing    = 300001
	ErrcodeTokenNotExist   = 300005
	ErrcodeTokenInvalid    = 400101
	ErrcodeRobotDisabled   = 400102
	ErrcodeNotInGroup      = 400106
	ErrcodeGroupDissolved  = 400013
	ErrcodeTooLong         = 460101
	ErrcodeContentRejected = 430101 // 430101–430104
)

// errcodeClass maps every documented non-zero errcode to its class; an errcode not
// here is ClassTransient (see Classify).
var errcodeClass = map[int]Class{
	ErrcodeBusy:           ClassTransient,
	ErrcodeSendTooFast:    ClassThrottled,
	ErrcodeSendTooFastNew: ClassThrottled,
	ErrcodeSignMismatch:   ClassRobotBroken,
	ErrcodeTokenMissing:   ClassRobotBroken,
	ErrcodeTokenNotExist:  ClassRobotBroken,
	ErrcodeTokenInvalid:   ClassRobotBroken,
	ErrcodeRobotDisabled:  ClassRobotBroken,
	ErrcodeNotInGroup:     ClassRobotBroken,
	ErrcodeGroupDissolved: ClassRobotBroken,
	ErrcodeTooLong:        ClassPermanent,
	430101:                ClassPermanent,
	430102:                ClassPermanent,
	430103:                ClassPermanent,
	430104:                ClassPermanent,
}

// Outcome is the classified answer to one request.
type Outcome struct {
	// OK is true when DingTalk answered errcode 0; the other fields but HTTPStatus are
	// then zero.
	OK bool
	// Class is the class of a failure.
	Class Class
	// HTTPStatus is the answer's status, 0 when there was no answer.
	HTTPStatus int
	// Errcode is DingTalk's errcode, 0 when the answer carried none.
	Errcode int
	// Reason says what happened in words, without any secret.
	Reason string
	// RetryAfter is the answer's Retry-After, 0 when absent.
	RetryAfter time.Duration
}

// robotAnswer is DingTalk's JSON answer.
type robotAnswer struct {
	Errcode *int   `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

// Classify classifies one answer: status, header and body of the HTTP response, or err
// when there was none (network error, timeout). now is used to read a Retry-After date.
//
// Success is errcode 0 and nothing else; the HTTP status alone never means success. An
// errcode this package does not know is ClassTransient: the send is retried a bounded
// number of times and then recorded as failed, so that a new throttling or maintenance
// code neither loses the alert nor disables a robot for good.
func Classify(status int, header http.Header, body []byte, err error, now time.Time) Outcome {
	if err != nil {
		return Outcome{Class: ClassTransient, Reason: "request failed: " + err.Error()}
	}
	o := Outcome{HTTPStatus: status, RetryAfter: retryAfter(header.Get("Retry-After"), now)}
	switch {
	case status == http.StatusTooManyRequests:
		o.Class, o.Reason = ClassTransient, "HTTP 429 too many requests"
		return o
	case status == http.StatusRequestTimeout, status == http.StatusProxyAuthRequired:
		// A timeout, or a proxy on the way that wants credentials: the message itself is
		// fine, so it is tried again rather than refused for good.
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("HTTP %d %s", status, http.StatusText(status))
		return o
	case status >= 500:
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("HTTP %d from DingTalk", status)
		return o
	case status >= 300 && status < 400:
		o.Class, o.Reason = ClassThrottled, fmt.Sprintf("HTTP %d redirect (DingTalk throttles the robot)", status)
		return o
	case status >= 400:
		o.Class, o.Reason = ClassPermanent, fmt.Sprintf("HTTP %d refused the request", status)
		return o
	case status < 200:
		o.Class, o.Reason = ClassTransient, fmt.Sprintf("unexpected HTTP %d", status)
		return o
	}
	var a robotAnswer
	if jerr := json.Unmarshal(bytes.TrimSpace(body), &a); jerr != nil || a.Errcode == nil {
		o.Class, o.Reason = ClassThrottled, fmt.Sprintf("HTTP %d with a body that is not a robot answer (%s)", status, describeBody(header, body))
		return o
	}
	if *a.Errcode == ErrcodeOK {
		return Outcome{OK: true, HTTPStatus: status}
	}
	o.Errcode = *a.Errcode
	class, known := errcodeClass[o.Errcode]
	if !known {
		class = ClassTransient
	}
	o.Class = class
	o.Reason = fmt.Sprintf("errcode %d: %s", o.Errcode, truncate(a.Errmsg, 200))
	if !known {
		o.Reason += " (unknown errcode, treated as transient)"
	}
	return o
}

func describeBody(header http.Header, body []byte) string {
	ct := header.Get("Content-Type")
	if ct == "" {
		ct = "no content type"
	}
	return fmt.Sprintf("%s, %d bytes", ct, len(body))
}

// retryAfter parses a Retry-After value: seconds or an HTTP date.
func retryAfter(v string, now time.Time) time.Duration {
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

func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	for n > 0 && !isRuneStart(s[n]) {
		n--
	}
	return s[:n] + "…"
}

func isRuneStart(b byte) bool { return b&0xC0 != 0x80 }
