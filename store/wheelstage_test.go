package store_test

import (
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	mrand "math/rand/v2"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// newWheelStage returns a wheel stage on the local Redis under a prefix of its own; its
// keys are deleted when the test ends (testenv.Redis). Unless opts names a number of
// shards, ROCKETDELAY_TEST_SHARDS, when set, does: the tests that reach the stage only
// through its methods then run on a sharded stage (those that read its keys directly
// expect shard 0's tag).
func newWheelStage(t testing.TB, opts store.WheelStageOptions) (redis.UniversalClient, string, *store.WheelStage) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	if v := os.Getenv("ROCKETDELAY_TEST_SHARDS"); v != "" && opts.Shards == 0 {
		n, err := strconv.Atoi(v)
		require.NoError(t, err, "ROCKETDELAY_TEST_SHARDS")
		opts.Shards = n
	}
	return rdb, prefix, store.NewWheelStage(rdb, prefix, opts)
}

func entryAt(id string, due time.Time) store.Entry {
	return store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("body of " + id)}
}

// scanKeys lists the keys matching pattern, on every primary of a cluster.
func scanKeys(t testing.TB, rdb redis.UniversalClient, pattern string) []string {
	t.Helper()
	ctx := context.Background()
	var mu sync.Mutex
	var keys []string
	scan := func(ctx context.Context, node redis.Cmdable) error {
		iter := node.Scan(ctx, 0, pattern, 1000).Iterator()
		for iter.Next(ctx) {
			mu.Lock()
			keys = append(keys, iter.Val())
			mu.Unlock()
		}
		return iter.Err()
	}
	if c, ok := rdb.(*redis.ClusterClient); ok {
		require.NoError(t, c.ForEachMaster(ctx, func(ctx context.Context, n *redis.Client) error { return scan(ctx, n) }))
	} else {
		require.NoError(t, scan(ctx, rdb))
	}
	return keys
}

// redisNow reads the Redis clock, which the scripts use.
func redisNow(t testing.TB, rdb redis.UniversalClient) time.Time {
	t.Helper()
	now, err := rdb.Time(context.Background()).Result()
	require.NoError(t, err)
	return now
}

// leaseExpiry is when the lease of the in-flight entry id runs out, by Redis's clock.
func leaseExpiry(t testing.TB, rdb redis.UniversalClient, prefix, id string) time.Time {
	t.Helper()
	ms, err := rdb.ZScore(context.Background(), "{"+prefix+"}:inflight", id).Result()
	require.NoError(t, err)
	return time.UnixMilli(int64(ms))
}

// waitRedisPast polls Redis's clock until it is past at (at most a minute): a test that
// needs a lease to run out waits for that state instead of sleeping for a guess of it.
func waitRedisPast(t testing.TB, rdb redis.UniversalClient, at time.Time) {
	t.Helper()
	deadline := time.Now().Add(time.Minute)
	for now := redisNow(t, rdb); !now.After(at); now = redisNow(t, rdb) {
		require.True(t, time.Now().Before(deadline), "Redis's clock did not pass %s within a minute", at)
		time.Sleep(min(at.Sub(now)+time.Millisecond, 50*time.Millisecond))
	}
}

// entriesOf is what a claim took, its entries alone (no test here stores a corrupt one).
func entriesOf(c store.Claimed, err error) ([]store.Entry, error) {
	if err == nil && len(c.Corrupt) > 0 {
		err = fmt.Errorf("corrupt entries claimed: %v", c.Corrupt[0].Err)
	}
	return c.Entries, err
}

func ids(entries []store.Entry) []string {
	out := make([]string, len(entries))
	for i, e := range entries {
		out[i] = e.ID
	}
	return out
}

func idRange(prefix string, n int) []string {
	out := make([]string, n)
	for i := range out {
		out[i] = prefix + strconv.Itoa(i)
	}
	return out
}

func TestWheelStagePut(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	due := time.Now()

	r, err := ws.Put(ctx, entryAt("a", due))
	require.NoError(t, err)
	require.Equal(t, store.PutStored, r)

	// A duplicate of a waiting entry changes nothing, not even the body or due time.
	dup := entryAt("a", due.Add(time.Hour))
	dup.Body = []byte("another body")
	r, err = ws.Put(ctx, dup)
	require.NoError(t, err)
	require.Equal(t, store.PutDuplicate, r)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 0}, [2]int64{waiting, inflight})

	claimed, err := entriesOf(ws.Claim(ctx, []string{"a"}, tok))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.Equal(t, []byte("body of a"), claimed[0].Body)
	require.Equal(t, due.UnixMilli(), claimed[0].DueAt.UnixMilli())

	// A duplicate of an entry in flight changes nothing either.
	r, err = ws.Put(ctx, dup)
	require.NoError(t, err)
	require.Equal(t, store.PutDuplicate, r)
	waiting, inflight, err = ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 1}, [2]int64{waiting, inflight})

	require.NoError(t, release(ctx, ws, "a"))
	r, err = ws.Put(ctx, dup)
	require.NoError(t, err)
	require.Equal(t, store.PutDone, r)

	c, err := ws.Cancel(ctx, "b")
	require.NoError(t, err)
	require.Equal(t, store.CancelTombstoned, c)
	for range 2 { // the tombstone is kept: every copy is refused
		r, err = ws.Put(ctx, entryAt("b", due))
		require.NoError(t, err)
		require.Equal(t, store.PutCancelled, r)
	}
	cancelled, err := ws.IsCancelled(ctx, "b")
	require.NoError(t, err)
	require.True(t, cancelled)

	requireEmptyStage(t, ws)

	_, err = ws.Put(ctx, entryAt("", due))
	require.Error(t, err)
}

// Every field survives the trip, whatever bytes it holds.
func TestWheelStageEntryRoundTrip(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})

	body := make([]byte, 20_000)
	_, _ = rand.Read(body)
	longID := strings.Repeat("{x}:é\x00 ", 16)[:128]
	full := store.Entry{
		ID:     longID,
		Target: "group-ä",
		DueAt:  time.UnixMilli(time.Now().Add(-time.Second).UnixMilli()),
		Body:   body,
		Props:  map[string]string{"RD_TARGET": "group-ä", "RD_ID": longID, "bin": "\x00\xff\n", "": "empty key"},
		Hops:   7,
	}
	bare := store.Entry{ID: "bare", DueAt: full.DueAt}

	for _, e := range []store.Entry{full, bare} {
		r, err := ws.Put(ctx, e)
		require.NoError(t, err)
		require.Equal(t, store.PutStored, r)
	}
	got, err := entriesOf(ws.Claim(ctx, []string{longID, "bare"}, tok))
	require.NoError(t, err)
	require.Len(t, got, 2)
	for i, want := range []store.Entry{full, bare} {
		require.Equal(t, want.ID, got[i].ID)
		require.Equal(t, want.Target, got[i].Target)
		require.True(t, want.DueAt.Equal(got[i].DueAt), "due %v, got %v", want.DueAt, got[i].DueAt)
		require.Equal(t, want.Body, got[i].Body)
		require.Equal(t, want.Props, got[i].Props)
		require.Equal(t, want.Hops, got[i].Hops)
	}
	require.Nil(t, got[1].Props)
	require.Empty(t, got[1].Body)
}

func TestWheelStageClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: 10 * time.Second})
	due := time.Now()
	for _, id := range []string{"a", "b", "c"} {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}

	got, err := entriesOf(ws.Claim(ctx, []string{"b"}, tok))
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids(got))

	// An id named twice is claimed once: twice, its alert was handed off twice.
	_, err = ws.Put(ctx, entryAt("d", due))
	require.NoError(t, err)
	got, err = entriesOf(ws.Claim(ctx, []string{"d", "d"}, tok))
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ids(got))

	// For another claim b is in flight already and x does not exist: both are lost.
	before := redisNow(t, rdb)
	got, err = entriesOf(ws.Claim(ctx, []string{"c", "b", "x", "a"}, "claim-2"))
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a"}, ids(got))
	after := redisNow(t, rdb)

	// The lease runs from Redis now.
	lease, err := rdb.ZScore(ctx, "{"+prefix+"}:inflight", "a").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(lease), before.Add(10*time.Second).UnixMilli())
	require.LessOrEqual(t, int64(lease), after.Add(10*time.Second).UnixMilli())

	// The same claim again (its reply was lost): what it holds comes back, nothing else.
	got, err = entriesOf(ws.Claim(ctx, []string{"c", "b", "x", "a"}, "claim-2"))
	require.NoError(t, err)
	require.Equal(t, []string{"c", "a"}, ids(got))

	got, err = entriesOf(ws.Claim(ctx, []string{"a", "b", "c"}, "claim-3"))
	require.NoError(t, err)
	require.Empty(t, got)
	got, err = entriesOf(ws.Claim(ctx, nil, tok))
	require.NoError(t, err)
	require.Empty(t, got)

	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 4}, [2]int64{waiting, inflight}, "a, b, c and d")
}

// Eight replicas racing for the same 1000 ids: each id is claimed exactly once.
func TestWheelStageConcurrentClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	all := idRange("id-", 1000)
	due := time.Now()
	for _, id := range all {
		r, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
		require.Equal(t, store.PutStored, r)
	}

	const claimers = 8
	claimed := make([][]string, claimers)
	errs := make([]error, claimers)
	var wg sync.WaitGroup
	for c := range claimers {
		wg.Go(func() {
			order := append([]string(nil), all...)
			mrand.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
			for len(order) > 0 {
				n := min(1+mrand.IntN(100), len(order))
				got, err := entriesOf(ws.Claim(ctx, order[:n], fmt.Sprintf("claimer-%d", c)))
				if err != nil {
					errs[c] = err
					return
				}
				claimed[c] = append(claimed[c], ids(got)...)
				order = order[n:]
			}
		})
	}
	wg.Wait()
	require.NoError(t, errors.Join(errs...))

	seen := make(map[string]int, len(all))
	for _, got := range claimed {
		for _, id := range got {
			seen[id]++
		}
	}
	require.Len(t, seen, len(all))
	for id, n := range seen {
		require.Equal(t, 1, n, "id %s claimed %d times", id, n)
	}
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 1000}, [2]int64{waiting, inflight})
}

// A claimer that crashes leaves its entries in flight; until their lease expires by
// Redis's clock no sweep takes them, and once it has the sweeper claims them again, with
// a new lease.
func TestWheelStageLeaseExpiry(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lease = 200 * time.Millisecond
	rdb, prefix, short := newWheelStage(t, store.WheelStageOptions{Lease: lease})
	// The same wheel stage with a lease no stall of this machine can outlast: while it
	// holds an entry, a sweep must leave it alone.
	long := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: time.Hour})
	for _, id := range []string{"held", "a"} {
		_, err := short.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	held, err := entriesOf(long.Claim(ctx, []string{"held"}, "long"))
	require.NoError(t, err)
	require.Len(t, held, 1)
	got, err := entriesOf(short.Claim(ctx, []string{"a"}, tok))
	require.NoError(t, err)
	require.Len(t, got, 1)
	expiry, err := rdb.ZScore(ctx, "{"+prefix+"}:inflight", "a").Result()
	require.NoError(t, err)

	deadline := time.Now().Add(10 * time.Second)
	var sweptAt time.Time
	for {
		require.True(t, time.Now().Before(deadline), "the expired lease was never recovered")
		before := redisNow(t, rdb)
		got, err = entriesOf(short.ClaimOverdue(ctx, time.Hour, 10, newToken()))
		require.NoError(t, err)
		after := redisNow(t, rdb)
		require.NotContains(t, ids(got), "held", "a lease that has not expired was taken")
		if after.UnixMilli() < int64(expiry) {
			require.Empty(t, got, "taken before its lease expired by Redis's clock")
		}
		if len(got) > 0 {
			sweptAt = before
			break
		}
		time.Sleep(20 * time.Millisecond)
	}
	require.Equal(t, []string{"a"}, ids(got))
	require.Equal(t, []byte("body of a"), got[0].Body)

	// Re-leased from the Redis now of the sweep.
	renewed, err := rdb.ZScore(ctx, "{"+prefix+"}:inflight", "a").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(renewed), sweptAt.Add(lease).UnixMilli())
	waiting, inflight, err := short.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 2}, [2]int64{waiting, inflight})
}

// The sweeper leaves entries alone while they are within the grace period (the wheel of
// some replica will fire for them); it takes the oldest first, and expired leases before
// overdue entries. The grace is a minute, so that no pause of a loaded machine moves the
// entry within it out of it.
func TestWheelStageClaimOverdue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Second})
	const grace = time.Minute
	now := time.Now()
	for id, due := range map[string]time.Time{
		"old-30m": now.Add(-30 * time.Minute),
		"old-20m": now.Add(-20 * time.Minute),
		"old-10m": now.Add(-10 * time.Minute),
		"in-2s":   now.Add(-2 * time.Second), // overdue, but within grace
		"future":  now.Add(time.Hour),
	} {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}

	got, err := entriesOf(ws.ClaimOverdue(ctx, grace, 2, newToken()))
	require.NoError(t, err)
	require.Equal(t, []string{"old-30m", "old-20m"}, ids(got))
	got, err = entriesOf(ws.ClaimOverdue(ctx, grace, 2, newToken()))
	require.NoError(t, err)
	require.Equal(t, []string{"old-10m"}, ids(got))
	got, err = entriesOf(ws.ClaimOverdue(ctx, grace, 2, newToken()))
	require.NoError(t, err)
	require.Empty(t, got)

	due, err := ws.DueWithin(ctx, 0, 10)
	require.NoError(t, err)
	require.Len(t, due, 1)
	require.Equal(t, "in-2s", due[0].ID)

	// Once the three leases expire (by Redis's clock: waited for, not slept on) they come
	// first.
	for _, id := range []string{"old-30m", "old-20m", "old-10m"} {
		waitRedisPast(t, rdb, leaseExpiry(t, rdb, prefix, id))
	}
	got, err = entriesOf(ws.ClaimOverdue(ctx, 0, 3, newToken()))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"old-30m", "old-20m", "old-10m"}, ids(got))
	got, err = entriesOf(ws.ClaimOverdue(ctx, 0, 3, newToken()))
	require.NoError(t, err)
	require.Equal(t, []string{"in-2s"}, ids(got))

	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 4}, [2]int64{waiting, inflight})

	_, err = entriesOf(ws.ClaimOverdue(ctx, 0, 0, newToken()))
	require.Error(t, err)
}

func TestWheelStageRelease(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{DoneTTL: time.Hour})
	for _, id := range []string{"a", "b", "c"} {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	_, err := entriesOf(ws.Claim(ctx, []string{"a", "b"}, tok))
	require.NoError(t, err)

	// c was never claimed, d never existed: both still get a done marker.
	require.NoError(t, release(ctx, ws, "a", "b", "c", "d"))
	require.NoError(t, release(ctx, ws)) // nothing to do
	requireEmptyStage(t, ws)
	n, err := rdb.HLen(ctx, "{"+prefix+"}:entries").Result()
	require.NoError(t, err)
	require.Zero(t, n)

	for _, id := range []string{"a", "b", "c", "d"} {
		ttl, err := rdb.PTTL(ctx, "{"+prefix+"}:done:"+id).Result()
		require.NoError(t, err)
		require.InDelta(t, time.Hour.Seconds(), ttl.Seconds(), 5)
		r, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
		require.Equal(t, store.PutDone, r, id)
	}

	// Releasing again is harmless.
	require.NoError(t, release(ctx, ws, "a"))
}

func TestWheelStageGiveBack(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{})
	due := time.UnixMilli(time.Now().UnixMilli())
	_, err := ws.Put(ctx, entryAt("a", due))
	require.NoError(t, err)
	_, err = entriesOf(ws.Claim(ctx, []string{"a"}, tok))
	require.NoError(t, err)

	retryAt := redisNow(t, rdb).Add(5 * time.Second).Truncate(time.Millisecond)
	require.NoError(t, giveBack(ctx, ws, "a", retryAt))
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 0}, [2]int64{waiting, inflight})
	list, err := ws.DueWithin(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, []store.Due{{ID: "a", DueAt: retryAt}}, normalize(list))

	// Not in flight any more: a second give-back changes nothing.
	require.NoError(t, giveBack(ctx, ws, "a", retryAt.Add(time.Hour)))
	require.NoError(t, giveBack(ctx, ws, "never", retryAt))
	list, err = ws.DueWithin(ctx, 24*time.Hour, 10)
	require.NoError(t, err)
	require.Equal(t, []store.Due{{ID: "a", DueAt: retryAt}}, normalize(list))

	// Until retryAt by Redis's clock a claim leaves it waiting and says how long it waits.
	before := redisNow(t, rdb)
	early, err := ws.Claim(ctx, []string{"a"}, "early")
	after := redisNow(t, rdb)
	require.NoError(t, err)
	require.True(t, after.Before(retryAt), "the machine stalled past the 5s to retryAt: the early claim cannot be checked")
	require.Empty(t, early.Entries)
	require.Len(t, early.NotDue, 1)
	require.Equal(t, "a", early.NotDue[0].ID)
	require.LessOrEqual(t, early.NotDue[0].Wait, retryAt.Sub(before)+time.Millisecond)
	require.GreaterOrEqual(t, early.NotDue[0].Wait, retryAt.Sub(after)-time.Millisecond)

	var got []store.Entry
	for deadline := time.Now().Add(15 * time.Second); len(got) == 0; time.Sleep(20 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "never claimable after its retry time")
		got, err = entriesOf(ws.Claim(ctx, []string{"a"}, tok))
		require.NoError(t, err)
	}
	require.False(t, redisNow(t, rdb).Before(retryAt), "claimed before its retry time by Redis's clock")
	require.True(t, due.Equal(got[0].DueAt), "the entry keeps its own due time")
	require.Equal(t, 1, got[0].Tries)
	require.NoError(t, release(ctx, ws, "a"))
	require.NoError(t, giveBack(ctx, ws, "a", retryAt))
	requireEmptyStage(t, ws)
}

// A replica whose clock runs fast fires its wheel early; the claim judges by Redis's
// clock and leaves an entry that is not due yet where it is, whoever asks.
func TestWheelStageClaimNeverEarly(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{})
	due := redisNow(t, rdb).Add(time.Hour).Truncate(time.Millisecond)
	_, err := ws.Put(ctx, entryAt("later", due))
	require.NoError(t, err)
	_, err = ws.Put(ctx, entryAt("now", time.Now().Add(-time.Second)))
	require.NoError(t, err)

	c, err := ws.Claim(ctx, []string{"later", "now"}, tok)
	require.NoError(t, err)
	require.Equal(t, []string{"now"}, ids(c.Entries))
	require.Len(t, c.NotDue, 1)
	require.Equal(t, "later", c.NotDue[0].ID)
	require.InDelta(t, time.Hour.Seconds(), c.NotDue[0].Wait.Seconds(), 60)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{1, 1}, [2]int64{waiting, inflight})

	// The sweeper never takes it either, whatever the grace.
	swept, err := ws.ClaimOverdue(ctx, 0, 10, newToken())
	require.NoError(t, err)
	require.Empty(t, swept.Entries)
}

// A claim ahead takes an entry due within ahead by Redis's clock, and says how long
// after its reply the entry is due by that clock (DueIn), so the caller can wait for it:
// never less than the time left from the script's own reading of the clock. An entry
// due later is left waiting; one due already comes back with no wait; the lease runs
// from Redis now plus ahead.
func TestWheelStageClaimAhead(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: 10 * time.Second})
	at := redisNow(t, rdb)
	soon := at.Add(2 * time.Second).Truncate(time.Millisecond)
	for id, due := range map[string]time.Time{"soon": soon, "later": at.Add(time.Hour), "now": at.Add(-time.Second)} {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}

	before := redisNow(t, rdb).Truncate(time.Millisecond)
	c, err := ws.ClaimAhead(ctx, []string{"soon", "later", "now"}, tok, 5*time.Second)
	after := redisNow(t, rdb)
	require.NoError(t, err)
	require.Equal(t, []string{"soon", "now"}, ids(c.Entries))
	wait := c.Entries[0].DueIn
	require.LessOrEqual(t, wait, soon.Sub(before), "counted from the script's reading of Redis's clock, not earlier")
	require.GreaterOrEqual(t, wait, soon.Sub(after), "waited for from the reply, it is due by Redis's clock")
	require.Zero(t, c.Entries[1].DueIn)
	require.Len(t, c.NotDue, 1)
	require.Equal(t, "later", c.NotDue[0].ID)
	require.InDelta(t, time.Hour.Seconds(), c.NotDue[0].Wait.Seconds(), 60)
	lease, err := rdb.ZScore(ctx, "{"+prefix+"}:inflight", "soon").Result()
	require.NoError(t, err)
	require.GreaterOrEqual(t, int64(lease), before.Add(15*time.Second).UnixMilli())

	// Without ahead, as Claim does, an entry not due yet is left waiting.
	_, err = ws.Put(ctx, entryAt("soon-2", soon))
	require.NoError(t, err)
	c, err = ws.Claim(ctx, []string{"soon-2"}, tok)
	require.NoError(t, err)
	require.Empty(t, c.Entries)
	require.Equal(t, "soon-2", c.NotDue[0].ID)
	_, err = ws.ClaimAhead(ctx, []string{"soon-2"}, tok, -time.Millisecond)
	require.Error(t, err)
}

// Done markers left ahead of the releases, on every shard, read back by Done with the
// outcome each records; an id without one reads 0. The entries stay in flight until
// they are released.
func TestWheelStageMarkAllDeliveredAndDone(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{Shards: 3})
	ids := []string{"m-1", "m-2", "m-3", "m-4", "m-5", "m-6"}
	for _, id := range ids {
		_, err := ws.Put(ctx, entryAt(id, time.Now().Add(-time.Second)))
		require.NoError(t, err)
	}
	c, err := ws.Claim(ctx, ids, tok)
	require.NoError(t, err)
	require.Len(t, c.Entries, len(ids))
	require.NoError(t, ws.MarkAllDelivered(ctx, []string{"m-1", "m-3", "m-4"}))
	_, err = ws.ReleaseAll(ctx, []store.Released{{Claim: store.Claim{ID: "m-5", Token: tok}, Receipt: store.Receipt{Outcome: store.Recorded}}})
	require.NoError(t, err)

	done, err := ws.Done(ctx, append(ids, "never"))
	require.NoError(t, err)
	require.Equal(t, []store.Outcome{store.Delivered, 0, store.Delivered, store.Delivered, store.Recorded, 0, 0}, done)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 5}, [2]int64{waiting, inflight}, "marked, still in flight until released")
}

// A corrupt record among valid ones is returned apart, held by the claim like the
// others, so the valid ones of its batch are handed off and the bad one can be recorded
// and released.
func TestWheelStageClaimQuarantinesCorruptEntries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{})
	past := time.Now().Add(-time.Minute)
	for _, id := range []string{"a", "bad", "c", "bad-sweep", "d"} {
		_, err := ws.Put(ctx, entryAt(id, past))
		require.NoError(t, err)
	}
	for _, id := range []string{"bad", "bad-sweep"} {
		require.NoError(t, rdb.HSet(ctx, "{"+prefix+"}:entries", id, "\x09not a record").Err())
	}

	c, err := ws.Claim(ctx, []string{"a", "bad", "c"}, tok)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "c"}, ids(c.Entries))
	require.Len(t, c.Corrupt, 1)
	require.Equal(t, store.Claim{ID: "bad", Token: tok}, c.Corrupt[0].Claim)
	require.Equal(t, []byte("\x09not a record"), c.Corrupt[0].Record)
	require.Error(t, c.Corrupt[0].Err)

	swept, err := ws.ClaimOverdue(ctx, 0, 10, newToken())
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ids(swept.Entries))
	require.Len(t, swept.Corrupt, 1)
	require.Equal(t, "bad-sweep", swept.Corrupt[0].Claim.ID)

	// Released like any other claim: nothing is left behind.
	_, err = ws.Release(ctx, store.Recorded, c.Corrupt[0].Claim, swept.Corrupt[0].Claim)
	require.NoError(t, err)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 3}, [2]int64{waiting, inflight})
}

// A sweep whose reply was lost is repeated with the same token: it returns what the
// first run took and takes nothing more, so nothing waits for a lease nobody holds.
func TestWheelStageClaimOverdueRepeat(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	past := time.Now().Add(-time.Minute)
	for _, id := range []string{"a", "b", "c"} {
		_, err := ws.Put(ctx, entryAt(id, past.Add(time.Duration(len(id))*time.Millisecond)))
		require.NoError(t, err)
	}
	first, err := entriesOf(ws.ClaimOverdue(ctx, 0, 2, "sweep-1"))
	require.NoError(t, err)
	require.Len(t, first, 2)
	again, err := entriesOf(ws.ClaimOverdue(ctx, 0, 2, "sweep-1"))
	require.NoError(t, err)
	require.ElementsMatch(t, ids(first), ids(again))
	rest, err := entriesOf(ws.ClaimOverdue(ctx, 0, 2, "sweep-2"))
	require.NoError(t, err)
	require.Len(t, rest, 1)
	require.NotContains(t, ids(first), rest[0].ID)
}

// A split alert's progress survives its hand-offs: Confirm and GiveBack note the parts
// delivered (never lowering them), the next claim returns them, Release forgets them.
func TestWheelStagePartsSent(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	_, err := ws.Put(ctx, entryAt("split", time.Now().Add(-time.Second)))
	require.NoError(t, err)
	got, err := entriesOf(ws.Claim(ctx, []string{"split"}, tok))
	require.NoError(t, err)
	require.Zero(t, got[0].PartsSent)

	require.NoError(t, ws.Confirm(ctx, got[0].Claim(), 1)) // part 2 next: part 1 delivered
	require.NoError(t, ws.Confirm(ctx, got[0].Claim(), 2))
	ok, err := ws.GiveBack(ctx, got[0].Claim(), time.Now().Add(-time.Second), 1) // never lowered
	require.NoError(t, err)
	require.True(t, ok)
	got, err = entriesOf(ws.Claim(ctx, []string{"split"}, "claim-2"))
	require.NoError(t, err)
	require.Equal(t, 2, got[0].PartsSent)

	// A claim that lost the entry still notes what it delivered, but is not confirmed.
	require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: "split", Token: "lost"}, 3), store.ErrNotHeld)
	ok, err = ws.GiveBack(ctx, got[0].Claim(), time.Now().Add(-time.Second), 0)
	require.NoError(t, err)
	require.True(t, ok)
	got, err = entriesOf(ws.Claim(ctx, []string{"split"}, "claim-3"))
	require.NoError(t, err)
	require.Equal(t, 3, got[0].PartsSent)

	_, err = ws.Release(ctx, store.Delivered, got[0].Claim())
	require.NoError(t, err)
	_, err = ws.Put(ctx, entryAt("split", time.Now()))
	require.NoError(t, err)
}

// A done marker is never downgraded: a release as Recorded after a delivery (the retry
// job delivered the alert while a stale hand-off recorded it) keeps "delivered".
func TestWheelStageDoneMarkerNeverDowngraded(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	require.NoError(t, ws.MarkDelivered(ctx, "x"))
	_, err := ws.Release(ctx, store.Recorded, store.Claim{ID: "x", Token: tok})
	require.NoError(t, err)
	delivered, err := ws.IsDelivered(ctx, "x")
	require.NoError(t, err)
	require.True(t, delivered)

	// The other way round is an upgrade.
	_, err = ws.Release(ctx, store.Recorded, store.Claim{ID: "y", Token: tok})
	require.NoError(t, err)
	delivered, err = ws.IsDelivered(ctx, "y")
	require.NoError(t, err)
	require.False(t, delivered)
	require.NoError(t, ws.MarkDelivered(ctx, "y"))
	delivered, err = ws.IsDelivered(ctx, "y")
	require.NoError(t, err)
	require.True(t, delivered)
}

// Time is Redis's clock, the one the scripts judge by.
func TestWheelStageTime(t *testing.T) {
	t.Parallel()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{})
	before := redisNow(t, rdb)
	got, err := ws.Time(context.Background())
	require.NoError(t, err)
	after := redisNow(t, rdb)
	require.False(t, got.Before(before.Truncate(time.Microsecond)))
	require.False(t, got.After(after))
}

// A claim whose lease ran out and was taken over by another replica's sweeper can no
// longer extend, give back, confirm or mark the entry; the new claim can. Release ends
// both, and the next claim sees the tries and the failure noted on the way.
func TestWheelStageClaimsHaveOwners(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: 50 * time.Millisecond})
	_, err := ws.Put(ctx, entryAt("a", time.Now().Add(-time.Minute)))
	require.NoError(t, err)
	first, err := entriesOf(ws.Claim(ctx, []string{"a"}, "zombie"))
	require.NoError(t, err)
	require.Len(t, first, 1)
	zombie := first[0].Claim()
	require.Equal(t, store.Claim{ID: "a", Token: "zombie"}, zombie)
	require.Zero(t, first[0].Tries)
	require.Nil(t, first[0].Failure)
	require.NoError(t, ws.Confirm(ctx, zombie, 0))

	waitRedisPast(t, rdb, leaseExpiry(t, rdb, prefix, "a")) // the zombie is paused past its lease
	taken, err := entriesOf(ws.ClaimOverdue(ctx, 0, 10, "sweeper"))
	require.NoError(t, err)
	require.Len(t, taken, 1)
	sweeper := taken[0].Claim()

	require.ErrorIs(t, ws.Confirm(ctx, zombie, 0), store.ErrNotHeld)
	require.ErrorIs(t, ws.MarkFailed(ctx, zombie, []byte("x")), store.ErrNotHeld)
	ok, err := ws.GiveBack(ctx, zombie, time.Now(), 0)
	require.NoError(t, err)
	require.False(t, ok, "a lost claim cannot give the entry back")
	_, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, inflight, "the sweeper's claim is untouched")

	require.NoError(t, ws.Confirm(ctx, sweeper, 0))
	require.NoError(t, ws.MarkFailed(ctx, sweeper, []byte(`{"class":"throttled"}`)))
	ok, err = ws.GiveBack(ctx, sweeper, time.Now().Add(-time.Second), 0)
	require.NoError(t, err)
	require.True(t, ok)
	again, err := entriesOf(ws.Claim(ctx, []string{"a"}, "third"))
	require.NoError(t, err)
	require.Len(t, again, 1)
	require.Equal(t, 1, again[0].Tries)
	require.Equal(t, `{"class":"throttled"}`, string(again[0].Failure))

	// A release by a claim that was lost still ends the entry: it was handed off.
	n, err := ws.Release(ctx, store.Recorded, zombie)
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.ErrorIs(t, ws.Confirm(ctx, again[0].Claim(), 0), store.ErrNotHeld)
	delivered, err := ws.IsDelivered(ctx, "a")
	require.NoError(t, err)
	require.False(t, delivered, "a recorded failure is not a delivery")
	res, err := ws.Put(ctx, entryAt("a", time.Now()))
	require.NoError(t, err)
	require.Equal(t, store.PutDone, res)
	require.NoError(t, ws.MarkDelivered(ctx, "a"))
	delivered, err = ws.IsDelivered(ctx, "a")
	require.NoError(t, err)
	require.True(t, delivered)
	delivered, err = ws.IsDelivered(ctx, "never")
	require.NoError(t, err)
	require.False(t, delivered)
}

func normalize(list []store.Due) []store.Due {
	for i := range list {
		list[i].DueAt = time.UnixMilli(list[i].DueAt.UnixMilli())
	}
	return list
}

func TestWheelStageDueWithin(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	now := time.UnixMilli(time.Now().UnixMilli())
	dues := map[string]time.Time{
		"past": now.Add(-time.Minute),
		"1s":   now.Add(time.Second),
		"2s":   now.Add(2 * time.Second),
		"10m":  now.Add(10 * time.Minute),
	}
	for id, due := range dues {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}
	list, err := ws.DueWithin(ctx, time.Minute, 10)
	require.NoError(t, err)
	require.Equal(t, []store.Due{{"past", dues["past"]}, {"1s", dues["1s"]}, {"2s", dues["2s"]}}, normalize(list))

	list, err = ws.DueWithin(ctx, time.Hour, 2)
	require.NoError(t, err)
	require.Equal(t, []store.Due{{"past", dues["past"]}, {"1s", dues["1s"]}}, normalize(list))

	// In-flight entries are not listed.
	_, err = entriesOf(ws.Claim(ctx, []string{"past"}, tok))
	require.NoError(t, err)
	list, err = ws.DueWithin(ctx, time.Hour, 10)
	require.NoError(t, err)
	require.Equal(t, []store.Due{{"1s", dues["1s"]}, {"2s", dues["2s"]}, {"10m", dues["10m"]}}, normalize(list))

	_, err = ws.DueWithin(ctx, time.Hour, 0)
	require.Error(t, err)
}

func TestWheelStageCancel(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour})
	for _, id := range []string{"waiting", "inflight", "done", "recorded", "withheld"} {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	_, err := entriesOf(ws.Claim(ctx, []string{"inflight", "done", "recorded", "withheld"}, tok))
	require.NoError(t, err)
	require.NoError(t, release(ctx, ws, "done"))
	_, err = ws.Release(ctx, store.Recorded, store.Claim{ID: "recorded", Token: tok})
	require.NoError(t, err)
	_, err = ws.Release(ctx, store.Withheld, store.Claim{ID: "withheld", Token: tok})
	require.NoError(t, err)
	tombstoneTTL := func(id string) time.Duration {
		ttl, err := rdb.PTTL(ctx, "{"+prefix+"}:cancel:"+id).Result()
		require.NoError(t, err)
		return ttl
	}

	r, err := ws.Cancel(ctx, "waiting")
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, r)
	require.InDelta(t, (2 * time.Hour).Seconds(), tombstoneTTL("waiting").Seconds(), 5)
	p, err := ws.Put(ctx, entryAt("waiting", time.Now())) // a redelivered copy
	require.NoError(t, err)
	require.Equal(t, store.PutCancelled, p)

	r, err = ws.Cancel(ctx, "inflight")
	require.NoError(t, err)
	require.Equal(t, store.CancelTooLate, r)
	require.Equal(t, time.Duration(-2), tombstoneTTL("inflight"), "no tombstone for an alert being sent")

	r, err = ws.Cancel(ctx, "done")
	require.NoError(t, err)
	require.Equal(t, store.CancelAlreadyDelivered, r)
	require.Equal(t, time.Duration(-2), tombstoneTTL("done"))

	// A recorded failure is no delivery: its failed_sends row decides (failed.Canceller).
	r, err = ws.Cancel(ctx, "recorded")
	require.NoError(t, err)
	require.Equal(t, store.CancelRecorded, r)
	require.False(t, r.Cancelled())
	require.Equal(t, time.Duration(-2), tombstoneTTL("recorded"), "nothing changed")

	// A withheld step (its episode ended before it was due) will never be sent.
	r, err = ws.Cancel(ctx, "withheld")
	require.NoError(t, err)
	require.Equal(t, store.CancelWithheld, r)
	require.True(t, r.Cancelled())
	require.Equal(t, time.Duration(-2), tombstoneTTL("withheld"), "nothing changed")

	r, err = ws.Cancel(ctx, "hopping")
	require.NoError(t, err)
	require.Equal(t, store.CancelTombstoned, r)
	require.InDelta(t, (2 * time.Hour).Seconds(), tombstoneTTL("hopping").Seconds(), 5)
	for id, want := range map[string]bool{"hopping": true, "waiting": true, "inflight": false, "done": false, "recorded": false, "withheld": false, "other": false} {
		got, err := ws.IsCancelled(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
	p, err = ws.Put(ctx, entryAt("hopping", time.Now()))
	require.NoError(t, err)
	require.Equal(t, store.PutCancelled, p)

	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 1}, [2]int64{waiting, inflight})
	n, err := rdb.HLen(ctx, "{"+prefix+"}:entries").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "only the in-flight entry is left")
}

// Every key the wheel stage writes carries the hash tag {prefix}, so that each script's
// keys sit in one Redis Cluster slot.
func TestWheelStageKeysShareHashTag(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{})
	for _, id := range []string{"a", "b", "c", "{d}", "e}"} {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	_, err := entriesOf(ws.Claim(ctx, []string{"a", "b", "{d}"}, tok))
	require.NoError(t, err)
	require.NoError(t, release(ctx, ws, "a", "{d}"))
	require.NoError(t, giveBack(ctx, ws, "b", time.Now()))
	_, err = ws.Cancel(ctx, "c")
	require.NoError(t, err)
	_, err = ws.Cancel(ctx, "f")
	require.NoError(t, err)

	keys := scanKeys(t, rdb, "*"+prefix+"*")
	require.ElementsMatch(t, []string{
		"{" + prefix + "}:due", "{" + prefix + "}:entries", "{" + prefix + "}:tries",
		"{" + prefix + "}:done:a", "{" + prefix + "}:done:{d}",
		"{" + prefix + "}:cancel:c", "{" + prefix + "}:cancel:f",
		"{" + prefix + "}:trace:a", "{" + prefix + "}:trace:b", "{" + prefix + "}:trace:c", "{" + prefix + "}:trace:{d}",
		"{" + prefix + "}:trace:e}", "{" + prefix + "}:pending", "{" + prefix + "}:pending-by",
	}, keys)
	slot := clusterSlot("{" + prefix + "}:due")
	for _, k := range keys {
		require.True(t, strings.HasPrefix(k, "{"+prefix+"}:"), k)
		require.Equal(t, slot, clusterSlot(k), k)
	}
}

// clusterSlot is Redis Cluster's key slot: CRC16 (XMODEM) of the hash tag, mod 16384.
func clusterSlot(key string) int {
	if s := strings.IndexByte(key, '{'); s >= 0 {
		if e := strings.IndexByte(key[s+1:], '}'); e > 0 {
			key = key[s+1 : s+1+e]
		}
	}
	var crc uint16
	for i := 0; i < len(key); i++ {
		crc ^= uint16(key[i]) << 8
		for range 8 {
			if crc&0x8000 != 0 {
				crc = crc<<1 ^ 0x1021
			} else {
				crc <<= 1
			}
		}
	}
	return int(crc) % 16384
}

// commandCounter counts the round trips a client makes: one per command, one per
// pipeline; commands that set up a new connection do not count.
type commandCounter struct {
	n atomic.Int64
}

func (c *commandCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c *commandCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		switch cmd.Name() {
		case "hello", "auth", "select", "client":
		default:
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c *commandCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		c.n.Add(1)
		return next(ctx, cmds)
	}
}

func (c *commandCounter) count(t *testing.T, what string, want int64, do func() error) {
	t.Helper()
	c.n.Store(0)
	require.NoError(t, do())
	require.Equal(t, want, c.n.Load(), "round trips of %s", what)
}

func TestWheelStageRoundTrips(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour})
	counter := &commandCounter{}
	rdb.AddHook(counter)

	batch := idRange("rt-", 100)
	// Warm up: the first run of a script on a server may need EVAL after EVALSHA.
	_, err := ws.Put(ctx, entryAt("warm", time.Now()))
	require.NoError(t, err)
	_, err = entriesOf(ws.Claim(ctx, []string{"warm"}, tok))
	require.NoError(t, err)
	require.NoError(t, giveBack(ctx, ws, "warm", time.Now()))
	_, err = entriesOf(ws.ClaimOverdue(ctx, time.Hour, 1, newToken()))
	require.NoError(t, err)
	_, err = ws.DueWithin(ctx, time.Hour, 1)
	require.NoError(t, err)
	require.NoError(t, release(ctx, ws, "warm"))
	_, err = ws.Cancel(ctx, "warm")
	require.NoError(t, err)
	_, err = ws.IsCancelled(ctx, "warm")
	require.NoError(t, err)
	_, _, err = ws.Stats(ctx) // the first pipeline on a connection sets it up
	require.NoError(t, err)

	counter.count(t, "Put", 1, func() error {
		_, err := ws.Put(ctx, entryAt("one", time.Now()))
		return err
	})
	for _, id := range batch {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	counter.count(t, "Claim of 100", 1, func() error {
		got, err := entriesOf(ws.Claim(ctx, batch, tok))
		require.Len(t, got, 100)
		return err
	})
	counter.count(t, "Release of 100", 1, func() error { return release(ctx, ws, batch...) })
	counter.count(t, "GiveBack", 1, func() error { return giveBack(ctx, ws, "one", time.Now()) })
	counter.count(t, "ClaimOverdue", 1, func() error {
		_, err := entriesOf(ws.ClaimOverdue(ctx, 0, 100, newToken()))
		return err
	})
	counter.count(t, "DueWithin", 1, func() error {
		_, err := ws.DueWithin(ctx, time.Hour, 100)
		return err
	})
	counter.count(t, "Cancel", 1, func() error {
		_, err := ws.Cancel(ctx, "one")
		return err
	})
	counter.count(t, "IsCancelled", 1, func() error {
		_, err := ws.IsCancelled(ctx, "one")
		return err
	})
	counter.count(t, "Stats", 1, func() error {
		_, _, err := ws.Stats(ctx)
		return err
	})
}

// An unreachable Redis gives errors that match ErrUnavailable and name the operation.
func TestWheelStageUnavailable(t *testing.T) {
	t.Parallel()
	rdb := redis.NewClient(&redis.Options{Addr: "127.0.0.1:1", MaxRetries: -1, DialerRetries: 1, DialTimeout: 500 * time.Millisecond})
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, "rd", store.WheelStageOptions{})
	ctx := context.Background()

	_, err := ws.Put(ctx, entryAt("a", time.Now()))
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.True(t, strings.HasPrefix(err.Error(), "store: put: "), err.Error())
	_, err = entriesOf(ws.Claim(ctx, []string{"a"}, tok))
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.True(t, strings.HasPrefix(err.Error(), "store: claim: "), err.Error())
	require.ErrorIs(t, release(ctx, ws, "a"), store.ErrUnavailable)
	_, _, err = ws.Stats(ctx)
	require.ErrorIs(t, err, store.ErrUnavailable)
	_, err = ws.IsCancelled(ctx, "a")
	require.ErrorIs(t, err, store.ErrUnavailable)

	// A caller that gave up is told so, not that Redis is down.
	cancelled, cancel := context.WithCancel(ctx)
	cancel()
	_, err = ws.Cancel(cancelled, "a")
	require.ErrorIs(t, err, context.Canceled)
	require.NotErrorIs(t, err, store.ErrUnavailable)
}

func TestWheelStageOptionsAndNames(t *testing.T) {
	t.Parallel()
	ws := store.NewWheelStage(redis.NewClient(&redis.Options{}), "rd", store.WheelStageOptions{DoneTTL: time.Hour})
	require.Equal(t, store.WheelStageOptions{Lease: 30 * time.Second, DoneTTL: time.Hour, CancelTTL: 31 * 24 * time.Hour, WaitTimeout: time.Second, Shards: 1}, ws.Options())
	require.Panics(t, func() { store.NewWheelStage(redis.NewClient(&redis.Options{}), "", store.WheelStageOptions{}) })

	for r, want := range map[fmt.Stringer]string{
		store.PutStored: "stored", store.PutDuplicate: "duplicate", store.PutDone: "done",
		store.PutCancelled: "cancelled", store.PutMoved: "moved", store.PutResult(0): "PutResult(0)",
		store.CancelRemoved: "removed", store.CancelTooLate: "too_late",
		store.CancelAlreadyDelivered: "already_delivered", store.CancelTombstoned: "tombstoned",
		store.CancelRecorded: "recorded", store.CancelRowCancelled: "cancelled",
		store.CancelResult(9): "CancelResult(9)",
	} {
		require.Equal(t, want, r.String())
	}
}

// BenchmarkWheelStagePutClaimRelease measures one alert's whole life in the wheel stage:
// Put, Claim of that id, Release: three round trips.
func BenchmarkWheelStagePutClaimRelease(b *testing.B) {
	ctx := context.Background()
	_, _, ws := newWheelStage(b, store.WheelStageOptions{})
	body := make([]byte, 512)
	_, _ = rand.Read(body)
	e := store.Entry{Target: "ops", Body: body, Props: map[string]string{"RD_TARGET": "ops"}, DueAt: time.Now()}
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		e.ID = "bench-" + strconv.Itoa(i)
		i++
		if r, err := ws.Put(ctx, e); err != nil || r != store.PutStored {
			b.Fatal(r, err)
		}
		if got, err := entriesOf(ws.Claim(ctx, []string{e.ID}, tok)); err != nil || len(got) != 1 {
			b.Fatal(len(got), err)
		}
		if err := release(ctx, ws, e.ID); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkWheelStageBatch100 is the same life for 100 alerts at a time, claimed and
// released in one batch each; ns/op is per alert.
func BenchmarkWheelStageBatch100(b *testing.B) {
	ctx := context.Background()
	_, _, ws := newWheelStage(b, store.WheelStageOptions{})
	body := make([]byte, 512)
	_, _ = rand.Read(body)
	e := store.Entry{Target: "ops", Body: body, DueAt: time.Now()}
	batch := make([]string, 0, 100)
	b.ReportAllocs()
	i := 0
	flush := func() {
		if got, err := entriesOf(ws.Claim(ctx, batch, tok)); err != nil || len(got) != len(batch) {
			b.Fatal(len(got), err)
		}
		if err := release(ctx, ws, batch...); err != nil {
			b.Fatal(err)
		}
		batch = batch[:0]
	}
	for b.Loop() {
		e.ID = "bench-" + strconv.Itoa(i)
		i++
		if _, err := ws.Put(ctx, e); err != nil {
			b.Fatal(err)
		}
		if batch = append(batch, e.ID); len(batch) == 100 {
			flush()
		}
	}
	if len(batch) > 0 {
		flush()
	}
}

// tok is the claim token of the tests' claims.
const tok = "claim-1"

var tokens atomic.Int64

// newToken returns a claim token no other claim of the tests uses (a sweep that reuses a
// token is a repeat of the same claim).
func newToken() string { return "claim-n" + strconv.FormatInt(tokens.Add(1), 10) }

func claimsOf(ids ...string) []store.Claim {
	out := make([]store.Claim, len(ids))
	for i, id := range ids {
		out[i] = store.Claim{ID: id, Token: tok}
	}
	return out
}

// release releases ids, claimed with tok, as delivered.
func release(ctx context.Context, ws *store.WheelStage, ids ...string) error {
	_, err := ws.Release(ctx, store.Delivered, claimsOf(ids...)...)
	return err
}

// giveBack gives id, claimed with tok, back for retryAt; it fails when tok did not hold it.
func giveBack(ctx context.Context, ws *store.WheelStage, id string, retryAt time.Time) error {
	_, err := ws.GiveBack(ctx, store.Claim{ID: id, Token: tok}, retryAt, 0)
	return err
}

// redis.durability fsync is checked against Redis's own setting.
func TestCheckDurabilityFsync(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _ := testenv.RedisServer(t, "--appendonly", "yes", "--appendfsync", "everysec")
	err := store.CheckDurability(ctx, rdb, "fsync", 0)
	require.ErrorContains(t, err, "appendfsync everysec")
	require.NotErrorIs(t, err, store.ErrCannotCheck)
	require.NoError(t, rdb.ConfigSet(ctx, "appendfsync", "always").Err())
	require.NoError(t, store.CheckDurability(ctx, rdb, "fsync", 0))
	require.NoError(t, store.CheckDurability(ctx, rdb, "write", 0))
	require.ErrorContains(t, store.CheckDurability(ctx, rdb, "replicas", 1), "0 replicas connected")
}

// With durability replicas=1 a write counts only once a replica took it: with the
// replica up, the wheel stage works; with it gone, every write fails with
// ErrNotReplicated (an ErrUnavailable: the caller keeps the alert and retries), and
// OnDurability hears of it once; with a replica back, once more.
func TestWheelStageWaitsForReplicas(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	primary, addr := testenv.RedisServer(t)
	host, port, _ := net.SplitHostPort(addr)
	replica, _ := testenv.RedisServer(t, "--replicaof", host, port)
	require.Eventually(t, func() bool {
		info, err := replica.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 20*time.Second, 50*time.Millisecond)
	require.NoError(t, store.CheckDurability(ctx, primary, "replicas", 1))
	var mu sync.Mutex
	var heard []string
	onDurability := func(met bool, detail string) {
		mu.Lock()
		defer mu.Unlock()
		heard = append(heard, fmt.Sprintf("%t: %s", met, detail))
	}
	// A WAIT long enough that a replica that is up always answers within it, even on a
	// loaded machine (300ms left little room beside the other tests).
	const wait = 2 * time.Second
	ws := store.NewWheelStage(primary, "rddur", store.WheelStageOptions{Replicas: 1, WaitTimeout: wait, OnDurability: onDurability})
	res, err := ws.Put(ctx, entryAt("a", time.Now()))
	require.NoError(t, err)
	require.Equal(t, store.PutStored, res)
	got, err := entriesOf(ws.Claim(ctx, []string{"a"}, tok))
	require.NoError(t, err)
	require.Len(t, got, 1)
	v, err := replica.HExists(ctx, "{rddur}:owner", "a").Result()
	require.NoError(t, err)
	require.True(t, v, "the claim reached the replica before Claim returned")

	_ = replica.Shutdown(ctx).Err() // the replica goes away (its answer is the connection closing)
	require.Eventually(t, func() bool {
		info, err := primary.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "connected_slaves:0")
	}, 10*time.Second, 50*time.Millisecond)
	start := time.Now()
	_, err = ws.Put(ctx, entryAt("b", time.Now()))
	require.ErrorIs(t, err, store.ErrNotReplicated)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.GreaterOrEqual(t, time.Since(start), wait, "WAIT waited its timeout")
	_, err = ws.Release(ctx, store.Delivered, got[0].Claim())
	require.ErrorIs(t, err, store.ErrNotReplicated)
	mu.Lock()
	require.Equal(t, []string{"false: 0 of 1 replicas took the last write within 2s"}, heard, "said once, not once per write")
	mu.Unlock()

	again, _ := testenv.RedisServer(t, "--replicaof", host, port)
	require.Eventually(t, func() bool {
		info, err := again.Info(ctx, "replication").Result()
		return err == nil && strings.Contains(info, "master_link_status:up")
	}, 20*time.Second, 50*time.Millisecond)
	// The primary counts the new replica for WAIT a moment after the replica says its link
	// is up (on a loaded machine, past the WAIT): writes fall short until then, which
	// says nothing new.
	require.Eventually(t, func() bool {
		_, err := ws.Put(ctx, entryAt("c", time.Now()))
		return err == nil
	}, 20*time.Second, 50*time.Millisecond, "a write taken by the new replica")
	mu.Lock()
	defer mu.Unlock()
	require.Equal(t, []string{"false: 0 of 1 replicas took the last write within 2s", "true: 1 of 1 replicas took the last write within 2s"}, heard)
}

func TestWheelStagePeek(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	due := time.UnixMilli(time.Now().Add(time.Minute).UnixMilli())
	e := store.Entry{ID: "peek-a", Target: "ops", DueAt: due, Body: []byte("disk full"), Hops: 2}
	_, err := ws.Put(ctx, e)
	require.NoError(t, err)
	got, err := ws.Peek(ctx, []string{"peek-a", "peek-missing"})
	require.NoError(t, err)
	require.Len(t, got, 1, "an id not in the wheel stage is left out")
	require.Equal(t, "ops", got[0].Target)
	require.True(t, due.Equal(got[0].DueAt))
	require.Equal(t, []byte("disk full"), got[0].Body)
	require.Equal(t, 2, got[0].Hops)
	none, err := ws.Peek(ctx, nil)
	require.NoError(t, err)
	require.Empty(t, none)
}

// ReleaseAll releases, in one call, hand-offs that ended each their own way: each gets
// its own done marker and trace, a Recorded release never downgrades a delivered marker
// in the same batch, and the ids whose claims were lost (another token owns them) are
// the ones returned.
func TestWheelStageReleaseAllMixed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{DoneTTL: time.Hour})
	for _, id := range []string{"sent", "failed", "withheld", "taken"} {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	_, err := entriesOf(ws.Claim(ctx, []string{"sent", "failed", "withheld"}, tok))
	require.NoError(t, err)
	_, err = entriesOf(ws.Claim(ctx, []string{"taken"}, "claim-other"))
	require.NoError(t, err)

	lost, err := ws.ReleaseAll(ctx, []store.Released{
		{Claim: store.Claim{ID: "sent", Token: tok}, Receipt: store.Receipt{Outcome: store.Delivered, Robot: "r2", Merged: 3, Replica: "a"}},
		{Claim: store.Claim{ID: "failed", Token: tok}, Receipt: store.Receipt{Outcome: store.Recorded, Replica: "a"}},
		{Claim: store.Claim{ID: "withheld", Token: tok}, Receipt: store.Receipt{Outcome: store.Withheld, Replica: "a"}},
		{Claim: store.Claim{ID: "taken", Token: tok}, Receipt: store.Receipt{Outcome: store.Delivered, Replica: "a"}},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{false, false, false, true}, lost, "taken is another token's")
	// A recorded release of a delivered alert (the retry job delivered it meanwhile) in a
	// later batch keeps the marker delivered.
	lost, err = ws.ReleaseAll(ctx, []store.Released{
		{Claim: store.Claim{ID: "sent", Token: tok}, Receipt: store.Receipt{Outcome: store.Recorded, Replica: "a"}},
		{Claim: store.Claim{ID: "fresh", Token: tok}, Receipt: store.Receipt{Outcome: store.Recorded, Replica: "a"}},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, true}, lost, "neither is held by tok any more")

	want := map[string][3]bool{ // delivered, recorded, withheld
		"sent": {true, false, false}, "failed": {false, true, false}, "withheld": {false, false, true}, "taken": {true, false, false},
		"fresh": {false, true, false},
	}
	for id, w := range want {
		st, err := ws.Inspect(ctx, id)
		require.NoError(t, err)
		require.True(t, st.Done, id)
		require.Equal(t, w, [3]bool{!st.Recorded && !st.Withheld, st.Recorded, st.Withheld}, id)
		require.False(t, st.InFlight || st.Waiting, "%s left the stage", id)
	}
	st, err := ws.Inspect(ctx, "sent")
	require.NoError(t, err)
	require.Equal(t, "r2", st.Robot)
	requireEmptyStage(t, ws)
}

// A release given its entry's target and due time (as a hand-off's is) takes them from
// there and reads nothing of the trace: the alert leaves the pending counts of its target
// even when its trace is gone (a release that read the target from the trace left it
// counted for ever), and its trace's lateness is measured from the given due time.
func TestWheelStageReleaseTakesTheEntrysTargetAndDueTime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{DoneTTL: time.Hour, Shards: 1}) // one shard: its trace key is named below
	due := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
	for _, id := range []string{"traceless", "traced"} {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}
	c, err := ws.CountPending(ctx, time.Now(), 1)
	require.NoError(t, err)
	require.Equal(t, map[string]int64{"ops": 2}, c.ByTarget)
	claimed, err := entriesOf(ws.Claim(ctx, []string{"traceless", "traced"}, tok))
	require.NoError(t, err)
	require.Len(t, claimed, 2)
	require.NoError(t, rdb.Del(ctx, "{"+prefix+"}:trace:traceless").Err())

	var rs []store.Released
	for _, e := range claimed {
		rs = append(rs, store.Released{Claim: e.Claim(), Receipt: store.Receipt{Outcome: store.Delivered, Replica: "a"},
			Target: e.Target, DueAt: e.DueAt})
	}
	lost, err := ws.ReleaseAll(ctx, rs)
	require.NoError(t, err)
	require.Equal(t, []bool{false, false}, lost)
	c, err = ws.CountPending(ctx, time.Now(), 1)
	require.NoError(t, err)
	require.Equal(t, store.PendingCounts{ByTarget: map[string]int64{}, ByHour: []int64{0}}, c, "nothing is pending")
	st, err := ws.Inspect(ctx, "traced")
	require.NoError(t, err)
	require.True(t, st.Done)
	require.GreaterOrEqual(t, st.Late, time.Minute, "late since its due time, a minute ago")
	requireEmptyStage(t, ws)
}

// An id twice in one release (claimed twice by one replica, under leases) leaves the
// pending counts once: the other alerts of its target stay counted.
func TestWheelStageReleaseOfAnIdTwiceUnlistsItOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{DoneTTL: time.Hour})
	due := time.Now().Add(-time.Minute)
	for _, id := range []string{"twice", "other"} {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}
	claimed, err := entriesOf(ws.Claim(ctx, []string{"twice"}, tok))
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	e := claimed[0]
	r := store.Released{Claim: e.Claim(), Receipt: store.Receipt{Outcome: store.Delivered}, Target: e.Target, DueAt: e.DueAt}
	_, err = ws.ReleaseAll(ctx, []store.Released{r, r})
	require.NoError(t, err)
	c, err := ws.CountPending(ctx, time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Total)
	require.Equal(t, map[string]int64{"ops": 1}, c.ByTarget, "'other' is still pending")
}

// A claim or a release of more ids than one script takes (maxScriptIDs, 1000) goes in
// several calls and loses none of them; the claim returns them in the order asked.
func TestWheelStageClaimAndReleaseManyAtOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	all := idRange("many-", 2500)
	putDue(t, ws, time.Now().Add(-time.Second), all...)
	asked := slices.Clone(all)
	mrand.Shuffle(len(asked), func(i, j int) { asked[i], asked[j] = asked[j], asked[i] })
	got, err := entriesOf(ws.Claim(ctx, asked, tok))
	require.NoError(t, err)
	require.Equal(t, asked, ids(got))
	rs := make([]store.Released, len(all))
	for i, id := range all {
		rs[i] = store.Released{Claim: store.Claim{ID: id, Token: tok}, Receipt: store.Receipt{Outcome: store.Delivered}}
	}
	lost, err := ws.ReleaseAll(ctx, rs)
	require.NoError(t, err)
	require.Equal(t, make([]bool, len(rs)), lost)
	requireEmptyStage(t, ws)
	for _, id := range []string{all[0], all[999], all[1000], all[2499]} {
		ok, err := ws.IsDelivered(ctx, id)
		require.NoError(t, err)
		require.True(t, ok, id)
	}
}

// A key of one id damaged by another writer (its trace a list, its done marker a hash)
// does not stop the release of its batch: every id leaves the stage with its done
// marker. Two releases of one id in a batch, by a stale claim and by the claim that
// holds it, report only the stale one lost.
func TestWheelStageReleaseSurvivesADamagedKey(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{DoneTTL: time.Hour})
	for _, id := range []string{"a", "b", "c"} {
		_, err := ws.Put(ctx, entryAt(id, time.Now()))
		require.NoError(t, err)
	}
	_, err := entriesOf(ws.Claim(ctx, []string{"a", "b", "c"}, tok))
	require.NoError(t, err)
	require.NoError(t, rdb.Del(ctx, "{"+prefix+"}:trace:b").Err())
	require.NoError(t, rdb.RPush(ctx, "{"+prefix+"}:trace:b", "not a hash").Err())
	require.NoError(t, rdb.HSet(ctx, "{"+prefix+"}:done:c", "not", "a string").Err())

	lost, err := ws.ReleaseAll(ctx, []store.Released{
		{Claim: store.Claim{ID: "a", Token: "claim-stale"}, Receipt: store.Receipt{Outcome: store.Delivered}},
		{Claim: store.Claim{ID: "a", Token: tok}, Receipt: store.Receipt{Outcome: store.Delivered}},
		{Claim: store.Claim{ID: "b", Token: tok}, Receipt: store.Receipt{Outcome: store.Delivered}},
		{Claim: store.Claim{ID: "c", Token: tok}, Receipt: store.Receipt{Outcome: store.Recorded}},
	})
	require.NoError(t, err)
	require.Equal(t, []bool{true, false, false, false}, lost)
	for _, id := range []string{"a", "b"} {
		ok, err := ws.IsDelivered(ctx, id)
		require.NoError(t, err)
		require.True(t, ok, id)
	}
	r, err := ws.Put(ctx, entryAt("c", time.Now()))
	require.NoError(t, err)
	require.Equal(t, store.PutDone, r, "c's done marker replaced the damaged key")
	requireEmptyStage(t, ws)
}

// requireEmptyStage requires that nothing waits in ws or is in flight.
func requireEmptyStage(t *testing.T, ws *store.WheelStage) {
	t.Helper()
	waiting, inflight, err := ws.Stats(context.Background())
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{waiting, inflight})
}
