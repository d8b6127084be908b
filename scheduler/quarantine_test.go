package scheduler

import (
	"context"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A wheel-stage record that cannot be decoded (damaged in Redis, written by an unknown
// version), claimed in one batch with valid ones, neither blocks them nor comes back
// forever: the valid ones are handed off, the bad one is recorded as a rejection
// (corrupt_entry, with its record as the payload) and released.
func TestCorruptEntryIsQuarantined(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 20*time.Second)
	h.start("quarantine")
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	defer rdb.Close()
	ctx := context.Background()

	due := time.Now().Add(8 * time.Second).Truncate(time.Millisecond) // one instant: one batch
	ids := []string{"q-good-1", "q-poison", "q-good-2"}
	for _, id := range ids {
		ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		_, err := h.producer.Publish(ctx, wire.Publication{Target: "ops", ID: id, At: due, Body: []byte(id)})
		cancel()
		require.NoError(t, err)
	}
	require.Eventually(t, func() bool {
		waiting, _, err := h.ws.Stats(ctx)
		return err == nil && waiting == 3
	}, 8*time.Second, 20*time.Millisecond, "the alerts never reached the wheel stage before their due time")
	require.NoError(t, rdb.HSet(ctx, "{"+h.prefix+"}:entries", "q-poison", "\x07 damaged record").Err())

	h.rec.waitAll(t, []string{"q-good-1", "q-good-2"}, 30*time.Second)
	require.Eventually(t, func() bool {
		waiting, inflight, err := h.ws.Stats(ctx)
		return err == nil && waiting+inflight == 0
	}, 30*time.Second, 20*time.Millisecond, "the poison entry is still in the wheel stage")
	h.rec.mu.Lock()
	defer h.rec.mu.Unlock()
	require.Len(t, h.rec.rejected, 1)
	rej := h.rec.rejected[0]
	require.Equal(t, "q-poison", rej.Alert.ID)
	require.Equal(t, rejectCorruptEntry, rej.Reason)
	require.Equal(t, []byte("\x07 damaged record"), rej.Alert.Body)
	require.Contains(t, rej.Detail, "cannot be decoded")
	require.Empty(t, h.rec.at["q-poison"], "a record that cannot be read was handed off")
	// Released as a recorded failure: a redelivered copy of its last hop is a no-op.
	delivered, err := h.ws.IsDelivered(ctx, "q-poison")
	require.NoError(t, err)
	require.False(t, delivered)
	n, err := rdb.Exists(ctx, "{"+h.prefix+"}:done:q-poison").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n)
}
