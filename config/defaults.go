package config

import (
	"slices"
	"time"
)

// Defaults of the fields above, in one place.
const (
	DefaultLogLevel  = "info"
	DefaultLogFormat = "json"
	DefaultHTTPAddr  = ":8080"
	// The HTTP server's limits (config.HTTP).
	DefaultHTTPReadHeaderTimeout = 5 * time.Second
	DefaultHTTPReadTimeout       = 30 * time.Second
	DefaultHTTPWriteTimeout      = 60 * time.Second
	DefaultHTTPIdleTimeout       = 60 * time.Second
	DefaultHTTPMaxHeaderBytes    = 64 << 10
	DefaultHTTPMaxConnections    = 512
	DefaultTopic                 = "guava"
	DefaultGroup                 = "rocketdelay"
	DefaultSendTimeout           = 3 * time.Second
	DefaultLevels                = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	DefaultThreshold             = 60 * time.Second
	DefaultHorizon               = 30 * 24 * time.Hour
	DefaultGrace                 = 2 * time.Second
	DefaultLease                 = 30 * time.Second
	DefaultLiveness              = 3 * time.Second
	// DefaultUnknownTargetWait is config scheduler.unknownTargetWait's default.
	DefaultUnknownTargetWait = 2 * time.Minute
	// MinUnknownTargetWait is the least scheduler.unknownTargetWait a configuration may
	// set: replicas say which targets they have four times within it, whatever their own
	// setting, so one whose wait is the least never takes another for gone.
	MinUnknownTargetWait   = 10 * time.Second
	DefaultDoneTTL         = 7 * 24 * time.Hour
	DefaultRetention       = 72 * time.Hour
	DefaultMaxMessageSize  = 4 << 20
	DefaultRetryMaxDelay   = 60 * time.Second
	DefaultMode            = ModeLevels
	DefaultTimerMargin     = 2 * time.Second
	DefaultKeyPrefix       = "rd"
	DefaultDurability      = DurabilityWrite
	DefaultWaitTimeout     = time.Second
	DefaultShards          = 1
	MaxShards              = 1024
	DefaultShutdownTimeout = 30 * time.Second

	DefaultSenderLimit           = 19
	DefaultSenderWindow          = 60 * time.Second
	DefaultSenderCooldown        = 10 * time.Minute
	DefaultSenderDisableFor      = time.Hour
	DefaultSenderHTTPTimeout     = 5 * time.Second
	DefaultSenderAttempts        = 5
	DefaultSenderBackoffBase     = 500 * time.Millisecond
	DefaultSenderBackoffMax      = 30 * time.Second
	DefaultSenderBaseURL         = "https://oapi.dingtalk.com/robot/send"
	DefaultSenderMaxInFlight     = 32
	DefaultSenderBreakerFailures = 5
	DefaultSenderBreakerOpen     = 30 * time.Second
	DefaultSenderCoalesce        = CoalesceAuto
	DefaultSenderCoalesceMax     = 50
	DefaultSenderPacing          = PacingAuto
	DefaultSenderRobotLimits     = RobotLimitsLearn
	DefaultSenderPriorityMaxWait = 60 * time.Second

	DefaultFailedSendsInterval    = 30 * time.Second
	DefaultFailedSendsMaxAttempts = 20
	DefaultFailedSendsMaxAge      = 24 * time.Hour
	DefaultFailedSendsBackoffBase = 30 * time.Second
	DefaultFailedSendsBackoffCap  = time.Hour
	DefaultFailedSendsBatchSize   = 100
	DefaultFailedSendsClaimLease  = time.Minute
	DefaultFailedSendsRetention   = 30 * 24 * time.Hour

	DefaultIngressMaxBody = 1 << 20

	// On-call: escalations.NAME and rotations.NAME.
	DefaultReackAfter         = 24 * time.Hour
	DefaultRepeatGrowth       = 1.0
	DefaultRepeatLimit        = 3
	DefaultRotationTimezone   = "UTC"
	DefaultRotationHandoff    = "09:00"
	DefaultRotationPeriodDays = 7
)

// MinLiveness is the shortest scheduler.liveness: a beat every 80ms or less would spend
// Redis round trips on nothing a replica's death needs.
const MinLiveness = 500 * time.Millisecond

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	Default(&c.Log.Level, DefaultLogLevel)
	Default(&c.Log.Format, DefaultLogFormat)
	Default(&c.HTTP.Addr, DefaultHTTPAddr)
	Default(&c.HTTP.ReadHeaderTimeout, DefaultHTTPReadHeaderTimeout)
	Default(&c.HTTP.ReadTimeout, DefaultHTTPReadTimeout)
	Default(&c.HTTP.WriteTimeout, DefaultHTTPWriteTimeout)
	Default(&c.HTTP.IdleTimeout, DefaultHTTPIdleTimeout)
	Default(&c.HTTP.MaxHeaderBytes, DefaultHTTPMaxHeaderBytes)
	Default(&c.HTTP.MaxConnections, DefaultHTTPMaxConnections)
	Default(&c.RocketMQ.Topic, DefaultTopic)
	Default(&c.RocketMQ.Group, DefaultGroup)
	Default(&c.RocketMQ.SendTimeout, DefaultSendTimeout)
	if len(c.Scheduler.Levels) == 0 {
		c.Scheduler.Levels = MustParseDelayLevels(DefaultLevels)
	}
	Default(&c.Scheduler.Threshold, DefaultThreshold)
	Default(&c.Scheduler.Horizon, DefaultHorizon)
	Default(&c.Scheduler.Grace, DefaultGrace)
	Default(&c.Scheduler.Lease, DefaultLease)
	Default(&c.Scheduler.Liveness, DefaultLiveness)
	Default(&c.Scheduler.DoneTTL, DefaultDoneTTL)
	Default(&c.RocketMQ.Retention, DefaultRetention)
	Default(&c.RocketMQ.MaxMessageSize, DefaultMaxMessageSize)
	Default(&c.Ingress.MaxBody, DefaultIngressMaxBody)
	Default(&c.Ingress.DedupeWindow, 5*time.Minute)
	Default(&c.Ingress.AckLinkTTL, 24*time.Hour)
	principals := slices.Clone(c.Ingress.Principals)
	for i := range principals {
		principals[i] = principals[i].withDefaults()
	}
	c.Ingress.Principals = principals
	Default(&c.Scheduler.RetryMaxDelay, DefaultRetryMaxDelay)
	Default(&c.Scheduler.Mode, DefaultMode)
	Default(&c.Scheduler.TimerMargin, DefaultTimerMargin)
	Default(&c.Scheduler.UnknownTargetWait, DefaultUnknownTargetWait)
	Default(&c.Redis.KeyPrefix, DefaultKeyPrefix)
	Default(&c.Redis.Durability, DefaultDurability)
	Default(&c.Redis.WaitTimeout, DefaultWaitTimeout)
	Default(&c.Redis.Shards, DefaultShards)
	Default(&c.ShutdownTimeout, DefaultShutdownTimeout)
	Default(&c.Sender.Limit, DefaultSenderLimit)
	Default(&c.Sender.Window, DefaultSenderWindow)
	Default(&c.Sender.Cooldown, DefaultSenderCooldown)
	Default(&c.Sender.DisableFor, DefaultSenderDisableFor)
	Default(&c.Sender.HTTPTimeout, DefaultSenderHTTPTimeout)
	Default(&c.Sender.Attempts, DefaultSenderAttempts)
	Default(&c.Sender.BackoffBase, DefaultSenderBackoffBase)
	Default(&c.Sender.BackoffMax, DefaultSenderBackoffMax)
	Default(&c.Sender.BaseURL, DefaultSenderBaseURL)
	Default(&c.Sender.MaxInFlight, DefaultSenderMaxInFlight)
	Default(&c.Sender.BreakerFailures, DefaultSenderBreakerFailures)
	Default(&c.Sender.BreakerOpen, DefaultSenderBreakerOpen)
	Default(&c.Sender.Coalesce, DefaultSenderCoalesce)
	Default(&c.Sender.CoalesceMax, DefaultSenderCoalesceMax)
	Default(&c.Sender.Pacing, DefaultSenderPacing)
	Default(&c.Sender.RobotLimits, DefaultSenderRobotLimits)
	Default(&c.Sender.PriorityMaxWait, DefaultSenderPriorityMaxWait)
	if c.Ingress.Priorities == nil {
		c.Ingress.Priorities = map[string]string{"critical": "critical", "error": "high", "warning": "normal", "info": "low"}
	}
	c.Sender = c.Sender.withDefaults()
	Default(&c.FailedSends.Interval, DefaultFailedSendsInterval)
	Default(&c.FailedSends.MaxAttempts, DefaultFailedSendsMaxAttempts)
	Default(&c.FailedSends.MaxAge, DefaultFailedSendsMaxAge)
	Default(&c.FailedSends.BackoffBase, DefaultFailedSendsBackoffBase)
	Default(&c.FailedSends.BackoffCap, DefaultFailedSendsBackoffCap)
	Default(&c.FailedSends.BatchSize, DefaultFailedSendsBatchSize)
	Default(&c.FailedSends.ClaimLease, DefaultFailedSendsClaimLease)
	Default(&c.FailedSends.Retention, DefaultFailedSendsRetention)
	c.Escalations = withDefaults(c.Escalations, Policy.WithDefaults)
	c.Rotations = withDefaults(c.Rotations, Rotation.WithDefaults)
	return c
}

// Default sets *field to def when *field is its type's zero value. Components fill their
// options' defaults with it from the Default… constants of this package, so every
// default has one home.
func Default[T comparable](field *T, def T) {
	var zero T
	if *field == zero {
		*field = def
	}
}

// withDefaults returns a copy of m (nil when m is nil) with fill applied to every value,
// leaving m itself as it was.
func withDefaults[V any](m map[string]V, fill func(V) V) map[string]V {
	if m == nil {
		return nil
	}
	out := make(map[string]V, len(m))
	for k, v := range m {
		out[k] = fill(v)
	}
	return out
}
