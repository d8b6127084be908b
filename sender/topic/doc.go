// Package topic is the contract of topic targets: where a due message of a topic target
// goes and what it carries (Target.Resolve: the business topic, the overrides a message
// may make, its tag, keys and user properties less rocketdelay's own RD_* ones, and RD_ID
// as a property and a key, so a business consumer never sees the delay machinery and can
// deduplicate), the properties that are the broker's own (wire.SystemProperty), and the
// Message a relay sends. The scheduler checks arriving messages with it, the relay sends
// by it, and operators' views describe rows with it.
//
// It must not start a RocketMQ client: the sending is package relay.
package topic
