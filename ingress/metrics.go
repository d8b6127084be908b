package ingress

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the HTTP ways in's Prometheus metrics.
type Metrics struct {
	requests *prometheus.CounterVec
	refused  *prometheus.CounterVec
}

// NewMetrics creates the metrics and registers them with reg (nil: not registered, for
// tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_ingress_requests_total",
			Help: "Requests to the HTTP ways in, by endpoint (publish, cancel, alertmanager) and outcome (ok, an escalation outcome, or why it was refused).",
		}, []string{"endpoint", "outcome"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_ingress_refused_total",
			Help: "Requests refused for their principal, by principal and reason (rate, forbidden, forbidden_target, forbidden_priority, forbidden_raw, forbidden_mention, foreign_id, foreign_key).",
		}, []string{"principal", "reason"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.refused)
	}
	return m
}
