package topic

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/wire"
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
	for _, p := range []string{wire.PropTopic, wire.PropTag, wire.PropKeys} {
		if _, ok := props[p]; ok && !t.AllowOverride {
			return Destination{}, fmt.Errorf("target %q does not let a message choose its destination (%s is set; "+
				"the target's topic.allowOverride is false)", t.Target, p)
		}
	}
	if v, ok := props[wire.PropTopic]; ok {
		if v != t.Name && !slices.Contains(t.AllowTopics, v) {
			return Destination{}, fmt.Errorf("%s=%q is not a topic target %q may deliver to (allowed: %s)",
				wire.PropTopic, v, t.Target, strings.Join(append([]string{t.Name}, t.AllowTopics...), ", "))
		}
		d.Topic = v
	}
	if v, ok := props[wire.PropTag]; ok {
		if strings.ContainsAny(v, "| \t\r\n") || len(v) > 127 {
			return Destination{}, fmt.Errorf("%s=%q is not a valid tag (no |, no whitespace, at most 127 characters)", wire.PropTag, v)
		}
		d.Tag = v
	}
	if v, ok := props[wire.PropKeys]; ok {
		d.Keys = strings.Fields(v)
	}
	if !slices.Contains(d.Keys, id) {
		d.Keys = append(d.Keys, id)
	}
	d.Properties = UserProperties(props)
	d.Properties[wire.PropID] = id
	return d, nil
}

// UserProperties returns the producer's own properties of props: neither the broker's
// and client's (wire.SystemProperty), nor the tag and keys, nor rocketdelay's RD_* ones.
func UserProperties(props map[string]string) map[string]string {
	out := maps.Clone(props)
	if out == nil {
		out = map[string]string{}
	}
	maps.DeleteFunc(out, func(k, _ string) bool {
		return wire.SystemProperty(k) || k == primitive.PropertyTags || k == primitive.PropertyKeys || strings.HasPrefix(k, schedulingPrefix)
	})
	return out
}
