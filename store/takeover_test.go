package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// keepBeating beats for replica every tenth of the period until the test ends or the
// returned stop is called, as a live replica does: a test whose replica must stay live
// while it sets up its holdings does not depend on how fast the machine runs.
func keepBeating(t *testing.T, ws *store.WheelStage, replica string) (stop func()) {
	t.Helper()
	lv := ws.Liveness(nil)
	_, err := lv.Beat(context.Background(), replica)
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() {
		tick := time.NewTicker(ws.Options().Liveness / 10)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			if _, err := lv.Beat(ctx, replica); err != nil && ctx.Err() == nil {
				t.Errorf("beat of %s: %v", replica, err)
			}
		}
	})
	stop = func() { cancel(); wg.Wait() }
	t.Cleanup(stop)
	return stop
}

// waitLapsed waits until Redis's clock is past the liveness of replica.
func waitLapsed(t *testing.T, rdb redis.UniversalClient, prefix, replica string) {
	t.Helper()
	waitRedisPast(t, rdb, liveUntil(t, rdb, prefix, replica).Add(time.Millisecond))
}

// putDue stores ids, due at due, eight at a time.
func putDue(t *testing.T, ws *store.WheelStage, due time.Time, ids ...string) {
	t.Helper()
	ctx := context.Background()
	var next atomic.Int64
	var wg sync.WaitGroup
	for range 8 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < len(ids); i = int(next.Add(1)) - 1 {
				r, err := ws.Put(ctx, entryAt(ids[i], due))
				if err != nil || r != store.PutStored {
					t.Errorf("put %s: %v %v", ids[i], r, err)
					return
				}
			}
		})
	}
	wg.Wait()
}

// claimAll claims ids for token, a thousand per call, and requires every one.
func claimAll(t *testing.T, ws *store.WheelStage, token string, ids ...string) {
	t.Helper()
	for chunk := range slices.Chunk(ids, 1000) {
		got, err := entriesOf(ws.Claim(context.Background(), chunk, token))
		require.NoError(t, err)
		require.Len(t, got, len(chunk))
	}
}

// sweep is B's sweeper run: claims of expired entries only (no due entry is overdue by
// an hour here).
func sweep(t *testing.T, ws *store.WheelStage, limit int, token string) []string {
	t.Helper()
	got, err := entriesOf(ws.ClaimOverdue(context.Background(), time.Hour, limit, token))
	require.NoError(t, err)
	out := ids(got)
	slices.Sort(out)
	return out
}

// TestTakeOverMovesEverythingOfALapsedReplica: with leases of an hour, nothing of A
// moves while A is live; once A's liveness ran out, the first sweep of B takes over
// and claims everything A held (claims from its fire loop and its sweeper, a park, an
// adopt), none of A's claims can confirm, give back, mark, park or adopt it any more,
// and A is gone.
func TestTakeOverMovesEverythingOfALapsedReplica(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: time.Second})
	keepBeating(t, ws, "rb")
	stopA := keepBeating(t, ws, "ra")

	now := redisNow(t, rdb)
	putDue(t, ws, now.Add(-10*time.Second), "o1")
	putDue(t, ws, now.Add(-5*time.Second), "d1")
	putDue(t, ws, now.Add(-4*time.Second), "p1")
	putDue(t, ws, now.Add(-time.Second), "c1", "c2")
	claimAll(t, ws, "ra/1", "c1", "c2")
	got, err := entriesOf(ws.ClaimOverdue(ctx, 0, 1, "ra/2"))
	require.NoError(t, err)
	require.Equal(t, []string{"o1"}, ids(got))
	claimAll(t, ws, "ra/3", "d1", "p1")
	parked, err := ws.Park(ctx, "ops", time.Hour,
		store.Parked{Claim: store.Claim{ID: "d1", Token: "ra/3"}, DueAt: now.Add(-5 * time.Second)},
		store.Parked{Claim: store.Claim{ID: "p1", Token: "ra/3"}, DueAt: now.Add(-4 * time.Second)})
	require.NoError(t, err)
	require.Len(t, parked, 2)
	adopted, left, err := ws.Adopt(ctx, "ops", 1, "ra/4")
	require.NoError(t, err)
	require.Equal(t, []string{"d1"}, ids(adopted.Entries))
	require.Equal(t, 1, left)
	all := []string{"c1", "c2", "d1", "o1", "p1"}
	require.Equal(t, all, readHoldings(t, rdb, prefix).heldBy("ra"))

	require.Empty(t, sweep(t, ws, 100, "rb/1"), "A is live and the leases last an hour: nothing moves")

	stopA()
	waitLapsed(t, rdb, prefix, "ra")
	require.Equal(t, all, sweep(t, ws, 100, "rb/2"), "the first sweep after A lapsed takes everything")
	h := readHoldings(t, rdb, prefix)
	require.Empty(t, h.heldBy("ra"))
	require.Equal(t, all, h.heldBy("rb"))
	requireInStep(t, h, nil)
	v, err := ws.Liveness(nil).View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"rb"}, v.Live)
	require.Empty(t, v.Lapsed)
	require.Equal(t, []string{"ra"}, v.Gone)

	require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: "c1", Token: "ra/1"}, 0), store.ErrNotHeld)
	require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: "p1", Token: "ra/3"}, 0), store.ErrNotHeld)
	back, err := ws.GiveBack(ctx, store.Claim{ID: "c2", Token: "ra/1"}, now, 0)
	require.NoError(t, err)
	require.False(t, back)
	require.ErrorIs(t, ws.MarkFailed(ctx, store.Claim{ID: "o1", Token: "ra/2"}, []byte("x")), store.ErrNotHeld)
	beat, err := ws.Liveness(nil).Beat(ctx, "ra")
	require.NoError(t, err)
	require.True(t, beat.Lapsed, "A's next beat learns it lapsed")
	parked, err = ws.Park(ctx, "ops", time.Hour, store.Parked{Claim: store.Claim{ID: "d1", Token: "ra/4"}, DueAt: now})
	require.NoError(t, err)
	require.Empty(t, parked)
	adopted, left, err = ws.Adopt(ctx, "ops", 10, "ra/5")
	require.NoError(t, err)
	require.Empty(t, adopted.Entries, "p1 only leaves its park")
	require.Zero(t, left)
	require.Empty(t, readHoldings(t, rdb, prefix).heldBy("ra"))
	for _, id := range all {
		require.NoError(t, ws.Confirm(ctx, store.Claim{ID: id, Token: "rb/2"}, 0), "B holds %s", id)
	}
}

// TestTakeOverWaitsForAGuardedSend: an entry whose send A confirmed may still be on the
// wire for G = T/3 after the confirm: a take-over ends A's claim at once (A cannot
// confirm it again) but leaves it unclaimed until the guard ends; A's other entry is
// claimed at once.
func TestTakeOverWaitsForAGuardedSend(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 3 * time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: period})
	keepBeating(t, ws, "rb")
	_, err := ws.Liveness(nil).Beat(ctx, "ra")
	require.NoError(t, err)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "x", "y")
	claimAll(t, ws, "ra/1", "x", "y")

	waitLapsed(t, rdb, prefix, "ra")
	before := redisNow(t, rdb)
	require.NoError(t, ws.Confirm(ctx, store.Claim{ID: "x", Token: "ra/1"}, 0), "no take-over yet: A still holds x")
	require.Equal(t, []string{"y"}, sweep(t, ws, 100, "rb/1"))
	guard := leaseExpiry(t, rdb, prefix, "x")
	requireWithin(t, guard, before.Add(period/3), redisNow(t, rdb).Add(period/3), "x waits for its guard")
	owner, err := rdb.HGet(ctx, "{"+prefix+"}:owner", "x").Result()
	require.NoError(t, err)
	require.Equal(t, "lapsed:ra", owner)
	require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: "x", Token: "ra/1"}, 0), store.ErrNotHeld)
	require.Empty(t, sweep(t, ws, 100, "rb/2"), "not before the guard ends")

	waitRedisPast(t, rdb, guard)
	require.Equal(t, []string{"x"}, sweep(t, ws, 100, "rb/3"))
}

// TestNoTakeOverInTheQuietWindow: after a silence of every replica longer than T/2 (as
// when Redis was down), a lapsed replica's holdings stay put: no sweep before the first
// beat, nor in the quiet window of T that beat opens; after the window they move.
func TestNoTakeOverInTheQuietWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 3 * time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: period})
	lv := ws.Liveness(nil)
	_, err := lv.Beat(ctx, "ra")
	require.NoError(t, err)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "x")
	claimAll(t, ws, "ra/1", "x")
	waitRedisPast(t, rdb, liveUntil(t, rdb, prefix, "ra").Add(-period*6/10))
	_, err = lv.Beat(ctx, "rb") // B is live for T from here; A lapses within 0.6 T
	require.NoError(t, err)
	v, err := lv.View(ctx)
	require.NoError(t, err)
	require.True(t, v.QuietUntil.IsZero())

	waitLapsed(t, rdb, prefix, "ra") // and nobody beat for more than T/2
	require.Empty(t, sweep(t, ws, 10, "rb/1"), "nobody beat for T/2: no take-over before the first beat")
	_, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	v, err = lv.View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"ra"}, v.Lapsed)
	require.False(t, v.QuietUntil.IsZero(), "that beat opened a quiet window")
	keepBeating(t, ws, "rb")
	require.Empty(t, sweep(t, ws, 10, "rb/2"), "no take-over in the quiet window")
	require.Equal(t, []string{"x"}, readHoldings(t, rdb, prefix).heldBy("ra"))

	waitRedisPast(t, rdb, v.QuietUntil)
	require.Equal(t, []string{"x"}, sweep(t, ws, 10, "rb/3"), "after the window, A's holdings move")
}

// TestQuietWindowSparesExpiredClaims: after a silence of every replica longer than T/2,
// the claim of a replica that lapsed in it is not taken either when its lease ran out:
// its lease is renewed until the quiet window ends (every replica gets a whole T to beat
// again); then it is taken over.
func TestQuietWindowSparesExpiredClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = 2 * time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: 50 * time.Millisecond, Liveness: period})
	lv := ws.Liveness(nil)
	_, err := lv.Beat(ctx, "ra")
	require.NoError(t, err)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "x")
	claimAll(t, ws, "ra/1", "x")

	waitLapsed(t, rdb, prefix, "ra") // and its lease ran out long before: nobody beat for T
	_, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	v, err := lv.View(ctx)
	require.NoError(t, err)
	require.False(t, v.QuietUntil.IsZero(), "B's beat opened a quiet window")
	keepBeating(t, ws, "rb")
	expired := leaseExpiry(t, rdb, prefix, "x")
	require.Empty(t, sweep(t, ws, 10, "rb/1"), "an expired claim of a lapsed replica is not taken in the quiet window")
	require.True(t, leaseExpiry(t, rdb, prefix, "x").After(expired), "its lease was renewed")
	require.Equal(t, []string{"x"}, readHoldings(t, rdb, prefix).heldBy("ra"))

	waitRedisPast(t, rdb, v.QuietUntil)
	require.Equal(t, []string{"x"}, sweep(t, ws, 10, "rb/2"), "after the window, it is taken over")
}

// TestRevivedReplicaKeepsWhatWasNotTaken: a take-over moves 5000 holdings per sweep; a
// replica that beats again in the middle of its take-over keeps the rest, and its claims
// of them still work.
func TestRevivedReplicaKeepsWhatWasNotTaken(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: time.Second})
	keepBeating(t, ws, "rb")
	stopA := keepBeating(t, ws, "ra")
	held := idRange("h", 5003)
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), held...)
	claimAll(t, ws, "ra/1", held...)
	stopA()

	waitLapsed(t, rdb, prefix, "ra")
	require.Len(t, sweep(t, ws, 10, "rb/1"), 10)
	kept := readHoldings(t, rdb, prefix).heldBy("ra")
	slices.Sort(held)
	require.Equal(t, held[5000:], kept, "the first 5000, in the index's order, were taken over")
	beat, err := ws.Liveness(nil).Beat(ctx, "ra")
	require.NoError(t, err)
	require.True(t, beat.Lapsed)
	// A beats on as a revived replica does: one beat alone lapses again after a second,
	// which a loaded run (the Cluster's store tests beside Sentinel's) spent in the sweep.
	keepBeating(t, ws, "ra")

	require.Len(t, sweep(t, ws, 5000, "rb/2"), 4990, "the rest of what was taken over, and nothing of A's")
	h := readHoldings(t, rdb, prefix)
	require.Equal(t, kept, h.heldBy("ra"))
	require.Len(t, h.heldBy("rb"), 5000)
	for _, id := range kept {
		require.NoError(t, ws.Confirm(ctx, store.Claim{ID: id, Token: "ra/1"}, 0), "A still holds %s", id)
	}
	v, err := ws.Liveness(nil).View(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"ra", "rb"}, v.Live)
	require.Empty(t, v.Gone)
}

// TestSweepSparesALiveReplicasClaims: with liveness on, a claim whose lease ran out is
// renewed, not taken, while its replica is live (liveness tells a dead holder, not the
// lease); a park whose lease ran out is claimed as before.
func TestSweepSparesALiveReplicasClaims(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const lease = 50 * time.Millisecond
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: lease, Liveness: time.Hour})
	for _, r := range []string{"ra", "rb"} {
		_, err := ws.Liveness(nil).Beat(ctx, r)
		require.NoError(t, err)
	}
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "x", "y")
	claimAll(t, ws, "ra/1", "x", "y")
	parked, err := ws.Park(ctx, "ops", lease, store.Parked{Claim: store.Claim{ID: "y", Token: "ra/1"}, DueAt: time.Now()})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	expired := leaseExpiry(t, rdb, prefix, "x")
	// The park's lease began after the claim's: wait for both to run out.
	waitRedisPast(t, rdb, leaseExpiry(t, rdb, prefix, "y").Add(time.Millisecond))

	require.Equal(t, []string{"y"}, sweep(t, ws, 10, "rb/1"), "the park is taken, the claim is not")
	require.True(t, leaseExpiry(t, rdb, prefix, "x").After(expired), "x's lease was renewed")
	require.NoError(t, ws.Confirm(ctx, store.Claim{ID: "x", Token: "ra/1"}, 0))

	off := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: lease})
	waitRedisPast(t, rdb, leaseExpiry(t, rdb, prefix, "x").Add(time.Millisecond))
	got, err := entriesOf(off.ClaimOverdue(ctx, time.Hour, 10, "rb/2"))
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"x", "y"}, ids(got), "with liveness off, the lease alone decides (y's claim of rb/1 ran out too)")
}

// TestBeatCostIndependentOfHoldings: a beat is one round trip whether its replica holds
// ten entries or ten thousand.
func TestBeatCostIndependentOfHoldings(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: time.Hour})
	var counting atomic.Bool
	var trips atomic.Int64
	rdb.AddHook(tripCounter{on: &counting, n: &trips})
	lv := ws.Liveness(nil)
	_, err := lv.Beat(ctx, "ra") // loads the script
	require.NoError(t, err)
	beats := func() int64 {
		trips.Store(0)
		counting.Store(true)
		defer counting.Store(false)
		for range 20 {
			_, err := lv.Beat(ctx, "ra")
			require.NoError(t, err)
		}
		return trips.Load()
	}
	due := redisNow(t, rdb).Add(-time.Second)
	few := idRange("f", 10)
	putDue(t, ws, due, few...)
	claimAll(t, ws, "ra/1", few...)
	atFew := beats()
	many := idRange("m", 10_000-10)
	putDue(t, ws, due, many...)
	claimAll(t, ws, "ra/2", many...)
	_, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 10_000, inflight)
	atMany := beats()
	require.EqualValues(t, 20, atFew, "one round trip per beat")
	require.Equal(t, atFew, atMany, fmt.Sprintf("round trips of 20 beats at 10 holdings: %d, at 10,000: %d", atFew, atMany))
}

// tripCounter counts the commands and pipelines a client sends while on is set.
type tripCounter struct {
	on *atomic.Bool
	n  *atomic.Int64
}

func (c tripCounter) DialHook(next redis.DialHook) redis.DialHook { return next }

func (c tripCounter) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		if c.on.Load() {
			c.n.Add(1)
		}
		return next(ctx, cmd)
	}
}

func (c tripCounter) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		if c.on.Load() {
			c.n.Add(1)
		}
		return next(ctx, cmds)
	}
}
