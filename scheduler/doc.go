// Package scheduler turns an alert published with any delay into a hand-off at its due
// moment: it consumes the RocketMQ topic, decomposes the remaining delay into the broker's
// delay levels (re-publishing hop by hop) or, in timer mode, RocketMQ 5 timer messages
// that land just before the due time, keeps the final remainder in Redis
// (store.WheelStage) plus an in-process timing wheel, and hands due alerts to its
// Delivery (package delivery), releasing them from Redis once delivery is done with them.
// Inputs that can never be delivered go to the same Delivery as rejections.
//
// Its files follow a message: message.go (a consumed message decoded as an alert),
// consumer.go (decode, hop or store), topic.go and brokerconfig.go (the topic checked or
// created at start, the broker's delay levels read back), hoptrace.go (each hop noted in
// the alert's trace for operators, off the consume path), plan.go and timer.go (the hop
// rule, and the timer probe at start), fireloop.go (claim what the wheel fires),
// sweeper.go (claim what is overdue, what a replica whose liveness lapsed held, or whose
// lease expired), claim.go (the claim an alert carries to its channel), handoff.go (the
// hand-off pool: hand each claimed entry to the Delivery, then release it or give it
// back, trying again while Redis is cut off), gate.go (each target's share of the pool's
// workers), share.go (a busy target's alerts parked and adopted across replicas),
// heartbeat.go (this replica's liveness, which keeps what it holds its own, and the
// due-soon entries of replicas that are gone), allocate.go (the consumer group's queues
// go to live replicas), refclock.go (this replica's clock corrected by its offset to
// Redis TIME, which every replica schedules by), dlq.go (the dead-letter queue's depth,
// which must stay 0), rlog.go (the RocketMQ client's log routed into slog), metrics.go,
// scheduler.go (Start and Stop: the steps in order; Stop hands everything back to the
// other replicas). Producers publish with package wire.
//
// It must not talk to a chat platform or Postgres, and it must never acknowledge a RocketMQ
// message before the message's next home (a re-published hop, Redis, or a rejected row)
// is durable.
package scheduler
