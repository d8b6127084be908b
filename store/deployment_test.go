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
