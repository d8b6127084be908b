// Package sender delivers alerts to DingTalk group robots: the message types and their
// validation, signing, response classification, and the rate-limited robot pool.
//
// Its files follow a send: message.go (the alert body as producers publish it, parsed
// and checked per msgtype), split.go (a text or markdown alert over DingTalk's 20000
// bytes becomes numbered parts), sender.go (SendAlert: pick a robot from the shared pool
// in Redis, confirm the caller's claim, post, and act on the answer: cool down, disable,
// retry with backoff, or fail with a *Failure), coalesce.go (each target's queue in this
// process: pacing its budget and merging what waits into one markdown message),
// share.go (a busy target's alerts parked for, and adopted into, the target's next send
// on any replica, through the Parking the scheduler provides),
// client.go (the HTTP request and the signed URL, rebuilt for every send), sign.go
// (DingTalk's signature), classify.go (an answer's class: delivered, throttled,
// transient, robot broken, payload permanent), robots.go (each robot's state in the pool
// for operators), metrics.go. The DingTalk simulator the tests and `make run` send to is
// package dingtalksim.
//
// It must not know about RocketMQ, and it never puts a robot's token or signing secret in
// a log line, a metric or an error.
package sender
