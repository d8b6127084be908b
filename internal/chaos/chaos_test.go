package chaos

import (
	"bytes"
	"context"
	"flag"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

var (
	full     = flag.Bool("chaos.full", false, "run every scenario at full size (TestChaosFull); `make chaos` uses go run ./internal/cmd/chaos instead")
	stackDir = flag.String("chaos.stack-dir", os.Getenv("CHAOS_STACK_DIR"), "reuse (and keep) a private stack in this state directory")
)

// TestChaosShort runs a shortened suite on a private stack: SIGKILLs during a run whose
// delays cover both broker hops and the wheel stage, the whole malformed corpus, a quick
// DingTalk storm, a SIGKILLed Redis, and a replica SIGSTOPped past its lease. Nothing may be lost, duplicated without an ambiguous cause, or
// delivered early, and every malformed input must be rejected with its reason.
func TestChaosShort(t *testing.T) {
	if testing.Short() {
		t.Skip("needs RocketMQ, Redis and Postgres (a private stack); skipped under -short")
	}
	var log bytes.Buffer
	ctx, cancel := context.WithTimeout(context.Background(), 14*time.Minute)
	defer cancel()
	rows, err := Run(ctx, Options{
		Scenarios:   []string{ScenarioKillOne, ScenarioMalformed, ScenarioStorm, ScenarioRedisKill, ScenarioZombie},
		Alerts:      300,
		OtherAlerts: 120,
		Kills:       2,
		MaxDelay:    30 * time.Second,
		PublishOver: 12 * time.Second,
		Outage:      2 * time.Second,
		Storm:       14 * time.Second,
		Drain:       90 * time.Second,
		Settle:      2 * time.Second,
		StackDir:    *stackDir,
		KeepStack:   *stackDir != "",
		Log:         &log,
	})
	var table bytes.Buffer
	_ = WriteTable(&table, rows)
	t.Logf("\n%s", table.String())
	if t.Failed() || err != nil || testing.Verbose() {
		t.Logf("progress:\n%s", log.String())
	}
	require.NoError(t, err)
	require.Len(t, rows, 5)
	for _, r := range rows {
		require.NoError(t, r.Err, r.Scenario)
		require.Zero(t, r.Lost, "%s: lost %v", r.Scenario, r.LostIDs)
		require.Zero(t, r.Duplicates, "%s: duplicates not explained by an ambiguous send", r.Scenario)
		require.Zero(t, r.Early, "%s: alerts delivered early", r.Scenario)
		require.Equal(t, r.Published, r.Delivered, r.Scenario)
		require.Empty(t, r.MalformedProblems, r.Scenario)
		require.Equal(t, r.Malformed, r.MalformedOK, r.Scenario)
		require.Zero(t, r.DLQ, "%s: messages in the dead-letter queue", r.Scenario)
		if r.Scenario == ScenarioMalformed {
			require.GreaterOrEqual(t, r.Malformed, 50, "the corpus has at least 50 inputs")
		}
	}
}

// TestChaosFull is the full suite as a test: go test ./internal/chaos -run TestChaosFull
// -chaos.full -timeout 90m -v.
func TestChaosFull(t *testing.T) {
	if !*full {
		t.Skip("the full chaos suite runs with -chaos.full (or go run ./internal/cmd/chaos)")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 85*time.Minute)
	defer cancel()
	rows, err := Run(ctx, Options{StackDir: *stackDir, KeepStack: *stackDir != "", Log: os.Stderr, PublishOver: 40 * time.Second, Drain: 150 * time.Second})
	var table bytes.Buffer
	_ = WriteTable(&table, rows)
	t.Logf("\n%s", table.String())
	require.NoError(t, err)
	for _, r := range rows {
		require.True(t, r.Pass(), "%s failed", r.Scenario)
	}
}

func TestCorpusSize(t *testing.T) {
	c := Corpus("abc123-malformed")
	require.GreaterOrEqual(t, len(c), 50)
	seen := map[string]bool{}
	for _, x := range c {
		require.False(t, seen[x.Name], "case %s twice", x.Name)
		seen[x.Name] = true
		require.NotEmpty(t, x.Reason, x.Name)
	}
}
