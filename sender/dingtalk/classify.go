package dingtalk

import (
	"bytes"
	"encoding/json"
	"fmt"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
)

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
	ErrcodeOverQuota       = 90030
)

// errcodeClass maps every documented non-zero errcode to its class; an errcode not
// here is sender.ClassTransient (see Classify).
var errcodeClass = map[int]sender.Class{
	ErrcodeBusy:           sender.ClassTransient,
	ErrcodeSendTooFast:    sender.ClassThrottled,
	ErrcodeSendTooFastNew: sender.ClassThrottled,
	ErrcodeSignMismatch:   sender.ClassRobotBroken,
	ErrcodeTokenMissing:   sender.ClassRobotBroken,
	ErrcodeTokenNotExist:  sender.ClassRobotBroken,
	ErrcodeTokenInvalid:   sender.ClassRobotBroken,
	ErrcodeRobotDisabled:  sender.ClassRobotBroken,
	ErrcodeNotInGroup:     sender.ClassRobotBroken,
	ErrcodeGroupDissolved: sender.ClassRobotBroken,
	ErrcodeTooLong:        sender.ClassPermanent,
	430101:                sender.ClassPermanent,
	430102:                sender.ClassPermanent,
	430103:                sender.ClassPermanent,
	430104:                sender.ClassPermanent,
	ErrcodeOverQuota:      sender.ClassOutOfQuota,
}

// robotAnswer is DingTalk's JSON answer.
type robotAnswer struct {
	Errcode *int   `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

// quotaZone is the time zone of DingTalk's quota periods (China Standard Time).
var quotaZone = time.FixedZone("CST", 8*3600)

// quotaEnd is when the monthly quota period that holds now ends: the first day of the
// next month, midnight in China.
func quotaEnd(now time.Time) time.Time {
	t := now.In(quotaZone)
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, quotaZone)
}

// Classify classifies one answer of a DingTalk robot. now is used to read a Retry-After
// date and to end a quota period.
//
// Success is errcode 0 and nothing else; the HTTP status alone never means success. A
// 2xx whose body is not a robot answer is the gateway's throttle page. An errcode this
// package does not know is transient: the send is retried a bounded number of times and
// then recorded as failed, so that a new throttling or maintenance code neither loses
// the alert nor disables a robot for good.
func Classify(a sender.Answer, now time.Time) sender.Outcome {
	if o, done := sender.ClassifyHTTP(a, "DingTalk", now); done {
		return o
	}
	o := sender.Outcome{HTTPStatus: a.Status, RetryAfter: sender.RetryAfter(a.Header.Get("Retry-After"), now)}
	var ra robotAnswer
	if jerr := json.Unmarshal(bytes.TrimSpace(a.Body), &ra); jerr != nil || ra.Errcode == nil {
		o.Class, o.Reason = sender.ClassThrottled, fmt.Sprintf("HTTP %d with a body that is not a robot answer (%s)", a.Status, sender.DescribeBody(a))
		return o
	}
	if *ra.Errcode == ErrcodeOK {
		return sender.Outcome{OK: true, HTTPStatus: a.Status}
	}
	o.Code = *ra.Errcode
	class, known := errcodeClass[o.Code]
	if !known {
		class = sender.ClassTransient
	}
	o.Class = class
	o.Reason = fmt.Sprintf("errcode %d: %s", o.Code, sender.Truncate(ra.Errmsg, 200))
	if !known {
		o.Reason += " (unknown errcode, treated as transient)"
	}
	if class == sender.ClassOutOfQuota {
		o.Until = quotaEnd(now)
	}
	return o
}
