package wire

import (
	"fmt"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/apache/rocketmq-client-go/v2/primitive"
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
	// the original message's unique key and carries it across hops. A topic target's
	// delivered message carries it too, as a property and one of its keys, so business
	// consumers can deduplicate.
	PropID = "RD_ID"
	// PropHops counts the hops taken so far; set by the scheduler, never by producers.
	PropHops = "RD_HOPS"
	// PropGen is the generation of this copy of the alert, a whole number (absent: 0);
	// set by rocketdelay, never by producers. A reschedule that sends an alert waiting in
	// the wheel stage back to the broker publishes a copy of a new generation; a copy
	// whose generation is not the alert's live one is dropped on arrival.
	PropGen = "RD_GEN"
	// PropPriority is the alert's priority, one of Priorities ("normal" when absent):
	// when a target's budget is short, a higher priority goes first.
	PropPriority = "RD_PRIORITY"
	// PropEpisode marks a step of an on-call escalation episode ("<seq>:<k>:<key>", set by
	// rocketdelay's escalations, never by producers): when it falls due, the episode's
	// state decides whether it is sent, and its content and mentions are rendered then.
	PropEpisode = "RD_EPISODE"
	// PropEpisodeSig is the service's signature of a step's mark (set by rocketdelay's
	// escalations with a key of their own, never by producers): over the step's id, its
	// target, its episode and its number. A mark that it does not prove is refused.
	PropEpisodeSig = "RD_EPISODE_SIG"
	// PropPrincipal names the producer an alert came from (set by rocketdelay's ways in
	// and escalations, never by producers): while its target's robots are busy, an alert
	// waits in its principal's share of them. PropPrincipalSig is the service's signature
	// over the alert's id, its target and the name; an alert without a proven principal
	// (one published to the topic directly) waits in the share of the topic's producers.
	PropPrincipal    = "RD_PRINCIPAL"
	PropPrincipalSig = "RD_PRINCIPAL_SIG"
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

// PriorityOf is the priority props name (0 when none, or not one of Priorities).
func PriorityOf(props map[string]string) int {
	p, _ := ParsePriority(props[PropPriority])
	return p
}

// The destination properties a producer may set on a message for a topic target whose
// configuration allows overrides (targets.NAME.topic.allowOverride).
const (
	// PropTopic names the business topic; it must be the target's topic or one of its
	// allowTopics.
	PropTopic = "RD_TOPIC"
	// PropTag is the delivered message's tag; it wins over the tag the message was
	// published with.
	PropTag = "RD_TAG"
	// PropKeys are the delivered message's keys, separated by spaces; they replace the
	// keys the message was published with.
	PropKeys = "RD_KEYS"
)

// The ids the service gives its own alerts, and who publishes them. A producer's alert
// under one would be stored first and the service's own, published later, dropped as its
// copy: the HTTP ways in refuse such an id, and the scheduler refuses, on arrival, a
// message under one whose principal (PropPrincipal) the service's signature does not
// prove to be the one below.
const (
	// StepIDPrefix begins the ids of an escalation's steps, resolutions and
	// announcements, published as StepsPrincipal.
	StepIDPrefix = "esc-"
	// StepsPrincipal is the principal of the escalations' steps and announcements.
	StepsPrincipal = "escalations"
	// AlertmanagerIDPrefix begins the ids of an Alertmanager receiver's notifications,
	// published as the receiver's principal (any).
	AlertmanagerIDPrefix = "am-"
	// ScopePrefix begins a scoped id, "@<principal>:<name>": an id in one principal's
	// scope, published by that principal only (through the ways in, whose
	// PropPrincipalSig proves it). Its owner is in its name, so the ways in neither
	// record nor read one, and no other producer can take it.
	ScopePrefix = "@"
)

// Scope returns the principal whose scope a scoped id ("@<principal>:<name>") is in; ok
// is false for an id that does not begin with ScopePrefix. A malformed scoped id (no
// principal, or no name) is in nobody's scope: principal is "" and ok true.
func Scope(id string) (principal string, ok bool) {
	rest, ok := strings.CutPrefix(id, ScopePrefix)
	if !ok {
		return "", false
	}
	principal, name, found := strings.Cut(rest, ":")
	if !found || principal == "" || name == "" {
		return "", true
	}
	return principal, true
}

// nobody is the principal ReservedID names for a malformed scoped id: no principal's name
// can be it (names are letters, digits, '-', '_' and '.').
const nobody = "@"

// ReservedID reports whether id begins with a prefix of the service's own ids or of a
// scoped id, and which; principal is who must publish it: StepsPrincipal, a scoped id's
// principal (a name no principal has for a malformed one), or "" for any principal.
func ReservedID(id string) (prefix, principal string, ok bool) {
	switch {
	case strings.HasPrefix(id, StepIDPrefix):
		return StepIDPrefix, StepsPrincipal, true
	case strings.HasPrefix(id, AlertmanagerIDPrefix):
		return AlertmanagerIDPrefix, "", true
	}
	if principal, ok := Scope(id); ok {
		if principal == "" {
			principal = nobody
		}
		return ScopePrefix, principal, true
	}
	return "", "", false
}

// MaxIDLength bounds RD_ID.
const MaxIDLength = 128

// MaxDueMillis is the latest due time an alert may have, in Unix milliseconds: the end
// of the year 9999. The earliest is the Unix epoch.
const MaxDueMillis = 253402300799999

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
	// RejectForgedMark is an alert that carries an escalation step's mark (RD_EPISODE)
	// the service did not make for it: no signature, or one that does not prove the mark,
	// or a mark of another id, target or time than the step's. Refused when it falls due:
	// never rendered, never sent.
	RejectForgedMark RejectReason = "forged_mark"
)

// RejectReasons lists every RejectReason, for metrics.
var RejectReasons = []RejectReason{RejectMissingTarget, RejectUnknownTarget, RejectMissingDue,
	RejectBadDue, RejectBeyondHorizon, RejectBadID, RejectBadBody, RejectDestination, RejectStale, RejectBadPriority, RejectForgedMark}

// Rejection says why a message can never be delivered, in words a producer can act on.
type Rejection struct {
	Reason RejectReason
	Detail string
}

// Error says the reason and the detail.
func (r *Rejection) Error() string { return fmt.Sprintf("rejected (%s): %s", r.Reason, r.Detail) }

// Reject returns the Rejection of reason with the formatted detail.
// Reject returns the Rejection of reason, its detail formatted.
func Reject(reason RejectReason, format string, args ...any) *Rejection {
	return &Rejection{Reason: reason, Detail: fmt.Sprintf(format, args...)}
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
		return Reject(RejectBeyondHorizon, "due at %s, more than %s ahead (scheduler.horizon)",
			at.UTC().Format(time.RFC3339), l.Horizon)
	}
	if l.Dedupe > 0 && now.Sub(at) > l.Dedupe {
		return Reject(RejectStale, "due at %s, more than %s ago (scheduler.doneTTL): if it was delivered its done marker "+
			"has expired, so this copy is not sent", at.UTC().Format(time.RFC3339), l.Dedupe)
	}
	return nil
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

// SystemProperty reports whether a message property is the broker's or the client's own
// (delay level, real topic, unique key, timer fields, …): a property that must not be
// copied onto a message rocketdelay publishes.
func SystemProperty(name string) bool {
	return systemProperty[name] || strings.HasPrefix(name, "__RMQ.TRANSIENT.")
}

var systemProperty = map[string]bool{
	primitive.PropertyDelayTimeLevel:                 true,
	primitive.PropertyRealTopic:                      true,
	primitive.PropertyRealQueueId:                    true,
	primitive.PropertyUniqueClientMessageIdKeyIndex:  true,
	primitive.PropertyMinOffset:                      true,
	primitive.PropertyMaxOffset:                      true,
	primitive.PropertyConsumeStartTime:               true,
	primitive.PropertyRetryTopic:                     true,
	primitive.PropertyOriginMessageId:                true,
	primitive.PropertyReconsumeTime:                  true,
	primitive.PropertyMaxReconsumeTimes:              true,
	primitive.PropertyTransactionPrepared:            true,
	primitive.PropertyProducerGroup:                  true,
	primitive.PropertyWaitStoreMsgOk:                 true,
	primitive.PropertyMsgRegion:                      true,
	primitive.PropertyTraceSwitch:                    true,
	primitive.PropertyTranscationPreparedQueueOffset: true,
	primitive.PropertyTranscationCheckTimes:          true,
	primitive.PropertyCluster:                        true,
	primitive.PropertyTimerDeliverMS:                 true,
	"__STARTDELIVERTIME":                             true,
	"TIMER_DELAY_SEC":                                true,
	"TIMER_DELAY_MS":                                 true,
	"TIMER_OUT_MS":                                   true,
	"TIMER_ENQUEUE_MS":                               true,
	"TIMER_DEQUEUE_MS":                               true,
	"TIMER_ROLL_TIMES":                               true,
	"INNER_NUM":                                      true,
	"INNER_BASE":                                     true,
	"TRACE_CONTEXT":                                  true,
	// Those of the broker's own (RocketMQ 5.3's MessageConst) that the broker or the
	// client act on: a copied TIMER_DEL_UNIQKEY makes a timer hop a delete request that
	// is never delivered, MSG_TYPE=reply makes the client send it as a reply,
	// INNER_MULTI_DISPATCH dispatches it to other queues. The rest (TTL, BUYER_ID,
	// CORRELATION_ID, …) are names a producer may use for its own.
	"TIMER_DEL_UNIQKEY":              true,
	"TIMER_DELAY_LEVEL":              true,
	"MSG_TYPE":                       true,
	"REPLY_TO_CLIENT":                true,
	"POP_CK":                         true,
	"POP_CK_OFFSET":                  true,
	"1ST_POP_TIME":                   true,
	"__transactionId__":              true,
	"CHECK_IMMUNITY_TIME_IN_SECONDS": true,
	"INNER_MULTI_DISPATCH":           true,
	"INNER_MULTI_QUEUE_OFFSET":       true,
	"PROPERTY_FORWARD_QUEUE_ID":      true,
	"REDIRECT":                       true,
	"__CRC32#":                       true,
	"EXTEND_UNIQ_INFO":               true,
	"TRANSFER_FLAG":                  true,
	"CORRECTION_FLAG":                true,
	"MQ2_FLAG":                       true,
}

// SendStatus names a broker's send status as RocketMQ does: SEND_OK,
// FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT, SLAVE_NOT_AVAILABLE.
func SendStatus(st primitive.SendStatus) string {
	switch st {
	case primitive.SendOK:
		return "SEND_OK"
	case primitive.SendFlushDiskTimeout:
		return "FLUSH_DISK_TIMEOUT"
	case primitive.SendFlushSlaveTimeout:
		return "FLUSH_SLAVE_TIMEOUT"
	case primitive.SendSlaveNotAvailable:
		return "SLAVE_NOT_AVAILABLE"
	case primitive.SendUnknownError:
		return "UNKNOWN_ERROR"
	default:
		return fmt.Sprintf("status %d", int(st))
	}
}
