package sender

import "github.com/prometheus/client_golang/prometheus"

// Metrics are the chat sender's Prometheus metrics, for every platform (the metric
// rocketdelay_target_info says each target's kind). Labels name targets and robots,
// never a token.
type Metrics struct {
	requests  *prometheus.CounterVec
	delivered *prometheus.CounterVec
	failures  *prometheus.CounterVec
	disabled  *prometheus.CounterVec
	cooldowns *prometheus.CounterVec
	wait      *prometheus.HistogramVec
	duration  *prometheus.HistogramVec
	inflight  prometheus.Gauge
	coalesced *prometheus.CounterVec
	merged    *prometheus.CounterVec
	lateness  *prometheus.HistogramVec
	waiting   *prometheus.GaugeVec
	limit     *prometheus.GaugeVec
	shared    *prometheus.CounterVec
	info      *prometheus.GaugeVec
	// turnsDeferred counts the sends that passed over a principal's waiting alerts in
	// turns for another's (coalesce.go's inTurns).
	turnsDeferred *prometheus.CounterVec
}

// NewMetrics creates the sender's metrics and registers them with reg (none when reg is
// nil):
//
//	rocketdelay_target_info{target,kind}                     1 for each target: its kind
//	    (dingtalk, wecom, feishu, topic)
//	rocketdelay_sender_requests_total{target,robot,result}   requests to the platform by result:
//	    ok, throttled, transient, robot_broken, out_of_quota, permanent, circuit_open,
//	    stale_confirm (not made: it could not start within the fence of its confirm),
//	    stale_slot (not made: it could not start within the hold of its robot's slot)
//	rocketdelay_sender_delivered_total{target}               messages (parts) delivered
//	rocketdelay_sender_failures_total{target,class}          sends given up, by class
//	rocketdelay_sender_robots_disabled_total{target,robot,why}  robots taken out of rotation:
//	    why broken (credential, signature, keyword, group) or out_of_quota
//	rocketdelay_sender_cooldowns_total{target,robot}         robots cooled down after throttling
//	rocketdelay_sender_robot_wait_seconds{target}            time a send waited for a free robot
//	rocketdelay_sender_request_duration_seconds{target}      duration of a request to the platform
//	rocketdelay_sender_inflight_requests                     requests to the platforms in flight
//	rocketdelay_sender_coalesced_alerts_total{target}        alerts delivered inside merged messages
//	rocketdelay_sender_merged_messages_total{target}         merged messages delivered
//	rocketdelay_sender_delivery_lateness_seconds{target}     due time → the platform accepted
//	rocketdelay_sender_waiting_alerts{target}                alerts waiting for a robot here
//	rocketdelay_sender_robot_effective_limit{target,robot}   the robot's limit in effect (learned)
//	rocketdelay_sender_shared_alerts_total{target,way}       alerts of a busy target parked here
//	    for any replica's next send (way parked), or adopted from the park (way adopted)
//	rocketdelay_sender_turns_deferred_total{target,principal}  sends that took other
//	    principals' alerts in turns while this one's waited ahead of them (principal
//	    topic: the alerts of no proven principal): whose flood the turns held back
func NewMetrics(reg prometheus.Registerer) *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_requests_total",
			Help: "Requests to chat robots, by target, robot and result (ok or the failure class).",
		}, []string{"target", "robot", "result"}),
		delivered: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_delivered_total",
			Help: "Messages (parts of split alerts count one each) the platform accepted, by target.",
		}, []string{"target"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_failures_total",
			Help: "Sends given up after their in-process attempts, by target and class.",
		}, []string{"target", "class"}),
		disabled: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_robots_disabled_total",
			Help: "Robots taken out of rotation because the platform said they are broken (why broken) or out of their quota (why out_of_quota).",
		}, []string{"target", "robot", "why"}),
		cooldowns: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_cooldowns_total",
			Help: "Robots cooled down because the platform throttled them.",
		}, []string{"target", "robot"}),
		wait: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rocketdelay_sender_robot_wait_seconds",
			Help:    "Time one message waited for a free robot.",
			Buckets: []float64{0.001, 0.01, 0.1, 0.5, 1, 5, 15, 30, 60, 120, 300, 600},
		}, []string{"target"}),
		duration: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rocketdelay_sender_request_duration_seconds",
			Help:    "Duration of one request to a chat platform.",
			Buckets: prometheus.DefBuckets,
		}, []string{"target"}),
		inflight: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_sender_inflight_requests",
			Help: "Requests to chat platforms in flight in this process.",
		}),
		coalesced: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_coalesced_alerts_total",
			Help: "Alerts delivered merged with others into one markdown message, by target.",
		}, []string{"target"}),
		merged: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_merged_messages_total",
			Help: "Merged markdown messages (each carrying two or more alerts) the platform accepted, by target.",
		}, []string{"target"}),
		lateness: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "rocketdelay_sender_delivery_lateness_seconds",
			Help:    "Time from an alert's due time to the platform accepting it (the last part of a split alert), by target.",
			Buckets: []float64{0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 3, 5, 10, 20, 30, 60, 120, 300, 600},
		}, []string{"target"}),
		waiting: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_sender_waiting_alerts",
			Help: "Alerts (parts) waiting for a robot in this process's queue of the target.",
		}, []string{"target"}),
		limit: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_sender_robot_effective_limit",
			Help: "The robot's limit per window in effect as of its last pick or throttle: its configured limit, or the lower one learned from the platform's throttles.",
		}, []string{"target", "robot"}),
		shared: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_shared_alerts_total",
			Help: "Alerts of a busy target parked for the target's next send on any replica (way parked), or adopted from the park into this replica's send (way adopted).",
		}, []string{"target", "way"}),
		turnsDeferred: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_sender_turns_deferred_total",
			Help: "Sends of a busy target that took other principals' alerts in turns while alerts of this principal waited ahead of them in due order (principal topic: no proven principal).",
		}, []string{"target", "principal"}),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_target_info",
			Help: "Always 1 for each configured target; kind says its channel (dingtalk, wecom, feishu, topic).",
		}, []string{"target", "kind"}),
	}
	if reg != nil {
		reg.MustRegister(m.requests, m.delivered, m.failures, m.disabled, m.cooldowns, m.wait, m.duration, m.inflight, m.coalesced, m.merged, m.lateness, m.waiting, m.limit, m.shared, m.info, m.turnsDeferred)
	}
	return m
}

// Target notes that target is of kind, for rocketdelay_target_info.
func (m *Metrics) Target(target, kind string) { m.info.WithLabelValues(target, kind).Set(1) }
