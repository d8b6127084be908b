// Package store is rocketdelay's access to Redis and Postgres. Every Redis mutation is a
// Lua script (lua/, embedded by embed.go) and every key is built in keys.go.
//
// Its files: connect.go (the Redis topologies and Postgres, and the durability check),
// wheelstage.go (the wheel stage's payloads, due index, claims and leases, release and
// give-back), liveness.go (each replica's liveness and the take-over of what a lapsed one
// held), park.go (a busy target's parked alerts), reschedule.go (moving a waiting alert,
// its generations), trace.go (each alert's trace for operators), robotpool.go (the
// robots' rate-limit windows, pacing tokens, cool-downs and learned limits), topicrate.go
// (a topic target's pace), episodes.go (escalation episodes' state and outbox), dedupe.go
// (the id every copy of one event gets within a window), failedsends.go and purge.go (the
// failed_sends table, its claims and its retention), redislog.go (go-redis's log routed
// into slog).
//
// It must not know about RocketMQ or a chat platform, and it never puts a DSN, a password or a
// token in an error or a log line.
package store
