package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// Durations take days on the command line too: plan's DELAY, every duration flag,
// failed list --since; a bad one is a usage error naming the flag. The configuration
// file takes them in every duration key, and a bad one names its key.
func TestDurationsWithDays(t *testing.T) {
	out, _, err := run(t, nil, "plan", "3d", "-o", "json")
	require.NoError(t, err)
	var p struct {
		DelayMS     int64 `json:"delay_ms"`
		RemainderMS int64 `json:"remainder_ms"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &p))
	require.Equal(t, (72 * time.Hour).Milliseconds(), p.DelayMS)
	out, _, err = run(t, nil, "plan", "1d12h", "--mode", "timer", "--timer-max", "1d")
	require.NoError(t, err)
	require.Contains(t, out, "delay 36h0m0s, timer messages of at most 24h0m0s")

	_, _, err = run(t, nil, "plan", "3dd")
	require.ErrorIs(t, err, ErrUsage)
	require.ErrorContains(t, err, `DELAY "3dd" is not a non-negative duration such as 3h25m17s or 3d`)
	_, _, err = run(t, nil, "plan", "1h", "--threshold", "1x")
	require.ErrorIs(t, err, ErrUsage)
	require.ErrorContains(t, err, `invalid argument "1x" for "--threshold" flag: not a duration such as 90s, 15m, 6h, 3d or 1d12h`)
	_, _, err = run(t, nil, "failed", "list", "--since", "1d12x")
	require.ErrorIs(t, err, ErrUsage)
	require.ErrorContains(t, err, "--since")

	dir := t.TempDir()
	file := filepath.Join(dir, "rd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:9876"], retention: 3d}
redis: {url: "redis://127.0.0.1:6379/0"}
postgres: {url: "postgres://u@127.0.0.1/db"}
scheduler: {horizon: 60d, doneTTL: 8d}
`), 0o600))
	out, _, err = run(t, nil, "config", "check", "-f", file)
	require.NoError(t, err)
	require.Contains(t, out, "horizon: 1440h0m0s")
	require.Contains(t, out, "doneTTL: 192h0m0s")
	require.Contains(t, out, "retention: 72h0m0s")

	bad := filepath.Join(dir, "bad.yaml")
	require.NoError(t, os.WriteFile(bad, []byte("scheduler: {horizon: 60days}\n"), 0o600))
	_, _, err = run(t, nil, "config", "check", "-f", bad)
	require.EqualError(t, err, bad+": config: scheduler.horizon: line 1: not a duration such as 90s, 15m, 6h, 3d or 1d12h")
}
