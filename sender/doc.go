// Package sender delivers alerts to DingTalk group robots: the message types and their
// validation, signing, response classification, and the rate-limited robot pool.
//
// It must not know about RocketMQ, and it never puts a robot's token or signing secret in
// a log line, a metric or an error.
package sender
