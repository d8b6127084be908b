package scheduler

import (
	"strconv"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A consumed message is decoded as the store.Entry the wheel stage keeps (its claim
// state unset): the alert as the producer published it, its due time, hops and
// generation, never re-encoded on a hop. One conversion, alertOf, makes it the
// sender.Alert that travels to a channel.

// alertOf is entry e as the Delivery takes it: its priority read from its properties,
// and, for an entry a claim holds, what earlier hand-offs noted (a failure, the parts of
// a split alert sent).
func alertOf(e store.Entry) sender.Alert {
	return sender.Alert{ID: e.ID, Target: e.Target, Due: e.DueAt, Body: e.Body, Hops: e.Hops, Props: e.Props,
		Priority: wire.PriorityOf(e.Props), Noted: e.Failure, PartsSent: e.PartsSent}
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
// the horizon. A message that can never be delivered yields a *wire.Rejection, with the
// alert's fields decoded as far as they could be (for the record of the rejection).
func decode(msg *primitive.MessageExt, rules decodeRules, now time.Time) (store.Entry, *wire.Rejection) {
	a := store.Entry{Body: msg.Body, Target: msg.GetProperty(wire.PropTarget), ID: messageID(msg)}
	// A chat alert keeps only its priority, its principal and the principal's signature
	// and, for an escalation's step, its episode's mark and the mark's signature (a topic
	// target's alert all its properties, below). They are read before any refusal: a
	// refused alert of the service's own id is judged by its proof (serviceIDProven),
	// which keeps the refusal's own reason (an unknown target sent on to a replica that
	// knows it, a stale step retried by an operator) rather than bad_id.
	for _, p := range []string{wire.PropPriority, wire.PropPrincipal, wire.PropPrincipalSig, wire.PropEpisode, wire.PropEpisodeSig} {
		if v := msg.GetProperty(p); v != "" {
			if a.Props == nil {
				a.Props = map[string]string{}
			}
			a.Props[p] = v
		}
	}
	if h, err := strconv.Atoi(msg.GetProperty(wire.PropHops)); err == nil && h > 0 {
		a.Hops = h
	}
	if v := msg.GetProperty(wire.PropGen); v != "" {
		g, err := strconv.ParseInt(v, 10, 64)
		if err != nil || g < 0 {
			return a, wire.Reject(wire.RejectBadDue, "%s=%q is not a generation (set by rocketdelay, never by producers)", wire.PropGen, v)
		}
		a.Gen = g
	}
	if a.ID == "" {
		return a, wire.Reject(wire.RejectBadID, "the message has neither %s nor a unique key", wire.PropID)
	}
	if err := wire.CheckID(a.ID); err != nil {
		return a, wire.Reject(wire.RejectBadID, "%v", err)
	}
	if a.Target == "" {
		return a, wire.Reject(wire.RejectMissingTarget, "the message has no %s property naming a target", wire.PropTarget)
	}
	// A hop's own properties grew by rocketdelay's (RD_HOPS, RD_DELIVER_AT_MS, …): it is
	// allowed hopRoom more, so that what was accepted at its first arrival is never
	// refused later, and a producer's RD_HOPS buys nothing.
	if n, most := propertyBytes(msg), maxConsumedPropertyBytes+min(a.Hops, 1)*hopRoom; n > most {
		return a, wire.Reject(wire.RejectDestination, "its properties take %d bytes encoded; a hop adds rocketdelay's and the broker's "+
			"own, and the broker refuses a message whose properties pass 32767: at most %d are accepted", n, most)
	}
	if !rules.knownTarget(a.Target) {
		return a, wire.Reject(wire.RejectUnknownTarget, "%s %q is not a target in the configuration", wire.PropTarget, a.Target)
	}
	at, rej := deliverAt(msg)
	if rej != nil {
		return a, rej
	}
	a.DueAt = at
	if _, err := wire.ParsePriority(msg.GetProperty(wire.PropPriority)); err != nil {
		return a, wire.Reject(wire.RejectBadPriority, "%v", err)
	}
	if rej := (wire.DueLimits{Horizon: rules.horizon, Dedupe: rules.dedupe}).Check(at, now); rej != nil {
		if rej.Reason == wire.RejectStale {
			rej.Detail += "; retry the row to send it anyway"
		}
		return a, rej
	}
	if t, ok := rules.topics[a.Target]; ok {
		// A topic target's body is any bytes; where it goes is decided now, so a
		// destination it may not choose is refused on arrival, not at its due time.
		a.Props = wire.CopyProps(msg)
		if _, err := t.Resolve(a.ID, a.Props); err != nil {
			return a, wire.Reject(wire.RejectDestination, "%v", err)
		}
		return a, nil
	}
	if rules.checkBody != nil {
		if err := rules.checkBody(a.Target, msg.Body); err != nil {
			return a, wire.Reject(wire.RejectBadBody, "%v", err)
		}
	}
	return a, nil
}

func deliverAt(msg *primitive.MessageExt) (time.Time, *wire.Rejection) {
	if v := msg.GetProperty(wire.PropDeliverAt); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, wire.Reject(wire.RejectBadDue, "%s=%q is not a whole number of Unix milliseconds", wire.PropDeliverAt, v)
		}
		if ms < 0 || ms > wire.MaxDueMillis {
			return time.Time{}, wire.Reject(wire.RejectBadDue, "%s=%d is outside the years 1970–9999", wire.PropDeliverAt, ms)
		}
		return time.UnixMilli(ms), nil
	}
	if v := msg.GetProperty(wire.PropDelay); v != "" {
		ms, err := strconv.ParseInt(v, 10, 64)
		if err != nil {
			return time.Time{}, wire.Reject(wire.RejectBadDue, "%s=%q is not a whole number of milliseconds", wire.PropDelay, v)
		}
		if ms < 0 {
			return time.Time{}, wire.Reject(wire.RejectBadDue, "%s=%d is negative", wire.PropDelay, ms)
		}
		if ms > wire.MaxDueMillis-msg.BornTimestamp {
			return time.Time{}, wire.Reject(wire.RejectBadDue, "%s=%d is absurdly far ahead", wire.PropDelay, ms)
		}
		return time.UnixMilli(msg.BornTimestamp + ms), nil
	}
	return time.Time{}, wire.Reject(wire.RejectMissingDue, "the message has neither %s nor %s", wire.PropDeliverAt, wire.PropDelay)
}

// messageID is RD_ID, or else the original message's unique key, which a redelivery of
// the same message keeps.
func messageID(msg *primitive.MessageExt) string {
	if id := msg.GetProperty(wire.PropID); id != "" {
		return id
	}
	if k := msg.GetProperty(primitive.PropertyUniqueClientMessageIdKeyIndex); k != "" {
		return k
	}
	return msg.MsgId
}

// maxConsumedPropertyBytes bounds a consumed message's encoded properties: the broker
// refuses a message whose properties pass 32767 bytes, and a hop or a send-back adds
// rocketdelay's (RD_DELIVER_AT_MS, RD_HOPS, RD_ID, …) and the broker's own (REAL_TOPIC,
// DELAY, …), so a message nearer the limit could never hop: retried for ever, it would
// hold its queue.
const maxConsumedPropertyBytes = 32767 - 1024

// hopRoom is what a hop's own properties may take beyond a first arrival's: all but
// what its next hop adds (RD_HOPS, RD_DELIVER_AT_MS, …) and the broker's own, so that a
// hop is refused only when the broker would refuse its next hop anyway (a release before
// the bound's hopped what it took: those hop on).
const hopRoom = 1024 - 160

// propertyBytes is the size of msg's own properties as the broker encodes them (each name
// and value, and a separator after each): the broker's (wire.SystemProperty), which grow
// from one arrival to the next and which a hop does not copy, left out.
func propertyBytes(msg *primitive.MessageExt) int {
	n := 0
	for k, v := range msg.GetProperties() {
		if !wire.SystemProperty(k) {
			n += len(k) + len(v) + 2
		}
	}
	return n
}
