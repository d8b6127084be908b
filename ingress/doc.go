// Package ingress is rocketdelay's HTTP ways in, for producers without a RocketMQ client:
// the publish API (POST /api/v1/alerts, DELETE /api/v1/alerts/{id}), a receiver of
// Prometheus Alertmanager's webhook (POST /api/v1/alertmanager/{target}), and the
// escalation API (POST /api/v1/escalations to start or update an episode, …/resolve and
// …/ack, GET /api/v1/escalations[/{key}]). Each answers success only once what was asked
// is stored: published to RocketMQ (through the same producer and wire contract as any
// producer), cancelled in Redis, or moved in an episode's state.
//
// POST /api/v1/alerts/{id}/reschedule moves an alert not sent yet to {"at": RFC 3339}
// or {"in": "90s"} (exactly one; a time that has passed means now), keeping its id,
// through failed.Rescheduler wherever the alert is (docs/design.md, Reschedule). It
// answers {"id", "result", "detail", "due"}: 200 moved (in the wheel stage), requeued (a
// new copy in the broker, due at the new time, replaces it: it waited in the wheel stage
// and the time is beyond scheduler.threshold, or it hopped and the time is before the one
// its message carries, which is read back from the broker), hop_moved (still hopping: it
// takes the later time when it reaches the wheel stage) or row_moved (a pending
// failed_sends row's next attempt), with the new due time; 404 unknown; 409 too_late
// (being sent), already_delivered, cancelled, withheld, in_hop (hopping, the time is
// before the due time its message carries, and the broker no longer has that message:
// "earliest" says which time that is), not_pending (a dead, rejected or discarded row: retry
// it instead); 400 a bad body or a time beyond scheduler.horizon; 503 when Redis,
// Postgres or, for a copy sent back to the broker, RocketMQ cannot be reached.
//
// Its files: ingress.go (the handler, the ingest token, JSON answers), reschedule.go,
// api.go (the publish API: a request refused as the producer and the consumer would
// refuse the message, wire.Publication.Check, with their reasons), alertmanager.go (the
// receiver: notifications published at once under an id named by their alerts'
// episodes, or, with ?policy= or ?delay=, a group's escalation episode), escalations.go
// (the escalation API), render.go (the notification as a template's data, each
// platform's built-in template from its sender.Platform, mentions), metrics.go.
//
// It must not send to a chat platform or a business topic itself: everything goes through the
// scheduler's topic, so the limiter, the robot pool, merging and failed_sends apply.
package ingress
