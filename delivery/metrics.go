package delivery

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/store"
)

// The kinds of record errors, a metric label.
const (
	kindSendFailure = "send_failure"
	kindRejected    = "rejected"
)

// Metrics are the Prometheus metrics of delivery: writes to failed_sends that failed, and
// the retry job's. A nil *Metrics records nothing.
type Metrics struct {
	recordErrors *prometheus.CounterVec
	rows         *prometheus.GaugeVec
	oldest       prometheus.Gauge
	attempts     prometheus.Counter
	succeeded    prometheus.Counter
	deaths       *prometheus.CounterVec
	purged       *prometheus.CounterVec
	purgeLeft    prometheus.Gauge
	tableBytes   prometheus.Gauge
}

// NewMetrics registers the metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		recordErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_failed_sends_record_errors_total",
			Help: "Writes to failed_sends that failed; the alert is kept and retried. By kind: send_failure, rejected.",
		}, []string{"kind"}),
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
		purged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_failed_sends_purged_total",
			Help: "Rows of failed_sends deleted once their retention was over, by status (counted after each pass of a purge).",
		}, []string{"status"}),
		purgeLeft: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_failed_sends_purge_left",
			Help: "Rows of failed_sends past their retention still to delete, as this replica's purge last knew it (counted up to 100000, less what it deleted since); 0 once a pass found none left.",
		}),
		tableBytes: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_failed_sends_table_bytes",
			Help: "Bytes failed_sends takes on disk (indexes and payloads included), as of the retry job's last purge.",
		}),
	}
	reg.MustRegister(m.recordErrors, m.rows, m.oldest, m.attempts, m.succeeded, m.deaths, m.purged, m.purgeLeft, m.tableBytes)
	m.recordErrors.WithLabelValues(kindSendFailure)
	m.recordErrors.WithLabelValues(kindRejected)
	for _, s := range store.FailedStatuses {
		m.rows.WithLabelValues(string(s))
	}
	return m
}

func (m *Metrics) purgedRows(deleted map[store.FailedStatus]int64, bytes, left int64) {
	if m == nil {
		return
	}
	for s, n := range deleted {
		m.purged.WithLabelValues(string(s)).Add(float64(n))
	}
	m.purgeLeft.Set(float64(left))
	if bytes > 0 {
		m.tableBytes.Set(float64(bytes))
	}
}

func (m *Metrics) recordError(kind string) {
	if m != nil {
		m.recordErrors.WithLabelValues(kind).Inc()
	}
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

// gaveUp counts n rows given up because no replica has their target (class
// unknown_target).
func (m *Metrics) gaveUp(n int) {
	if m != nil {
		m.deaths.WithLabelValues(store.ClassUnknownTarget).Add(float64(n))
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
