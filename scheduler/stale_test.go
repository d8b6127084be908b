package scheduler

import (
	"context"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/wire"
)

// A copy of an alert that arrives after its done marker expired (a consumer-group reset,
// an old retry message) cannot be told from a first arrival: one due longer ago than the
// dedupe window is recorded as stale instead of sent again, and one inside it is not.
func TestDecodeRejectsStaleAlerts(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	rules := decodeRules{knownTarget: func(string) bool { return true }, horizon: time.Hour, dedupe: time.Minute}
	for _, tc := range []struct {
		ago   time.Duration
		stale bool
	}{{2 * time.Minute, true}, {time.Minute + time.Millisecond, true}, {time.Minute, false}, {time.Second, false}} {
		msg := &primitive.MessageExt{Message: primitive.Message{Body: []byte("x")}}
		msg.WithProperties(map[string]string{wire.PropTarget: "ops", wire.PropID: "a",
			wire.PropDeliverAt: strconv.FormatInt(now.Add(-tc.ago).UnixMilli(), 10)})
		a, rej := decode(msg, rules, now)
		if !tc.stale {
			require.Nil(t, rej, "due %s ago", tc.ago)
			continue
		}
		require.NotNil(t, rej, "due %s ago", tc.ago)
		require.Equal(t, wire.RejectStale, rej.Reason)
		require.Contains(t, rej.Detail, "scheduler.doneTTL")
		require.True(t, now.Add(-tc.ago).Equal(a.DueAt), "the rejection keeps the due time")
	}
	rules.dedupe = 0
	msg := &primitive.MessageExt{Message: primitive.Message{Body: []byte("x")}}
	msg.WithProperties(map[string]string{wire.PropTarget: "ops", wire.PropID: "a", wire.PropDeliverAt: "1"})
	_, rej := decode(msg, rules, now)
	require.Nil(t, rej, "no dedupe window, nothing is stale")
}

// On the real broker, with a dedupe window of a minute: a copy due two minutes ago is
// rejected as stale and never handed off; a fresh alert next to it is delivered.
func TestStaleCopyIsRecordedNotSent(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	opts := h.options("stale")
	opts.DedupeWindow = time.Minute
	s, err := New(opts, h.ws, h.rec, discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	require.NoError(t, s.Start(ctx))
	t.Cleanup(func() { stop(t, s) })

	copyMsg := primitive.NewMessage(h.topic, []byte("old copy"))
	copyMsg.WithProperties(map[string]string{wire.PropTarget: "ops", wire.PropID: "stale-copy",
		wire.PropDeliverAt: strconv.FormatInt(time.Now().Add(-2*time.Minute).UnixMilli(), 10)})
	res, err := h.raw.SendSync(ctx, copyMsg)
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, res.Status)
	h.publish("fresh", time.Second, "fresh")
	h.rec.waitAll(t, []string{"fresh"}, 30*time.Second)
	require.Eventually(t, func() bool {
		h.rec.mu.Lock()
		defer h.rec.mu.Unlock()
		return len(h.rec.rejected) == 1
	}, 20*time.Second, 20*time.Millisecond, "the stale copy was never rejected")
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	require.Equal(t, string(wire.RejectStale), h.rec.rejected[0].Reason)
	require.Equal(t, "stale-copy", h.rec.rejected[0].Alert.ID)
	require.Empty(t, h.rec.at["stale-copy"], "a stale copy was handed off")
}
