package scheduler

import (
	"fmt"
	"strconv"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/notify"
	"github.com/rocketdelay/rocketdelay/notify/topic"
)

// The wire contract: scheduling metadata travels in message properties, so hops never
// re-encode the body.
const (
	// PropDeliverAt is the absolute due time, Unix epoch milliseconds.
	PropDeliverAt = "RD_DELIVER_AT_MS"
	// PropDelay is a delay in milliseconds relative to the message's born timestamp;
	// the scheduler converts it to PropDeliverAt on first receipt.
	PropDelay = "RD_DELAY_MS"
	// PropTarget names a target of the configuration: a robot group or a topic target.
	// Required.
	PropTarget = "RD_TARGET"
	// PropID is the idempotency key. Optional: when absent the scheduler derives it from
	// the original message's unique key and carries it across hops.
	PropID = "RD_ID"
	// PropHops counts the hops taken so far; set by the scheduler, never by producers.
	PropHops = "RD_HOPS"
	// PropPriority is the alert's priority, one of Priorities ("normal" when absent):
	// when a target's budget is short, a higher priority goes first.
	PropPriority = "RD_PRIORITY"
)

// Priorities are the values of PropPriority, by name: the higher the number, the sooner
// the alert goes when it waits with others for its target's budget.
var Priorities = map[string]int{"low": -1, "normal": 0, "high": 1, "critical": 2}

// ParsePriority returns the priority named s ("" is normal).
func ParsePriority(s string) (int, error) {
	if s == "" {
		return 0, nil
	}
	p, ok := Priorities[s]
	if !ok {
		return 0, fmt.Errorf("%s=%q is not one of critical, high, normal, low", PropPriority, s)
	}
	return p, nil
}

// priorityOf is the priority the properties an entry keeps name (0 when none or invalid:
// decode refused invalid ones on arrival).
func priorityOf(props map[string]string) int {
	p, _ := ParsePriority(props[PropPriority])
	return p
}

// MaxIDLength bounds RD_ID.
const MaxIDLength = 128

// RejectReason classifies a message that can never be delivered; it is a metric label.
type RejectReason string

// The reasons a message is rejected.
const (
	RejectMissingTarget RejectReason = "missing_target"
	RejectUnknownTarget RejectReason = "unknown_target"
	RejectMissingDue    RejectReason = "missing_due"
	RejectBadDue        RejectReason = "bad_due"
	RejectBeyondHorizon RejectReason = "beyond_horizon"
	RejectBadID         RejectReason = "bad_id"
	RejectBadBody       RejectReason = "bad_body"
	// RejectDestination is a message for a topic target that asks for a destination the
	// target does not allow (RD_TOPIC outside its allowlist, overrides it does not allow),
	// or, refused by the producer before it is sent, keys or properties a message cannot
	// carry (see Publication.Check).
	RejectDestination RejectReason = "bad_destination"
	// RejectStale is an alert due longer ago than the dedupe window (config
	// scheduler.doneTTL): its done marker, if it was delivered, is gone, so a copy of it
	// (a consumer-group reset, an old retry message) cannot be told from a first arrival.
	// It is recorded, not sent; an operator can send it with `rocketdelay failed retry`.
	RejectStale RejectReason = "stale"
	// RejectBadPriority is a message whose RD_PRIORITY is not one of Priorities.
	RejectBadPriority RejectReason = "bad_priority"
)

// RejectReasons lists every RejectReason, for metrics.
var RejectReasons = []RejectReason{RejectMissingTarget, RejectUnknownTarget, RejectMissingDue,
	RejectBadDue, RejectBeyondHorizon, RejectBadID, RejectBadBody, RejectDestination, RejectStale, RejectBadPriority}

// Rejection says why a message can never be delivered, in words a producer can act on.
type Rejection struct {
	Reason RejectReason
	Detail string
}

func (r *Rejection) Error() string { return fmt.Sprintf("rejected (%s): %s", r.Reason, r.Detail) }

func reject(reason RejectReason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
}

// alert is a consumed message as the scheduler routes it: decoded from the message's
// properties and body, never re-encoded on a hop.
type alert struct {
	// ID is the idempotency key, RD_ID (or the original message's unique key).
	ID string
	// Target names a target of the configuration.
	Target string
	// DueAt is the absolute due time, millisecond precision; zero when unknown.
	DueAt time.Time
	// Body is the message body as published.
	Body []byte
	// Hops counts the hops taken so far.
	Hops int
	// Props are the properties a topic target's message is delivered by (tag, keys, user
	// properties, destination overrides; see storedProps); nil for a robot group.
	Props map[string]string
}

// forDelivery is a as the Delivery records it when it is rejected.
func (a alert) forDelivery() notify.Alert {
	return notify.Alert{ID: a.ID, Target: a.Target, Due: a.DueAt, Body: a.Body, Hops: a.Hops, Props: a.Props}
}

// decodeRules are what decode checks a message against.
type decodeRules struct {
	knownTarget func(string) bool
	topics      map[string]topic.Target
	checkBody   func(target string, body []byte) error // nil: any body
	horizon     time.Duration
	// dedupe is the dedupe window: an alert due longer ago than this is stale. 0: none.
	dedupe time.Duration
}

// decode reads an alert from a consumed message. now is the receipt time; it bounds
// the horizon. A message that can never be delivered yields a *Rejection, with the
// alert's fields decoded as far as they could be (for the record of the rejection).
func decode(msg *primitive.MessageExt, rules decodeRules, now time.Time) (alert, *Rejection) {
	a := alert{Body: msg.Body, Target: msg.GetProperty(PropTarget), ID: messageID(msg)}
	if h, err := strconv.Atoi(msg.GetProperty(PropHops)); err == nil && h > 0 {
		a.Hops = h
	}
	if a.ID == "" {
		return a, reject(RejectBadID, "the message has neither %s nor a unique key", PropID)
	}
	if err := CheckID(a.ID); err != nil {
		return a, reject(RejectBadID, "%v", err)
	}
	if a.Target == "" {
		return a, reject(RejectMissingTarget, "the message has no %s property naming a target", PropTarget)
	}
	if !rules.knownTarget(a.Target) {
		return a, reject(RejectUnknownTarget, "%s %q is not a target in the configuration", PropTarget, a.Target)
	}
	at, rej := deliverAt(msg)
	if rej != nil {
		return a, rej
	}
	a.DueAt = at
	if _, err := ParsePriority(msg.GetProperty(PropPriority)); err != nil {
		return a, reject(RejectBadPriority, "%v", err)
	}
	if rej := (DueLimits{Horizon: rules.horizon, Dedupe: rules.dedupe}).Check(at, now); rej != nil {
		if rej.Reason == RejectStale {
			rej.Detail += "; retry the row to send it anyway"
		}
		return a, rej
	}
	if t, ok := rules.topics[a.Target]; ok {
		// A topic target's body is any bytes; where it goes is decided now, so a
		// destination it may not choose is refused on arrival, not at its due time.
		a.Props = storedProps(msg)
		if _, err := t.Resolve(a.ID, a.Props); err != nil {
			return a, reject(RejectDestination, "%v", err)
		}
		return a, nil
	}
	if rules.checkBody != nil {
		if err := rules.checkBody(a.Target, msg.Body); err != nil {
			return a, reject(RejectBadBody, "%v", err)
		}
	}
	if p := msg.GetProperty(PropPriority); p != "" {
		a.Props = map[string]string{PropPriority: p} // a chat alert keeps only its priority
	}
	return a, nil
}

// DueLimits bound an alert's due time as the consumer checks it on every receipt
// (config scheduler.horizon and scheduler.doneTTL); the HTTP ways in check them before
// they publish.
type DueLimits struct {
	// Horizon is how far ahead a due time may be. 0: any.
	Horizon time.Duration
	// Dedupe is the dedupe window (config scheduler.doneTTL): an alert due longer ago
	// than this is stale. 0: none is.
	Dedupe time.Duration
}

// Check says why an alert due at, received at now, is rejected: due beyond the horizon,
// or stale; nil when it is neither.
func (l DueLimits) Check(at, now time.Time) *Rejection {
	if l.Horizon > 0 && at.Sub(now) > l.Horizon {
		return reject(RejectBeyondHorizon, "due at %s, more than %s ahead (scheduler.horizon)",
			at.UTC().Format(time.RFC3339), l.Horizon)
	}
	if l.Dedupe > 0 && now.Sub(at) > l.Dedupe {
		return reject(RejectStale, "due at %s, more than %s ago (scheduler.doneTTL): if it was delivered its done marker "+
			"has expired, so this copy is not sent", at.UTC().Format(time.RFC3339), l.Dedupe)
	}
	return nil
}

// storedProps are the properties of a topic target's message that its delivery needs:
// all but the broker's own and the scheduling ones (due time, target, id, hops), which
// the wheel stage keeps in fields of their own.
func storedProps(msg *primitive.MessageExt) map[string]string {
	out := map[string]string{}
	for k, v := range msg.GetProperties() {
		switch {
		case topic.SystemProperty(k), k == PropDeliverAt, k == PropDelay, k == PropTarget, k == PropID, k == PropHops:
		default:
			out[k] = v
		}
	}
	return out
}

// absurdMillis is a due time no alert can have: year 9999.
const absurdMillis = 253402300799999

func deliverAt(msg *primitive.MessageExt) (time.Time, *Rejection) {
	if v := msg.GetProperty(PropDeliverAt); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, reject(RejectBadDue, "%s=%q is not a whole number of Unix milliseconds", PropDeliverAt, v)
		}
		if ms < 0 || ms > absurdMillis {
			return time.Time{}, reject(RejectBadDue, "%s=%d is outside the years 1970–9999", PropDeliverAt, ms)
		}
		return time.UnixMilli(ms), nil
	}
	if v := msg.GetProperty(PropDelay); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, reject(RejectBadDue, "%s=%q is not a whole number of milliseconds", PropDelay, v)
		}
		if ms < 0 {
			return time.Time{}, reject(RejectBadDue, "%s=%d is negative", PropDelay, ms)
		}
		if ms > absurdMillis-msg.BornTimestamp {
			return time.Time{}, reject(RejectBadDue, "%s=%d is absurdly far ahead", PropDelay, ms)
		}
		return time.UnixMilli(msg.BornTimestamp + ms), nil
	}
	return time.Time{}, reject(RejectMissingDue, "the message has neither %s nor %s", PropDeliverAt, PropDelay)
}

// messageID is RD_ID, or else the original message's unique key, which a redelivery of
// the same message keeps.
func messageID(msg *primitive.MessageExt) string {
	if id := msg.GetProperty(PropID); id != "" {
		return id
	}
	if k := msg.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex); k != "" {
		return k
	}
	return msg.MsgId
}

// CheckID says what is wrong with an RD_ID, nil when nothing is: at most MaxIDLength
// printable characters without spaces, and not "." or "..", the two ids that cannot
// round-trip through a URL path segment (the cancel endpoints and the console's pages
// carry ids there, escaped; "." and ".." would be resolved away).
func CheckID(id string) error {
	if len(id) > MaxIDLength || !printable(id) {
		return fmt.Errorf("%s must be at most %d printable characters without spaces", PropID, MaxIDLength)
	}
	if id == "." || id == ".." {
		return fmt.Errorf(`%s %q is not an id: "." and ".." cannot stand in a URL path`, PropID, id)
	}
	return nil
}

// printable reports whether s is valid UTF-8 of printable characters without spaces. The
// replacement character counts as unprintable: it is what a broker makes of bytes that
// were not UTF-8.
func printable(s string) bool {
	if !utf8.ValidString(s) {
		return false
	}
	for _, r := range s {
		if !unicode.IsPrint(r) || unicode.IsSpace(r) || r == utf8.RuneError {
			return false
		}
	}
	return true
}
