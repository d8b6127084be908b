package config_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

const validYAML = `
rocketmq:
  nameServers: ["127.0.0.1:9876"]
scheduler:
  levels: "1s 2s 3s"
  threshold: 3s
redis:
  url: redis://:hunter2@127.0.0.1:6379/0
postgres:
  url: postgres://rd:pg-pass-42@127.0.0.1:5432/rd
`

func writeFile(t *testing.T, content string) string {
	t.Helper()
	path := filepath.Join(t.TempDir(), "config.yaml")
	require.NoError(t, os.WriteFile(path, []byte(content), 0o600))
	return path
}

func noEnv(string) string { return "" }

func TestLoadFillsDefaults(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, DefaultTopic, c.RocketMQ.Topic)
	require.Equal(t, DefaultGroup, c.RocketMQ.Group)
	require.Equal(t, DefaultHTTPAddr, c.HTTP.Addr)
	require.Equal(t, DefaultHorizon, c.Scheduler.Horizon)
	require.Equal(t, DefaultDoneTTL, c.Scheduler.DoneTTL)
	require.Equal(t, DefaultLease, c.Scheduler.Lease)
	require.Equal(t, DefaultLiveness, c.Scheduler.Liveness)
	require.Equal(t, DefaultGrace, c.Scheduler.Grace)
	require.Equal(t, 3*time.Second, c.Scheduler.Threshold)
	require.Equal(t, DelayLevels{time.Second, 2 * time.Second, 3 * time.Second}, c.Scheduler.Levels)
	require.Equal(t, "redis://:hunter2@127.0.0.1:6379/0", c.Redis.URL.Reveal())
}

func TestDefaultLevelsAreRocketMQs(t *testing.T) {
	c := Config{}.WithDefaults()
	require.Len(t, c.Scheduler.Levels, 18)
	require.Equal(t, time.Second, c.Scheduler.Levels[0])
	require.Equal(t, 2*time.Hour, c.Scheduler.Levels[17])
	require.Equal(t, DefaultLevels, c.Scheduler.Levels.String())
}

func TestUnknownKeyIsAnError(t *testing.T) {
	_, err := Load(writeFile(t, validYAML+"\nreddis:\n  url: x\n"), noEnv)
	require.Error(t, err)
	require.Contains(t, err.Error(), "reddis")
	require.Contains(t, err.Error(), "not found")
}

func TestWrongTypeNamesTheLine(t *testing.T) {
	_, err := Load(writeFile(t, "shutdownTimeout: soon\n"), noEnv)
	require.Error(t, err)
	require.Contains(t, err.Error(), "line 1")
}

func TestValidateNamesEveryBadKey(t *testing.T) {
	c := Config{
		Log:      Log{Level: "loud"},
		HTTP:     HTTP{Addr: "8080", TrustedProxies: []string{"10.0.0.0/8", "2001:db8::1", "ingress.local"}},
		RocketMQ: RocketMQ{NameServers: []string{"nohost"}, Topic: "bad topic"},
		Scheduler: Scheduler{
			Levels:    DelayLevels{5 * time.Second},
			Threshold: time.Second,
			Liveness:  100 * time.Millisecond,
		},
		Redis:    Redis{URL: "http://:hunter2@x"},
		Postgres: Postgres{URL: "mysql://u:pg-pass-42@x/db"},
	}.WithDefaults()
	err := c.Validate()
	require.Error(t, err)
	msg := err.Error()
	require.NotContains(t, msg, "http.trustedProxies[0]")
	require.NotContains(t, msg, "http.trustedProxies[1]")
	for _, key := range []string{"log.level", "http.addr", "http.trustedProxies[2]", "rocketmq.nameServers[0]", "rocketmq.topic",
		"scheduler.threshold", "scheduler.liveness", "redis.url", "postgres.url"} {
		require.Contains(t, msg, "config: "+key+":")
	}
	require.NotContains(t, msg, "hunter2")
	require.NotContains(t, msg, "pg-pass-42")
}

// TestHTTPLimitsAreChecked: the server's limits must be usable, and a request body
// must fit in one broker message.
func TestHTTPLimitsAreChecked(t *testing.T) {
	c := Config{
		HTTP:     HTTP{ReadHeaderTimeout: time.Minute, ReadTimeout: time.Second, IdleTimeout: -time.Second, MaxHeaderBytes: 100, MaxConnections: -1},
		RocketMQ: RocketMQ{MaxMessageSize: 1 << 20},
		Ingress:  Ingress{MaxBody: 2 << 20},
	}.WithDefaults()
	msg := c.Validate().Error()
	for _, key := range []string{"http.readHeaderTimeout", "http.idleTimeout", "http.maxHeaderBytes", "http.maxConnections", "ingress.maxBody"} {
		require.Contains(t, msg, "config: "+key+":")
	}
	require.Contains(t, msg, "rocketmq.maxMessageSize 1048576")
	d := Config{}.WithDefaults()
	require.Equal(t, DefaultHTTPIdleTimeout, d.HTTP.IdleTimeout, "an idle connection is closed by default")
	require.Equal(t, DefaultHTTPMaxConnections, d.HTTP.MaxConnections)
	require.LessOrEqual(t, d.Ingress.MaxBody, int64(d.RocketMQ.MaxMessageSize))
}

func TestMissingRequiredKeysSayHowToSetThem(t *testing.T) {
	_, err := Load("", noEnv)
	require.Error(t, err)
	require.Contains(t, err.Error(), "ROCKETDELAY_NAMESRV")
	require.Contains(t, err.Error(), "ROCKETDELAY_REDIS_URL")
	require.Contains(t, err.Error(), "ROCKETDELAY_POSTGRES_URL")
}

func TestEnvironmentOverridesFile(t *testing.T) {
	env := map[string]string{
		"ROCKETDELAY_NAMESRV":   "10.0.0.1:9876,10.0.0.2:9876",
		"ROCKETDELAY_LEVELS":    "1s 2s",
		"ROCKETDELAY_THRESHOLD": "2s",
		"ROCKETDELAY_REDIS_URL": "redis://127.0.0.1:1/2",
		"ROCKETDELAY_TOPIC":     "other",
	}
	c, err := Load(writeFile(t, validYAML), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.1:9876", "10.0.0.2:9876"}, c.RocketMQ.NameServers)
	require.Equal(t, DelayLevels{time.Second, 2 * time.Second}, c.Scheduler.Levels)
	require.Equal(t, 2*time.Second, c.Scheduler.Threshold)
	require.Equal(t, "redis://127.0.0.1:1/2", c.Redis.URL.Reveal())
	require.Equal(t, "other", c.RocketMQ.Topic)
}

func TestBadEnvironmentValueNamesVariable(t *testing.T) {
	_, err := Load(writeFile(t, validYAML), func(k string) string {
		if k == "ROCKETDELAY_LEVELS" {
			return "1s  2s"
		}
		return ""
	})
	require.ErrorContains(t, err, "scheduler.levels: from ROCKETDELAY_LEVELS")
}

func TestEnvVarNamesAreUnique(t *testing.T) {
	seen := map[string]bool{}
	for _, ev := range EnvVars {
		require.True(t, strings.HasPrefix(ev.Name, "ROCKETDELAY_"), ev.Name)
		require.False(t, seen[ev.Name], "duplicate %s", ev.Name)
		seen[ev.Name] = true
	}
}

func TestSecretsNeverPrint(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)

	var logs bytes.Buffer
	slog.New(slog.NewJSONHandler(&logs, nil)).Info("cfg", "redis", c.Redis.URL, "config", c)
	js, err := json.Marshal(c)
	require.NoError(t, err)
	outputs := map[string]string{
		"Redacted": c.Redacted(),
		"%v":       fmt.Sprintf("%v", c),
		"%+v":      fmt.Sprintf("%+v", c),
		"%#v":      fmt.Sprintf("%#v", c),
		"%s":       fmt.Sprintf("%s", c.Postgres.URL),
		"slog":     logs.String(),
		"json":     string(js),
	}
	for name, out := range outputs {
		require.NotContains(t, out, "hunter2", name)
		require.NotContains(t, out, "pg-pass-42", name)
	}
	require.Contains(t, c.Redacted(), "url: <secret>")
}

func TestRedactedIsValidConfigExceptSecrets(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	back, err := Decode(strings.NewReader(c.Redacted()))
	require.NoError(t, err)
	require.Equal(t, c.Scheduler, back.Scheduler)
	require.Equal(t, Secret("<secret>"), back.Redis.URL)
}

func TestParseDelayLevelsRejects(t *testing.T) {
	for _, s := range []string{"", "1s  2s", " 1s", "1s ", "1x", "1.5s", "0s", "-1s", "+1s", "2s 1s", "1s 1s", "s", "1m 60s",
		"999999999999h", "9999999999999999999s", "36501d"} {
		_, err := ParseDelayLevels(s)
		require.Error(t, err, "%q", s)
	}
}

func TestDelayLevelsRoundTrip(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		n := rapid.IntRange(1, 20).Draw(t, "n")
		units := []time.Duration{time.Second, time.Minute, time.Hour, 24 * time.Hour}
		var levels DelayLevels
		var last time.Duration
		for range n {
			unit := rapid.SampledFrom(units).Draw(t, "unit")
			k := rapid.IntRange(1, 90).Draw(t, "k")
			d := time.Duration(k) * unit
			if d <= last {
				continue
			}
			levels = append(levels, d)
			last = d
		}
		if len(levels) == 0 {
			return
		}
		back, err := ParseDelayLevels(levels.String())
		if err != nil {
			t.Fatalf("parse %q: %v", levels.String(), err)
		}
		if fmt.Sprint(back) != fmt.Sprint(levels) {
			t.Fatalf("round trip %v -> %q -> %v", levels, levels.String(), back)
		}
	})
}

func TestTargets(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r1, token: tok-secret-1, signingSecret: SEC-secret-2, keyword: alert}
      - {name: r2, token: tok-secret-3}
`), noEnv)
	require.NoError(t, err)
	require.Len(t, c.Targets["ops"].Robots, 2)
	require.Equal(t, "tok-secret-1", c.Targets["ops"].Robots[0].Token.Reveal())
	out := c.Redacted() + fmt.Sprintf("%+v", c)
	for _, s := range []string{"tok-secret-1", "SEC-secret-2", "tok-secret-3"} {
		require.NotContains(t, out, s)
	}

	_, err = Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r1}
      - {name: r1, token: x}
  empty: {}
`), noEnv)
	require.ErrorContains(t, err, "targets.ops.robots[0].token: required")
	require.ErrorContains(t, err, `targets.ops.robots[1].name: "r1" is used twice`)
	require.ErrorContains(t, err, "targets.empty.robots: a target needs at least one robot")
}

func TestTopicTargets(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+`
targets:
  ops:
    robots: [{name: r1, token: tok}]
  orders:
    topic: {name: order-events, tag: delayed, allowOverride: true, allowTopics: [order-audit], ratePerSecond: 200}
`), noEnv)
	require.NoError(t, err)
	require.Equal(t, KindDingTalk, c.Targets["ops"].Channel())
	require.Equal(t, KindTopic, c.Targets["orders"].Channel())
	require.Equal(t, &TopicTarget{Name: "order-events", Tag: "delayed", AllowOverride: true, AllowTopics: []string{"order-audit"},
		RatePerSecond: 200}, c.Targets["orders"].Topic)

	_, err = Load(writeFile(t, validYAML+`
targets:
  both:
    robots: [{name: r1, token: tok}]
    topic: {name: t}
  noname:
    topic: {tag: x}
  bad:
    topic: {name: "a b", tag: "x|y", allowTopics: [ok], ratePerSecond: -1}
  badlist:
    topic: {name: ok, allowOverride: true, allowTopics: ["no way"]}
`), noEnv)
	require.ErrorContains(t, err, "targets.both: a target has robots or a topic, not both")
	require.ErrorContains(t, err, "targets.noname.topic.name: required")
	require.ErrorContains(t, err, `targets.bad.topic.name: "a b" is not a valid topic name`)
	require.ErrorContains(t, err, `targets.bad.topic.tag: "x|y" is not a valid tag`)
	require.ErrorContains(t, err, "targets.bad.topic.allowTopics: only with allowOverride: true")
	require.ErrorContains(t, err, "targets.bad.topic.ratePerSecond: must be between 0 (no cap) and 1000000, got -1")
	require.ErrorContains(t, err, `targets.badlist.topic.allowTopics[0]: "no way" is not a valid topic name`)
}

func TestFailedSendsAndAdminDefaults(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, FailedSends{
		Interval:    30 * time.Second,
		MaxAttempts: 20,
		MaxAge:      24 * time.Hour,
		BackoffBase: 30 * time.Second,
		BackoffCap:  time.Hour,
		BatchSize:   100,
		ClaimLease:  time.Minute,
		Retention:   30 * 24 * time.Hour,
	}, c.FailedSends)
	require.Equal(t, Secret(""), c.Admin.Token, "no token: the admin API is disabled")
}

func TestFailedSendsAndAdminFromFileAndEnv(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+`
admin:
  token: file-token-0123456789
failedSends:
  interval: 5s
  maxAttempts: 3
  maxAge: 2h
  backoffBase: 1s
  backoffCap: 10s
  batchSize: 7
  claimLease: 20s
`), func(k string) string {
		if k == "ROCKETDELAY_ADMIN_TOKEN" {
			return "env-token-abcdefghijkl"
		}
		return ""
	})
	require.NoError(t, err)
	require.Equal(t, FailedSends{Interval: 5 * time.Second, MaxAttempts: 3, MaxAge: 2 * time.Hour,
		BackoffBase: time.Second, BackoffCap: 10 * time.Second, BatchSize: 7, ClaimLease: 20 * time.Second, Retention: 30 * 24 * time.Hour}, c.FailedSends)
	require.Equal(t, "env-token-abcdefghijkl", c.Admin.Token.Reveal())
	out := c.Redacted() + fmt.Sprintf("%+v", c)
	require.NotContains(t, out, "env-token-abcdefghijkl")
	require.Contains(t, c.Redacted(), "token: <secret>")
}

func TestFailedSendsAndAdminValidation(t *testing.T) {
	_, err := Load(writeFile(t, validYAML+`
admin:
  token: short-secret
failedSends:
  interval: 1ms
  maxAttempts: -1
  maxAge: -1h
  backoffBase: 2m
  backoffCap: 1m
  batchSize: 5000
`), noEnv)
	require.Error(t, err)
	for _, key := range []string{"admin.token", "failedSends.interval", "failedSends.maxAttempts", "failedSends.maxAge",
		"failedSends.backoffCap", "failedSends.batchSize"} {
		require.ErrorContains(t, err, "config: "+key+":")
	}
	require.NotContains(t, err.Error(), "short-secret")

	_, err = Load(writeFile(t, validYAML+"failedSends:\n  backoffBase: -1s\n"), noEnv)
	require.ErrorContains(t, err, "config: failedSends.backoffBase:")

	// A claim lease shorter than a request can be on the wire (sender.httpTimeout).
	_, err = Load(writeFile(t, validYAML+"failedSends:\n  claimLease: 4s\n"), noEnv)
	require.ErrorContains(t, err, "config: failedSends.claimLease: must be at least sender.httpTimeout (5s), got 4s")
}

func TestSenderDefaultsAndValidation(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, Sender{
		Limit: 19, Window: time.Minute, Cooldown: 10 * time.Minute, DisableFor: time.Hour,
		HTTPTimeout: 5 * time.Second, Attempts: 5, BackoffBase: 500 * time.Millisecond,
		BackoffMax: 30 * time.Second, BaseURL: "https://oapi.dingtalk.com/robot/send", MaxInFlight: 32,
		BreakerFailures: 5, BreakerOpen: 30 * time.Second, Coalesce: "auto", CoalesceMax: 50, Pacing: "auto", RobotLimits: "learn",
		PriorityMaxWait: time.Minute,
		Platforms: map[string]Platform{
			"wecom": {BaseURL: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send", Limit: 19, Cooldown: 5 * time.Second},
			"feishu": {BaseURL: "https://open.feishu.cn/open-apis/bot/v2/hook", Limit: 95, LimitPerSecond: 4,
				Cooldown: 5 * time.Second},
			"slack": {BaseURL: "https://hooks.slack.com/services", Limit: 50, LimitPerSecond: 1, Cooldown: 5 * time.Second},
		},
	}, c.Sender)

	_, err = Load(writeFile(t, validYAML+`
sender:
  limit: 21
  window: 10s
  attempts: -1
  backoffBase: 2s
  backoffMax: 1s
  baseURL: "ftp://x"
  maxInFlight: -3
  maxWait: -1s
`), noEnv)
	for _, want := range []string{
		"sender.limit: must be between 1 and 20",
		"sender.attempts: must be at least 1",
		"sender.backoffMax: 1s is below sender.backoffBase 2s",
		`sender.baseURL: "ftp://x" must be an http:// or https:// URL`,
		"sender.maxInFlight: must be at least 1",
		"sender.maxWait: must not be negative",
	} {
		require.ErrorContains(t, err, want)
	}

	// Against DingTalk itself the window must be a minute; against the simulator seconds do.
	_, err = Load(writeFile(t, validYAML+"sender: {window: 2s}\n"), noEnv)
	require.ErrorContains(t, err, "sender.window: DingTalk counts per minute")
	c, err = Load(writeFile(t, validYAML+"sender: {window: 2s, limit: 20, baseURL: \"http://127.0.0.1:18090/robot/send\"}\n"), noEnv)
	require.NoError(t, err)
	require.Equal(t, 2*time.Second, c.Sender.Window)
	require.Equal(t, 20, c.Sender.Limit)

	c, err = Load(writeFile(t, validYAML), func(k string) string {
		return map[string]string{"ROCKETDELAY_SENDER_BASE_URL": "http://sim:1/robot/send", "ROCKETDELAY_SENDER_WINDOW": "3s", "ROCKETDELAY_SENDER_LIMIT": "5"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, "http://sim:1/robot/send", c.Sender.BaseURL)
	require.Equal(t, 3*time.Second, c.Sender.Window)
	require.Equal(t, 5, c.Sender.Limit)
}

func TestRobotTokenAsWebhookURLAndLimit(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r1, token: "https://oapi.dingtalk.com/robot/send?access_token=tok-secret-9", limit: 10}
      - {name: r2, token: "https://oapi.dingtalk.com/robot/send?x=1"}
      - {name: r3, token: tok, limit: 21}
`), noEnv)
	require.ErrorContains(t, err, "targets.ops.robots[1].token: the webhook URL has no access_token parameter")
	require.ErrorContains(t, err, "targets.ops.robots[2].limit: must be between 1 and 20")
	require.NotContains(t, err.Error(), "tok-secret-9")

	c, err = Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r1, token: "https://oapi.dingtalk.com/robot/send?access_token=tok-secret-9", limit: 10}
`), noEnv)
	require.NoError(t, err)
	tok, err := c.Targets["ops"].Robots[0].Credential(KindDingTalk)
	require.NoError(t, err)
	require.Equal(t, "tok-secret-9", tok.Reveal())
	require.Equal(t, 10, c.Targets["ops"].Robots[0].Limit)
}

func TestSecretsFromEnvironmentAndFiles(t *testing.T) {
	dir := t.TempDir()
	secretFile := filepath.Join(dir, "sign")
	require.NoError(t, os.WriteFile(secretFile, []byte("SEC-from-file-77\n"), 0o600))
	env := map[string]string{"OPS_TOKEN": "tok-from-env-55", "PG": "postgres://rd:pw-from-env@127.0.0.1:5432/rd"}
	getenv := func(k string) string { return env[k] }
	c, err := Load(writeFile(t, `
rocketmq:
  nameServers: ["127.0.0.1:9876"]
redis:
  url: redis://127.0.0.1:6379/0
postgres:
  url: env:PG
targets:
  ops:
    robots:
      - {name: r1, token: "env:OPS_TOKEN", signingSecret: "file:`+secretFile+`"}
`), getenv)
	require.NoError(t, err)
	r := c.Targets["ops"].Robots[0]
	require.Equal(t, "tok-from-env-55", r.Token.Reveal())
	require.Equal(t, "SEC-from-file-77", r.SigningSecret.Reveal())
	require.Equal(t, env["PG"], c.Postgres.URL.Reveal())
	require.NotContains(t, c.Redacted(), "from-env")

	_, err = Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r1, token: "env:MISSING_TOKEN", signingSecret: "file:`+filepath.Join(dir, "nope")+`"}
      - {name: r2, token: "file:`+filepath.Join(dir, "empty")+`"}
`), getenv)
	require.ErrorContains(t, err, "targets.ops.robots[0].token: environment variable MISSING_TOKEN is not set")
	require.ErrorContains(t, err, "targets.ops.robots[0].signingSecret: read "+filepath.Join(dir, "nope")+": no such file")
	require.ErrorContains(t, err, "targets.ops.robots[1].token: read")

	require.NoError(t, os.WriteFile(filepath.Join(dir, "empty"), []byte(" \n"), 0o600))
	_, err = Load(writeFile(t, validYAML+`
targets:
  ops:
    robots:
      - {name: r2, token: "file:`+filepath.Join(dir, "empty")+`"}
`), getenv)
	require.ErrorContains(t, err, "is empty")
}

func TestAdminTokenFromEnvReference(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+"\nadmin: {token: \"env:RD_TEST_ADMIN\"}\n"), func(k string) string {
		if k == "RD_TEST_ADMIN" {
			return "a-long-admin-token-0123456789"
		}
		return ""
	})
	require.NoError(t, err)
	require.Equal(t, "a-long-admin-token-0123456789", c.Admin.Token.Reveal())
}

func TestSenderCoalesceDefaultsAndValidation(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, CoalesceAuto, c.Sender.Coalesce)
	require.Equal(t, DefaultSenderCoalesceMax, c.Sender.CoalesceMax)

	c, err = Load(writeFile(t, validYAML+"sender: {coalesce: \"off\", coalesceMax: 20}\n"), noEnv)
	require.NoError(t, err)
	require.Equal(t, CoalesceOff, c.Sender.Coalesce)
	require.Equal(t, 20, c.Sender.CoalesceMax)

	_, err = Load(writeFile(t, validYAML+"sender: {coalesce: always, coalesceMax: 1}\n"), noEnv)
	require.ErrorContains(t, err, `sender.coalesce: must be "auto" or "off", got "always"`)
	require.ErrorContains(t, err, "sender.coalesceMax: must be between 2 and 1000")
	_, err = Load(writeFile(t, validYAML+"sender: {coalesceMax: 1001}\n"), noEnv)
	require.ErrorContains(t, err, "sender.coalesceMax: must be between 2 and 1000")
}

// An unknown key is named when it looks like a key name, and left out when it does not
// (a token pasted as a key must not reach the log).
func TestUnknownKeysAreNamedOnlyWhenTheyLookLikeKeys(t *testing.T) {
	_, err := Decode(strings.NewReader("shutdownTimout: 5s\n"))
	require.ErrorContains(t, err, "field shutdownTimout not found")
	_, err = Decode(strings.NewReader("!00000000 {tok-SECRET-0123456789abcdef}0"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "tok-SECRET")
	require.Contains(t, err.Error(), "an unknown key that does not look like a key name")
}

func TestRedisTopologies(t *testing.T) {
	base := strings.Replace(validYAML, "redis:\n  url: redis://:hunter2@127.0.0.1:6379/0\n", "", 1)
	c, err := Load(writeFile(t, base+`redis:
  sentinel:
    masterName: rdprimary
    addresses: ["10.0.0.1:26379", "10.0.0.2:26379"]
    password: sentinel-data-pw
`), noEnv)
	require.NoError(t, err)
	require.Equal(t, "rdprimary", c.Redis.Sentinel.MasterName)
	require.Equal(t, []string{"10.0.0.1:26379", "10.0.0.2:26379"}, c.Redis.Sentinel.Addresses)
	require.Equal(t, "sentinel-data-pw", c.Redis.Sentinel.Password.Reveal())

	c, err = Load(writeFile(t, base+"redis:\n  cluster:\n    addresses: [\"10.0.0.1:7000\"]\n"), noEnv)
	require.NoError(t, err)
	require.Equal(t, []string{"10.0.0.1:7000"}, c.Redis.Cluster.Addresses)

	for _, tc := range []struct{ yaml, key, says string }{
		{"redis:\n  url: redis://h:1/0\n  cluster: {addresses: [\"h:1\"]}\n", "redis", "not several"},
		{"redis:\n  sentinel: {addresses: [\"h:1\"]}\n", "redis.sentinel.masterName", "required"},
		{"redis:\n  sentinel: {masterName: m}\n", "redis.sentinel.addresses", "at least one"},
		{"redis:\n  cluster: {addresses: [\"nohostport\"]}\n", "redis.cluster.addresses[0]", "not host:port"},
		{"redis:\n  cluster: {}\n", "redis.cluster.addresses", "at least one"},
	} {
		_, err := Load(writeFile(t, base+tc.yaml), noEnv)
		require.ErrorContains(t, err, tc.key, tc.yaml)
		require.ErrorContains(t, err, tc.says, tc.yaml)
	}

	// The topology variables replace the file's topology, a URL included.
	env := map[string]string{"ROCKETDELAY_REDIS_CLUSTER": "127.0.0.1:17001,127.0.0.1:17002"}
	c, err = Load(writeFile(t, validYAML), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Empty(t, c.Redis.URL)
	require.Equal(t, []string{"127.0.0.1:17001", "127.0.0.1:17002"}, c.Redis.Cluster.Addresses)
	env = map[string]string{"ROCKETDELAY_REDIS_SENTINEL": "127.0.0.1:26380", "ROCKETDELAY_REDIS_SENTINEL_MASTER": "rdprimary"}
	c, err = Load(writeFile(t, validYAML), func(k string) string { return env[k] })
	require.NoError(t, err)
	require.Empty(t, c.Redis.URL)
	require.Equal(t, "rdprimary", c.Redis.Sentinel.MasterName)
}

// A value of the wrong type, or a custom tag, is not echoed: either may be a secret
// written in the wrong place. The line and the expected type are.
func TestTypeErrorsDoNotEchoValues(t *testing.T) {
	_, err := Decode(strings.NewReader("!tok-SECRET-0123456789abcdef"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "SECRET")
	require.Contains(t, err.Error(), "cannot unmarshal a value with a custom tag into config.Config")
	_, err = Decode(strings.NewReader("sender:\n  limit: pw-SECRET-42\n"))
	require.Error(t, err)
	require.NotContains(t, err.Error(), "SECRET")
	require.Contains(t, err.Error(), "line 2: cannot unmarshal !!str into int")
}

func TestSecretMatches(t *testing.T) {
	s := Secret("admin-token-0123456789")
	require.True(t, s.Matches("admin-token-0123456789"))
	for _, c := range []string{"", "admin-token-012345678", "admin-token-0123456789 ", "ADMIN-token-0123456789"} {
		require.False(t, s.Matches(c), c)
	}
	require.False(t, Secret("").Matches(""), "an empty secret matches nothing")
}

// A target has one kind; each kind's robots are checked by its platform's rules, and
// every error names its key.
func TestTargetKinds(t *testing.T) {
	c, err := Load(writeFile(t, validYAML+`
targets:
  ding:
    robots: [{name: d1, token: "https://oapi.dingtalk.com/robot/send?access_token=tok-d"}]
  wc:
    kind: wecom
    robots: [{name: w1, token: "https://qyapi.weixin.qq.com/cgi-bin/webhook/send?key=key-w"}, {name: w2, token: k2, limit: 20}]
  fs:
    kind: feishu
    robots: [{name: f1, token: "https://open.feishu.cn/open-apis/bot/v2/hook/hook-f", signingSecret: sec, keyword: alert, limit: 100}]
  orders:
    topic: {name: order-events}
`), noEnv)
	require.NoError(t, err)
	for name, kind := range map[string]string{"ding": KindDingTalk, "wc": "wecom", "fs": "feishu", "orders": KindTopic} {
		require.Equal(t, kind, c.Targets[name].Channel(), name)
		require.Equal(t, kind != KindTopic, c.Targets[name].Chat(), name)
	}
	for name, want := range map[string]string{"ding": "tok-d", "wc": "key-w", "fs": "hook-f"} {
		tok, err := c.Targets[name].Robots[0].Credential(c.Targets[name].Channel())
		require.NoError(t, err)
		require.Equal(t, want, tok.Reveal())
	}

	_, err = Load(writeFile(t, validYAML+`
targets:
  a: {kind: teams, robots: [{name: r, token: t}]}
  b: {kind: wecom, robots: [{name: r, token: t, signingSecret: s, keyword: k, limit: 21}]}
  c: {kind: feishu, robots: [{name: r, token: "https://open.feishu.cn/open-apis/bot/v2/hook/"}, {name: s, token: t, limit: 101}],
      alertmanager: {mentions: [{mobiles: ["138"]}]}}
  d: {kind: topic, robots: [{name: r, token: t}]}
  e: {kind: wecom, topic: {name: x}, robots: [{name: r, token: t}]}
sender:
  feishu: {limit: 101, limitPerSecond: 6}
  wecom: {limitPerSecond: 1, baseURL: "ftp://x"}
`), noEnv)
	require.Error(t, err)
	for _, key := range []string{
		"targets.a.kind: must be one of dingtalk, wecom, feishu, slack, topic",
		"targets.b.robots[0].signingSecret: WeCom robots do not sign",
		"targets.b.robots[0].keyword: WeCom robots have no keyword",
		"targets.b.robots[0].limit: must be between 1 and 20 (WeCom's limit",
		"targets.c.robots[0].token: the webhook URL has no /hook/TOKEN path",
		"targets.c.robots[1].limit: must be between 1 and 100 (Feishu's limit",
		"targets.c.alertmanager.mentions[0].mobiles: Feishu mentions by user id (userIds: its feishuOpenId)",
		"targets.d: a target has robots or a topic, not both",
		"targets.e.topic: a target of kind wecom has robots, not a topic",
		"sender.feishu.limit: must be between 1 and 100",
		"sender.feishu.limitPerSecond: must be between 1 and 5",
		"sender.wecom.limitPerSecond: WeCom has no per-second limit",
		"sender.wecom.baseURL:",
	} {
		require.ErrorContains(t, err, "config: "+key)
	}
}

// ingress.publicURL must be a plain http(s) URL (the acknowledgement links are signed
// with the service's own keys, not the ingest token); the dedupe window and the links'
// life must be positive; a signing key is at least 32 characters.
func TestIngressPublicURLAndWindows(t *testing.T) {
	for _, c := range []struct{ yaml, key string }{
		{"ingress:\n  publicURL: ftp://x.example\n  token: ingest-token-0123456789\n", "ingress.publicURL"},
		{"ingress:\n  publicURL: https://user:pw@x.example\n  token: ingest-token-0123456789\n", "ingress.publicURL"},
		{"signing:\n  keys: [too-short]\n", "signing.keys[0]"},
		{"signing:\n  keys: [\"a long key with spaces in it 0123456789\"]\n", "signing.keys[0]"},
		{"ingress:\n  dedupeWindow: -1s\n", "ingress.dedupeWindow"},
		{"sender:\n  windowGuard: 31s\n", "sender.windowGuard"},
		{"sender:\n  windowGuard: -1s\n", "sender.windowGuard"},
		{"ingress:\n  ackLinkTTL: -1s\n", "ingress.ackLinkTTL"},
	} {
		_, err := Load(writeFile(t, validYAML+c.yaml), noEnv)
		require.ErrorContains(t, err, "config: "+c.key+":", c.yaml)
		require.NotContains(t, err.Error(), "pw@", "no credential echoed")
	}
	cfg, err := Load(writeFile(t, validYAML+"ingress:\n  publicURL: https://rd.example/\n"), noEnv)
	require.NoError(t, err, "links need no ingest token")
	require.Equal(t, 5*time.Minute, cfg.Ingress.DedupeWindow)
	require.Equal(t, 24*time.Hour, cfg.Ingress.AckLinkTTL)
}

func TestRedisShards(t *testing.T) {
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, DefaultShards, c.Redis.Shards)
	c, err = Load(writeFile(t, strings.Replace(validYAML, "redis:\n", "redis:\n  shards: 16\n", 1)), noEnv)
	require.NoError(t, err)
	require.Equal(t, 16, c.Redis.Shards)
	for _, n := range []string{"-1", "1025"} {
		_, err := Load(writeFile(t, strings.Replace(validYAML, "redis:\n", "redis:\n  shards: "+n+"\n", 1)), noEnv)
		require.ErrorContains(t, err, "redis.shards", n)
		require.ErrorContains(t, err, "must be 1 to 1024", n)
	}
	// A shard's tag is {prefix/i}: a prefix with a slash could name another deployment's shard.
	_, err = Load(writeFile(t, strings.Replace(validYAML, "redis:\n", "redis:\n  keyPrefix: rd/1\n", 1)), noEnv)
	require.ErrorContains(t, err, "redis.keyPrefix")
	require.ErrorContains(t, err, "slashes")
}

// TestPublicURLMustBeHTTPS: an acknowledgement link is a credential; plain HTTP only on a
// loopback host or when asked for. The public listener is another address, and TLS takes
// a certificate and its key.
func TestPublicURLMustBeHTTPS(t *testing.T) {
	for _, tc := range []struct {
		url      string
		insecure bool
		ok       bool
	}{
		{"https://rd.example.com", false, true},
		{"http://rd.example.com", false, false},
		{"http://rd.example.com", true, true},
		{"http://127.0.0.1:18080", false, true},
		{"http://localhost:18080", false, true},
		{"http://[::1]:18080", false, true},
		{"http://10.0.0.7", false, false},
	} {
		c := Config{Ingress: Ingress{PublicURL: tc.url, InsecurePublicURL: tc.insecure}}.WithDefaults()
		err := c.Validate()
		require.NotNil(t, err) // required keys are missing here; only publicURL is judged
		if tc.ok {
			require.NotContains(t, err.Error(), "ingress.publicURL", tc.url)
		} else {
			require.Contains(t, err.Error(), "config: ingress.publicURL: "+tc.url+" is plain HTTP", tc.url)
		}
	}
	c := Config{HTTP: HTTP{Addr: ":8080", PublicAddr: ":8080", TLSCertFile: "tls.crt"}}.WithDefaults()
	msg := c.Validate().Error()
	require.Contains(t, msg, "config: http.publicAddr:")
	require.Contains(t, msg, "config: http.tlsCertFile: give both")
}

// A robot belongs to one target: listed in two (by the same token, or by a webhook URL
// holding it), each target would count its sends in a window of its own and together
// they would go over the platform's limit. The error names the robots, not the token.
func TestARobotBelongsToOneTarget(t *testing.T) {
	c := Config{
		RocketMQ: RocketMQ{NameServers: []string{"127.0.0.1:9876"}},
		Redis:    Redis{URL: "redis://127.0.0.1:6379/0"},
		Postgres: Postgres{URL: "postgres://u@127.0.0.1/db"},
		Targets: map[string]Target{
			"ops":   {Robots: []Robot{{Name: "a", Token: "tok-shared-robot-91"}, {Name: "b", Token: "tok-own-robot-92"}}},
			"page":  {Robots: []Robot{{Name: "c", Token: "https://oapi.dingtalk.com/robot/send?access_token=tok-shared-robot-91"}}},
			"twice": {Robots: []Robot{{Name: "d", Token: "tok-twice-93"}, {Name: "e", Token: "tok-twice-93"}}},
			"wecom": {Kind: "wecom", Robots: []Robot{{Name: "w", Token: "tok-own-robot-92"}}},
		},
	}.WithDefaults()
	err := c.Validate()
	require.Error(t, err)
	msg := err.Error()
	require.Contains(t, msg, `config: targets.page.robots[0].token: robot "c" is also robot "a" of target ops`)
	require.Contains(t, msg, `config: targets.twice.robots[1].token: robot "e" is robot "d" again`)
	require.NotContains(t, msg, "targets.wecom", "another platform's robot with the same token is another robot")
	require.NotContains(t, msg, "targets.ops.")
	require.NotContains(t, msg, "tok-shared-robot-91")
}

// Named operators and the proxy's user header are checked: a name they may have, a token
// of their own, the console on, and the header believed only from trusted proxies.
func TestOperatorsAreChecked(t *testing.T) {
	c := Config{
		Admin: Admin{ProxyUserHeader: "X-Forwarded-User", Operators: []Operator{
			{Name: "ana", Token: "ana-operator-token-0123"},
			{Name: "ana", Token: "another-operator-token-0123"},
			{Name: "admin", Token: "admin-named-operator-token"},
			{Name: "bo b", Token: "short"},
			{Name: "cy", Token: "ingest-token-shared-0123"},
		}},
		Ingress: Ingress{Token: "ingest-token-shared-0123"},
	}.WithDefaults()
	msg := c.Validate().Error()
	for _, want := range []string{
		"config: admin.operators: needs admin.token",
		"config: admin.proxyUserHeader: needs http.trustedProxies",
		`config: admin.operators[1].name: "ana" is used twice`,
		`config: admin.operators[2].name: "admin" is not an operator's name`,
		`config: admin.operators[3].name: "bo b" is not an operator's name`,
		"config: admin.operators[3].token: must be at least 16 characters",
		"config: admin.operators[4].token: is another login's or a producer's token",
	} {
		require.Contains(t, msg, want)
	}
	require.NotContains(t, msg, "ingest-token-shared-0123")
	require.NotContains(t, msg, "admin.operators[0]")
}

// A credential pasted where it does not belong is named by its key and never echoed: a
// webhook's token in sender.baseURL's query (the mistake the check exists for), a
// password in a sentinel's address written as a URL. And the window check against
// DingTalk's real endpoint is not passed by writing its port or its host in capitals.
func TestValidateEchoesNoCredential(t *testing.T) {
	for _, c := range []Config{
		{Sender: Sender{BaseURL: "https://oapi.dingtalk.com/robot/send?access_token=tok-abc-123456"}},
		{Sender: Sender{BaseURL: "https://user:tok-abc-123456@oapi.dingtalk.com/robot/send"}},
		{Redis: Redis{Sentinel: &RedisSentinel{MasterName: "m", Addresses: []string{"redis://:tok-abc-123456@n1:6379"}}}},
		{Redis: Redis{Cluster: &RedisCluster{Addresses: []string{"redis://:tok-abc-123456@n1:6379"}}}},
	} {
		err := c.WithDefaults().Validate()
		require.Error(t, err)
		require.NotContains(t, err.Error(), "tok-abc-123456")
	}
	err := Config{Sender: Sender{BaseURL: "https://oapi.dingtalk.com/robot/send?access_token=x"}}.WithDefaults().Validate()
	require.ErrorContains(t, err, `sender.baseURL: "https://oapi.dingtalk.com/robot/send" (its user and query not shown)`)
	for _, base := range []string{"https://oapi.dingtalk.com:443/robot/send", "https://OAPI.dingtalk.com/robot/send"} {
		err := Config{Sender: Sender{BaseURL: base, Window: 10 * time.Second}}.WithDefaults().Validate()
		require.ErrorContains(t, err, "sender.window", base)
	}
}

// A bad scheduler.levels in the file is an error naming the key and the line, as the
// docs promise for every value (it named neither).
func TestBadLevelsNameTheirKeyAndLine(t *testing.T) {
	_, err := Decode(strings.NewReader("log: {level: info}\nscheduler:\n  levels: \"1s 5x\"\n"))
	require.ErrorContains(t, err, "scheduler.levels: line 3: ")
	_, err = Decode(strings.NewReader("scheduler:\n  levels: [1s, 5s]\n"))
	require.ErrorContains(t, err, "scheduler.levels: line 2: ")
	c, err := Decode(strings.NewReader("scheduler:\n  levels: \"1s 5s\"\n"))
	require.NoError(t, err)
	require.Equal(t, DelayLevels{time.Second, 5 * time.Second}, c.Scheduler.Levels)
}
