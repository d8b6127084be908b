// Package oncall computes on-call escalation from the configuration: when each entry of
// an episode's policy is due and which step it sends (Schedule), who of a rotation is on
// duty at a given moment (Rotation), and whom a step mentions on a target of a given
// channel (Mentions).
//
// It is pure computation over the configuration and the times it is given. It must not
// read the clock (callers pass the moment, so tests choose it), perform I/O, or touch
// Redis, RocketMQ or HTTP: an episode's state, its atomic transitions and the
// publishing of its steps live with the components that own those.
package oncall
