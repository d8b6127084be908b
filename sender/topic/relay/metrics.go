package relay

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the topic sender's Prometheus metrics.
type Metrics struct {
	messages   *prometheus.CounterVec
	batch      prometheus.Histogram
	duration   prometheus.Histogram
	rateWait   *prometheus.CounterVec
	notDurable *prometheus.CounterVec
}

// NewMetrics creates the topic sender's metrics and registers them with reg (nil: not
// registered, for tests).
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		messages: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_topic_messages_total",
			Help: "Due messages of topic targets, by target and result (delivered, or the failure class).",
		}, []string{"target", "result"}),
		batch: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rocketdelay_topic_batch_messages",
			Help:    "Messages per RocketMQ send to a business topic (a batch send carries several).",
			Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
		}),
		duration: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rocketdelay_topic_send_duration_seconds",
			Help:    "Duration of one RocketMQ send (single or batch) to a business topic.",
			Buckets: []float64{0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 3},
		}),
		notDurable: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_topic_sends_not_durable_total",
			Help: "Messages a business topic's broker stored but answered short of SEND_OK (not flushed or replicated as configured: SLAVE_NOT_AVAILABLE, FLUSH_DISK_TIMEOUT, FLUSH_SLAVE_TIMEOUT), by target and status: delivered, not sent again.",
		}, []string{"target", "status"}),
		rateWait: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_topic_rate_wait_seconds_total",
			Help: "Time messages of a topic target with a ratePerSecond waited for the rate, by target.",
		}, []string{"target"}),
	}
	if reg != nil {
		reg.MustRegister(m.messages, m.batch, m.duration, m.rateWait, m.notDurable)
	}
	return m
}
