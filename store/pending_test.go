package store_test

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/store"
)

// allPending pages through every pending alert q selects, limit per page, and returns
// them in order.
func allPending(t require.TestingT, ws *store.WheelStage, q store.PendingQuery) []store.Pending {
	ctx := context.Background()
	var out []store.Pending
	for pages := 0; ; pages++ {
		require.Less(t, pages, 1000, "paging does not end")
		p, err := ws.Pending(ctx, q)
		require.NoError(t, err)
		out = append(out, p.Alerts...)
		if p.Next == "" {
			return out
		}
		q.Cursor = p.Next
	}
}

// The index of pending alerts stays exact under any sequence of hop notes, puts,
// deliveries and cancels, on three shards: every page lists, in due order, exactly the
// alerts the model says are pending (hopping or waiting), with their targets, and the
// counts by target agree. The pages are small (two alerts), so paging crosses shards and
// alerts due at the same instant.
func TestPendingIndexIsExact(t *testing.T) {
	t.Parallel()
	rapid.Check(t, func(rt *rapid.T) {
		ctx := context.Background()
		_, _, ws := newWheelStage(t, store.WheelStageOptions{Shards: 3})
		const n = 8
		base := time.Now().Add(-time.Minute).Truncate(time.Millisecond)
		type alert struct {
			id, target string
			due        time.Time
		}
		alerts := make([]alert, n)
		for i := range alerts {
			// Three due times: several alerts share one, and the index orders them by id.
			alerts[i] = alert{id: fmt.Sprintf("a%d", i), target: []string{"ops", "db"}[i%2], due: base.Add(time.Duration(i%3) * time.Second)}
		}
		const (
			none = iota
			hopping
			waiting
			done
			cancelled
		)
		state := make([]int, n)
		for step := range rapid.IntRange(1, 30).Draw(rt, "steps") {
			i := rapid.IntRange(0, n-1).Draw(rt, fmt.Sprintf("alert %d", step))
			a := alerts[i]
			switch op := rapid.SampledFrom([]string{"hop", "put", "deliver", "cancel"}).Draw(rt, fmt.Sprintf("op %d", step)); op {
			case "hop":
				require.NoError(rt, ws.TraceHop(ctx, store.HopNote{ID: a.id, Target: a.target, Due: a.due, Hops: 1, Delay: time.Minute}))
				if state[i] == none {
					state[i] = hopping
				}
			case "put":
				e := entryAt(a.id, a.due)
				e.Target = a.target
				_, err := ws.Put(ctx, e)
				require.NoError(rt, err)
				if state[i] == none || state[i] == hopping {
					state[i] = waiting
				}
			case "deliver":
				c, err := ws.Claim(ctx, []string{a.id}, tok)
				require.NoError(rt, err)
				if len(c.Entries) == 1 {
					_, err = ws.Release(ctx, store.Delivered, store.Claim{ID: a.id, Token: tok})
					require.NoError(rt, err)
				}
				if state[i] == waiting {
					require.Len(rt, c.Entries, 1)
					state[i] = done
				}
			case "cancel":
				_, err := ws.Cancel(ctx, a.id)
				require.NoError(rt, err)
				if state[i] != done {
					state[i] = cancelled
				}
			}
			var want []store.Pending
			byTarget := map[string]int64{}
			for k, s := range state {
				if s == hopping || s == waiting {
					stage := store.StageHopping
					if s == waiting {
						stage = store.StageWaiting
					}
					want = append(want, store.Pending{ID: alerts[k].id, Target: alerts[k].target, DueAt: alerts[k].due, Stage: stage})
					byTarget[alerts[k].target]++
				}
			}
			slices.SortFunc(want, func(a, b store.Pending) int { return cmp.Or(a.DueAt.Compare(b.DueAt), cmp.Compare(a.ID, b.ID)) })
			// The counts first: a list that a page mends (an ended alert left in it) must
			// not hide a script that failed to unlist.
			c, err := ws.CountPending(ctx, time.Now(), 2)
			require.NoError(rt, err)
			require.Equal(rt, int64(len(want)), c.Total, "step %d", step)
			require.Equal(rt, byTarget, c.ByTarget, "step %d", step)
			require.Equal(rt, int64(len(want)), c.Overdue, "every alert of the model is due a minute ago")
			got := allPending(rt, ws, store.PendingQuery{Limit: 2})
			for k := range got {
				got[k].DueAt = got[k].DueAt.Local()
				got[k].Hops = 0
			}
			for k := range want {
				want[k].DueAt = want[k].DueAt.Local()
			}
			require.Equal(rt, want, got, "step %d", step)
		}
	})
}

// The list filters by target, principal and due time, shows what the hop note or the
// put said of each alert, follows a reschedule, and costs Redis about a hundred bytes
// per pending alert beyond its trace.
func TestPendingListsAndCounts(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{})
	now := time.Now().Truncate(time.Millisecond)
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "far", Target: "ops", Due: now.Add(3 * time.Hour), Hops: 2,
		Delay: time.Hour, Priority: "high", Principal: "billing"}))
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "mid", Target: "db", Due: now.Add(90 * time.Minute), Hops: 1,
		Delay: time.Hour, Principal: "orders"}))
	e := entryAt("near", now.Add(30*time.Second))
	e.Priority, e.Principal = "low", "billing"
	_, err := ws.Put(ctx, e)
	require.NoError(t, err)

	page, err := ws.Pending(ctx, store.PendingQuery{})
	require.NoError(t, err)
	require.Empty(t, page.Next)
	require.Equal(t, []store.Pending{
		{ID: "near", Target: "ops", DueAt: now.Add(30 * time.Second), Priority: "low", Principal: "billing", Stage: store.StageWaiting},
		{ID: "mid", Target: "db", DueAt: now.Add(90 * time.Minute), Principal: "orders", Stage: store.StageHopping, Hops: 1},
		{ID: "far", Target: "ops", DueAt: now.Add(3 * time.Hour), Priority: "high", Principal: "billing", Stage: store.StageHopping, Hops: 2},
	}, localDues(page.Alerts))

	ids := func(q store.PendingQuery) []string {
		var out []string
		for _, a := range allPending(t, ws, q) {
			out = append(out, a.ID)
		}
		return out
	}
	require.Equal(t, []string{"near", "far"}, ids(store.PendingQuery{Target: "ops"}))
	require.Equal(t, []string{"near", "far"}, ids(store.PendingQuery{Principal: "billing"}))
	require.Equal(t, []string{"mid"}, ids(store.PendingQuery{DueAfter: now.Add(time.Minute), DueBefore: now.Add(3 * time.Hour)}))
	require.Empty(t, ids(store.PendingQuery{Target: "nobody"}))
	_, err = ws.Pending(ctx, store.PendingQuery{Cursor: "not-a-cursor"})
	require.ErrorIs(t, err, store.ErrBadCursor)

	c, err := ws.CountPending(ctx, now, 3)
	require.NoError(t, err)
	require.Equal(t, store.PendingCounts{Total: 3, ByTarget: map[string]int64{"ops": 2, "db": 1}, ByHour: []int64{1, 1, 0}, Later: 1}, c)
	require.Equal(t, []string{"ops", "db"}, c.SortedTargets())

	// A reschedule of the hopping alert moves it in the list; a cancel unlists it.
	r, err := ws.Reschedule(ctx, "far", now.Add(5*time.Hour), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleHopMoved, r.Result)
	require.Equal(t, []string{"near", "mid", "far"}, ids(store.PendingQuery{}))
	got := allPending(t, ws, store.PendingQuery{Target: "ops", DueAfter: now.Add(4 * time.Hour)})
	require.Len(t, got, 1)
	require.Equal(t, now.Add(5*time.Hour).UnixMilli(), got[0].DueAt.UnixMilli())
	_, err = ws.Cancel(ctx, "mid")
	require.NoError(t, err)
	require.Equal(t, []string{"near", "far"}, ids(store.PendingQuery{}))
	// A late hop note of the cancelled alert does not list it again.
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "mid", Target: "db", Due: now.Add(90 * time.Minute), Hops: 2, Delay: time.Hour}))
	require.Equal(t, []string{"near", "far"}, ids(store.PendingQuery{}))

	// An alert rejected after it hopped is unlisted, and counted no more.
	require.NoError(t, ws.Unlist(ctx, "far", "db")) // a message of its id for another target: not it
	require.Equal(t, []string{"near", "far"}, ids(store.PendingQuery{}))
	require.NoError(t, ws.Unlist(ctx, "far", "ops"))
	require.NoError(t, ws.Unlist(ctx, "never-listed", ""))
	require.Equal(t, []string{"near"}, ids(store.PendingQuery{}))
	c, err = ws.CountPending(ctx, now, 0)
	require.NoError(t, err)
	require.Equal(t, store.PendingCounts{Total: 1, ByTarget: map[string]int64{"ops": 1}, ByHour: []int64{}, Later: 1}, c)

	// What the index costs: 1,000 more pending alerts.
	before, err := rdb.MemoryUsage(ctx, "{"+prefix+"}:pending", 0).Result()
	require.NoError(t, err)
	for i := range 1000 {
		require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: fmt.Sprintf("order-%06d-recheck", i), Target: "ops",
			Due: now.Add(time.Duration(i) * time.Minute), Hops: 1, Delay: time.Hour}))
	}
	after, err := rdb.MemoryUsage(ctx, "{"+prefix+"}:pending", 0).Result()
	require.NoError(t, err)
	per := float64(after-before) / 1000
	t.Logf("the index of pending alerts: %.0f bytes per alert (ids of 19 bytes)", per)
	require.Less(t, per, 150.0)
}

// localDues returns ps with their due times in the local zone, to compare with times
// the test made.
func localDues(ps []store.Pending) []store.Pending {
	for k := range ps {
		ps[k].DueAt = ps[k].DueAt.Local()
	}
	return ps
}
