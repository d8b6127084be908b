package failed

import (
	"slices"
	"strings"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
)

// Targets are the configured targets by name, as operators see a row's target: what
// kind it is and where its message goes. A nil Targets describes nothing.
type Targets map[string]config.Target

// KindUnknown is the kind of a row whose target the configuration does not have (an
// input rejected for its target, or a target removed since).
const KindUnknown = "unknown"

// Destination is a row's target as operators see it.
type Destination struct {
	// Kind is the target's kind (a chat platform's, or config.KindTopic)
	// or KindUnknown; "" when the Targets are not known.
	Kind string
	// Where says where the message goes: "robots a, b" or "topic orders, tag paid".
	Where string
}

// Describe returns the destination of row's message.
func (t Targets) Describe(row store.FailedSend) Destination {
	if t == nil {
		return Destination{}
	}
	c, ok := t[row.Target]
	if !ok {
		return Destination{Kind: KindUnknown, Where: "-"}
	}
	if c.Chat() {
		names := make([]string, len(c.Robots))
		for i, r := range c.Robots {
			names[i] = r.Name
		}
		slices.Sort(names)
		return Destination{Kind: c.Channel(), Where: "robots " + strings.Join(names, ", ")}
	}
	if c.Topic == nil { // not validated: a command that does not deliver reads the targets as they are
		return Destination{Kind: c.Channel(), Where: "-"}
	}
	d, err := topic.Target{TopicTarget: *c.Topic, Target: row.Target}.Resolve(row.MessageID, row.Properties)
	if err != nil {
		return Destination{Kind: config.KindTopic, Where: "topic " + c.Topic.Name + " (not deliverable as recorded: " + err.Error() + ")"}
	}
	return Destination{Kind: config.KindTopic, Where: d.String()}
}
