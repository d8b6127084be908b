// Package sender is the delivery core every channel shares: the one alert value and its
// claim (alert.go), the neutral failure classes and the Failure every channel returns
// (failure.go), the one classifier that applies each platform's table of answers
// (classify.go), the description every chat platform gives of itself (platform.go) and
// its rules in the simulator (simrules.go), and the chat core every chat platform's
// robots go through.
//
// Its files follow a chat send: protocol.go (what a platform's package provides: parse,
// size rule, merge style, post; the neutral Message and Mentions), sender.go (Chat.Send:
// pick a robot from the target's shared pool in Redis, confirm the alert's claim, post
// through the platform, and act on the class of the answer: cool down, disable, retry
// with backoff, or fail with a *Failure), split.go (a text or markdown alert over the
// platform's size limit becomes numbered parts), coalesce.go (alertQueue: each target's
// queue in this process and its drainer, pacing its budget, priorities, and merging what
// waits into one message), share.go (the queue's alerts parked for, and adopted into,
// the target's next send on any replica, through the Parking the scheduler provides), client.go (the HTTP
// request every platform makes, and the classification by HTTP status they share),
// fence.go (a request starts only within the wheel stage's guard of its claim's confirm,
// or not at all), body.go (reading and encoding bodies), robots.go (each robot's state in
// the pool for operators), metrics.go.
//
// The chat platforms are packages of their own, one folder each (dingtalk, wecom, feishu,
// slack): each exports its Platform and holds its message model, rendering, size rule,
// signing, mentions, failure table, built-in Alertmanager template and simulator rules,
// and package platforms lists them (the registry). The simulator's engine is package
// chatsim, beside them; no production package imports it. Topic targets are package
// topic: a due message of a topic target goes to its business topic through topic/relay,
// which returns the same *Failure.
//
// It must not know about RocketMQ, and it never puts a robot's token or signing secret in
// a log line, a metric or an error.
package sender
