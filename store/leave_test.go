package store_test

import (
	"context"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// TestTakeGoneGivesEachDepartedReplicaOnce: once a take-over of A finished, the beats of
// the others count A as gone, and one TakeGone of all those that race takes it; the next
// beat counts none. Beats report A absent from its lapse on, while it is gone, once it
// departed, and no longer once it beats again.
func TestTakeGoneGivesEachDepartedReplicaOnce(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: time.Second})
	lv := ws.Liveness(nil)
	keepBeating(t, ws, "rb")
	stopA := keepBeating(t, ws, "ra")
	putDue(t, ws, redisNow(t, rdb).Add(-time.Second), "x")
	claimAll(t, ws, "ra/1", "x")
	beat, err := lv.Beat(ctx, "rb")
	require.NoError(t, err)
	require.Zero(t, beat.Gone)

	stopA()
	waitLapsed(t, rdb, prefix, "ra")
	beat, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	require.Equal(t, store.BeatResult{Absent: []string{"ra"}}, beat, "A lapsed")
	require.Equal(t, []string{"x"}, sweep(t, ws, 10, "rb/1"))
	beat, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	require.Equal(t, store.BeatResult{Gone: 1, Absent: []string{"ra"}}, beat, "the take-over of A finished")

	taken := takeGoneAtOnce(ctx, lv, 4)
	require.Equal(t, []string{"", "", "", "ra"}, taken, "one survivor takes A")
	beat, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	require.Zero(t, beat.Gone)
	require.Equal(t, []string{"ra"}, beat.Absent, "A departed: its consumer is left out for a while")
	_, err = lv.Beat(ctx, "ra") // A was paused, and is back
	require.NoError(t, err)
	beat, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	require.Empty(t, beat.Absent, "a replica that beats is not absent")
}

// TestLeaveHandsBackEverything: a replica that stops hands back, with leases of an hour,
// everything it holds but the ids whose hand-off still runs: the others' next sweep
// claims its claims and parks at once, a send it confirmed within the guard once the
// guard ends, and its own claims of them are void; it stays live while it keeps some,
// and once it keeps none it is gone. Leave works through more than one batch.
func TestLeaveHandsBackEverything(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The guard (period/3) must outlast the leave and the two sweeps of 5,000 below, which
	// under -race on a busy machine took over a second (CI, with a 3s period); the test
	// waits for it to end at its close.
	const period = 15 * time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: period})
	lv := ws.Liveness(nil)
	keepBeating(t, ws, "ra")
	keepBeating(t, ws, "rb")
	now := redisNow(t, rdb)
	many := idRange("m", 5003)
	putDue(t, ws, now.Add(-time.Second), append([]string{"sending", "confirmed", "parked"}, many...)...)
	claimAll(t, ws, "ra/1", append([]string{"sending", "confirmed", "parked"}, many...)...)
	parked, err := ws.Park(ctx, "ops", time.Hour, store.Parked{Claim: store.Claim{ID: "parked", Token: "ra/1"}, DueAt: now})
	require.NoError(t, err)
	require.Len(t, parked, 1)
	before := redisNow(t, rdb)
	require.NoError(t, ws.Confirm(ctx, store.Claim{ID: "confirmed", Token: "ra/1"}, 0))
	require.NoError(t, ws.Confirm(ctx, store.Claim{ID: "sending", Token: "ra/1"}, 0))
	require.Empty(t, sweep(t, ws, 100, "rb/1"), "A is live and the leases last an hour: nothing moves")

	ended, left, err := lv.Leave(ctx, "ra", "sending", "unknown")
	require.NoError(t, err)
	require.Equal(t, 5005, ended)
	require.Equal(t, 1, left)
	guard := leaseExpiry(t, rdb, prefix, "confirmed")
	requireWithin(t, guard, before.Add(period/3), redisNow(t, rdb).Add(period/3), "a confirmed send waits for its guard")
	owner, err := rdb.HGet(ctx, "{"+prefix+"}:owner", "confirmed").Result()
	require.NoError(t, err)
	require.Equal(t, "left:ra", owner)
	require.Equal(t, []string{"sending"}, readHoldings(t, rdb, prefix).heldBy("ra"))
	v, err := lv.View(ctx)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"ra", "rb"}, v.Live, "A keeps a hand-off: still live")
	require.Empty(t, v.Gone)

	var swept []string
	for _, token := range []string{"rb/2", "rb/3"} {
		swept = append(swept, sweep(t, ws, 5000, token)...)
	}
	slices.Sort(swept)
	require.Equal(t, slices.Sorted(slices.Values(append([]string{"parked"}, many...))), swept,
		"the next sweeps claim A's claims and its park, not the guarded send")
	for _, id := range []string{"parked", "confirmed", many[0]} {
		require.ErrorIs(t, ws.Confirm(ctx, store.Claim{ID: id, Token: "ra/1"}, 0), store.ErrNotHeld, id)
	}
	require.NoError(t, ws.Confirm(ctx, store.Claim{ID: "sending", Token: "ra/1"}, 0), "A still holds what it kept")

	ended, left, err = lv.Leave(ctx, "ra")
	require.NoError(t, err)
	require.Equal(t, [2]int{1, 0}, [2]int{ended, left})
	require.Empty(t, readHoldings(t, rdb, prefix).heldBy("ra"))
	v, err = lv.View(ctx)
	require.NoError(t, err)
	require.Equal(t, []string{"ra"}, v.Gone, "A left: the others load its wheel's entries")

	waitRedisPast(t, rdb, leaseExpiry(t, rdb, prefix, "sending"))
	require.ElementsMatch(t, []string{"confirmed", "sending"}, sweep(t, ws, 100, "rb/4"), "after their guards")
	requireInStep(t, readHoldings(t, rdb, prefix), nil)
}

// takeGoneAtOnce runs n TakeGone calls at once, as n survivors would, and returns their
// answers sorted ("error: …" for a failed one).
func takeGoneAtOnce(ctx context.Context, lv *store.Liveness, n int) []string {
	got := make(chan string, n)
	for range n {
		go func() {
			r, err := lv.TakeGone(ctx)
			if err != nil {
				r = "error: " + err.Error()
			}
			got <- r
		}()
	}
	var taken []string
	for range n {
		taken = append(taken, <-got)
	}
	slices.Sort(taken)
	return taken
}
