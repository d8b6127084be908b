package config_test

import (
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestParseDuration(t *testing.T) {
	for s, want := range map[string]time.Duration{
		"3d": 72 * time.Hour, "30d": 720 * time.Hour, "1d12h": 36 * time.Hour, "1.5d": 36 * time.Hour, "0.5d30m": 12*time.Hour + 30*time.Minute,
		"-2d": -48 * time.Hour, "+1d": 24 * time.Hour, "-1d6h": -30 * time.Hour, "90m": 90 * time.Minute, "0": 0, "1h30m15s": time.Hour + 30*time.Minute + 15*time.Second,
		"0d": 0, ".5d": 12 * time.Hour,
	} {
		got, err := ParseDuration(s)
		require.NoError(t, err, s)
		require.Equal(t, want, got, s)
	}
	for _, s := range []string{"", "d", "3x", "3 d", "1d-2h", "1d+2h", "1dd", "d3", "1d2", "999999999999d", "106752d"} {
		_, err := ParseDuration(s)
		require.EqualError(t, err, "not "+DurationHint, "%q: the error does not repeat the value", s)
	}
	rapid.Check(t, func(t *rapid.T) {
		d := time.Duration(rapid.Int64().Draw(t, "d"))
		got, err := ParseDuration(d.String())
		require.NoError(t, err)
		require.Equal(t, d, got, "every Go duration reads as before")
	})
}

// Every duration of the file may be written with days, in any quoting, in flow or
// block style, behind an anchor, next to text that is not ASCII; the decoder still
// names the right line for anything else it refuses.
func TestConfigDurationsWithDays(t *testing.T) {
	c, err := Decode(strings.NewReader(`scheduler:
  horizon: 60d
  doneTTL: '8d'
  lease: "1d12h"
  grace: 2s
failedSends: {maxAge: &week 7d, retention: *week}
escalations:
  "数据库":
    steps:
      - {target: "运维组", after: 1d, mention: {users: ["张三"]}}
      - {after: 1.5d, target: lead}
    repeat: {every: 12h, limit: 2}
`))
	require.NoError(t, err)
	require.Equal(t, 60*24*time.Hour, c.Scheduler.Horizon)
	require.Equal(t, 8*24*time.Hour, c.Scheduler.DoneTTL)
	require.Equal(t, 36*time.Hour, c.Scheduler.Lease)
	require.Equal(t, 2*time.Second, c.Scheduler.Grace)
	require.Equal(t, 7*24*time.Hour, c.FailedSends.MaxAge)
	require.Equal(t, 7*24*time.Hour, c.FailedSends.Retention)
	steps := c.Escalations["数据库"].Steps
	require.Equal(t, 24*time.Hour, steps[0].After)
	require.Equal(t, "运维组", steps[0].Target)
	require.Equal(t, 36*time.Hour, steps[1].After)

	_, err = Decode(strings.NewReader("scheduler:\n  horizon: 30d\n  grace: 2s\nrocketmq:\n  topik: x\n"))
	require.ErrorContains(t, err, "line 5: field topik not found", "line numbers stay the file's")
}

// A value that is not a duration is an error naming its key and line, never the value.
func TestBadDurationNamesTheKey(t *testing.T) {
	_, err := Decode(strings.NewReader("scheduler:\n  horizon: 30x\nescalations:\n  db:\n    steps:\n      - {after: tomorrow-hunter2, target: ops}\nsender: {cooldown: 600}\n"))
	require.EqualError(t, err, "config: scheduler.horizon: line 2: not a duration such as 90s, 15m, 6h, 3d or 1d12h\n"+
		"config: escalations.db.steps[0].after: line 6: not a duration such as 90s, 15m, 6h, 3d or 1d12h\n"+
		"config: sender.cooldown: line 7: not a duration such as 90s, 15m, 6h, 3d or 1d12h")

	_, err = Load(writeFile(t, validYAML+"ingress: {dedupeWindow: 2w}\n"), noEnv)
	require.ErrorContains(t, err, "config: ingress.dedupeWindow: line 11: not a duration")
	require.ErrorContains(t, err, "config.yaml: ", "the file is named")

	c, err := Load(writeFile(t, validYAML), func(k string) string {
		return map[string]string{"ROCKETDELAY_SHUTDOWN_TIMEOUT": "1d", "ROCKETDELAY_SENDER_WINDOW": "2m"}[k]
	})
	require.NoError(t, err)
	require.Equal(t, 24*time.Hour, c.ShutdownTimeout, "the environment takes days too")
	_, err = Load(writeFile(t, validYAML), func(k string) string { return map[string]string{"ROCKETDELAY_THRESHOLD": "3days"}[k] })
	require.EqualError(t, err, "config: scheduler.threshold: from ROCKETDELAY_THRESHOLD: not a duration such as 90s, 15m, 6h, 3d or 1d12h")
}
