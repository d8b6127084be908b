// Package delivery owns "an alert is due": it sends a due alert through its target's
// channel (package sender), and when the channel gives up it records the alert in the Postgres table
// failed_sends before the caller lets go of it. It decides what is recorded, with which
// class and reason, what counts as delivered, and when a failed alert is tried again:
// the retry job (RetryJob) that re-sends pending rows with exponential backoff until they
// are delivered or dead lives here too. Its claims on rows are fenced (a token and a
// lease on Postgres's clock, a confirm before every request, settles only by the holder),
// like the wheel stage's claims on entries. Inputs that can never be delivered (a
// malformed message, an unknown target) are recorded here as rejected, never over
// another row.
//
// The path of a due alert reads top-down: the scheduler's wheel stage claims it and calls
// Deliverer.Deliver with one sender.Alert that carries its claim; the Deliverer calls the
// target's channel (Channels: the chat sender, the topic relay) and the store
// (store.FailedSends). Neither of those knows about this package, and this package knows
// nothing of RocketMQ or of the timing wheel.
//
// Every failure it inspects is a *sender.Failure, the one error type of every channel
// that carries a class and a reason a person can read; its Class is the metric label and
// the row's error_class. Errors and records never contain a token, a signing secret or a
// DSN.
package delivery
