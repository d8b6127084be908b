// Package ingress is rocketdelay's HTTP ways in, for producers without a RocketMQ client:
// the publish API (POST /api/v1/alerts, DELETE /api/v1/alerts/{id}) and a receiver of
// Prometheus Alertmanager's webhook (POST /api/v1/alertmanager/{target}). Both answer
// success only once what was asked is stored: published to RocketMQ (through the same
// producer and wire contract as any producer), or cancelled in Redis.
//
// Its files: ingress.go (the handler, the ingest token, JSON answers), api.go (the
// publish API: a request refused as the producer and the consumer would refuse the
// message, wire.Publication.Check, with their reasons), alertmanager.go (the
// receiver: notifications rendered and published at once, or, with ?delay=, a group's
// delayed escalation that a later notification replaces and a resolve cancels), render.go (the notification as a template's data, the built-in
// template in templates/, mentions), metrics.go.
//
// It must not send to DingTalk or a business topic itself: everything goes through the
// scheduler's topic, so the limiter, the robot pool, merging and failed_sends apply.
package ingress
