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
	"fmt"
	"io"
	"log/slog"
	"strconv"
	"strings"
	"time"
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
	// Targets are the robot groups (DingTalk, WeCom, Feishu) and RocketMQ topics due
	// messages are sent to, by the name producers put in RD_TARGET. A message naming a
	// target that is not here is rejected. Default none.
	Targets map[string]Target `yaml:"targets" json:"targets"`
	// Escalations are the on-call escalation policies, by name: the steps (a target and
	// whom to mention, at offsets from the episode's start) an episode pages through
	// until it is acknowledged or resolved. Default none.
	Escalations map[string]Policy `yaml:"escalations" json:"escalations"`
	// Rotations are the on-call rotations, by name, whose member on duty an escalation
	// step may mention. Default none.
	Rotations map[string]Rotation `yaml:"rotations" json:"rotations"`
	// Sender configures delivery to chat robots: their rate limits, cool-downs, retries,
	// merging and the HTTP client (DingTalk's at the top, WeCom's and Feishu's in their
	// sections).
	Sender Sender `yaml:"sender" json:"sender"`
	// Admin configures the authenticated admin HTTP API (/api/v1/failed).
	Admin Admin `yaml:"admin" json:"admin"`
	// Ingress configures the ways in over HTTP: the publish API (/api/v1/alerts) and
	// the Alertmanager receiver (/api/v1/alertmanager/{target}).
	Ingress Ingress `yaml:"ingress" json:"ingress"`
	// FailedSends configures the retry job of the failed_sends table.
	FailedSends FailedSends `yaml:"failedSends" json:"failedSends"`
	// Signing holds the keys the service signs what only it writes with.
	Signing Signing `yaml:"signing" json:"signing"`
	// ShutdownTimeout bounds a graceful stop: stop consuming, drain, close stores.
	// Default 30s.
	ShutdownTimeout time.Duration `yaml:"shutdownTimeout" json:"shutdownTimeout"`

	// files are the files besides the configuration file that its values come from: the
	// file: secrets and the targets' Alertmanager templates (Files).
	files []string
}

// Signing holds the service's own signing keys: they sign the marks of escalation steps
// (RD_EPISODE_SIG, checked before a step is sent) and the acknowledgement links, each
// with a key derived for it alone. They are no producer's credential.
type Signing struct {
	// Keys are the signing keys, each at least 32 characters, written like every secret
	// ("env:NAME", "file:/path"). The first signs; every one verifies: to rotate, put the
	// new key first and keep the old one listed until what it signed has expired (the
	// acknowledgement links' ingress.ackLinkTTL, the steps published before, at most the
	// longest escalation). Default none: a key generated once for the deployment and kept
	// in Redis under the key prefix ({p}:signing-key), which every replica reads at start.
	Keys []Secret `yaml:"keys" json:"keys,omitempty"`
}

// MinSigningKeyLen is the shortest signing key Validate accepts.
const MinSigningKeyLen = 32

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
	// TrustedProxies are the reverse proxies (CIDRs or addresses) whose X-Forwarded-For
	// and X-Forwarded-Proto the service believes: the client's address for the
	// console's login limits, and HTTPS for Secure cookies behind a proxy that
	// terminates TLS. None by default: the headers are ignored.
	TrustedProxies []string `yaml:"trustedProxies" json:"trustedProxies,omitempty"`
	// PublicAddr, when set, is a second listener (host:port) that serves only what the
	// on-call people's phones must reach from outside: the acknowledgement pages under
	// /ack/ and /healthz; everything else is 404 there. Addr keeps serving everything.
	// Default none.
	PublicAddr string `yaml:"publicAddr" json:"publicAddr,omitempty"`
	// TLSCertFile and TLSKeyFile, when set, make both listeners serve HTTPS with this
	// certificate and key (PEM), read again when the files change (a renewed
	// certificate needs no restart). Default none: plain HTTP, for a TLS-terminating
	// proxy in front.
	TLSCertFile string `yaml:"tlsCertFile" json:"tlsCertFile,omitempty"`
	TLSKeyFile  string `yaml:"tlsKeyFile" json:"tlsKeyFile,omitempty"`
	// ReadHeaderTimeout bounds reading a request's headers. Default 5s.
	ReadHeaderTimeout time.Duration `yaml:"readHeaderTimeout" json:"readHeaderTimeout"`
	// ReadTimeout bounds reading a whole request, its body included: a client that sends
	// its body slowly is cut off. Default 30s.
	ReadTimeout time.Duration `yaml:"readTimeout" json:"readTimeout"`
	// WriteTimeout bounds a request from the end of its headers to the end of its
	// response. Default 60s.
	WriteTimeout time.Duration `yaml:"writeTimeout" json:"writeTimeout"`
	// IdleTimeout closes a keep-alive connection that carried no request for this long.
	// Default 60s.
	IdleTimeout time.Duration `yaml:"idleTimeout" json:"idleTimeout"`
	// MaxHeaderBytes bounds a request's headers, bytes. Default 65536.
	MaxHeaderBytes int `yaml:"maxHeaderBytes" json:"maxHeaderBytes"`
	// MaxConnections is the most connections served at once; a connection over it is
	// closed as soon as it is accepted (and counted). Default 512.
	MaxConnections int `yaml:"maxConnections" json:"maxConnections"`
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
	// MaxMessageSize is the largest message body the brokers accept (their
	// maxMessageSize): a due message of a topic target whose body is larger is refused
	// before it is sent, as it can never be stored. Default 4194304 (4 MiB), RocketMQ's.
	MaxMessageSize int `yaml:"maxMessageSize" json:"maxMessageSize"`
	// AccessKey and SecretKey sign every request rocketdelay makes to the name servers and
	// brokers (the producers, the consumer, the admin calls), for brokers that authenticate
	// their clients: RocketMQ 5's ACL 2.0 (authenticationEnabled; the access key is a
	// user's name, the secret key its password) or ACL 1.0 (aclEnable). Both or neither.
	// SecretKey, like every secret, may be written "env:NAME" or "file:/path".
	// Default none: requests are not signed.
	AccessKey string `yaml:"accessKey" json:"accessKey,omitempty"`
	SecretKey Secret `yaml:"secretKey" json:"secretKey,omitempty"`
	// TLS makes every connection to the name servers and brokers TLS (the brokers'
	// tls.server.mode permissive or enforcing). The pinned RocketMQ Go client does not
	// verify the server's certificate: the connection is private from anyone who only
	// listens, not from someone who can stand in the middle (docs/exposure.md). Default
	// false.
	TLS bool `yaml:"tls" json:"tls,omitempty"`
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
	// Lease is the backstop of a claim: how long a claimed entry belongs to its claim when
	// nothing tells whether the claim's replica is live (a claim of a version without
	// liveness), and how long a parked entry waits for an adopter; after that any
	// replica's sweeper claims it again. Default 30s.
	Lease time.Duration `yaml:"lease" json:"lease"`
	// Liveness is the liveness period T of the replicas: each renews its liveness in Redis
	// every T/6, and when one has not for T (it died, or was paused or cut off from Redis
	// that long) the others take over everything it held at once. A silence of Redis
	// itself (every replica cut off, a restart, a failover) takes nothing over: the
	// replicas get a whole T to beat again after it. At least 500ms. Default 3s.
	Liveness time.Duration `yaml:"liveness" json:"liveness"`
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
	// UnknownTargetWait is how long an alert for a target this replica's configuration
	// does not have waits for a replica that has it: while any replica of the deployment
	// said it has the target within this much (a configuration rolled out replica by
	// replica), the alert is sent on for it; after, it is rejected as unknown_target. A
	// name no replica ever had is rejected at once. Cover a rolling update. Default 2m.
	UnknownTargetWait time.Duration `yaml:"unknownTargetWait" json:"unknownTargetWait"`
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
	// TLS, when set, reaches Redis over TLS in any topology: the single node (whose URL
	// must then be rediss://), the sentinels and the primaries and replicas they name,
	// every node of a Cluster. Default none: plain TCP, or a rediss:// URL's TLS with the
	// system's roots.
	TLS *RedisTLS `yaml:"tls,omitempty" json:"tls,omitempty"`
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
	// Shards is how many shards the wheel stage is split into, 1 to 1024, each under a
	// hash tag of its own, so that a Redis Cluster spreads the stage over its primaries
	// (an alert belongs to one shard, by a hash of its id). A change rolled out replica
	// by replica moves the stage to the new count online, every replica following the
	// deployment's layout meanwhile (docs/design.md, Shards). Default 1: the single-tag
	// layout.
	Shards int `yaml:"shards" json:"shards"`
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

// RedisTLS is how rocketdelay checks the Redis servers' certificates and proves itself
// to them. The files are read at start.
type RedisTLS struct {
	// CAFile is a PEM file of the certificate authorities that sign the servers'
	// certificates. Default the system's roots.
	CAFile string `yaml:"caFile" json:"caFile,omitempty"`
	// CertFile and KeyFile are the client's certificate and key (PEM), for servers that
	// require one (tls-auth-clients). Both or neither. Default none.
	CertFile string `yaml:"certFile" json:"certFile,omitempty"`
	KeyFile  string `yaml:"keyFile" json:"keyFile,omitempty"`
	// ServerName is the name every server's certificate must carry. Default the host of
	// the address dialed (as a Cluster or Sentinel announces it).
	ServerName string `yaml:"serverName" json:"serverName,omitempty"`
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

// Target is where the alerts that name it in RD_TARGET go: a group of chat robots of one
// platform that share the load of one group chat (Robots), or a RocketMQ business topic
// (Topic). A target has exactly one of the two.
type Target struct {
	// Kind is the target's channel: a chat channel's kind ("dingtalk", "wecom", "feishu",
	// "slack") for a group of that platform's robots, "topic" for a RocketMQ topic.
	// Default "topic" when Topic is set, "dingtalk" otherwise.
	Kind string `yaml:"kind" json:"kind,omitempty"`
	// Robots of a robot group, all of Kind's platform; at least one when Topic is not set.
	Robots []Robot `yaml:"robots" json:"robots"`
	// Topic makes the target a RocketMQ topic target: a due message is sent to a business
	// topic with its body, tag, keys and user properties as the producer published them.
	Topic *TopicTarget `yaml:"topic" json:"topic,omitempty"`
	// Alertmanager says how Alertmanager notifications for this robot group are
	// rendered: its template file and its mentions. Default: the built-in template of its
	// kind, no mentions.
	Alertmanager *AlertmanagerTarget `yaml:"alertmanager" json:"alertmanager,omitempty"`
}

// AlertmanagerTarget renders Alertmanager notifications for a robot group.
type AlertmanagerTarget struct {
	// Template is a Go text/template file defining "title" and "text" over the
	// notification ("dingtalk.title" and "dingtalk.text" are accepted too); the text is
	// markdown in the subset of the target's platform. Default the built-in template of
	// the target's kind.
	Template string `yaml:"template" json:"template,omitempty"`
	// Mentions add people to a firing notification whose alerts match. Default none.
	Mentions []Mention `yaml:"mentions" json:"mentions,omitempty"`
}

// Mention mentions people in a firing notification that has an alert whose labels
// include every label of Match (an empty Match matches every notification).
type Mention struct {
	// Match are labels an alert must carry, name to value.
	Match map[string]string `yaml:"match" json:"match,omitempty"`
	// AtAll mentions everyone in the group chat.
	AtAll bool `yaml:"atAll" json:"atAll,omitempty"`
	// Mobiles and UserIDs are the people mentioned: mobile numbers (DingTalk, WeCom) and
	// user ids (DingTalk userId, WeCom userid, Feishu open_id).
	Mobiles []string `yaml:"mobiles" json:"mobiles,omitempty"`
	UserIDs []string `yaml:"userIds" json:"userIds,omitempty"`
}

// The kinds of target that config itself knows, as Target.Kind names them; the chat
// channels' kinds come from their registry (Kinds, ChatChannels).
const (
	// KindTopic is a RocketMQ business topic.
	KindTopic = "topic"
	// KindDingTalk is the kind of a robot group that names none: DingTalk custom robots,
	// the first chat channel rocketdelay had.
	KindDingTalk = "dingtalk"
)

// Channel returns the target's kind: Kind, or when it is empty KindTopic for a topic
// target and KindDingTalk for robots.
func (t Target) Channel() string {
	switch {
	case t.Kind != "":
		return t.Kind
	case t.Topic != nil:
		return KindTopic
	}
	return KindDingTalk
}

// Chat reports whether the target is a group of chat robots (any kind but topic).
func (t Target) Chat() bool { return t.Channel() != KindTopic }

// TopicTarget is a RocketMQ topic that due messages are delivered to.
type TopicTarget struct {
	// Name is the business topic. Required.
	Name string `yaml:"name" json:"name"`
	// Tag is the tag of a delivered message whose producer gave it none. Default none:
	// the message keeps the tag it was published with, if any.
	Tag string `yaml:"tag" json:"tag,omitempty"`
	// AllowOverride lets a message name its own destination with the RD_TOPIC, RD_TAG
	// and RD_KEYS properties; RD_TOPIC may only name Name or a topic of AllowTopics.
	// Default false: a message carrying any of them is rejected.
	AllowOverride bool `yaml:"allowOverride" json:"allowOverride,omitempty"`
	// AllowTopics are the topics besides Name that RD_TOPIC may name (AllowOverride
	// only). Default none.
	AllowTopics []string `yaml:"allowTopics" json:"allowTopics,omitempty"`
	// RatePerSecond, when above 0, caps the messages delivered to this target per second,
	// counted by all replicas together in Redis, to protect a slow consumer. Default 0:
	// no cap.
	RatePerSecond int `yaml:"ratePerSecond" json:"ratePerSecond,omitempty"`
}

// Robot is one chat robot: a DingTalk custom robot, a WeCom group robot or a Feishu
// custom bot, as its target's kind says.
type Robot struct {
	// Name identifies the robot in logs and metrics (never its token). Unique within its
	// target. Required.
	Name string `yaml:"name" json:"name"`
	// Token is the robot's credential, or its whole webhook URL, from which the
	// credential is taken: DingTalk's access_token
	// (https://oapi.dingtalk.com/robot/send?access_token=…), WeCom's key
	// (https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=…), Feishu's hook token
	// (https://open.feishu.cn/open-apis/bot/v2/hook/…). Required. Like every secret it may
	// be written "env:NAME" (read from the environment variable NAME) or "file:/path"
	// (read from the file, surrounding whitespace trimmed) and is then resolved by Load.
	Token Secret `yaml:"token" json:"token"`
	// SigningSecret is the robot's signing secret (DingTalk's "加签" SEC…, Feishu's
	// "签名校验"); empty when the robot does not sign. WeCom robots do not sign. It may be
	// written "env:NAME" or "file:/path" like Token.
	SigningSecret Secret `yaml:"signingSecret" json:"signingSecret"`
	// Keyword is the robot's custom keyword (DingTalk, Feishu), when its security setting
	// uses one; the sender makes sure every message contains it. Default none.
	Keyword string `yaml:"keyword" json:"keyword"`
	// Limit is how many messages the robot may send per sender.window; 0 takes the
	// default of its kind (sender.limit for DingTalk, sender.KIND.limit for the others).
	// At most the platform's own limit.
	Limit int `yaml:"limit" json:"limit"`
}

// Credential returns the robot's credential for a robot of kind: Token itself, or the
// credential its channel takes from Token when it is a webhook URL (DingTalk's
// access_token parameter, WeCom's key parameter, …). The error never contains the token.
func (r Robot) Credential(kind string) (Secret, error) {
	c, ok := ChatChannelOf(kind)
	if !ok {
		return "", fmt.Errorf("%q is not a chat channel", kind)
	}
	return c.credential(r.Token)
}

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

// Guard is the window guard in effect: WindowGuard, or Window/60 when it is 0.
func (s Sender) Guard() time.Duration {
	if s.WindowGuard != 0 {
		return s.WindowGuard
	}
	return s.Window / 60
}

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
	// WindowGuard is how much longer than Window a send counts against its robot after
	// its answer. A send counts from the pick until it is answered (the platform counted
	// it at some moment in between) and then for Window + WindowGuard: the guard covers
	// what the answer does not, the bytes of a request given up on still on their way and
	// the platform's clock ticking apart. It is also how often a pick waiting for an
	// answer asks again. 0 (the default) means Window/60: 1s of a 60s window; see Guard.
	WindowGuard time.Duration `yaml:"windowGuard" json:"windowGuard"`
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
	// `rocketdelay chat-sim` for tests and demos. Default
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
	// PriorityMaxWait bounds how long an alert waits behind alerts of higher priority
	// (RD_PRIORITY) when a target's budget is short: past it, it goes ahead of every
	// priority. Default 60s.
	PriorityMaxWait time.Duration `yaml:"priorityMaxWait" json:"priorityMaxWait"`
	// Platforms configure the robots of each chat channel besides DingTalk, by its
	// section: sender.wecom, sender.feishu, sender.slack (a channel's Section).
	Platforms map[string]Platform `yaml:",inline" json:"platforms,omitempty"`
}

// Platform configures the robots of one chat channel besides DingTalk, whose settings
// are sender's own keys. The defaults and bounds are the channel's (ChatChannel).
type Platform struct {
	// BaseURL is the webhook endpoint without the robot's credential: WeCom's
	// "https://qyapi.weixin.qq.com/cgi-bin/webhook/send" (the key goes in its query),
	// Feishu's "https://open.feishu.cn/open-apis/bot/v2/hook" (the token follows it in the
	// path), Slack's "https://hooks.slack.com/services" (its T…/B…/… path follows it).
	// Point it at `rocketdelay chat-sim` for tests and demos. Default the platform's.
	BaseURL string `yaml:"baseURL" json:"baseURL"`
	// Limit is how many messages each robot may send per sender.window: at most the
	// platform's (20 for WeCom, 100 for Feishu, 60 for Slack). Default 19 for WeCom, 95
	// for Feishu, 50 for Slack.
	Limit int `yaml:"limit" json:"limit"`
	// LimitPerSecond is how many messages each robot may send per second too (a sixtieth
	// of sender.window): Feishu's 5 per second, Slack's about 1; 0 for WeCom, which has
	// none. Default 4 for Feishu, 1 for Slack.
	LimitPerSecond int `yaml:"limitPerSecond" json:"limitPerSecond"`
	// Cooldown is how long a robot the platform throttled rests at first. The platform
	// documents no lock-out, so rocketdelay learns it: a robot throttled again by the
	// first request after its rest rests twice as long, up to sender.cooldown, until a
	// request goes through. Default 5s.
	Cooldown time.Duration `yaml:"cooldown" json:"cooldown"`
}

// Admin configures the admin HTTP API.
type Admin struct {
	// Token is the bearer token the admin API requires (Authorization: Bearer …); at
	// least 16 characters. Default none: the admin API answers 503, disabled. It is also
	// the console's login, as the operator "admin", and turns the console on.
	Token Secret `yaml:"token" json:"token"`
	// Operators are named console logins: each logs in with a token of its own, and what
	// it does (acknowledgements, cancels, reschedules, retries and discards of failed
	// sends) is recorded and shown as done by its name. Tokens at least 16 characters,
	// unique, none an ingress credential. They need admin.token (the console is on).
	Operators []Operator `yaml:"operators" json:"operators,omitempty"`
	// ProxyUserHeader names the header (X-Forwarded-User, X-Forwarded-Email) by which an
	// authenticating proxy in front of the console names the person: a console request
	// from one of http.trustedProxies that carries it is that person's, without a login.
	// From any other address the header is ignored. Default none.
	ProxyUserHeader string `yaml:"proxyUserHeader" json:"proxyUserHeader,omitempty"`
}

// Operator is a named console login (admin.operators).
type Operator struct {
	// Name is how the console records and shows what the operator did: letters, digits,
	// '-', '_', '.', '@', at most 64 characters; not "admin".
	Name string `yaml:"name" json:"name"`
	// Token is the operator's login; secret.
	Token Secret `yaml:"token" json:"token"`
}

// ValidOperatorName reports whether name may name an operator (Operator.Name; a proxy's
// user header too).
func ValidOperatorName(name string) bool {
	if name == "" || len(name) > 64 {
		return false
	}
	for _, r := range name {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_.@+", r)) {
			return false
		}
	}
	return true
}

// MinAdminTokenLen is the shortest admin token Validate accepts.
const MinAdminTokenLen = 16

// Ingress configures the HTTP ways in.
type Ingress struct {
	// Token is the bearer token of the publish API and the Alertmanager receiver
	// (Authorization: Bearer …), separate from the admin token; at least 16 characters.
	// Default none: both answer 503, disabled.
	Token Secret `yaml:"token" json:"token"`
	// MaxBody bounds a request body, bytes. Default 1048576 (1 MiB).
	MaxBody int64 `yaml:"maxBody" json:"maxBody"`
	// Priorities map an Alertmanager alert's severity label to the priority of the alert
	// the receiver publishes (RD_PRIORITY; the highest of the notification's firing
	// alerts): one of PriorityNames. A severity not here is normal. Default critical →
	// critical, error → high, warning → normal, info → low.
	Priorities map[string]string `yaml:"priorities" json:"priorities,omitempty"`
	// DedupeWindow is how long copies of one Alertmanager notification (the same group,
	// receiver and firing and resolved alerts, each by fingerprint and startsAt — from
	// both members of an Alertmanager HA pair, or a retry) are delivered once. An alert
	// that fired again has a new startsAt, so its notification is never held back; a
	// repeat_interval re-send is delivered once the window has passed, so it must be
	// shorter than the routes' repeat_interval. For a receiver that escalates, it is how long after an episode
	// resolved a late copy of one of its firings (the same alerts with the same starts)
	// is absorbed instead of starting a new episode. Default 5m.
	DedupeWindow time.Duration `yaml:"dedupeWindow" json:"dedupeWindow"`
	// PublicURL is the service's URL as the on-call people's browsers reach it (such as
	// https://rocketdelay.example.com): escalation steps carry an acknowledgement link
	// under it. Default none: steps carry no link.
	PublicURL string `yaml:"publicURL" json:"publicURL,omitempty"`
	// InsecurePublicURL allows an http:// PublicURL on a host other than a loopback
	// address (the links carry a capability: over plain HTTP anyone on the path can take
	// it). Default false.
	InsecurePublicURL bool `yaml:"insecurePublicURL" json:"insecurePublicURL,omitempty"`
	// AckLinkTTL is how long an acknowledgement link works after its message was
	// rendered. Default 24h.
	AckLinkTTL time.Duration `yaml:"ackLinkTTL" json:"ackLinkTTL"`
	// Principals are the producers of the HTTP ways in, each with its own token, targets,
	// rights, rate and highest priority (principals.go). Token stands for one more, named
	// "ingest", with every right.
	Principals []Principal `yaml:"principals" json:"principals,omitempty"`
	// PrincipalsFile is a YAML file of more principals ("principals: [...]"), such as a
	// key of a Kubernetes Secret mounted as a volume: read at start and again whenever
	// it changes, without a restart. Default none.
	PrincipalsFile string `yaml:"principalsFile" json:"principalsFile,omitempty"`
}

// PriorityNames are the priorities an alert may have (RD_PRIORITY), highest first.
var PriorityNames = []string{"critical", "high", "normal", "low"}

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
	// Retention is how long a row in a final state (delivered, discarded, rejected) is kept
	// after its last change; the retry job then deletes it. Default 720h (30 days).
	Retention time.Duration `yaml:"retention" json:"retention"`
	// DeadRetention is how long a dead row is kept after its last change; 0 keeps dead
	// rows until an operator discards (or retries) them. Default 0.
	DeadRetention time.Duration `yaml:"deadRetention" json:"deadRetention"`
}

// MaxFailedSendsBatchSize bounds failedSends.batchSize.
const MaxFailedSendsBatchSize = 1000
