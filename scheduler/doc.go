// Package scheduler turns an alert published with any delay into a hand-off at its due
// moment: it consumes the RocketMQ topic, decomposes the remaining delay into the broker's
// delay levels (re-publishing hop by hop), keeps the final sub-minute remainder in Redis
// plus an in-process timing wheel, and hands due alerts to a sender.
//
// It must not talk to DingTalk, and it must never acknowledge a RocketMQ message before
// the message's next home (a re-published hop, or Redis) is durable.
package scheduler
