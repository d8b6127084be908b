package scheduler

import (
	"strconv"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/rocketdelay/rocketdelay/wire"
)

// Metrics are the scheduler's Prometheus metrics.
type Metrics struct {
	received       prometheus.Counter
	hops           *prometheus.CounterVec
	stored         *prometheus.CounterVec
	claims         *prometheus.CounterVec
	recovered      prometheus.Counter
	handoffs       *prometheus.CounterVec
	lateness       prometheus.Histogram
	rejected       *prometheus.CounterVec
	elsewhere      prometheus.Counter
	cancelled      prometheus.Counter
	retries        *prometheus.CounterVec
	reconsumed     prometheus.Counter
	reconsumeTimes prometheus.Histogram
	claimsLost     prometheus.Counter
	dlq            prometheus.Gauge
	wheelEntries   prometheus.GaugeFunc
	mode           *prometheus.GaugeVec
	quarantined    prometheus.Counter
	storeRetries   *prometheus.CounterVec
	releaseBatch   prometheus.Histogram
	releasing      prometheus.Gauge
	marked         prometheus.Counter
	movesApplied   prometheus.Counter
	tracesDropped  prometheus.Counter

	beats        *prometheus.CounterVec
	beatGap      prometheus.Histogram
	lapses       prometheus.Counter
	claimsLapsed prometheus.Counter
	departed     prometheus.Counter
	rebalances   prometheus.Counter
	handedBack   prometheus.Counter

	clockOffset      prometheus.Gauge
	clockUncertainty prometheus.Gauge
	clockSyncs       *prometheus.CounterVec

	wheelLen atomic.Value // func() int, set when the scheduler starts
}

// NewMetrics registers the scheduler's metrics with reg.
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		received: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_messages_received_total",
			Help: "Messages consumed from the topic, first receipts and hops alike.",
		}),
		hops: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_hops_published_total",
			Help: "Hops re-published to the broker, by delay level (\"timer\" for a timer message).",
		}, []string{"level"}),
		stored: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_wheel_stage_puts_total",
			Help: "Alerts handed to the Redis wheel stage, by result (stored, duplicate, done, cancelled; stale: a copy of a rescheduled alert that another copy replaced, dropped).",
		}, []string{"result"}),
		claims: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_claims_total",
			Help: "Claims of due alerts when the wheel fired: won by this replica, or lost (another replica, cancel or done); adopted: alerts of a busy target this replica took from the park for its send.",
		}, []string{"result"}),
		recovered: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_sweeper_recovered_total",
			Help: "Alerts the sweeper claimed because they were overdue past the grace period or their lease expired.",
		}),
		handoffs: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_handoffs_total",
			Help: "Due alerts handed off, by result: ok (delivered), recorded (failure recorded in failed_sends), error (given back for a retry), claim_lost (another replica holds it now), not_due (claimed before its due time by this replica's clock; given back), parked (its target busy: parked for the target's next send on any replica), stopping (not sent before this replica stopped: handed back to the others), done (swept with its done marker left: handed off by the replica that held it; released, not sent again).",
		}, []string{"result"}),
		lateness: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name:    "rocketdelay_handoff_lateness_seconds",
			Help:    "Time from an alert's due time to its hand-off to the sender.",
			Buckets: []float64{0.001, 0.005, 0.01, 0.02, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300},
		}),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_rejected_total",
			Help: "Messages that can never be delivered, by reason.",
		}, []string{"reason"}),
		cancelled: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_cancelled_dropped_total",
			Help: "Alerts cancelled while still hopping, dropped when they reached the wheel stage.",
		}),
		retries: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_consume_retries_total",
			Help: "Messages handed back to RocketMQ for a later retry because their next home was not durable, by stage.",
		}, []string{"stage"}),
	}
	m.elsewhere = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_unknown_target_sent_on_total",
		Help: "Messages for a target this replica's configuration does not have, but another replica's has (a configuration rollout), sent on for it rather than rejected.",
	})
	m.reconsumed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_reconsumed_messages_total",
		Help: "Messages RocketMQ delivered again after the consumer handed them back (their next home was not durable).",
	})
	m.reconsumeTimes = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rocketdelay_message_reconsume_times",
		Help:    "How many times a redelivered message had been handed back before; past 16 RocketMQ's default would have dead-lettered it.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256, 1024},
	})
	m.tracesDropped = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_hop_traces_dropped_total",
		Help: "Hops whose note in the alert's trace (for operators) was not written: Redis was slow or down, or the notes came faster than it took them. The hops themselves never wait for it.",
	})
	m.claimsLost = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_claims_lost_total",
		Help: "Hand-offs whose claim another replica had taken over (this replica was paused, or cut off from Redis, past its liveness): not sent by this one.",
	})
	m.dlq = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rocketdelay_dlq_messages",
		Help: "Messages in the consumer group's dead-letter queue (%DLQ%<group>) as of the last check; -1 when the check failed. rocketdelay never dead-letters; any message here came from elsewhere or from an older version and is not delivered.",
	})
	m.dlq.Set(-1)
	m.wheelEntries = prometheus.NewGaugeFunc(prometheus.GaugeOpts{
		Name: "rocketdelay_wheel_entries",
		Help: "Keys in this replica's in-process timing wheel.",
	}, func() float64 {
		if f, ok := m.wheelLen.Load().(func() int); ok {
			return float64(f())
		}
		return 0
	})
	m.mode = prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rocketdelay_scheduler_mode",
		Help: "1 for the way hops cross the broker that this replica settled on at start (levels or timer; scheduler.mode auto probes the brokers).",
	}, []string{"mode"})
	m.quarantined = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_wheel_entries_quarantined_total",
		Help: "Claimed wheel-stage entries whose record could not be decoded, recorded as rejected (rejected_corrupt_entry) and released.",
	})
	m.storeRetries = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rocketdelay_wheel_stage_retries_total",
		Help: "Wheel-stage writes tried again while Redis could not be reached (claim, sweep, adopt, release, mark, give_back), instead of leaving the entry to its lease.",
	}, []string{"op"})
	m.releaseBatch = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rocketdelay_release_batch_size",
		Help:    "Finished hand-offs released from the wheel stage by one call to Redis: the hand-offs that finished while the call before was on its way.",
		Buckets: []float64{1, 2, 4, 8, 16, 32, 64, 128, 256},
	})
	m.releasing = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rocketdelay_releases_waiting",
		Help: "Hand-offs delivered with neither their release nor their done marker landed in Redis: alerts sent that a kill of this replica now would leave to be sent again. With the hand-offs sending, at most 512: a hand-off takes its slot before it sends, and waits for one at the bound.",
	})
	m.marked = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_release_marks_total",
		Help: "Delivered hand-offs whose done marker was left ahead of their release, the releases queued behind one another (a burst): from then on a replica that takes them over finds them done and does not send them again.",
	})
	m.movesApplied = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_wheel_moves_applied_total",
		Help: "Reschedules of waiting alerts whose timer this replica's wheel held, moved to the new due time as the reschedule announced it.",
	})
	m.clockOffset = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rocketdelay_clock_offset_seconds",
		Help: "Redis TIME minus this replica's clock, as last measured; the replica schedules by Redis's clock.",
	})
	m.clockUncertainty = prometheus.NewGauge(prometheus.GaugeOpts{
		Name: "rocketdelay_clock_offset_uncertainty_seconds",
		Help: "Half the shortest round trip of the last clock sync: how far off the measured offset may be.",
	})
	m.clockSyncs = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rocketdelay_clock_syncs_total",
		Help: "Measurements of the offset to Redis's clock, by result (ok, error).",
	}, []string{"result"})
	m.beats = prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "rocketdelay_liveness_beats_total",
		Help: "Beats of this replica's liveness in Redis, by result (ok, error); a beat that failed is tried again after 100ms.",
	}, []string{"result"})
	m.beatGap = prometheus.NewHistogram(prometheus.HistogramOpts{
		Name:    "rocketdelay_liveness_beat_gap_seconds",
		Help:    "Time between two beats of this replica that landed (scheduler.liveness/6 when all is well); one that reaches scheduler.liveness lets the others take over what this replica holds.",
		Buckets: []float64{0.05, 0.1, 0.2, 0.3, 0.5, 0.75, 1, 1.5, 2, 3, 5, 10, 30},
	})
	m.lapses = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_liveness_lapses_total",
		Help: "Beats that found this replica's liveness lapsed (it was paused, or cut off from Redis, past scheduler.liveness): the others may have taken over what it held.",
	})
	m.claimsLapsed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_liveness_claims_refused_total",
		Help: "Claims refused because this replica's liveness had lapsed; each beat and claimed again.",
	})
	m.departed = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_liveness_departed_replicas_total",
		Help: "Replicas gone (their holdings all taken over after their liveness lapsed, or handed back as they stopped) whose wheels' due-soon entries this replica loaded.",
	})
	m.rebalances = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_liveness_rebalances_total",
		Help: "Rebalances of the consumer group this replica made because the replicas absent from the liveness changed (a lapse, a departure, a return).",
	})
	m.handedBack = prometheus.NewCounter(prometheus.CounterOpts{
		Name: "rocketdelay_handed_back_total",
		Help: "Claims and parks this replica handed back to the others as it stopped.",
	})
	reg.MustRegister(m.beats, m.beatGap, m.lapses, m.claimsLapsed, m.departed, m.rebalances, m.handedBack)
	for _, r := range []string{"ok", "error"} {
		m.beats.WithLabelValues(r)
	}
	reg.MustRegister(m.mode, m.received, m.elsewhere, m.hops, m.stored, m.claims, m.recovered, m.handoffs, m.lateness,
		m.rejected, m.cancelled, m.retries, m.reconsumed, m.reconsumeTimes, m.claimsLost, m.dlq, m.wheelEntries,
		m.quarantined, m.storeRetries, m.releaseBatch, m.releasing, m.marked, m.movesApplied, m.tracesDropped, m.clockOffset, m.clockUncertainty, m.clockSyncs)
	for _, r := range wire.RejectReasons {
		m.rejected.WithLabelValues(string(r))
	}
	return m
}

// hop counts a hop by its delay level, 0 for a timer hop.
func (m *Metrics) hop(level int) {
	label := "timer"
	if level > 0 {
		label = strconv.Itoa(level)
	}
	m.hops.WithLabelValues(label).Inc()
}

// setMode exports the mode in use.
func (m *Metrics) setMode(mode string) {
	m.mode.Reset()
	m.mode.WithLabelValues(mode).Set(1)
}

// HandoffLateness summarises the hand-off lateness histogram since start: how many
// hand-offs, and the upper bounds of the buckets holding the median and the 99th
// percentile (the histogram's resolution).
func (m *Metrics) HandoffLateness() (count uint64, p50, p99 time.Duration) {
	var d dto.Metric
	if err := m.lateness.Write(&d); err != nil || d.GetHistogram().GetSampleCount() == 0 {
		return 0, 0, 0
	}
	h := d.GetHistogram()
	count = h.GetSampleCount()
	at := func(q float64) time.Duration {
		want := uint64(q * float64(count))
		for _, b := range h.GetBucket() {
			if b.GetCumulativeCount() >= max(want, 1) {
				return time.Duration(b.GetUpperBound() * float64(time.Second))
			}
		}
		return time.Duration(h.GetBucket()[len(h.GetBucket())-1].GetUpperBound() * float64(time.Second))
	}
	return count, at(0.5), at(0.99)
}
