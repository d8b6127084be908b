package store_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestClaimPrefixKeepsOneDeployment: the first deployment to start on a prefix owns it;
// its replicas start again and again, another deployment (another group, or another
// topic) is refused with the owner named.
func TestClaimPrefixKeepsOneDeployment(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	require.NoError(t, store.ClaimPrefix(ctx, rdb, prefix, "guava/rocketdelay"))
	require.NoError(t, store.ClaimPrefix(ctx, rdb, prefix, "guava/rocketdelay"), "the same deployment's next replica")
	for _, other := range []string{"guava/rocketdelay-b", "other/rocketdelay"} {
		err := store.ClaimPrefix(ctx, rdb, prefix, other)
		require.ErrorIs(t, err, store.ErrPrefixTaken)
		require.ErrorContains(t, err, `"guava/rocketdelay"`)
		require.ErrorContains(t, err, "prefix of its own")
	}
	require.NoError(t, store.ClaimPrefix(ctx, rdb, prefix+"-b", "guava/rocketdelay-b"), "on a prefix of its own")
}

// TestClaimShardsRefusesAnotherCountUntilDrained: the first replica records the
// deployment's shard count; a replica with another count is refused, naming what is
// left, while the wheel stage holds an alert, while an alert is listed as hopping, and
// while a replica of the old layout is live; once drained, the new count is taken. On
// the code before, any count was taken at any time.
func TestClaimShardsRefusesAnotherCountUntilDrained(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	claim := func(n int) error { // with liveness off: no moves
		t.Helper()
		l, err := store.ClaimShards(ctx, rdb, prefix, n, false)
		if err == nil {
			require.Equal(t, store.Layout{Shards: n}, l)
		}
		return err
	}
	require.NoError(t, claim(1))
	require.NoError(t, claim(1), "the same count again")
	one := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: 1, Liveness: time.Minute})
	refused := func(what string) {
		t.Helper()
		err := claim(3)
		require.ErrorIs(t, err, store.ErrShardsChanged)
		require.ErrorContains(t, err, "it is 3, and the deployment's wheel stage has 1 shards")
		require.ErrorContains(t, err, what)
	}

	_, err := one.Put(ctx, store.Entry{ID: "waiting", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.NoError(t, err)
	refused("1 alerts in the wheel stage")
	res, err := one.Cancel(ctx, "waiting")
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, res)

	require.NoError(t, one.TraceHop(ctx, store.HopNote{ID: "hopping", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1, Delay: time.Minute}))
	refused("1 listed as pending")
	_, err = one.Cancel(ctx, "hopping")
	require.NoError(t, err)

	live := one.Liveness(nil)
	_, err = live.Beat(ctx, "replica-a")
	require.NoError(t, err)
	refused("replicas live in it: replica-a")
	_, _, err = live.Leave(ctx, "replica-a")
	require.NoError(t, err)

	require.NoError(t, claim(3), "drained: the new count is taken")
	require.NoError(t, claim(3))
	three := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: 3})
	_, err = three.Put(ctx, store.Entry{ID: "after", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.NoError(t, err)
	err = claim(1)
	require.ErrorIs(t, err, store.ErrShardsChanged, "and now the old count is the other one")
	require.ErrorContains(t, err, "start this one with redis.shards: 3")
}

// A replica that passed ClaimShards with the old count before another changed it (it
// saw nobody live: the first had not beaten yet) learns of it once it is live, before it
// takes anything: AckLayout refuses it, and the two layouts never run side by side.
func TestAckLayoutRefusesALayoutChangedWhileStarting(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	c, err := store.ClaimShards(ctx, rdb, prefix, 1, true)
	require.NoError(t, err, "replica c, waiting for Postgres")
	a, err := store.ClaimShards(ctx, rdb, prefix, 3, true)
	require.NoError(t, err, "replica a: drained, nobody live")
	require.Equal(t, store.Layout{Shards: 3}, a)
	err = store.AckLayout(ctx, rdb, prefix, "replica-c", c)
	require.ErrorIs(t, err, store.ErrShardsChanged, "replica c, after its first beat")
	require.ErrorContains(t, err, "acts in the layout 1, and the deployment's is 3 now")
	require.NoError(t, store.AckLayout(ctx, rdb, prefix, "replica-a", a))
}

// TestRosterSaysWhoKnowsATarget: a target no replica affirmed is not known; one affirmed
// is known since then by the Redis clock; another replica's affirmation of other targets
// leaves it as it was.
func TestRosterSaysWhoKnowsATarget(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	a, b := store.NewRoster(rdb, prefix), store.NewRoster(rdb, prefix)
	_, ok, err := a.Known(ctx, "newt")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, a.Affirm(ctx, []string{"ops", "newt"}))
	require.NoError(t, b.Affirm(ctx, []string{"ops"}))
	for _, target := range []string{"ops", "newt"} {
		ago, ok, err := b.Known(ctx, target)
		require.NoError(t, err)
		require.True(t, ok, target)
		require.Less(t, ago, time.Minute, target)
		require.GreaterOrEqual(t, ago, time.Duration(0), target)
	}
	_, ok, err = b.Known(ctx, "other")
	require.NoError(t, err)
	require.False(t, ok)
	require.NoError(t, rdb.HSet(ctx, "{"+prefix+"}:targets", "old", time.Now().Add(-time.Hour).UnixMilli()).Err())
	ago, ok, err := a.Known(ctx, "old")
	require.NoError(t, err)
	require.True(t, ok)
	require.InDelta(t, time.Hour.Seconds(), ago.Seconds(), 60, "an hour ago, by the Redis clock")
}
