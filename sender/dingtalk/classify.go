package dingtalk

import (
	"bytes"
	"encoding/json"
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

// failures is DingTalk's table: errcode 0 in a 2xx is success; a 2xx whose body is not
// a robot answer is the gateway's throttle page; 130101 and 410100 throttle, the
// credential and group errors break the robot, the size and content errors refuse the
// message, 90030 is the monthly quota (out of rotation until the period ends in China);
// an errcode not here is transient: the send is retried a bounded number of times and
// then recorded as failed, so that a new throttling or maintenance code neither loses
// the alert nor disables a robot for good.
var failures = sender.Failures{
	Name: "DingTalk", CodeName: "errcode", OK: ErrcodeOK, NotAnswer: sender.ClassThrottled,
	Read: readAnswer,
	Codes: map[int]sender.Class{
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
	},
	Refine: func(o sender.Outcome, _ string, now time.Time) sender.Outcome {
		if o.Class == sender.ClassOutOfQuota {
			o.Until = quotaEnd(now)
		}
		return o
	},
}

// readAnswer reads DingTalk's JSON answer, {"errcode":…,"errmsg":…}.
func readAnswer(a sender.Answer) (int, string, bool) {
	var ra struct {
		Errcode *int   `json:"errcode"`
		Errmsg  string `json:"errmsg"`
	}
	if err := json.Unmarshal(bytes.TrimSpace(a.Body), &ra); err != nil || ra.Errcode == nil {
		return 0, "", false
	}
	return *ra.Errcode, ra.Errmsg, true
}

// quotaZone is the time zone of DingTalk's quota periods (China Standard Time).
var quotaZone = time.FixedZone("CST", 8*3600)

// quotaEnd is when the monthly quota period that holds now ends: the first day of the
// next month, midnight in China.
func quotaEnd(now time.Time) time.Time {
	t := now.In(quotaZone)
	return time.Date(t.Year(), t.Month()+1, 1, 0, 0, 0, 0, quotaZone)
}
