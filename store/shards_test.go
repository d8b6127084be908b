package store_test

import (
	"context"
	"hash/fnv"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// shardTag is the hash tag of shard i of prefix's wheel stage of n shards (keys.go), with
// its braces and ":".
func shardTag(prefix string, i, n int) string {
	return "{" + store.ShardTag(prefix, i, n) + "}:"
}

// shardOf is the shard of id among n, computed apart from the store's own hash.
func shardOf(id string, n int) int {
	h := fnv.New32a()
	h.Write([]byte(id))
	return int(h.Sum32() % uint32(n))
}

// spreadIDs returns ids, named prefix0, prefix1, …, until each of n shards has per of
// them, and the ids of each shard.
func spreadIDs(prefix string, n, per int) (all []string, byShard [][]string) {
	byShard = make([][]string, n)
	for k := 0; ; k++ {
		id := prefix + strconv.Itoa(k)
		i := shardOf(id, n)
		if len(byShard[i]) < per {
			byShard[i] = append(byShard[i], id)
			all = append(all, id)
		}
		if len(all) == n*per {
			return all, byShard
		}
	}
}

// TestShardsSpreadIDs: with three shards each id's keys sit under its shard's tag, every
// shard holds some of the ids and none holds all; DeleteKeys deletes every shard's keys.
func TestShardsSpreadIDs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Shards: n})
	all := idRange("spread-", 60)
	putDue(t, ws, redisNow(t, rdb).Add(time.Hour), all...)

	total := int64(0)
	for i := range n {
		held, err := rdb.HLen(ctx, shardTag(prefix, i, n)+"entries").Result()
		require.NoError(t, err)
		require.Positive(t, held, "shard %d holds some", i)
		require.Less(t, held, int64(len(all)), "shard %d does not hold all", i)
		total += held
	}
	require.Equal(t, int64(len(all)), total)
	for _, id := range all {
		want := shardOf(id, n)
		for i := range n {
			ok, err := rdb.HExists(ctx, shardTag(prefix, i, n)+"entries", id).Result()
			require.NoError(t, err)
			require.Equal(t, i == want, ok, "%s in shard %d", id, i)
		}
		ms, err := rdb.ZScore(ctx, shardTag(prefix, want, n)+"due", id).Result()
		require.NoError(t, err)
		require.Positive(t, ms)
	}
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(all)), waiting)
	require.Zero(t, inflight)

	_, err = store.DeleteKeys(ctx, rdb, prefix)
	require.NoError(t, err)
	require.Empty(t, scanKeys(t, rdb, "{"+prefix+"*"))
}

// TestOneShardKeepsTheKeysOfBefore: with one shard (the default) every key of an alert
// carries the tag {p}, as before shards.
func TestOneShardKeepsTheKeysOfBefore(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Shards: 1})
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "a", "b", "c")
	claimAll(t, ws, "r/1", "a", "b", "c")
	_, err := ws.Release(ctx, store.Delivered, store.Claim{ID: "a", Token: "r/1"})
	require.NoError(t, err)
	for _, k := range scanKeys(t, rdb, "*"+prefix+"*") {
		require.True(t, strings.HasPrefix(k, "{"+prefix+"}:"), k)
	}
	require.Contains(t, scanKeys(t, rdb, "{"+prefix+"}:*"), "{"+prefix+"}:done:a")
}

// TestShardsRoundTrip: with three shards, one call over ids of every shard claims,
// peeks, parks, adopts and releases each in its own shard; cancel, inspect, reschedule
// and the markers go to the id's shard.
func TestShardsRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Shards: n, Lease: time.Hour})
	all, byShard := spreadIDs("rt-", n, 3)
	now := redisNow(t, rdb)
	putDue(t, ws, now.Add(-time.Second), all...)
	later := "rt-later"
	putDue(t, ws, now.Add(time.Hour), later)

	peeked, err := ws.Peek(ctx, append(slices.Clone(all), "rt-missing"))
	require.NoError(t, err)
	require.Equal(t, all, ids(peeked), "peek keeps the order asked")

	c, err := ws.Claim(ctx, append(slices.Clone(all), later), "r/1")
	require.NoError(t, err)
	got := ids(c.Entries)
	slices.Sort(got)
	want := slices.Sorted(slices.Values(all))
	require.Equal(t, want, got)
	require.Len(t, c.NotDue, 1)
	require.Equal(t, later, c.NotDue[0].ID)
	for _, id := range all {
		owner, err := rdb.HGet(ctx, shardTag(prefix, shardOf(id, n), n)+"owner", id).Result()
		require.NoError(t, err)
		require.Equal(t, "r/1", owner)
		st, err := ws.Inspect(ctx, id)
		require.NoError(t, err)
		require.True(t, st.InFlight, id)
		require.Equal(t, "r/1", st.Owner)
	}
	_, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(len(all)), inflight)

	// Park the first of each shard, adopt them back.
	var park []store.Parked
	for i := range n {
		park = append(park, store.Parked{Claim: store.Claim{ID: byShard[i][0], Token: "r/1"}, DueAt: now})
	}
	parked, err := ws.Park(ctx, "ops", time.Hour, park...)
	require.NoError(t, err)
	require.Len(t, parked, n)
	adopted, left, err := ws.Adopt(ctx, "ops", 2, "r/2")
	require.NoError(t, err)
	require.Len(t, adopted.Entries, 2)
	require.Equal(t, 1, left)
	again, left, err := ws.Adopt(ctx, "ops", 2, "r/2")
	require.NoError(t, err)
	require.ElementsMatch(t, ids(adopted.Entries), ids(again.Entries), "a repeat returns what the first took")
	require.Equal(t, 1, left)
	rest, left, err := ws.Adopt(ctx, "ops", 5, "r/3")
	require.NoError(t, err)
	require.Len(t, rest.Entries, 1)
	require.Zero(t, left)

	// Release every claim in one call: one script per shard.
	var claims []store.Claim
	for _, e := range c.Entries {
		claims = append(claims, e.Claim())
	}
	for _, e := range slices.Concat(adopted.Entries, rest.Entries) {
		for k := range claims {
			if claims[k].ID == e.ID {
				claims[k] = e.Claim()
			}
		}
	}
	lost, err := ws.Release(ctx, store.Delivered, claims...)
	require.NoError(t, err)
	require.Zero(t, lost)
	for _, id := range all {
		ok, err := ws.IsDelivered(ctx, id)
		require.NoError(t, err)
		require.True(t, ok, id)
		exists, err := rdb.Exists(ctx, shardTag(prefix, shardOf(id, n), n)+"done:"+id).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), exists)
		r, err := ws.Put(ctx, entryAt(id, now))
		require.NoError(t, err)
		require.Equal(t, store.PutDone, r)
	}
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(1), waiting)
	require.Zero(t, inflight)

	// Cancel: the waiting one is removed, an unknown one tombstoned in its shard.
	r, err := ws.Cancel(ctx, later)
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, r)
	for _, id := range []string{later, "rt-hopping"} {
		if id != later {
			r, err := ws.Cancel(ctx, id)
			require.NoError(t, err)
			require.Equal(t, store.CancelTombstoned, r)
		}
		yes, err := ws.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.True(t, yes)
		exists, err := rdb.Exists(ctx, shardTag(prefix, shardOf(id, n), n)+"cancel:"+id).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), exists, id)
		put, err := ws.Put(ctx, entryAt(id, now))
		require.NoError(t, err)
		require.Equal(t, store.PutCancelled, put)
		st, err := ws.Inspect(ctx, id)
		require.NoError(t, err)
		require.True(t, st.Cancelled)
	}

	// Reschedule a hopping alert: its trace and record sit in its shard.
	const moving = "rt-moving"
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: moving, Due: now.Add(30 * time.Minute), Target: "ops", Hops: 1, Delay: 10 * time.Minute}))
	res, err := ws.Reschedule(ctx, moving, now.Add(2*time.Hour), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleHopMoved, res.Result)
	due, ok, err := ws.RescheduledDue(ctx, moving)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, now.Add(2*time.Hour).UnixMilli(), due.UnixMilli())
	routing, err := ws.Routing(ctx, moving)
	require.NoError(t, err)
	require.Equal(t, due, routing.Due)
	exists, err := rdb.Exists(ctx, shardTag(prefix, shardOf(moving, n), n)+"resched:"+moving,
		shardTag(prefix, shardOf(moving, n), n)+"trace:"+moving).Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), exists)
}

// TestShardsDueWithinMergesByDueTime: the due-soon lists of the shards are merged,
// earliest first, to the limit.
func TestShardsDueWithinMergesByDueTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Shards: n})
	all := idRange("dw-", 30)
	now := redisNow(t, rdb)
	for k, id := range all {
		r, err := ws.Put(ctx, entryAt(id, now.Add(time.Duration(k)*time.Second)))
		require.NoError(t, err)
		require.Equal(t, store.PutStored, r)
	}
	due, err := ws.DueWithin(ctx, time.Minute, 10)
	require.NoError(t, err)
	var got []string
	for k, d := range due {
		got = append(got, d.ID)
		require.Equal(t, now.Add(time.Duration(k)*time.Second).UnixMilli(), d.DueAt.UnixMilli())
	}
	require.Equal(t, all[:10], got)
	due, err = ws.DueWithin(ctx, 5500*time.Millisecond, 100)
	require.NoError(t, err)
	require.Len(t, due, 6)
}

// TestShardsClaimOverdueLimitIsPerShard: the sweeper's limit applies to each shard.
func TestShardsClaimOverdueLimitIsPerShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Shards: n})
	all, _ := spreadIDs("ov-", n, 3)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Minute), all...)
	got, err := entriesOf(ws.ClaimOverdue(ctx, time.Second, 2, "r/1"))
	require.NoError(t, err)
	require.Len(t, got, 2*n)
	again, err := entriesOf(ws.ClaimOverdue(ctx, time.Second, 2, "r/1"))
	require.NoError(t, err)
	require.ElementsMatch(t, ids(got), ids(again), "a repeat with the same token returns what it took")
	rest, err := entriesOf(ws.ClaimOverdue(ctx, time.Second, 2, "r/2"))
	require.NoError(t, err)
	require.Len(t, rest, n)
}

// TestShardsTakeOverInEveryShard: a replica that lapsed has its holdings in every shard
// taken over by the next sweep of another; it is gone, and taken once.
func TestShardsTakeOverInEveryShard(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Shards: n, Lease: time.Hour, Liveness: time.Second})
	keepBeating(t, ws, "rb")
	stopA := keepBeating(t, ws, "ra")
	all, _ := spreadIDs("to-", n, 4)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), all...)
	claimAll(t, ws, "ra/1", all...)
	for i := range n {
		held, err := rdb.ZCard(ctx, shardTag(prefix, i, n)+"held").Result()
		require.NoError(t, err)
		require.Equal(t, int64(4), held, "shard %d", i)
	}
	require.Empty(t, sweep(t, ws, 100, "rb/1"), "A is live: nothing moves")

	stopA()
	for i := range n {
		ms, err := rdb.ZScore(ctx, shardTag(prefix, i, n)+"live", "ra").Result()
		require.NoError(t, err)
		waitRedisPast(t, rdb, time.UnixMilli(int64(ms)).Add(time.Millisecond))
	}
	want := slices.Sorted(slices.Values(all))
	require.Equal(t, want, sweep(t, ws, 100, "rb/2"), "the first sweep after A lapsed takes everything, in every shard")
	for _, id := range all {
		require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: id, Token: "ra/1"}, 0), store.ErrNotHeld)
		require.NoError(t, ws.Confirm(ctx, store.Claim{ID: id, Token: "rb/2"}, 0))
	}
	v, err := ws.Liveness(nil).View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"rb"}, v.Live)
	require.Empty(t, v.Lapsed)
	require.Equal(t, []string{"ra"}, v.Gone)
	for i := range n {
		gone, err := rdb.ZRange(ctx, shardTag(prefix, i, n)+"gone", 0, -1).Result()
		require.NoError(t, err)
		require.Equal(t, []string{"ra"}, gone, "shard %d", i)
	}
	b, err := ws.Liveness(nil).Beat(ctx, "rb")
	require.NoError(t, err)
	require.Equal(t, 1, b.Gone)
	require.Contains(t, b.Absent, "ra")

	lv := ws.Liveness(nil)
	beat, err := lv.Beat(ctx, "ra")
	require.NoError(t, err)
	require.True(t, beat.Lapsed, "A's next beat learns it lapsed")
	taken := takeGoneAtOnce(ctx, lv, 4)
	require.Equal(t, []string{"", "", "", "ra"}, taken, "one survivor takes A, from every shard")
	for i := range n {
		gone, err := rdb.ZCard(ctx, shardTag(prefix, i, n)+"gone").Result()
		require.NoError(t, err)
		require.Zero(t, gone, "shard %d", i)
	}

}

// TestShardsLeave: a replica that leaves hands back its holdings of every shard, but
// the kept ones, and is gone once it holds nothing.
func TestShardsLeave(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Shards: n, Lease: time.Hour, Liveness: 3 * time.Second})
	keepBeating(t, ws, "rb")
	keepBeating(t, ws, "ra")
	all, byShard := spreadIDs("lv-", n, 2)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), all...)
	claimAll(t, ws, "ra/1", all...)
	keep := byShard[n-1][0]
	ended, left, err := ws.Liveness(nil).Leave(ctx, "ra", keep)
	require.NoError(t, err)
	require.Equal(t, len(all)-1, ended)
	require.Equal(t, 1, left)
	got := sweep(t, ws, 100, "rb/1")
	require.Len(t, got, len(all)-1)
	require.NotContains(t, got, keep)
}

// TestShardIndexIsFNV1a checks the store's id hash against hash/fnv, through where the
// keys land: it must never change, or a deployment's alerts move between shards.
func TestShardIndexIsFNV1a(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 7
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Shards: n})
	for _, id := range []string{"a", "alert-1", "{x}", "日本", "a/b:c"} {
		require.NoError(t, ws.MarkDelivered(ctx, id))
		exists, err := rdb.Exists(ctx, shardTag(prefix, shardOf(id, n), n)+"done:"+id).Result()
		require.NoError(t, err)
		require.Equal(t, int64(1), exists, id)
	}
}

// TestShardsTakeGoneOnceWhenShardsFinishApart: a replica whose take-over ends in shard 1
// before shard 0 is taken once: when shard 0 reports it gone later, nobody takes it again.
func TestShardsTakeGoneOnceWhenShardsFinishApart(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 3
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Shards: n, Liveness: time.Second})
	lv := ws.Liveness(nil)
	gone := func(i int, replica string) {
		t.Helper()
		require.NoError(t, rdb.ZAdd(ctx, shardTag(prefix, i, n)+"gone", redis.Z{Score: 1, Member: replica}).Err())
	}
	gone(1, "rx")
	took, err := lv.TakeGone(ctx)
	require.NoError(t, err)
	require.Equal(t, "rx", took)
	gone(0, "rx")
	gone(2, "rx")
	took, err = lv.TakeGone(ctx)
	require.NoError(t, err)
	require.Empty(t, took, "shard 0 knows rx was taken")
	for i := range n {
		left, err := rdb.ZCard(ctx, shardTag(prefix, i, n)+"gone").Result()
		require.NoError(t, err)
		require.Zero(t, left, "shard %d", i)
	}
	gone(2, "ry")
	took, err = lv.TakeGone(ctx)
	require.NoError(t, err)
	require.Equal(t, "ry", took, "another replica is taken")
}
