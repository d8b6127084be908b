package topic

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/config"
)

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
	// PropID is the property every delivered message carries: its RD_ID, which is also one
	// of its keys, so consumers can deduplicate.
	PropID = "RD_ID"
)

// schedulingPrefix starts every property of rocketdelay's wire contract (RD_TARGET,
// RD_DELIVER_AT_MS, RD_HOPS, …): none of them reaches a business consumer, except the
// RD_ID that Resolve sets.
const schedulingPrefix = "RD_"

// Target is a topic target of the configuration, by name.
type Target struct {
	config.TopicTarget
	// Target is the target's name (RD_TARGET).
	Target string
}

// Targets returns the topic targets of c, by name.
func Targets(c config.Config) map[string]Target {
	out := map[string]Target{}
	for name, t := range c.Targets {
		if t.Topic != nil {
			out[name] = Target{TopicTarget: *t.Topic, Target: name}
		}
	}
	return out
}

// Destination is where and how a due message is delivered.
type Destination struct {
	// Topic is the business topic.
	Topic string
	// Tag is the message's tag; "" for none.
	Tag string
	// Keys are the message's keys, RD_ID among them.
	Keys []string
	// Properties are the producer's user properties, less rocketdelay's RD_* ones, plus
	// RD_ID.
	Properties map[string]string
}

// String describes d for operators: "topic orders, tag paid".
func (d Destination) String() string {
	if d.Tag == "" {
		return "topic " + d.Topic
	}
	return "topic " + d.Topic + ", tag " + d.Tag
}

// Resolve returns the destination of the message id whose properties are props (as it
// was published: tag and keys in TAGS and KEYS, overrides in RD_TOPIC, RD_TAG, RD_KEYS;
// the broker's own properties are ignored). The error says, in words a producer can act
// on, why the message may not go where it asks to.
func (t Target) Resolve(id string, props map[string]string) (Destination, error) {
	d := Destination{Topic: t.Name, Tag: props[primitive.PropertyTags], Keys: strings.Fields(props[primitive.PropertyKeys])}
	if d.Tag == "" {
		d.Tag = t.Tag
	}
	for _, p := range []string{PropTopic, PropTag, PropKeys} {
		if _, ok := props[p]; ok && !t.AllowOverride {
			return Destination{}, fmt.Errorf("target %q does not let a message choose its destination (%s is set; "+
				"the target's topic.allowOverride is false)", t.Target, p)
		}
	}
	if v, ok := props[PropTopic]; ok {
		if v != t.Name && !slices.Contains(t.AllowTopics, v) {
			return Destination{}, fmt.Errorf("%s=%q is not a topic target %q may deliver to (allowed: %s)",
				PropTopic, v, t.Target, strings.Join(append([]string{t.Name}, t.AllowTopics...), ", "))
		}
		d.Topic = v
	}
	if v, ok := props[PropTag]; ok {
		if strings.ContainsAny(v, "| \t\r\n") || len(v) > 127 {
			return Destination{}, fmt.Errorf("%s=%q is not a valid tag (no |, no whitespace, at most 127 characters)", PropTag, v)
		}
		d.Tag = v
	}
	if v, ok := props[PropKeys]; ok {
		d.Keys = strings.Fields(v)
	}
	if !slices.Contains(d.Keys, id) {
		d.Keys = append(d.Keys, id)
	}
	d.Properties = UserProperties(props)
	d.Properties[PropID] = id
	return d, nil
}

// UserProperties returns the producer's own properties of props: neither the broker's
// and client's (SystemProperty), nor the tag and keys, nor rocketdelay's RD_* ones.
func UserProperties(props map[string]string) map[string]string {
	out := maps.Clone(props)
	if out == nil {
		out = map[string]string{}
	}
	maps.DeleteFunc(out, func(k, _ string) bool {
		return SystemProperty(k) || k == primitive.PropertyTags || k == primitive.PropertyKeys || strings.HasPrefix(k, schedulingPrefix)
	})
	return out
}

// SystemProperty reports whether a message property is the broker's or the client's own
// (delay level, real topic, unique key, timer fields, …): a property that must not be
// copied onto a message rocketdelay publishes.
func SystemProperty(name string) bool { return systemProperty[name] }

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
