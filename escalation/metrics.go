package escalation

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the escalations' Prometheus metrics.
type Metrics struct {
	episodes  *prometheus.CounterVec
	steps     *prometheus.CounterVec
	timeToAck prometheus.Histogram
	live      *prometheus.GaugeVec
}

// NewMetrics creates the escalations' metrics and registers them with reg (none when nil):
//
//	rocketdelay_escalation_episodes_total{event}   episodes started, resolved, acknowledged
//	rocketdelay_escalation_steps_total{result}     steps due: sent, withheld (the episode ended), or
//	    refused (a mark the service did not make for the alert: forged)
//	rocketdelay_escalation_time_to_ack_seconds     from an episode's start to its acknowledgement
//	rocketdelay_escalation_episodes{state}         episodes not resolved: pending, acked, and
//	    stuck (pending past its last step, for nobody acknowledged or resolved it)
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		episodes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_escalation_episodes_total",
			Help: "Escalation episodes started, resolved and acknowledged, by event.",
		}, []string{"event"}),
		steps: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_escalation_steps_total",
			Help: "Escalation steps that fell due: sent, withheld because their episode had ended, or refused because their mark was not the service's (forged).",
		}, []string{"result"}),
		timeToAck: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rocketdelay_escalation_time_to_ack_seconds",
			Help:    "Time from an escalation episode's start to its acknowledgement.",
			Buckets: []float64{30, 60, 120, 300, 600, 1200, 1800, 3600, 7200, 14400},
		}),
		live: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_escalation_episodes",
			Help: "Escalation episodes not resolved, by state: pending, acked, and stuck (pending past its last step).",
		}, []string{"state"}),
	}
	if reg != nil {
		reg.MustRegister(m.episodes, m.steps, m.timeToAck, m.live)
	}
	return m
}
