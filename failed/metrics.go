package failed

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/store"
)

// Metrics are the retry job's Prometheus metrics. A nil *Metrics records nothing.
type Metrics struct {
	rows      *prometheus.GaugeVec
	oldest    prometheus.Gauge
	attempts  prometheus.Counter
	succeeded prometheus.Counter
	deaths    *prometheus.CounterVec
}

// NewMetrics registers the retry job's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		rows: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_failed_sends",
			Help: "Rows of the failed_sends table by status, as of the retry job's last round (every replica reports the same table).",
		}, []string{"status"}),
		oldest: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_failed_sends_oldest_pending_age_seconds",
			Help: "Age of the oldest pending failed send as of the retry job's last round; 0 when none is pending.",
		}),
		attempts: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_failed_send_retries_total",
			Help: "Sends the retry job attempted.",
		}),
		succeeded: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_failed_send_retries_succeeded_total",
			Help: "Sends the retry job attempted that were delivered.",
		}),
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_failed_sends_dead_total",
			Help: "Failed sends the retry job gave up on, by the class of their last failure.",
		}, []string{"class"}),
	}
	reg.MustRegister(m.rows, m.oldest, m.attempts, m.succeeded, m.deaths)
	for _, s := range store.FailedStatuses {
		m.rows.WithLabelValues(string(s))
	}
	return m
}

func (m *Metrics) attempted() {
	if m != nil {
		m.attempts.Inc()
	}
}

func (m *Metrics) delivered() {
	if m != nil {
		m.succeeded.Inc()
	}
}

func (m *Metrics) dead(class string) {
	if m != nil {
		m.deaths.WithLabelValues(class).Inc()
	}
}

func (m *Metrics) observe(st store.FailedStats, now time.Time) {
	if m == nil {
		return
	}
	for _, s := range store.FailedStatuses {
		m.rows.WithLabelValues(string(s)).Set(float64(st.ByStatus[s]))
	}
	age := 0.0
	if st.OldestPending != nil {
		age = max(now.Sub(*st.OldestPending).Seconds(), 0)
	}
	m.oldest.Set(age)
}
