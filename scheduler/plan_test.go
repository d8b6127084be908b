package scheduler

import (
	"log/slog"
	"math"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/rlog"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/config"
)

var (
	defaultLevels = config.MustParseDelayLevels(config.DefaultLevels)
	testLevels    = config.MustParseDelayLevels("1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 15s 20s 30s")
)

func TestPlanExamples(t *testing.T) {
	hops, rem := Plan(3*time.Hour+25*time.Minute+17*time.Second, Route{Levels: defaultLevels, Threshold: time.Minute})
	var levels []int
	for _, h := range hops {
		levels = append(levels, h.Level)
	}
	// 2h, 1h, 20m, 5m, then 17s for the wheel.
	require.Equal(t, []int{18, 17, 15, 9}, levels)
	require.Equal(t, 17*time.Second, rem)
	require.Equal(t, 3*time.Hour+25*time.Minute, hops[len(hops)-1].Reached)

	hops, rem = Plan(59*time.Second, Route{Levels: defaultLevels, Threshold: time.Minute})
	require.Empty(t, hops)
	require.Equal(t, 59*time.Second, rem)

	hops, rem = Plan(time.Minute, Route{Levels: defaultLevels, Threshold: time.Minute})
	require.Equal(t, []Hop{{Level: 5, Delay: time.Minute, Reached: time.Minute}}, hops)
	require.Zero(t, rem)

	hops, rem = Plan(-5*time.Second, Route{Levels: defaultLevels, Threshold: time.Minute})
	require.Empty(t, hops)
	require.Zero(t, rem, "a due time in the past is delivered at once")
}

// minHops is the true minimum number of hops, by breadth-first search over whole
// seconds: the fewest levels whose sum s satisfies delay-threshold < s <= delay.
func minHops(delay time.Duration, levels config.DelayLevels, threshold time.Duration) int {
	if delay < threshold {
		return 0
	}
	d := int(delay / time.Second)
	lo := d - int(threshold/time.Second) // need sum > lo
	seen := make([]bool, d+1)
	frontier := []int{0}
	seen[0] = true
	for hops := 1; ; hops++ {
		var next []int
		for _, s := range frontier {
			for _, l := range levels {
				n := s + int(l/time.Second)
				if n > d || seen[n] {
					continue
				}
				if n > lo {
					return hops
				}
				seen[n] = true
				next = append(next, n)
			}
		}
		frontier = next
	}
}

func checkPlanProperties(t *rapid.T, levels config.DelayLevels, maxDelay time.Duration) {
	threshold := rapid.SampledFrom([]time.Duration{levels[0], 5 * time.Second, 10 * time.Second, time.Minute}).Draw(t, "threshold")
	if threshold < levels[0] {
		threshold = levels[0]
	}
	delay := time.Duration(rapid.Int64Range(0, int64(maxDelay/time.Second)).Draw(t, "seconds")) * time.Second
	hops, rem := Plan(delay, Route{Levels: levels, Threshold: threshold})

	var sum time.Duration
	for i, h := range hops {
		sum += h.Delay
		if h.Reached != sum {
			t.Fatalf("hop %d reached %s, want %s", i, h.Reached, sum)
		}
		if levels[h.Level-1] != h.Delay {
			t.Fatalf("hop %d: level %d is %s, plan says %s", i, h.Level, levels[h.Level-1], h.Delay)
		}
	}
	if sum+rem != delay {
		t.Fatalf("hops %s + remainder %s != delay %s", sum, rem, delay)
	}
	if rem < 0 || sum > delay {
		t.Fatalf("early: hops cover %s of a %s delay", sum, delay)
	}
	if rem >= threshold {
		t.Fatalf("remainder %s is not below the threshold %s", rem, threshold)
	}
	if want := minHops(delay, levels, threshold); len(hops) != want {
		t.Fatalf("delay %s threshold %s: %d hops, minimum is %d", delay, threshold, len(hops), want)
	}
}

func TestPlanPropertiesDefaultLevels(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlanProperties(t, defaultLevels, 30*time.Hour) })
}

func TestPlanPropertiesTestLevels(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) { checkPlanProperties(t, testLevels, 2*time.Hour) })
}

// Sub-second delays: never early, remainder below threshold.
func TestPlanMilliseconds(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		delay := time.Duration(rapid.Int64Range(0, int64(5*time.Hour/time.Millisecond)).Draw(t, "ms")) * time.Millisecond
		hops, rem := Plan(delay, Route{Levels: defaultLevels, Threshold: time.Minute})
		if len(hops) > 0 && hops[len(hops)-1].Reached > delay {
			t.Fatalf("early")
		}
		if rem < 0 || rem >= time.Minute {
			t.Fatalf("remainder %s", rem)
		}
	})
}

// A message handed back again and again is redelivered at a level that grows with its
// reconsume count and never passes RetryMaxDelay; it never runs out of retries.
func TestRetryLevelIsCapped(t *testing.T) {
	s := &Scheduler{opts: Options{
		Levels:        config.MustParseDelayLevels(config.DefaultLevels),
		RetryDelay:    time.Second,
		RetryMaxDelay: time.Minute,
	}}
	var got []string
	for _, n := range []int{0, 1, 2, 3, 4, 5, 6, 16, 17, 1000, math.MaxInt32} {
		l := s.retryLevel(n)
		got = append(got, s.opts.Levels[l-1:l].String())
	}
	require.Equal(t, []string{"1s", "1s", "1s", "5s", "10s", "30s", "1m", "1m", "1m", "1m", "1m"}, got)
}

// The client's errors about a group's retry or dead-letter topic (created on first use)
// are expected start-up chatter, not errors; others stay errors.
func TestClientErrorsAboutRetryAndDLQTopicsAreInfo(t *testing.T) {
	require.Equal(t, slog.LevelInfo, errorLevel(map[string]any{rlog.LogKeyTopic: "%RETRY%rocketdelay"}))
	require.Equal(t, slog.LevelInfo, errorLevel(map[string]any{rlog.LogKeyTopic: "%DLQ%rocketdelay"}))
	require.Equal(t, slog.LevelError, errorLevel(map[string]any{rlog.LogKeyTopic: "guava"}))
	require.Equal(t, slog.LevelError, errorLevel(nil))
	probingTopics.Store("guava", true)
	require.Equal(t, slog.LevelInfo, errorLevel(map[string]any{rlog.LogKeyTopic: "guava"}), "EnsureTopic expects it missing")
	probingTopics.Delete("guava")
	require.Equal(t, slog.LevelError, errorLevel(map[string]any{rlog.LogKeyTopic: "guava"}))
}
