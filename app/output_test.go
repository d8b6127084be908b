package app

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// decode parses a command's -o json output into v, requiring exactly one JSON value.
func decode(t *testing.T, out string, v any) {
	t.Helper()
	dec := json.NewDecoder(strings.NewReader(out))
	dec.DisallowUnknownFields()
	require.NoError(t, dec.Decode(v), "output: %s", out)
	require.False(t, dec.More(), "one JSON value: %s", out)
}

// version, plan and config check answer in JSON with -o json; an output format a
// command does not have is a usage error.
func TestJSONOutputOfLocalCommands(t *testing.T) {
	out, _, err := run(t, nil, "version", "-o", "json")
	require.NoError(t, err)
	var v versionView
	decode(t, out, &v)
	require.Equal(t, Version, v.Version)
	require.Equal(t, runtime.Version(), v.GoVersion)

	out, _, err = run(t, nil, "plan", "3h25m17s", "-o", "json")
	require.NoError(t, err)
	var p struct {
		Delay       string `json:"delay"`
		DelayMS     int64  `json:"delay_ms"`
		Mode        string `json:"mode"`
		Levels      string `json:"levels"`
		Threshold   string `json:"threshold"`
		Remainder   string `json:"remainder"`
		RemainderMS int64  `json:"remainder_ms"`
		Hops        []struct {
			Level     int    `json:"level"`
			Delay     string `json:"delay"`
			DelayMS   int64  `json:"delay_ms"`
			Reached   string `json:"reached"`
			ReachedMS int64  `json:"reached_ms"`
		} `json:"hops"`
	}
	decode(t, out, &p)
	require.Equal(t, "3h25m17s", p.Delay)
	require.Equal(t, (3*time.Hour + 25*time.Minute + 17*time.Second).Milliseconds(), p.DelayMS)
	require.Equal(t, "levels", p.Mode)
	require.Equal(t, "1m0s", p.Threshold)
	// 2h, 1h, 20m, 5m, then 17s in the wheel stage: the table's numbers.
	var levels []int
	for _, h := range p.Hops {
		levels = append(levels, h.Level)
	}
	require.Equal(t, []int{18, 17, 15, 9}, levels)
	require.Equal(t, "3h25m0s", p.Hops[3].Reached)
	require.Equal(t, "17s", p.Remainder)
	require.Equal(t, p.DelayMS, p.Hops[len(p.Hops)-1].ReachedMS+p.RemainderMS)
	table, _, err := run(t, nil, "plan", "3h25m17s")
	require.NoError(t, err)
	require.Contains(t, table, "4 hops, then 17s in the wheel stage")

	file := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:9876"]}
redis: {url: "redis://:redis-pw-77@127.0.0.1:6379/0"}
postgres: {url: "postgres://u:pg-pw-88@127.0.0.1/db"}
targets:
  ops: {robots: [{name: r1, token: tok-99}]}
`), 0o600))
	out, _, err = run(t, nil, "config", "check", "-f", file, "-o", "json")
	require.NoError(t, err)
	var cfg map[string]any
	decode(t, out, &cfg)
	require.Equal(t, "guava", cfg["rocketmq"].(map[string]any)["topic"])
	require.Equal(t, "<secret>", cfg["redis"].(map[string]any)["url"])
	require.Equal(t, "1m0s", cfg["scheduler"].(map[string]any)["threshold"], "durations as in the YAML")
	for _, secret := range []string{"redis-pw-77", "pg-pw-88", "tok-99"} {
		require.NotContains(t, out, secret)
	}

	for _, args := range [][]string{{"version", "-o", "yaml"}, {"plan", "1m", "-o", "name"}, {"config", "check", "-o", "name"}} {
		_, _, err := run(t, nil, args...)
		require.ErrorIs(t, err, ErrUsage, "%v", args)
		require.ErrorContains(t, err, `invalid argument "`+args[len(args)-1]+`" for "-o, --output" flag`, "%v", args)
	}
}

// migrate up and status answer in JSON with -o json, against a real Postgres.
func TestMigrateJSON(t *testing.T) {
	_, dsn := testenv.PostgresSchema(t)
	env := map[string]string{"ROCKETDELAY_POSTGRES_URL": dsn, "ROCKETDELAY_REDIS_URL": "redis://127.0.0.1:1", "ROCKETDELAY_NAMESRV": "127.0.0.1:1"}
	type migration struct {
		Version    int64      `json:"version"`
		Name       string     `json:"name"`
		Applied    bool       `json:"applied"`
		AppliedAt  *time.Time `json:"applied_at"`
		DurationMS int64      `json:"duration_ms"`
	}
	out, _, err := run(t, env, "migrate", "status", "-o", "json")
	require.NoError(t, err)
	var before struct {
		Migrations []migration `json:"migrations"`
	}
	decode(t, out, &before)
	require.NotEmpty(t, before.Migrations)
	for _, m := range before.Migrations {
		require.False(t, m.Applied, "%+v", m)
		require.Nil(t, m.AppliedAt)
	}

	out, _, err = run(t, env, "migrate", "up", "-o", "json")
	require.NoError(t, err)
	var up struct {
		Applied []migration `json:"applied"`
	}
	decode(t, out, &up)
	require.Len(t, up.Applied, len(before.Migrations))
	require.Equal(t, before.Migrations[0].Name, up.Applied[0].Name)

	out, _, err = run(t, env, "migrate", "up", "-o", "json")
	require.NoError(t, err)
	require.JSONEq(t, `{"applied": []}`, out)

	out, _, err = run(t, env, "migrate", "status", "-o", "json")
	require.NoError(t, err)
	var after struct {
		Migrations []migration `json:"migrations"`
	}
	decode(t, out, &after)
	for _, m := range after.Migrations {
		require.True(t, m.Applied, "%+v", m)
		require.NotNil(t, m.AppliedAt)
		require.WithinDuration(t, time.Now(), *m.AppliedAt, time.Minute)
	}
}

// cancel answers in JSON whatever the outcome (the exit code says it too), and with
// -o name prints the id of what it cancelled, for a script's next step.
func TestCancelJSONAndName(t *testing.T) {
	dsn := testenv.MigratedPostgres(t)
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{CancelTTL: time.Hour})
	for _, id := range []string{"order-1", "order-2"} {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
		require.NoError(t, err)
	}
	env := map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t), "ROCKETDELAY_POSTGRES_URL": dsn,
		"ROCKETDELAY_REDIS_KEY_PREFIX": prefix, "ROCKETDELAY_NAMESRV": "127.0.0.1:1"}
	type answer struct {
		ID          string `json:"id"`
		Result      string `json:"result"`
		Explanation string `json:"explanation"`
	}
	out, _, err := run(t, env, "cancel", "order-1", "-o", "json")
	require.NoError(t, err)
	var a answer
	decode(t, out, &a)
	require.Equal(t, answer{ID: "order-1", Result: "removed", Explanation: "removed from the wheel stage"}, a)

	out, _, err = run(t, env, "cancel", "order-1", "-o", "json")
	require.NoError(t, err, "a repeat is answered the same way a hopping alert's is: it is dropped when it arrives")
	decode(t, out, &a)
	require.Equal(t, "tombstoned", a.Result)

	out, _, err = run(t, env, "cancel", "order-9", "-o", "json")
	require.Equal(t, ExitNotFound, ExitCode(err), "%v", err)
	decode(t, out, &a)
	require.Equal(t, "order-9", a.ID)
	require.Equal(t, "unknown", a.Result)
	require.Contains(t, a.Explanation, "no alert order-9 is known")

	out, _, err = run(t, env, "cancel", "order-2", "-o", "name")
	require.NoError(t, err)
	require.Equal(t, "order-2\n", out)
	out, _, err = run(t, env, "cancel", "order-8", "-o", "name")
	require.Equal(t, ExitNotFound, ExitCode(err))
	require.Empty(t, out, "-o name prints only what was cancelled")
}

// publish answers with the alert's id and due time in JSON, or only its id with -o
// name, through the real broker.
func TestPublishJSONAndName(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`rocketmq: {nameServers: [%q], topic: %s}
redis: {url: "redis://127.0.0.1:1/0"}
postgres: {url: "postgres://u@127.0.0.1:1/db"}
targets:
  ops: {robots: [{name: r1, token: t1}]}
`, testenv.NameServer(t), testenv.Unique("rd_app_out_"))), 0o600))
	before := time.Now()
	out, _, err := run(t, nil, "publish", "-f", file, "--target", "ops", "--in", "10m", "--id", "out-1", "--text", "x", "-o", "json")
	require.NoError(t, err)
	var p struct {
		ID     string    `json:"id"`
		Target string    `json:"target"`
		DueAt  time.Time `json:"due_at"`
	}
	decode(t, out, &p)
	require.Equal(t, "out-1", p.ID)
	require.Equal(t, "ops", p.Target)
	require.WithinRange(t, p.DueAt, before.Add(10*time.Minute-time.Millisecond), time.Now().Add(10*time.Minute))

	out, _, err = run(t, nil, "publish", "-f", file, "--target", "ops", "--in", "10m", "--text", "x", "-o", "name")
	require.NoError(t, err)
	require.Regexp(t, `^rd-[0-9a-f]{8,}\n$`, out, "a new id, alone on its line")
}
