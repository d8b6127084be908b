package sender

import (
	"fmt"
	"time"
)

// Failures is a platform's table from its answers to the neutral failure classes; one
// classifier (Classify) applies every platform's table the same way.
type Failures struct {
	// Name says whose answers they are ("DingTalk"), in reasons; CodeName what the
	// platform calls its code ("errcode", "code", "HTTP").
	Name, CodeName string
	// Read reads the platform's own answer: its code and message; ok is false when the
	// answer is not one (no answer, or a body of something else, such as a gateway's
	// page).
	Read func(a Answer) (code int, msg string, ok bool)
	// OK is the code of success.
	OK int
	// Codes are the classes of the codes the platform documents; any other code is
	// ClassTransient, so that a new throttling or maintenance code neither loses an alert
	// nor disables a robot for good.
	Codes map[int]Class
	// NotAnswer is the class of a 2xx whose body is not the platform's answer
	// (DingTalk's gateway throttles with such pages: ClassThrottled).
	NotAnswer Class
	// CodeFirst says the platform's code is judged before the HTTP status: it answers its
	// refusals with 4xx statuses (Feishu, Slack); else the status is judged first, as
	// ClassifyHTTP does.
	CodeFirst bool
	// Busy is the code of the platform's busy moments (Feishu's 11232), 0 for none: a
	// throttle that teaches no lower limit (Outcome.Busy).
	Busy int
	// Refine, when set, adjusts an outcome of a code by what the message says or the time
	// (DingTalk's quota period's end, Feishu's parameter error that names the token).
	Refine func(o Outcome, msg string, now time.Time) Outcome
}

// complete reports whether the table can classify.
func (f Failures) complete() bool {
	return f.Name != "" && f.CodeName != "" && f.Read != nil && len(f.Codes) > 0
}

// Classify classifies one answer of a robot: success is the platform's OK code in a 2xx
// answer, nothing else (never the HTTP status alone). now reads a Retry-After date and
// ends a quota period.
func (f Failures) Classify(a Answer, now time.Time) Outcome {
	code, msg, ok := 0, "", false
	if a.Err == nil {
		code, msg, ok = f.Read(a)
	}
	if f.CodeFirst && ok && code != f.OK {
		return f.code(a, code, msg, now)
	}
	if o, done := ClassifyHTTP(a, f.Name, now); done {
		return o
	}
	switch {
	case !ok:
		class := f.NotAnswer
		if class == "" {
			class = ClassTransient
		}
		return Outcome{Class: class, HTTPStatus: a.Status, RetryAfter: RetryAfter(a.Header.Get("Retry-After"), now),
			Reason: fmt.Sprintf("HTTP %d with a body that is not a robot answer (%s)", a.Status, DescribeBody(a))}
	case code == f.OK:
		return Outcome{OK: true, HTTPStatus: a.Status}
	}
	return f.code(a, code, msg, now)
}

// code is the outcome of the platform's refusal code.
func (f Failures) code(a Answer, code int, msg string, now time.Time) Outcome {
	o := Outcome{HTTPStatus: a.Status, Code: code, RetryAfter: RetryAfter(a.Header.Get("Retry-After"), now)}
	class, known := f.Codes[code]
	if !known {
		class = ClassTransient
	}
	o.Class, o.Busy = class, f.Busy != 0 && code == f.Busy
	o.Reason = fmt.Sprintf("%s %d: %s", f.CodeName, code, Truncate(msg, 200))
	if !known {
		o.Reason += fmt.Sprintf(" (unknown %s, treated as transient)", f.CodeName)
	}
	if f.Refine != nil {
		o = f.Refine(o, msg, now)
	}
	return o
}
