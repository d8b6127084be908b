package sender

import (
	"fmt"
	"strings"
	"time"
)

// Class says what a failed send means and what the core does about it. A channel's
// table maps each of its platform's answers to one of these classes; the core acts on
// the class alone.
type Class string

// The classes of a failed send. Their values are metric labels and failed_sends's
// error_class.
const (
	// ClassThrottled: the platform throttled the robot (DingTalk 130101, WeCom 45009,
	// Feishu 9499). The robot cools down; the message moves to another robot at once and
	// the attempt does not count.
	ClassThrottled Class = "throttled"
	// ClassTransient: a passing fault (system busy, HTTP 408, 429, 5xx, network errors,
	// timeouts, and any code the channel does not know). Retried with exponential backoff
	// and full jitter, honouring Retry-After, a bounded number of times.
	ClassTransient Class = "transient"
	// ClassRobotBroken: the robot cannot send (bad credential or signature, keyword
	// missing, robot disabled or removed from its group). The robot is taken out of
	// rotation; the message moves to another robot.
	ClassRobotBroken Class = "robot_broken"
	// ClassOutOfQuota: the robot used up a quota of the platform's (DingTalk 90030). It is
	// out of rotation until the quota period ends (Outcome.Until); the message moves to
	// another robot and is never retried in vain through this one.
	ClassOutOfQuota Class = "out_of_quota"
	// ClassPermanent: the message itself is refused (too large, content rejected, HTTP
	// 400/401/403/404 and other 4xx, an invalid body, an unknown target). Not retried.
	ClassPermanent Class = "permanent"
)

// Retryable reports whether sending the same message later may succeed: every class
// but ClassPermanent.
func (c Class) Retryable() bool { return c != ClassPermanent }

// Outcome is the classified answer to one request, as a channel reports it.
type Outcome struct {
	// OK is true when the platform accepted the message; the other fields but
	// HTTPStatus are then zero.
	OK bool
	// Class is the class of a failure.
	Class Class
	// HTTPStatus is the answer's status, 0 when there was no answer.
	HTTPStatus int
	// Code is the platform's own answer code (DingTalk's and WeCom's errcode, Feishu's
	// code), 0 when the answer carried none.
	Code int
	// Reason says what happened in words, without any secret.
	Reason string
	// RetryAfter is the answer's Retry-After, 0 when absent.
	RetryAfter time.Duration
	// Until, for ClassOutOfQuota, is when the robot's quota period ends.
	Until time.Time
	// Busy, for ClassThrottled, says the platform as a whole was busy (Feishu's 11232 at
	// its busy moments), not the robot over its budget: the robot rests, and no lower
	// limit is learned from it.
	Busy bool
}

// Failure is the error of a send that did not succeed, on every channel: every error
// a Sender and a topic relay return is one (find it with errors.As), but ErrParked.
// When ctx ended, it is ClassTransient and wraps ctx.Err(). Reason and Error never
// contain a token or a secret.
type Failure struct {
	// Class says what went wrong; Class.Retryable tells whether a later send may succeed.
	Class Class
	// Reason says it in words a person can act on.
	Reason string
	// Target is the target's name.
	Target string
	// Robot names the robot of the last request, "" when none was made (and for topic
	// targets).
	Robot string
	// HTTPStatus and Code are those of the last answer (Outcome), 0 when none.
	HTTPStatus int
	Code       int
	// Attempts counts the requests that failed transiently.
	Attempts int
	// Merged, when 2 or more, is how many alerts the failed merged message carried; every
	// one of them got this same Failure.
	Merged int
	// Part and Parts locate the failed part (Part counts from 1; Parts is 1 for a message
	// sent whole); the parts before it were delivered. Both are 0 when the message was
	// refused before sending (unknown target, invalid or oversized body).
	Part, Parts int
	// RetryAfter, when not 0, is the earliest a retry makes sense (a Retry-After longer
	// than the backoff cap, or the wait for a free robot beyond the sender's MaxWait).
	RetryAfter time.Duration
	// Err is the underlying error, if any (ctx.Err(), store.ErrNoRobot, a store error).
	Err error
}

// Error describes the failure.
func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sender: send to %s", f.Target)
	if f.Parts > 1 {
		fmt.Fprintf(&b, " (part %d/%d)", f.Part, f.Parts)
	}
	if f.Merged > 1 {
		fmt.Fprintf(&b, " (merged message of %d alerts)", f.Merged)
	}
	if f.Robot != "" {
		fmt.Fprintf(&b, " via robot %s", f.Robot)
	}
	fmt.Fprintf(&b, ": %s", f.Class)
	if f.HTTPStatus != 0 {
		fmt.Fprintf(&b, ", HTTP %d", f.HTTPStatus)
	}
	if f.Attempts > 0 {
		fmt.Fprintf(&b, ", %d attempts", f.Attempts)
	}
	fmt.Fprintf(&b, ": %s", f.Reason)
	return b.String()
}

// Unwrap returns the underlying error.
func (f *Failure) Unwrap() error { return f.Err }

// PartsSent is how many leading parts of a split alert were delivered before f.
func (f *Failure) PartsSent() int {
	if f.Parts > 1 && f.Part > 1 {
		return f.Part - 1
	}
	return 0
}
