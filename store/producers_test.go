package store_test

import (
	"testing"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// An episode a principal opens counts against its cap from the moment it is recorded,
// before its start lands in the live episodes: of two requests at once with a cap of
// one, the second is refused (a record not live yet was forgotten as ended, and both
// opened). Once the first has started and ended, another may open.
func TestOpenEpisodeCountsAStartOnItsWay(t *testing.T) {
	t.Parallel()
	ctx := t.Context()
	rdb, prefix := testenv.Redis(t)
	p := store.NewProducers(rdb, prefix, 1)
	ok, open, err := p.OpenEpisode(ctx, "team", "first", 1)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, 1, open)
	// The first's start has not landed (it is not in ep-live): the second must wait.
	ok, open, err = p.OpenEpisode(ctx, "team", "second", 1)
	require.NoError(t, err)
	require.False(t, ok, "a second episode opened beside one on its way")
	require.Equal(t, 1, open)
	ok, _, err = p.OpenEpisode(ctx, "team", "first", 1)
	require.NoError(t, err)
	require.True(t, ok, "the first's own request again is no new one")

	live := "{" + prefix + "}:ep-live"
	require.NoError(t, rdb.ZAdd(ctx, live, redis.Z{Score: 1, Member: "first"}).Err()) // started
	ok, _, err = p.OpenEpisode(ctx, "team", "second", 1)
	require.NoError(t, err)
	require.False(t, ok, "the first is open")
	require.NoError(t, rdb.ZRem(ctx, live, "first").Err()) // ended
	ok, open, err = p.OpenEpisode(ctx, "team", "second", 1)
	require.NoError(t, err)
	require.True(t, ok, "the first ended")
	require.Equal(t, 1, open)
}
