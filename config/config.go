// Package config holds rocketdelay's configuration: one typed struct, loaded from a YAML
// file (strictly: an unknown key is an error), overridden by environment variables, filled
// with defaults in one place (WithDefaults) and checked by Validate before anything
// starts.
//
// Secrets (DSNs that may carry passwords, robot tokens) have the type Secret, which
// prints as "<secret>" everywhere: fmt, slog, YAML and JSON output.
//
// This package reads files and the environment it is given; it opens no connection.
package config

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/url"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// Config is the whole configuration of a rocketdelay process.
type Config struct {
	// Log configures the process's structured log.
	Log Log `yaml:"log" json:"log"`
	// HTTP configures the listener for /healthz, /readyz, /metrics and the admin API.
	HTTP HTTP `yaml:"http" json:"http"`
	// RocketMQ says where the broker is and which topic and group the scheduler uses.
	RocketMQ RocketMQ `yaml:"rocketmq" json:"rocketmq"`
	// Scheduler configures the decomposition of delays into broker delay levels.
	Scheduler Scheduler `yaml:"scheduler" json:"scheduler"`
	// Redis holds the wheel stage and the robots' rate-limit windows.
	Redis Redis `yaml:"redis" json:"redis"`
	// Postgres holds the failed_sends table.
	Postgres Postgres `yaml:"postgres" json:"postgres"`
	// Targets are the robot groups alerts are sent to, by the name producers put in
	// RD_TARGET. An alert naming a target that is not here is rejected. Default none.
	Targets map[string]Target `yaml:"targets" json:"targets"`
	// Sender configures delivery to DingTalk: the robots' rate limit, cool-downs,
	// retries and the HTTP client.
	Sender Sender `yaml:"sender" json:"sender"`
	// Admin configures the authenticated admin HTTP API (/api/v1/failed).
	Admin Admin `yaml:"admin" json:"admin"`
	// FailedSends configures the retry job of the failed_sends table.
	FailedSends FailedSends `yaml:"failedSends" json:"failedSends"`
	// ShutdownTimeout bounds a graceful stop: stop consuming, drain, close stores.
	// Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout" json:"shutdownTimeout"`
}

// Log configures logging.
type Log struct {
	// Level is one of debug, info, warn, error. Default info.
	Level string `yaml:"level" json:"level"`
	// Format is json or text. Default json.
	Format string `yaml:"format" json:"format"`
}

// Logger returns the logger l describes, writing to w.
func (l Log) Logger(w io.Writer) *slog.Logger {
	var level slog.Level
	_ = level.UnmarshalText([]byte(l.Level)) // checked by Validate; info when empty
	opts := &slog.HandlerOptions{Level: level}
	if l.Format == "text" {
		return slog.New(slog.NewTextHandler(w, opts))
	}
	return slog.New(slog.NewJSONHandler(w, opts))
}

// HTTP configures the HTTP listener.
type HTTP struct {
	// Addr is the host:port to listen on. Default ":8080".
	Addr string `yaml:"addr" json:"addr"`
}

// RocketMQ configures the connection to the broker.
type RocketMQ struct {
	// NameServers are the name server addresses, host:port. Required.
	NameServers []string `yaml:"nameServers" json:"nameServers"`
	// Topic is the topic producers publish alerts to and the scheduler re-publishes hops
	// to. Default "guava".
	Topic string `yaml:"topic" json:"topic"`
	// Group is the scheduler's consumer group. Default "rocketdelay".
	Group string `yaml:"group" json:"group"`
	// SendTimeout bounds one publish to the broker. Default 3s.
	SendTimeout time.Duration `yaml:"sendTimeout" json:"sendTimeout"`
	// Brokers are broker addresses (host:port) on which rocketdelay creates the topic at
	// start when the name server does not know it, and the consumer group's retry topic;
	// the scheduler also reads their timer precision. Default none: the topic must exist.
	Brokers []string `yaml:"brokers" json:"brokers"`
	// Retention is how long the brokers keep messages (their fileReservedTime): the
	// longest a copy of an alert can still be redelivered (a consumer-group reset, an old
	// retry message). scheduler.doneTTL must be at least this. Default 72h, RocketMQ's.
	Retention time.Duration `yaml:"retention" json:"retention"`
}

// Scheduler configures how delays are decomposed.
type Scheduler struct {
	// Levels are the broker's delay levels, in the broker's `messageDelayLevel` syntax; they
	// must match the broker's setting exactly. Default RocketMQ's 18 levels,
	// "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h".
	Levels DelayLevels `yaml:"levels" json:"levels"`
	// Threshold: a remainder at or above it takes another broker hop, a remainder below it
	// goes to the wheel stage. Must be at least the smallest level. Default 60s.
	Threshold time.Duration `yaml:"threshold" json:"threshold"`
	// Horizon is the longest delay accepted; a due time further out is rejected.
	// Default 720h (30 days).
	Horizon time.Duration `yaml:"horizon" json:"horizon"`
	// Grace is how far past its due time an entry of the wheel stage must be before any
	// replica's sweeper claims it (the replica holding it in its wheel goes first); it
	// bounds the extra lateness when a replica dies. Default 2s.
	Grace time.Duration `yaml:"grace" json:"grace"`
	// Lease is how long a claimed entry belongs to the replica that claimed it; after
	// that, if it was neither delivered nor given back (the replica died), any replica's
	// sweeper claims it again. Default 30s.
	Lease time.Duration `yaml:"lease" json:"lease"`
	// DoneTTL is how long a delivered alert's done marker turns a later duplicate of the
	// same RD_ID into a no-op: the dedupe window. It must be at least rocketmq.retention,
	// the longest the broker can still redeliver a copy; an alert due longer ago than
	// this is rejected as stale, since a copy of it could no longer be told from a first
	// arrival. Default 168h (7 days).
	DoneTTL time.Duration `yaml:"doneTTL" json:"doneTTL"`
	// RetryMaxDelay caps the wait between two tries of an alert that cannot move on while
	// a dependency is down: a hand-off that failed (it backs off from 1s, doubling) and a
	// message the consumer hands back to RocketMQ (redelivered at the largest delay level
	// not above the backoff). Reconsumption is unbounded, so an outage of any length
	// loses nothing; this bounds how late an alert is once the outage ends. At least 1s.
	// Default 60s.
	RetryMaxDelay time.Duration `yaml:"retryMaxDelay" json:"retryMaxDelay"`
	// Mode is how a message crosses the part of its delay at or above Threshold:
	//   "levels"  re-published hop by hop with the broker's delay levels (every RocketMQ);
	//   "timer"   re-published once with a RocketMQ 5 timer (TIMER_DELIVER_MS) that lands
	//             TimerMargin before the due time (several timer hops beyond the broker's
	//             maximum); a broker without timers is a start-up error;
	//   "auto"    timer when a probe at start finds the brokers accept timer messages,
	//             levels otherwise.
	// Default "levels".
	Mode string `yaml:"mode" json:"mode"`
	// TimerMargin is how long before the due time a timer hop lands, for the wheel stage to
	// deliver the rest to the millisecond. It must cover the broker's timer precision
	// (timerPrecisionMs, 1s by default: a timer message may arrive up to that much early)
	// plus a hop's latency, and be below Threshold. Default 2s.
	TimerMargin time.Duration `yaml:"timerMargin" json:"timerMargin"`
}

// Values of scheduler.mode.
const (
	ModeLevels = "levels"
	ModeTimer  = "timer"
	ModeAuto   = "auto"
)

// Redis configures the Redis connection: exactly one of URL (a single node), Sentinel or
// Cluster.
type Redis struct {
	// URL is a redis:// or rediss:// URL of a single node; it may carry a password.
	URL Secret `yaml:"url" json:"url"`
	// Sentinel reaches a primary through Redis Sentinel, which fails over to a replica.
	Sentinel *RedisSentinel `yaml:"sentinel,omitempty" json:"sentinel,omitempty"`
	// Cluster reaches a Redis Cluster. Every script keeps its keys in one hash slot.
	Cluster *RedisCluster `yaml:"cluster,omitempty" json:"cluster,omitempty"`
	// KeyPrefix starts every key rocketdelay writes, so several deployments can share one
	// Redis. Default "rd".
	KeyPrefix string `yaml:"keyPrefix" json:"keyPrefix"`
	// Durability is what "stored" means before rocketdelay acknowledges a RocketMQ message
	// or counts a claim, a release or a delivery as done:
	//   "write"       Redis answered (its own appendfsync decides the rest: with
	//                 everysec, a host crash or a failover to an asynchronous replica can
	//                 lose the last second);
	//   "fsync"       Redis answered and runs with appendfsync always (checked at start
	//                 where CONFIG GET is allowed): a host crash loses nothing answered;
	//   "replicas=N"  Redis answered and WAIT saw N replicas take the write within
	//                 WaitTimeout; otherwise the message is handed back and retried.
	// Default "write".
	Durability string `yaml:"durability" json:"durability"`
	// WaitTimeout bounds WAIT in durability replicas=N. Default 1s.
	WaitTimeout time.Duration `yaml:"waitTimeout" json:"waitTimeout"`
}

// RedisSentinel is a Sentinel deployment.
type RedisSentinel struct {
	// MasterName is the name the sentinels monitor the primary under. Required.
	MasterName string `yaml:"masterName" json:"masterName"`
	// Addresses are the sentinels, host:port. Required.
	Addresses []string `yaml:"addresses" json:"addresses"`
	// Password authenticates to the primary and replicas; SentinelPassword to the
	// sentinels, when they require one.
	Password         Secret `yaml:"password" json:"password"`
	SentinelPassword Secret `yaml:"sentinelPassword" json:"sentinelPassword"`
	// DB is the database number. Default 0.
	DB int `yaml:"db" json:"db"`
}

// RedisCluster is a Redis Cluster.
type RedisCluster struct {
	// Addresses are some of the cluster's nodes, host:port; the rest are discovered.
	// Required.
	Addresses []string `yaml:"addresses" json:"addresses"`
	// Password authenticates to the nodes.
	Password Secret `yaml:"password" json:"password"`
}

// Values of redis.durability.
const (
	DurabilityWrite = "write"
	DurabilityFsync = "fsync"
	// DurabilityReplicas is the prefix of "replicas=N".
	DurabilityReplicas = "replicas="
)

// ParseDurability reads redis.durability: the mode (write, fsync or replicas) and, for
// replicas=N, N.
func ParseDurability(s string) (mode string, replicas int, err error) {
	switch {
	case s == DurabilityWrite, s == DurabilityFsync:
		return s, 0, nil
	case strings.HasPrefix(s, DurabilityReplicas):
		n, err := strconv.Atoi(strings.TrimPrefix(s, DurabilityReplicas))
		if err != nil || n < 1 {
			return "", 0, fmt.Errorf("%q: N in replicas=N must be a whole number of at least 1", s)
		}
		return "replicas", n, nil
	}
	return "", 0, fmt.Errorf("%q is not one of write, fsync, replicas=N", s)
}

// Postgres configures the Postgres connection.
type Postgres struct {
	// URL is a postgres:// DSN; it may carry a password. Required.
	URL Secret `yaml:"url" json:"url"`
}

// Target is a named group of DingTalk robots that share the load of one group chat.
type Target struct {
	// Robots of the group; at least one.
	Robots []Robot `yaml:"robots" json:"robots"`
}

// Robot is one DingTalk custom robot.
type Robot struct {
	// Name identifies the robot in logs and metrics (never its token). Unique within its
	// target. Required.
	Name string `yaml:"name" json:"name"`
	// Token is the robot's access_token, or its whole webhook URL
	// (https://oapi.dingtalk.com/robot/send?access_token=…), from which the access_token
	// is taken. Required. Like every secret it may be written "env:NAME" (read from the
	// environment variable NAME) or "file:/path" (read from the file, surrounding
	// whitespace trimmed) and is then resolved by Load.
	Token Secret `yaml:"token" json:"token"`
	// SigningSecret is the robot's "加签" secret (SEC…); empty when the robot does not sign.
	// It may be written "env:NAME" or "file:/path" like Token.
	SigningSecret Secret `yaml:"signingSecret" json:"signingSecret"`
	// Keyword is the robot's custom keyword, when its security setting uses one; the
	// sender makes sure every message contains it. Default none.
	Keyword string `yaml:"keyword" json:"keyword"`
	// Limit is how many messages the robot may send per sender.window; 0 takes
	// sender.limit. At most 20 (DingTalk's own limit).
	Limit int `yaml:"limit" json:"limit"`
}

// AccessToken returns the robot's access_token: Token itself, or the access_token
// parameter when Token is a webhook URL. The error never contains the token.
func (r Robot) AccessToken() (Secret, error) {
	v := strings.TrimSpace(r.Token.Reveal())
	if !strings.HasPrefix(v, "http://") && !strings.HasPrefix(v, "https://") {
		return Secret(v), nil
	}
	u, err := url.Parse(v)
	if err != nil {
		return "", errors.New("the webhook URL does not parse")
	}
	tok := u.Query().Get("access_token")
	if tok == "" {
		return "", errors.New("the webhook URL has no access_token parameter")
	}
	return Secret(tok), nil
}

// MaxRobotLimit is DingTalk's limit on a custom robot: 20 messages per minute.
const MaxRobotLimit = 20

// Values of sender.coalesce.
const (
	// CoalesceAuto merges waiting alerts of a target under backlog.
	CoalesceAuto = "auto"
	// CoalesceOff sends every alert alone.
	CoalesceOff = "off"
)

// Values of sender.pacing.
const (
	// PacingAuto spends a target's budget evenly while alerts wait, merging what waits.
	PacingAuto = "auto"
	// PacingBurst sends while a robot has room, merging only once none has.
	PacingBurst = "burst"
)

// Values of sender.robotLimits.
const (
	// RobotLimitsLearn lowers the limit of a robot DingTalk throttles below its
	// configured limit, and probes a robot out of a cool-down with one request at a time.
	RobotLimitsLearn = "learn"
	// RobotLimitsFixed always uses the configured limits.
	RobotLimitsFixed = "fixed"
)

// MaxCoalesceMax is the largest sender.coalesceMax Validate accepts.
const MaxCoalesceMax = 1000

// Sender configures delivery to DingTalk robots.
type Sender struct {
	// Limit is how many messages each robot may send per Window, counted by all replicas
	// together in Redis; 1 to 20. One below DingTalk's 20 leaves room for clock skew and
	// network jitter. Default 19.
	Limit int `yaml:"limit" json:"limit"`
	// Window is the length of the sliding rate-limit window. DingTalk counts per minute,
	// so against the real service it must be at least 60s (Validate refuses less when
	// BaseURL is DingTalk's); tests against the simulator use seconds. Default 60s.
	Window time.Duration `yaml:"window" json:"window"`
	// Cooldown is how long a robot DingTalk throttled (130101, 410100, a redirect) stays
	// out of rotation. Default 10m.
	Cooldown time.Duration `yaml:"cooldown" json:"cooldown"`
	// DisableFor is how long a broken robot (bad token, signature or keyword, removed from
	// its group) stays out of rotation before it is tried again. Default 1h.
	DisableFor time.Duration `yaml:"disableFor" json:"disableFor"`
	// HTTPTimeout bounds one request to DingTalk, connection to answer. Default 5s.
	HTTPTimeout time.Duration `yaml:"httpTimeout" json:"httpTimeout"`
	// Attempts bounds the tries of one message on transient errors (system busy, 5xx,
	// 429, network errors) within one send; throttled and broken robots do not count.
	// Default 5.
	Attempts int `yaml:"attempts" json:"attempts"`
	// BackoffBase is the first retry's backoff ceiling; it doubles per attempt up to
	// BackoffMax, and the actual wait is random below it (full jitter), or Retry-After
	// when DingTalk sends one. Default 500ms.
	BackoffBase time.Duration `yaml:"backoffBase" json:"backoffBase"`
	// BackoffMax caps the backoff. Default 30s.
	BackoffMax time.Duration `yaml:"backoffMax" json:"backoffMax"`
	// BaseURL is the robot webhook endpoint without its query; point it at
	// `rocketdelay dingtalk-sim` for tests and demos. Default
	// "https://oapi.dingtalk.com/robot/send".
	BaseURL string `yaml:"baseURL" json:"baseURL"`
	// MaxInFlight bounds the HTTP requests to DingTalk in flight at once in this process.
	// Default 32.
	MaxInFlight int `yaml:"maxInFlight" json:"maxInFlight"`
	// MaxWait bounds how long one send waits for a free robot before it gives up with a
	// transient failure that says when to retry; 0 waits as long as the caller's context
	// allows. Default 0.
	MaxWait time.Duration `yaml:"maxWait" json:"maxWait"`
	// BreakerFailures is how many transient failures in a row open a robot's circuit
	// breaker, which keeps this replica from sending through it for BreakerOpen.
	// Default 5.
	BreakerFailures int `yaml:"breakerFailures" json:"breakerFailures"`
	// BreakerOpen is how long an open circuit breaker keeps its robot out of rotation
	// before one trial request. Default 30s.
	BreakerOpen time.Duration `yaml:"breakerOpen" json:"breakerOpen"`
	// Coalesce says whether alerts of one target that wait for a free robot are merged:
	// "auto" merges them, when the target's queue in this replica is longer than its
	// robots can drain within the window, into one markdown message (a title, then one
	// section per alert, in due order) of at most the size limit and CoalesceMax alerts;
	// "off" sends every alert alone. Default "auto".
	Coalesce string `yaml:"coalesce" json:"coalesce"`
	// CoalesceMax is the most alerts one merged message carries, 2 to 1000.
	// Default 50.
	CoalesceMax int `yaml:"coalesceMax" json:"coalesceMax"`
	// Pacing says how a target's budget (its robots' limits per window, shared by all
	// replicas) is spent when coalescing is on: "auto" sends a lone alert at once, but
	// while alerts wait it spends the budget evenly over the window (a token bucket in
	// Redis) and merges everything waiting into each send, so lateness under load stays
	// near one send's share of the window; "burst" sends while any robot has room and
	// merges only once none has, so a burst spends the whole window at its start and the
	// rest waits for the next. Default "auto".
	Pacing string `yaml:"pacing" json:"pacing"`
	// RobotLimits says whether the robots' limits are learned. DingTalk robots are often
	// shared (CI, a monitoring tool, a colleague's script use the same webhook), so a robot
	// may be throttled below Limit: "learn" then gives it a lower limit (three quarters of
	// what its window held, shared by all replicas in Redis), raises it again by one per
	// window without a throttle (never above Limit), sends exactly one request into a
	// robot coming out of its cool-down until that answer says it is open, and logs the
	// start of each such episode once; "fixed" always uses the configured limits.
	// Default "learn".
	RobotLimits string `yaml:"robotLimits" json:"robotLimits"`
}

// Admin configures the admin HTTP API.
type Admin struct {
	// Token is the bearer token the admin API requires (Authorization: Bearer …); at
	// least 16 characters. Default none: the admin API answers 503, disabled.
	Token Secret `yaml:"token" json:"token"`
}

// MinAdminTokenLen is the shortest admin token Validate accepts.
const MinAdminTokenLen = 16

// FailedSends configures the retry job that re-sends pending rows of failed_sends, on
// every replica.
type FailedSends struct {
	// Interval is how often the retry job looks for due rows. Default 30s.
	Interval time.Duration `yaml:"interval" json:"interval"`
	// MaxAttempts is how many retry-job attempts a row gets before it is dead.
	// Default 20.
	MaxAttempts int `yaml:"maxAttempts" json:"maxAttempts"`
	// MaxAge is how long after it was recorded a row may still be retried; a failed
	// attempt after that makes it dead. Default 24h.
	MaxAge time.Duration `yaml:"maxAge" json:"maxAge"`
	// BackoffBase is the wait after a row's first failed retry; it doubles per attempt up
	// to BackoffCap. Default 30s.
	BackoffBase time.Duration `yaml:"backoffBase" json:"backoffBase"`
	// BackoffCap caps the wait between two attempts on a row. Default 1h.
	BackoffCap time.Duration `yaml:"backoffCap" json:"backoffCap"`
	// BatchSize is how many due rows the job claims at once. Default 100.
	BatchSize int `yaml:"batchSize" json:"batchSize"`
	// ClaimLease is how long a row the retry job claimed stays its own without a renewal,
	// on Postgres's clock; the job renews it while it works through its batch and right
	// before every request, so it only bounds how long the rows of a replica that died or
	// froze wait for another. Default 1m.
	ClaimLease time.Duration `yaml:"claimLease" json:"claimLease"`
}

// MaxFailedSendsBatchSize bounds failedSends.batchSize.
const MaxFailedSendsBatchSize = 1000

func (f FailedSends) validate(bad func(key, format string, args ...any)) {
	if f.Interval < 100*time.Millisecond {
		bad("failedSends.interval", "must be at least 100ms, got %s", f.Interval)
	}
	if f.MaxAttempts < 1 {
		bad("failedSends.maxAttempts", "must be at least 1, got %d", f.MaxAttempts)
	}
	if f.MaxAge <= 0 {
		bad("failedSends.maxAge", "must be positive, got %s", f.MaxAge)
	}
	if f.BackoffBase <= 0 {
		bad("failedSends.backoffBase", "must be positive, got %s", f.BackoffBase)
	}
	if f.BackoffCap < f.BackoffBase {
		bad("failedSends.backoffCap", "must be at least failedSends.backoffBase (%s), got %s", f.BackoffBase, f.BackoffCap)
	}
	if f.BatchSize < 1 || f.BatchSize > MaxFailedSendsBatchSize {
		bad("failedSends.batchSize", "must be between 1 and %d, got %d", MaxFailedSendsBatchSize, f.BatchSize)
	}
	if f.ClaimLease < time.Second {
		bad("failedSends.claimLease", "must be at least 1s, got %s", f.ClaimLease)
	}
}

// Defaults of the fields above, in one place.
const (
	DefaultLogLevel        = "info"
	DefaultLogFormat       = "json"
	DefaultHTTPAddr        = ":8080"
	DefaultTopic           = "guava"
	DefaultGroup           = "rocketdelay"
	DefaultSendTimeout     = 3 * time.Second
	DefaultLevels          = "1s 5s 10s 30s 1m 2m 3m 4m 5m 6m 7m 8m 9m 10m 20m 30m 1h 2h"
	DefaultThreshold       = 60 * time.Second
	DefaultHorizon         = 30 * 24 * time.Hour
	DefaultGrace           = 2 * time.Second
	DefaultLease           = 30 * time.Second
	DefaultDoneTTL         = 7 * 24 * time.Hour
	DefaultRetention       = 72 * time.Hour
	DefaultRetryMaxDelay   = 60 * time.Second
	DefaultMode            = ModeLevels
	DefaultTimerMargin     = 2 * time.Second
	DefaultKeyPrefix       = "rd"
	DefaultDurability      = DurabilityWrite
	DefaultWaitTimeout     = time.Second
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

	DefaultFailedSendsInterval    = 30 * time.Second
	DefaultFailedSendsMaxAttempts = 20
	DefaultFailedSendsMaxAge      = 24 * time.Hour
	DefaultFailedSendsBackoffBase = 30 * time.Second
	DefaultFailedSendsBackoffCap  = time.Hour
	DefaultFailedSendsBatchSize   = 100
	DefaultFailedSendsClaimLease  = time.Minute
)

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	Default(&c.Log.Level, DefaultLogLevel)
	Default(&c.Log.Format, DefaultLogFormat)
	Default(&c.HTTP.Addr, DefaultHTTPAddr)
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
	Default(&c.Scheduler.DoneTTL, DefaultDoneTTL)
	Default(&c.RocketMQ.Retention, DefaultRetention)
	Default(&c.Scheduler.RetryMaxDelay, DefaultRetryMaxDelay)
	Default(&c.Scheduler.Mode, DefaultMode)
	Default(&c.Scheduler.TimerMargin, DefaultTimerMargin)
	Default(&c.Redis.KeyPrefix, DefaultKeyPrefix)
	Default(&c.Redis.Durability, DefaultDurability)
	Default(&c.Redis.WaitTimeout, DefaultWaitTimeout)
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
	Default(&c.FailedSends.Interval, DefaultFailedSendsInterval)
	Default(&c.FailedSends.MaxAttempts, DefaultFailedSendsMaxAttempts)
	Default(&c.FailedSends.MaxAge, DefaultFailedSendsMaxAge)
	Default(&c.FailedSends.BackoffBase, DefaultFailedSendsBackoffBase)
	Default(&c.FailedSends.BackoffCap, DefaultFailedSendsBackoffCap)
	Default(&c.FailedSends.BatchSize, DefaultFailedSendsBatchSize)
	Default(&c.FailedSends.ClaimLease, DefaultFailedSendsClaimLease)
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

// FieldError names the configuration key that is wrong and why.
type FieldError struct {
	Key    string // the YAML path, e.g. "scheduler.threshold"
	Reason string
}

func (e *FieldError) Error() string { return fmt.Sprintf("config: %s: %s", e.Key, e.Reason) }

// Validate reports every invalid field of c (which should have its defaults filled in),
// each as a *FieldError naming the key, joined with errors.Join.
func (c Config) Validate() error {
	var errs []error
	bad := func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Reason: fmt.Sprintf(format, args...)})
	}
	switch c.Log.Level {
	case "debug", "info", "warn", "error":
	default:
		bad("log.level", "%q is not one of debug, info, warn, error", c.Log.Level)
	}
	switch c.Log.Format {
	case "json", "text":
	default:
		bad("log.format", "%q is not one of json, text", c.Log.Format)
	}
	if _, _, err := net.SplitHostPort(c.HTTP.Addr); err != nil {
		bad("http.addr", "%q is not host:port", c.HTTP.Addr)
	}
	if len(c.RocketMQ.NameServers) == 0 {
		bad("rocketmq.nameServers", "at least one name server (host:port) is required; set it in the file or in ROCKETDELAY_NAMESRV")
	}
	for i, ns := range c.RocketMQ.NameServers {
		if _, port, err := net.SplitHostPort(ns); err != nil || port == "" {
			bad(fmt.Sprintf("rocketmq.nameServers[%d]", i), "%q is not host:port", ns)
		}
	}
	if !validResourceName(c.RocketMQ.Topic) {
		bad("rocketmq.topic", "%q is not a valid topic name (letters, digits, %%, -, _, |; at most 127 characters)", c.RocketMQ.Topic)
	}
	if !validResourceName(c.RocketMQ.Group) {
		bad("rocketmq.group", "%q is not a valid group name (letters, digits, %%, -, _, |; at most 127 characters)", c.RocketMQ.Group)
	}
	if c.RocketMQ.SendTimeout <= 0 {
		bad("rocketmq.sendTimeout", "must be positive, got %s", c.RocketMQ.SendTimeout)
	}
	if len(c.Scheduler.Levels) == 0 {
		bad("scheduler.levels", "at least one delay level is required")
	} else if c.Scheduler.Threshold < c.Scheduler.Levels[0] {
		bad("scheduler.threshold", "%s is below the smallest delay level %s", c.Scheduler.Threshold, c.Scheduler.Levels[0])
	}
	switch c.Scheduler.Mode {
	case ModeLevels, ModeTimer, ModeAuto:
	default:
		bad("scheduler.mode", "must be %q, %q or %q, got %q", ModeLevels, ModeTimer, ModeAuto, c.Scheduler.Mode)
	}
	if c.Scheduler.TimerMargin <= 0 {
		bad("scheduler.timerMargin", "must be positive, got %s", c.Scheduler.TimerMargin)
	} else if c.Scheduler.Mode != ModeLevels && c.Scheduler.TimerMargin >= c.Scheduler.Threshold {
		bad("scheduler.timerMargin", "%s must be below scheduler.threshold %s: a timer hop lands that long before the due time",
			c.Scheduler.TimerMargin, c.Scheduler.Threshold)
	}
	for i, b := range c.RocketMQ.Brokers {
		if _, port, err := net.SplitHostPort(b); err != nil || port == "" {
			bad(fmt.Sprintf("rocketmq.brokers[%d]", i), "%q is not host:port", b)
		}
	}
	if c.Scheduler.Grace <= 0 {
		bad("scheduler.grace", "must be positive, got %s", c.Scheduler.Grace)
	}
	if c.Scheduler.DoneTTL < time.Minute {
		bad("scheduler.doneTTL", "must be at least 1m, got %s", c.Scheduler.DoneTTL)
	}
	if c.RocketMQ.Retention <= 0 {
		bad("rocketmq.retention", "must be positive (the brokers' fileReservedTime), got %s", c.RocketMQ.Retention)
	} else if c.Scheduler.DoneTTL < c.RocketMQ.Retention {
		bad("scheduler.doneTTL", "%s is shorter than rocketmq.retention %s: a copy of an alert the broker can still "+
			"redeliver after its done marker expired would be sent again; make it at least the brokers' retention",
			c.Scheduler.DoneTTL, c.RocketMQ.Retention)
	}
	if c.Scheduler.RetryMaxDelay < time.Second {
		bad("scheduler.retryMaxDelay", "must be at least 1s, got %s", c.Scheduler.RetryMaxDelay)
	}
	if c.Scheduler.Lease < time.Second {
		bad("scheduler.lease", "must be at least 1s, got %s", c.Scheduler.Lease)
	}
	if c.Scheduler.Horizon <= 0 {
		bad("scheduler.horizon", "must be positive, got %s", c.Scheduler.Horizon)
	}
	topologies := 0
	for _, set := range []bool{c.Redis.URL != "", c.Redis.Sentinel != nil, c.Redis.Cluster != nil} {
		if set {
			topologies++
		}
	}
	switch {
	case topologies == 0:
		bad("redis.url", "required (or redis.sentinel, or redis.cluster); set it in the file or in ROCKETDELAY_REDIS_URL")
	case topologies > 1:
		bad("redis", "give one of redis.url, redis.sentinel and redis.cluster, not several")
	case c.Redis.Sentinel != nil:
		if c.Redis.Sentinel.MasterName == "" {
			bad("redis.sentinel.masterName", "required: the name the sentinels monitor the primary under")
		}
		if len(c.Redis.Sentinel.Addresses) == 0 {
			bad("redis.sentinel.addresses", "at least one sentinel host:port is required")
		}
		for i, a := range c.Redis.Sentinel.Addresses {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				bad(fmt.Sprintf("redis.sentinel.addresses[%d]", i), "%q is not host:port", a)
			}
		}
	case c.Redis.Cluster != nil:
		if len(c.Redis.Cluster.Addresses) == 0 {
			bad("redis.cluster.addresses", "at least one node host:port is required")
		}
		for i, a := range c.Redis.Cluster.Addresses {
			if _, port, err := net.SplitHostPort(a); err != nil || port == "" {
				bad(fmt.Sprintf("redis.cluster.addresses[%d]", i), "%q is not host:port", a)
			}
		}
	default:
		if u, err := url.Parse(c.Redis.URL.Reveal()); err != nil || (u.Scheme != "redis" && u.Scheme != "rediss" && u.Scheme != "unix") {
			bad("redis.url", "must be a redis://, rediss:// or unix:// URL")
		}
	}
	if _, _, err := ParseDurability(c.Redis.Durability); err != nil {
		bad("redis.durability", "%v", err)
	}
	if c.Redis.WaitTimeout <= 0 {
		bad("redis.waitTimeout", "must be positive, got %s", c.Redis.WaitTimeout)
	}
	if strings.ContainsAny(c.Redis.KeyPrefix, "{} \t\n") {
		bad("redis.keyPrefix", "%q must not contain braces or whitespace", c.Redis.KeyPrefix)
	}
	if c.Postgres.URL == "" {
		bad("postgres.url", "required; set it in the file or in ROCKETDELAY_POSTGRES_URL")
	} else if u, err := url.Parse(c.Postgres.URL.Reveal()); err != nil || (u.Scheme != "postgres" && u.Scheme != "postgresql") {
		bad("postgres.url", "must be a postgres:// URL")
	}
	for name, t := range c.Targets {
		key := "targets." + name
		if !validResourceName(name) {
			bad(key, "a target name may hold letters, digits, %%, -, _ and | only")
		}
		if len(t.Robots) == 0 {
			bad(key+".robots", "a target needs at least one robot")
		}
		seen := map[string]bool{}
		for i, r := range t.Robots {
			rkey := fmt.Sprintf("%s.robots[%d]", key, i)
			switch {
			case r.Name == "":
				bad(rkey+".name", "required")
			case seen[r.Name]:
				bad(rkey+".name", "%q is used twice in this target", r.Name)
			}
			seen[r.Name] = true
			if r.Token == "" {
				bad(rkey+".token", "required (the robot webhook's access_token)")
			} else if tok, err := r.AccessToken(); err != nil {
				bad(rkey+".token", "%v", err)
			} else if strings.ContainsAny(tok.Reveal(), " \t\r\n&?#") {
				bad(rkey+".token", "the access_token holds whitespace or URL punctuation")
			}
			if r.Limit < 0 || r.Limit > MaxRobotLimit {
				bad(rkey+".limit", "must be between 1 and %d (DingTalk's limit), or 0 for sender.limit; got %d", MaxRobotLimit, r.Limit)
			}
		}
	}
	c.Sender.validate(bad)
	if tok := c.Admin.Token.Reveal(); tok != "" && (len(tok) < MinAdminTokenLen || strings.ContainsAny(tok, " \t\r\n")) {
		bad("admin.token", "must be at least %d characters without whitespace", MinAdminTokenLen)
	}
	c.FailedSends.validate(bad)
	if c.ShutdownTimeout <= 0 {
		bad("shutdownTimeout", "must be positive, got %s", c.ShutdownTimeout)
	}
	return errors.Join(errs...)
}

func (s Sender) validate(bad func(key, format string, args ...any)) {
	if s.Limit < 1 || s.Limit > MaxRobotLimit {
		bad("sender.limit", "must be between 1 and %d (DingTalk's limit per robot), got %d", MaxRobotLimit, s.Limit)
	}
	u, err := url.Parse(s.BaseURL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" || u.RawQuery != "" {
		bad("sender.baseURL", "%q must be an http:// or https:// URL without a query", s.BaseURL)
	}
	switch {
	case s.Window < time.Second:
		bad("sender.window", "must be at least 1s, got %s", s.Window)
	case s.Window < time.Minute && err == nil && u.Host == "oapi.dingtalk.com":
		bad("sender.window", "DingTalk counts per minute: the window must be at least 60s against %s, got %s", u.Host, s.Window)
	}
	positive := map[string]time.Duration{
		"sender.cooldown": s.Cooldown, "sender.disableFor": s.DisableFor,
		"sender.httpTimeout": s.HTTPTimeout, "sender.backoffBase": s.BackoffBase,
	}
	for _, key := range []string{"sender.cooldown", "sender.disableFor", "sender.httpTimeout", "sender.backoffBase"} {
		if positive[key] <= 0 {
			bad(key, "must be positive, got %s", positive[key])
		}
	}
	if s.BackoffMax < s.BackoffBase {
		bad("sender.backoffMax", "%s is below sender.backoffBase %s", s.BackoffMax, s.BackoffBase)
	}
	if s.Attempts < 1 {
		bad("sender.attempts", "must be at least 1, got %d", s.Attempts)
	}
	if s.MaxInFlight < 1 {
		bad("sender.maxInFlight", "must be at least 1, got %d", s.MaxInFlight)
	}
	if s.BreakerFailures < 1 {
		bad("sender.breakerFailures", "must be at least 1, got %d", s.BreakerFailures)
	}
	if s.BreakerOpen <= 0 {
		bad("sender.breakerOpen", "must be positive, got %s", s.BreakerOpen)
	}
	if s.MaxWait < 0 {
		bad("sender.maxWait", "must not be negative, got %s", s.MaxWait)
	}
	if s.Coalesce != CoalesceAuto && s.Coalesce != CoalesceOff {
		bad("sender.coalesce", "must be %q or %q, got %q", CoalesceAuto, CoalesceOff, s.Coalesce)
	}
	if s.Pacing != PacingAuto && s.Pacing != PacingBurst {
		bad("sender.pacing", "must be %q or %q, got %q", PacingAuto, PacingBurst, s.Pacing)
	}
	if s.RobotLimits != RobotLimitsLearn && s.RobotLimits != RobotLimitsFixed {
		bad("sender.robotLimits", "must be %q or %q, got %q", RobotLimitsLearn, RobotLimitsFixed, s.RobotLimits)
	}
	if s.CoalesceMax < 2 || s.CoalesceMax > MaxCoalesceMax {
		bad("sender.coalesceMax", "must be between 2 and %d (sender.coalesce: off sends every alert alone), got %d", MaxCoalesceMax, s.CoalesceMax)
	}
}

// validResourceName mirrors the broker's check for topic and group names.
func validResourceName(s string) bool {
	if s == "" || len(s) > 127 {
		return false
	}
	for _, r := range s {
		ok := r == '%' || r == '-' || r == '_' || r == '|' ||
			(r >= 'a' && r <= 'z') || (r >= 'A' && r <= 'Z') || (r >= '0' && r <= '9')
		if !ok {
			return false
		}
	}
	return true
}

// Decode reads YAML from r strictly: an unknown key or a value of the wrong type is an
// error that names the line. An empty document yields the zero Config.
func Decode(r io.Reader) (Config, error) {
	var c Config
	dec := yaml.NewDecoder(r)
	dec.KnownFields(true)
	if err := dec.Decode(&c); err != nil && !errors.Is(err, io.EOF) {
		var te *yaml.TypeError
		if errors.As(err, &te) {
			for i, e := range te.Errors {
				te.Errors[i] = cannotUnmarshal.ReplaceAllStringFunc(unknownKey.ReplaceAllStringFunc(e, hideOddKey), hideValue)
			}
		}
		return Config{}, fmt.Errorf("config: %w", err)
	}
	return c, nil
}

// unknownKey finds the strict decoder's "field KEY not found in type T".
var unknownKey = regexp.MustCompile(`field (.*) not found in type (\S+)`)

// cannotUnmarshal finds the decoder's "cannot unmarshal TAG `VALUE` into T".
var cannotUnmarshal = regexp.MustCompile("cannot unmarshal (\\S+) `.*?` into (\\S+)")

// hideValue drops the value from a type error, and a tag that is not one of YAML's own
// (!!str, !!int, …): either may be a secret written in the wrong place. The line number
// and the expected type say what to fix.
func hideValue(m string) string {
	sub := cannotUnmarshal.FindStringSubmatch(m)
	tag := sub[1]
	if !strings.HasPrefix(tag, "!!") || !keyName.MatchString(tag[2:]) {
		tag = "a value with a custom tag"
	}
	return "cannot unmarshal " + tag + " into " + sub[2]
}

// keyName is what a configuration key looks like.
var keyName = regexp.MustCompile(`^[A-Za-z][A-Za-z0-9_]{0,39}$`)

// hideOddKey keeps an unknown key in the error when it looks like a key name (a typo to
// fix) and leaves it out otherwise: a token pasted one indentation too far, or a value
// written as a key, is not echoed into logs.
func hideOddKey(m string) string {
	sub := unknownKey.FindStringSubmatch(m)
	if keyName.MatchString(sub[1]) {
		return m
	}
	return "an unknown key that does not look like a key name (not shown: a value written as a key, or mis-indented?) in type " + sub[2]
}

// Load reads the YAML file at path (no file when path is ""), applies the environment
// overrides from getenv (os.Getenv when nil), fills in defaults and validates.
func Load(path string, getenv func(string) string) (Config, error) {
	var c Config
	if path != "" {
		data, err := os.ReadFile(path)
		if err != nil {
			return Config{}, fmt.Errorf("config: read %s: %w", path, err)
		}
		c, err = Decode(bytes.NewReader(data))
		if err != nil {
			return Config{}, fmt.Errorf("%s: %w", path, err)
		}
	}
	if getenv == nil {
		getenv = os.Getenv
	}
	if err := c.applyEnv(getenv); err != nil {
		return Config{}, err
	}
	if err := c.resolveSecrets(getenv, os.ReadFile); err != nil {
		return Config{}, err
	}
	c = c.WithDefaults()
	if err := c.Validate(); err != nil {
		return Config{}, err
	}
	return c, nil
}

// EnvVar is one environment override: when the variable is set and not empty, it
// replaces the key's value from the file.
type EnvVar struct {
	Name string // e.g. ROCKETDELAY_NAMESRV
	Key  string // the YAML key it overrides
	set  func(c *Config, v string) error
}

// EnvVars lists every environment variable Load reads.
var EnvVars = []EnvVar{
	{"ROCKETDELAY_LOG_LEVEL", "log.level", func(c *Config, v string) error { c.Log.Level = v; return nil }},
	{"ROCKETDELAY_LOG_FORMAT", "log.format", func(c *Config, v string) error { c.Log.Format = v; return nil }},
	{"ROCKETDELAY_HTTP_ADDR", "http.addr", func(c *Config, v string) error { c.HTTP.Addr = v; return nil }},
	{"ROCKETDELAY_NAMESRV", "rocketmq.nameServers", func(c *Config, v string) error {
		c.RocketMQ.NameServers = splitList(v)
		return nil
	}},
	{"ROCKETDELAY_BROKERS", "rocketmq.brokers", func(c *Config, v string) error {
		c.RocketMQ.Brokers = splitList(v)
		return nil
	}},
	{"ROCKETDELAY_TOPIC", "rocketmq.topic", func(c *Config, v string) error { c.RocketMQ.Topic = v; return nil }},
	{"ROCKETDELAY_GROUP", "rocketmq.group", func(c *Config, v string) error { c.RocketMQ.Group = v; return nil }},
	{"ROCKETDELAY_LEVELS", "scheduler.levels", func(c *Config, v string) error {
		l, err := ParseDelayLevels(v)
		c.Scheduler.Levels = l
		return err
	}},
	{"ROCKETDELAY_THRESHOLD", "scheduler.threshold", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		c.Scheduler.Threshold = d
		return err
	}},
	{"ROCKETDELAY_SCHEDULER_MODE", "scheduler.mode", func(c *Config, v string) error { c.Scheduler.Mode = v; return nil }},
	{"ROCKETDELAY_REDIS_URL", "redis.url", func(c *Config, v string) error { c.Redis.URL = Secret(v); return nil }},
	// The topology variables replace the file's whole topology (a URL included).
	{"ROCKETDELAY_REDIS_SENTINEL", "redis.sentinel.addresses", func(c *Config, v string) error {
		if c.Redis.Sentinel == nil {
			c.Redis.Sentinel = &RedisSentinel{}
		}
		c.Redis.Sentinel.Addresses, c.Redis.URL, c.Redis.Cluster = splitList(v), "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_SENTINEL_MASTER", "redis.sentinel.masterName", func(c *Config, v string) error {
		if c.Redis.Sentinel == nil {
			c.Redis.Sentinel = &RedisSentinel{}
		}
		c.Redis.Sentinel.MasterName, c.Redis.URL, c.Redis.Cluster = v, "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_CLUSTER", "redis.cluster.addresses", func(c *Config, v string) error {
		if c.Redis.Cluster == nil {
			c.Redis.Cluster = &RedisCluster{}
		}
		c.Redis.Cluster.Addresses, c.Redis.URL, c.Redis.Sentinel = splitList(v), "", nil
		return nil
	}},
	{"ROCKETDELAY_REDIS_KEY_PREFIX", "redis.keyPrefix", func(c *Config, v string) error { c.Redis.KeyPrefix = v; return nil }},
	{"ROCKETDELAY_REDIS_DURABILITY", "redis.durability", func(c *Config, v string) error { c.Redis.Durability = v; return nil }},
	{"ROCKETDELAY_POSTGRES_URL", "postgres.url", func(c *Config, v string) error { c.Postgres.URL = Secret(v); return nil }},
	{"ROCKETDELAY_SENDER_BASE_URL", "sender.baseURL", func(c *Config, v string) error { c.Sender.BaseURL = v; return nil }},
	{"ROCKETDELAY_SENDER_WINDOW", "sender.window", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		c.Sender.Window = d
		return err
	}},
	{"ROCKETDELAY_SENDER_LIMIT", "sender.limit", func(c *Config, v string) error {
		n, err := strconv.Atoi(v)
		c.Sender.Limit = n
		return err
	}},
	{"ROCKETDELAY_ADMIN_TOKEN", "admin.token", func(c *Config, v string) error { c.Admin.Token = Secret(v); return nil }},
	{"ROCKETDELAY_SHUTDOWN_TIMEOUT", "shutdownTimeout", func(c *Config, v string) error {
		d, err := time.ParseDuration(v)
		c.ShutdownTimeout = d
		return err
	}},
}

func (c *Config) applyEnv(getenv func(string) string) error {
	var errs []error
	for _, ev := range EnvVars {
		v := getenv(ev.Name)
		if v == "" {
			continue
		}
		if err := ev.set(c, v); err != nil {
			// The value may be a secret: name the variable, not its content.
			errs = append(errs, &FieldError{Key: ev.Key, Reason: fmt.Sprintf("from %s: %v", ev.Name, redactErr(err, v))})
		}
	}
	return errors.Join(errs...)
}

func redactErr(err error, value string) string {
	return strings.ReplaceAll(err.Error(), value, "<value>")
}

func splitList(v string) []string {
	var out []string
	for _, f := range strings.FieldsFunc(v, func(r rune) bool { return r == ',' || r == ';' || r == ' ' }) {
		out = append(out, f)
	}
	return out
}

// Redacted returns the effective configuration as YAML with every secret printed as
// "<secret>"; `rocketdelay config check` prints it.
func (c Config) Redacted() string {
	out, err := yaml.Marshal(c)
	if err != nil { // only unmarshalable types could fail, and Config has none
		return fmt.Sprintf("config: cannot render: %v", err)
	}
	return string(out)
}

// DelayLevels are the broker's delay levels in order; level i+1 (RocketMQ's DELAY=i+1)
// waits DelayLevels[i].
type DelayLevels []time.Duration

// ParseDelayLevels parses the broker's `messageDelayLevel` syntax: whole numbers with a
// unit s, m, h or d, separated by single spaces, strictly increasing.
func ParseDelayLevels(s string) (DelayLevels, error) {
	if s == "" {
		return nil, errors.New("empty level list")
	}
	fields := strings.Split(s, " ")
	levels := make(DelayLevels, 0, len(fields))
	for i, f := range fields {
		if f == "" {
			return nil, fmt.Errorf("levels must be separated by single spaces (as the broker requires): %q", s)
		}
		unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[f[len(f)-1]]
		n, err := strconv.Atoi(f[:len(f)-1])
		if unit == 0 || err != nil || n <= 0 || f[0] == '+' {
			return nil, fmt.Errorf("level %d %q: want a positive whole number followed by s, m, h or d", i+1, f)
		}
		if int64(n) > int64(maxLevel/unit) {
			return nil, fmt.Errorf("level %d %q is longer than %s, far beyond any broker's delay", i+1, f, maxLevel)
		}
		d := time.Duration(n) * unit
		if i > 0 && d <= levels[i-1] {
			return nil, fmt.Errorf("level %d %q is not longer than level %d (%s): levels must increase", i+1, f, i, levels[i-1])
		}
		levels = append(levels, d)
	}
	return levels, nil
}

// maxLevel bounds one delay level; it keeps the arithmetic far from overflowing.
const maxLevel = 100 * 365 * 24 * time.Hour

// MustParseDelayLevels is ParseDelayLevels for constants; it panics on a bad string.
func MustParseDelayLevels(s string) DelayLevels {
	l, err := ParseDelayLevels(s)
	if err != nil {
		panic(err)
	}
	return l
}

// String prints the levels in the broker's syntax.
func (l DelayLevels) String() string {
	parts := make([]string, len(l))
	for i, d := range l {
		switch {
		case d%(24*time.Hour) == 0:
			parts[i] = fmt.Sprintf("%dd", d/(24*time.Hour))
		case d%time.Hour == 0:
			parts[i] = fmt.Sprintf("%dh", d/time.Hour)
		case d%time.Minute == 0:
			parts[i] = fmt.Sprintf("%dm", d/time.Minute)
		default:
			parts[i] = fmt.Sprintf("%ds", d/time.Second)
		}
	}
	return strings.Join(parts, " ")
}

// MarshalText prints the levels in the broker's syntax.
func (l DelayLevels) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalText parses the broker's syntax (see ParseDelayLevels).
func (l *DelayLevels) UnmarshalText(b []byte) error {
	v, err := ParseDelayLevels(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
