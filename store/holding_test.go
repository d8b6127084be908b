package store_test

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// holdings is who holds what in a wheel stage, read at once: {p}:owner, {p}:by and
// {p}:held.
type holdings struct {
	owner, by map[string]string
	held      []string
}

func readHoldings(t require.TestingT, rdb redis.UniversalClient, prefix string) holdings {
	ctx := context.Background()
	var owner, by *redis.MapStringStringCmd
	var held *redis.ZSliceCmd
	_, err := rdb.TxPipelined(ctx, func(p redis.Pipeliner) error {
		owner = p.HGetAll(ctx, "{"+prefix+"}:owner")
		by = p.HGetAll(ctx, "{"+prefix+"}:by")
		held = p.ZRangeWithScores(ctx, "{"+prefix+"}:held", 0, -1)
		return nil
	})
	require.NoError(t, err)
	h := holdings{owner: owner.Val(), by: by.Val()}
	for _, z := range held.Val() {
		require.Zero(t, z.Score, "held member %v", z.Member)
		h.held = append(h.held, z.Member.(string))
	}
	return h
}

// heldBy lists, sorted, the ids {p}:held names for replica.
func (h holdings) heldBy(replica string) []string {
	var ids []string
	for _, m := range h.held {
		if id, ok := strings.CutPrefix(m, replica+"/"); ok {
			ids = append(ids, id)
		}
	}
	slices.Sort(ids)
	return ids
}

func replicaOf(token string) string {
	r, _, _ := strings.Cut(token, "/")
	return r
}

// requireInStep checks that by and held follow owner: every id in flight has the replica
// responsible for it in by (the replica of its claim; for a parked id, the one that
// parked it, parkers), and held is exactly by's "<replica>/<id>".
func requireInStep(t require.TestingT, h holdings, parkers map[string]string) {
	require.ElementsMatch(t, slices.Collect(maps.Keys(h.owner)), slices.Collect(maps.Keys(h.by)), "by names the ids in flight")
	var want []string
	for id, token := range h.owner {
		if strings.HasPrefix(token, "parked:") {
			require.Equal(t, parkers[id], h.by[id], "%s, parked, stays with its parker", id)
		} else {
			require.Equal(t, replicaOf(token), h.by[id], "%s, held by %s", id, token)
		}
		want = append(want, h.by[id]+"/"+id)
	}
	require.ElementsMatch(t, want, h.held, "held is by's replica/id")
}

// TestHeldIndexFollowsOwnership: whatever two replicas do to a handful of ids (put,
// claim, sweep, park, adopt, give back, release, cancel, confirm, mark delivered; with
// tokens they hold or stale ones; leases that run out at once or never; liveness on or
// off), {p}:by and {p}:held stay in step with {p}:owner after every call.
func TestHeldIndexFollowsOwnership(t *testing.T) {
	rdb, base := testenv.Redis(t)
	ctx := context.Background()
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		prefix := base + ":" + strconv.Itoa(run) // under {base:…, deleted with the test's keys
		lease := rapid.SampledFrom([]time.Duration{time.Millisecond, time.Hour}).Draw(rt, "lease")
		liveness := rapid.SampledFrom([]time.Duration{0, time.Hour}).Draw(rt, "liveness")
		ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: lease, Liveness: liveness})
		replicas := []string{"ra", "rb"}
		if liveness > 0 {
			for _, r := range replicas {
				_, err := ws.Liveness(nil).Beat(ctx, r)
				require.NoError(rt, err)
			}
		}
		ids := []string{"i0", "i1", "i2", "i3"}
		past := time.Now().Add(-time.Minute)
		tokens := map[string]string{} // id → the last token that claimed it
		parkers := map[string]string{}
		n := 0
		token := func(r string) string { n++; return r + "/" + strconv.Itoa(n) }
		took := func(entries []store.Entry) {
			for _, e := range entries {
				tokens[e.ID] = e.Token
			}
		}
		// tokenFor is the token of id's last claim, or now and then a stale or
		// unknown one.
		tokenFor := func(rt *rapid.T, id string) string {
			if tk, ok := tokens[id]; ok && rapid.IntRange(0, 3).Draw(rt, "stale") > 0 {
				return tk
			}
			return token(rapid.SampledFrom(replicas).Draw(rt, "replica"))
		}
		steps := rapid.IntRange(1, 30).Draw(rt, "steps")
		for range steps {
			id := rapid.SampledFrom(ids).Draw(rt, "id")
			r := rapid.SampledFrom(replicas).Draw(rt, "replica")
			switch op := rapid.SampledFrom([]string{"put", "put", "claim", "claim", "sweep", "park", "park", "adopt",
				"adopt", "giveback", "release", "cancel", "confirm", "delivered"}).Draw(rt, "op"); op {
			case "put":
				_, err := ws.Put(ctx, entryAt(id, past))
				require.NoError(rt, err)
			case "claim":
				some := rapid.SliceOfNDistinct(rapid.SampledFrom(ids), 1, 3, rapid.ID).Draw(rt, "ids")
				c, err := ws.Claim(ctx, some, token(r))
				require.NoError(rt, err)
				took(c.Entries)
			case "sweep":
				c, err := ws.ClaimOverdue(ctx, 0, rapid.IntRange(1, 3).Draw(rt, "limit"), token(r))
				require.NoError(rt, err)
				took(c.Entries)
			case "park":
				tk := tokenFor(rt, id)
				got, err := ws.Park(ctx, "g", lease, store.Parked{Claim: store.Claim{ID: id, Token: tk}, DueAt: past})
				require.NoError(rt, err)
				if len(got) == 1 {
					parkers[id] = replicaOf(tk)
				}
			case "adopt":
				c, _, err := ws.Adopt(ctx, "g", rapid.IntRange(1, 3).Draw(rt, "limit"), token(r))
				require.NoError(rt, err)
				took(c.Entries)
			case "giveback":
				_, err := ws.GiveBack(ctx, store.Claim{ID: id, Token: tokenFor(rt, id)}, past, 0)
				require.NoError(rt, err)
			case "release":
				outcome := rapid.SampledFrom([]store.Outcome{store.Delivered, store.Recorded}).Draw(rt, "outcome")
				_, err := ws.Release(ctx, outcome, store.Claim{ID: id, Token: tokenFor(rt, id)})
				require.NoError(rt, err)
			case "cancel":
				_, err := ws.Cancel(ctx, id)
				require.NoError(rt, err)
			case "confirm":
				err := ws.Confirm(ctx, store.Claim{ID: id, Token: tokenFor(rt, id)}, 0)
				if err != nil {
					require.ErrorIs(rt, err, store.ErrNotHeld)
				}
			case "delivered":
				require.NoError(rt, ws.MarkDelivered(ctx, id))
			default:
				rt.Fatalf("unknown op %s", op)
			}
			requireInStep(rt, readHoldings(rt, rdb, prefix), parkers)
		}
	})
}

// TestClaimRefusedWhileLapsed: with liveness on, a replica that never beat, or whose
// liveness ran out, claims, sweeps, adopts and parks nothing (ErrLapsed, not a "try
// again" ErrUnavailable), and everything stays where it was; after a beat it claims
// again. With liveness off nobody needs to beat.
func TestClaimRefusedWhileLapsed(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const period = time.Second
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: time.Hour, Liveness: period})
	lv := ws.Liveness(nil)
	past := redisNow(t, rdb).Add(-time.Second)
	for _, id := range []string{"a", "b", "c", "d"} {
		_, err := ws.Put(ctx, entryAt(id, past))
		require.NoError(t, err)
	}
	requireLapsed := func(err error) {
		t.Helper()
		require.ErrorIs(t, err, store.ErrLapsed)
		require.NotErrorIs(t, err, store.ErrUnavailable)
		require.ErrorContains(t, err, "replica ra is not live")
	}
	_, err := ws.Claim(ctx, []string{"a"}, "ra/1")
	requireLapsed(err)

	_, err = lv.Beat(ctx, "ra")
	require.NoError(t, err)
	for i, id := range []string{"a", "b", "c"} {
		got, err := entriesOf(ws.Claim(ctx, []string{id}, fmt.Sprintf("ra/%d", i+2)))
		require.NoError(t, err)
		require.Len(t, got, 1)
	}
	parked, err := ws.Park(ctx, "g", time.Hour, store.Parked{Claim: store.Claim{ID: "c", Token: "ra/4"}, DueAt: past})
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, parked)
	before := readHoldings(t, rdb, prefix)
	require.Equal(t, []string{"a", "b", "c"}, before.heldBy("ra"))

	waitRedisPast(t, rdb, liveUntil(t, rdb, prefix, "ra").Add(time.Millisecond))
	_, err = ws.Claim(ctx, []string{"d"}, "ra/5")
	requireLapsed(err)
	_, err = ws.ClaimOverdue(ctx, 0, 10, "ra/6")
	requireLapsed(err)
	_, _, err = ws.Adopt(ctx, "g", 10, "ra/7")
	requireLapsed(err)
	_, err = ws.Park(ctx, "g", time.Hour, store.Parked{Claim: store.Claim{ID: "b", Token: "ra/3"}, DueAt: past})
	requireLapsed(err)
	require.Equal(t, before, readHoldings(t, rdb, prefix), "nothing moved")
	waiting, _, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.EqualValues(t, 1, waiting, "d still waits")
	_, err = lv.Beat(ctx, "rb")
	require.NoError(t, err)
	_, left, err := ws.Adopt(ctx, "g", 0, "rb/1")
	require.NoError(t, err)
	require.Equal(t, 1, left, "c still parked")

	beat, err := lv.Beat(ctx, "ra")
	require.NoError(t, err)
	require.True(t, beat.Lapsed)
	got, err := entriesOf(ws.Claim(ctx, []string{"d"}, "ra/8"))
	require.NoError(t, err)
	require.Equal(t, []string{"d"}, ids(got), "live again, it claims")

	off := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: time.Hour})
	_, err = off.Put(ctx, entryAt("e", past))
	require.NoError(t, err)
	got, err = entriesOf(off.Claim(ctx, []string{"e"}, "never-beat/1"))
	require.NoError(t, err)
	require.Equal(t, []string{"e"}, ids(got), "with liveness off, a replica that never beat claims")
}
