// Package relay sends due messages of topic targets to their RocketMQ business topics:
// Send resolves the destination (topic.Target.Resolve), queues the message for it and
// waits for the batch that carries it; failures are *sender.Failure values, transient
// or permanent, like the DingTalk sender's.
//
// Its files: relay.go (the Sender, its producer, Send, and how a broker's answer is
// classified), batch.go (each destination's queue: whatever waits while a send is in
// flight goes out in the next RocketMQ batch send, paced by the target's ratePerSecond
// across replicas, each message's claim confirmed right before the send), metrics.go.
//
// It must not know about DingTalk, Postgres or the wheel stage's keys: the caller's
// Confirm is the only claim it sees.
package relay
