package store_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestAShardMoveWaitsForEveryLiveReplica: a replica started with another count while
// the stage is not drained starts a move (on the code before, it was refused); one with
// the old count follows it. Phase 2 waits until every live replica acks the move; a
// replica that would look only at the old count is refused once it began; the move
// settles once its records have had time to end.
func TestAShardMoveWaitsForEveryLiveReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	one, err := store.ClaimShards(ctx, rdb, prefix, 1, true)
	require.NoError(t, err)
	stage := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: 1, Liveness: time.Minute})
	var placed []string // placed by the old count: some of them in another shard of the new one
	for i := range 8 {
		placed = append(placed, fmt.Sprintf("waiting-%d", i))
		_, err = stage.Put(ctx, store.Entry{ID: placed[i], Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
		require.NoError(t, err)
	}
	_, err = stage.Liveness(nil).Beat(ctx, "replica-a")
	require.NoError(t, err)
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-a", one))

	moving, err := store.ClaimShards(ctx, rdb, prefix, 3, true)
	require.NoError(t, err, "not drained, and online: a move")
	require.Equal(t, store.Layout{Shards: 3, From: 1, Phase: 1}, moving)
	follow, err := store.ClaimShards(ctx, rdb, prefix, 1, true)
	require.NoError(t, err)
	require.Equal(t, moving, follow, "a replica of the old count follows the move")
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-a", one), "the old count runs beside phase 1")
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-b", moving))

	rec, err := store.AdvanceLayout(ctx, rdb, prefix, moving)
	require.NoError(t, err)
	require.Equal(t, moving, rec, "replica-a, live, looks only at the old count: phase 2 waits")
	_, err = stage.Put(ctx, store.Entry{ID: "still-old", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.NoError(t, err, "and it writes as before")

	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-a", follow), "replica-a started again in the move")
	rec, err = store.AdvanceLayout(ctx, rdb, prefix, moving)
	require.NoError(t, err)
	require.Equal(t, 2, rec.Phase)
	require.WithinDuration(t, time.Now(), rec.Since, time.Minute)
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-b", moving), "phase 1 runs beside phase 2")
	err = store.AckLayout(ctx, rdb, prefix, "replica-c", one)
	require.ErrorIs(t, err, store.ErrShardsChanged, "the old count alone, after phase 2 began")
	_, err = stage.Put(ctx, store.Entry{ID: "late-old", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.ErrorIs(t, err, store.ErrMovedOn, "a replica of the old count alone that was away writes nothing")
	require.ErrorIs(t, err, store.ErrUnavailable, "and keeps what it was storing")
	again, err := store.ClaimShards(ctx, rdb, prefix, 3, true)
	require.NoError(t, err)
	require.Equal(t, rec.String(), again.String())

	now := time.Now()
	same, err := store.SettleLayout(ctx, rdb, prefix, rec, 0, now)
	require.NoError(t, err)
	require.Equal(t, rec.String(), same.String(), "alerts placed the old way are still to be handed off")
	two := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: 3, From: 1, Phase: 2})
	for _, id := range append(placed, "still-old") {
		r, err := two.Cancel(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.CancelRemoved, r, id)
	}
	same, err = store.SettleLayout(ctx, rdb, prefix, rec, time.Hour, now)
	require.NoError(t, err)
	require.Equal(t, rec.String(), same.String(), "their tombstones live on")
	same, err = store.SettleLayout(ctx, rdb, prefix, rec, time.Hour, now.Add(59*time.Minute))
	require.NoError(t, err)
	require.Equal(t, rec.String(), same.String())
	settled, err := store.SettleLayout(ctx, rdb, prefix, rec, time.Hour, now.Add(61*time.Minute))
	require.NoError(t, err)
	require.Equal(t, store.Layout{Shards: 3}, settled)
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-b", rec), "phase 2 runs beside the count it settled at")
	fences, err := rdb.Exists(ctx, "{"+prefix+"}:fence").Result()
	require.NoError(t, err)
	require.Zero(t, fences, "the fence is lifted")
}

// TestAMovingStageKeepsEachAlertInOneShard: alerts placed by the old count and by the
// new one, seen through replicas in each phase (as in a rolling change of redis.shards
// from 1 to 3): each is stored once, cancelled, rescheduled, claimed and released where
// it is, a duplicate of one is refused whichever replica gets it, and after the move
// settles the new count alone finds every one's done marker and tombstone.
func TestAMovingStageKeepsEachAlertInOneShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	opts := func(shards, from, phase int) store.WheelStageOptions {
		return store.WheelStageOptions{Shards: shards, From: from, Phase: phase, Liveness: time.Minute}
	}
	old := store.NewWheelStage(rdb, prefix, opts(1, 0, 0))
	one := store.NewWheelStage(rdb, prefix, opts(3, 1, 1))
	two := store.NewWheelStage(rdb, prefix, opts(3, 1, 2))
	for _, w := range []*store.WheelStage{old, one, two} {
		_, err := w.Liveness(nil).Beat(ctx, "replica")
		require.NoError(t, err)
	}
	require.Equal(t, "1>3", one.Layout().String())
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	put := func(w *store.WheelStage, id string) store.PutResult {
		t.Helper()
		r, err := w.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte(id)})
		require.NoError(t, err)
		return r
	}
	const n = 24
	var before, after []string
	for i := range n {
		b, a := fmt.Sprintf("before-%d", i), fmt.Sprintf("after-%d", i)
		before, after = append(before, b), append(after, a)
		require.Equal(t, store.PutStored, put(old, b), b)
		require.Equal(t, store.PutStored, put(two, a), a)
		for _, w := range []*store.WheelStage{one, two} {
			require.Equal(t, store.PutDuplicate, put(w, b), b)
			require.Equal(t, store.PutDuplicate, put(w, a), a)
		}
	}
	moved := 0
	for _, id := range after {
		n, err := rdb.Exists(ctx, "{"+prefix+"}:fwd:"+id).Result()
		require.NoError(t, err)
		moved += int(n)
	}
	require.NotZero(t, moved, "some alerts placed in phase 2 are in shards the old count has not")
	listed, err := two.DueWithin(ctx, time.Minute, 1000)
	require.NoError(t, err)
	require.Len(t, listed, 2*n, "the fire loop sees both counts' shards")

	// Cancelled through a replica of phase 1: each where it is.
	for _, id := range []string{before[0], after[0]} {
		r, err := one.Cancel(ctx, id)
		require.NoError(t, err)
		require.Equal(t, store.CancelRemoved, r, id)
		require.Equal(t, store.PutCancelled, put(two, id), id)
		gone, err := two.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.True(t, gone, id)
	}
	// Claimed and released through phase 2, in one batch of both kinds.
	ids := append(append([]string{}, before[1:]...), after[1:]...)
	c, err := two.Claim(ctx, ids, "replica/claim")
	require.NoError(t, err)
	require.Len(t, c.Entries, len(ids), "every alert claimed once, wherever it is")
	claims := make([]store.Claim, len(c.Entries))
	for i, e := range c.Entries {
		claims[i] = e.Claim()
	}
	lost, err := two.Release(ctx, store.Delivered, claims...)
	require.NoError(t, err)
	require.Zero(t, lost)
	for _, id := range ids {
		require.Equal(t, store.PutDone, put(one, id), id)
		require.Equal(t, store.PutDone, put(two, id), id)
	}
	waiting, inflight, err := two.Stats(ctx)
	require.NoError(t, err)
	require.Zero(t, waiting+inflight)

	// Settled at 3 (the old count's records ended: here they are still there, and the
	// new count finds those of the alerts that moved).
	three := store.NewWheelStage(rdb, prefix, opts(3, 0, 0))
	for _, id := range after[1:] {
		require.Equal(t, store.PutDone, put(three, id), id)
	}
	require.Equal(t, store.PutCancelled, put(three, after[0]))
}

// TestASettledMoveLeavesNoFence: a move from 2 to 3 fences both shards of 2 when phase 2
// begins (a replica settled at 2 writes nothing), and once it settles the fences go, also
// when the settle was cut off before it lifted them (another replica lifts them), so a
// later layout of 2 shards is not fenced. A record that is gone is written again by the
// next ack instead of stopping every replica.
func TestASettledMoveLeavesNoFence(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	_, err := store.ClaimShards(ctx, rdb, prefix, 2, true)
	require.NoError(t, err)
	opts := store.WheelStageOptions{Shards: 2, Liveness: time.Minute}
	two := store.NewWheelStage(rdb, prefix, opts)
	put := func(w *store.WheelStage, id string) error {
		_, err := w.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
		return err
	}
	require.NoError(t, put(two, "placed"))
	moving, err := store.ClaimShards(ctx, rdb, prefix, 3, true)
	require.NoError(t, err)
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-b", moving))
	rec, err := store.AdvanceLayout(ctx, rdb, prefix, moving)
	require.NoError(t, err)
	require.Equal(t, 2, rec.Phase)
	for i := range 6 { // ids of both shards of 2
		require.ErrorIs(t, put(two, fmt.Sprintf("fenced-%d", i)), store.ErrMovedOn)
	}
	r, err := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: 3, From: 2, Phase: 2}).Cancel(ctx, "placed")
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, r)
	settled, err := store.SettleLayout(ctx, rdb, prefix, rec, 0, time.Now())
	require.NoError(t, err)
	require.Equal(t, store.Layout{Shards: 3}, settled)
	for i := range 6 {
		require.NoError(t, put(two, fmt.Sprintf("after-%d", i)), "no fence is left")
	}

	// A settle cut off between its change and the lift: the next replica's look lifts.
	tags := []string{"{" + prefix + "}:fence", "{" + store.ShardTag(prefix, 1, 2) + "}:fence"}
	for _, key := range tags {
		require.NoError(t, rdb.Set(ctx, key, "2", 0).Err())
	}
	require.NoError(t, rdb.Set(ctx, "{"+prefix+"}:fence-lift", "2", 0).Err())
	require.ErrorIs(t, put(two, "fenced-again"), store.ErrMovedOn)
	require.NoError(t, store.LiftFences(ctx, rdb, prefix))
	for _, key := range tags {
		n, err := rdb.Exists(ctx, key).Result()
		require.NoError(t, err)
		require.Zero(t, n, key)
	}
	require.NoError(t, put(two, "lifted"))

	require.NoError(t, rdb.Del(ctx, "{"+prefix+"}:shards").Err())
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-b", settled), "a record that is gone is written again")
	l, ok, err := store.ReadLayout(ctx, rdb, prefix)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, settled, l)
}
