package store_test

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestWheelStageReschedule moves an alert in every stage of the wheel stage, earlier and
// later, and checks each refusal changes nothing.
func TestWheelStageReschedule(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour})
	const reach = time.Minute
	now := redisNow(t, rdb)
	for _, id := range []string{"later", "earlier", "far"} {
		_, err := ws.Put(ctx, entryAt(id, now.Add(30*time.Second)))
		require.NoError(t, err)
	}
	for _, id := range []string{"inflight", "done", "recorded", "withheld", "cancelled"} {
		_, err := ws.Put(ctx, entryAt(id, now))
		require.NoError(t, err)
	}
	score := func(id string) time.Time {
		ms, err := rdb.ZScore(ctx, "{"+prefix+"}:due", id).Result()
		require.NoError(t, err)
		return time.UnixMilli(int64(ms))
	}

	// Waiting: later and earlier, both the due index and the entry's own due time.
	for id, to := range map[string]time.Time{"later": now.Add(50 * time.Second), "earlier": now.Add(2 * time.Second)} {
		to = to.Truncate(time.Millisecond)
		got, err := ws.Reschedule(ctx, id, to, reach)
		require.NoError(t, err)
		require.Equal(t, store.Rescheduled{Result: store.RescheduleMoved, DueAt: to}, got, id)
		require.Equal(t, to, score(id), id)
		peeked, err := ws.Peek(ctx, []string{id})
		require.NoError(t, err)
		require.Len(t, peeked, 1)
		want := entryAt(id, to)
		require.Equal(t, want, peeked[0], "the entry is intact, with the new due time")
	}
	// A claim honours the new time by Redis's clock: not before it, then at it.
	claimed, err := ws.Claim(ctx, []string{"earlier"}, tok)
	require.NoError(t, err)
	require.Empty(t, claimed.Entries)
	require.Len(t, claimed.NotDue, 1)
	waitRedisPast(t, rdb, score("earlier"))
	claimed, err = ws.Claim(ctx, []string{"earlier"}, tok)
	require.NoError(t, err)
	require.Len(t, claimed.Entries, 1)
	require.Equal(t, score("later"), now.Add(50*time.Second).Truncate(time.Millisecond))

	// The past means now (Redis's now).
	before := redisNow(t, rdb)
	got, err := ws.Reschedule(ctx, "later", before.Add(-time.Hour), reach)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleMoved, got.Result)
	require.False(t, got.DueAt.Before(before.Truncate(time.Millisecond)), "now, not an hour ago")
	require.WithinDuration(t, before, got.DueAt, 5*time.Second)

	// Farther than the wheel stage holds: the copy to send back to the broker, and
	// nothing changed until it is settled (TestWheelStageRequeue).
	farDue := score("far")
	farTo := redisNow(t, rdb).Add(reach + 5*time.Second).Truncate(time.Millisecond)
	got, err = ws.Reschedule(ctx, "far", farTo, reach)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooFar, got.Result)
	require.NotNil(t, got.Requeue)
	want := entryAt("far", farTo)
	want.Gen = 1
	require.Equal(t, store.Requeue{Entry: want, Gen: 1}, *got.Requeue, "the whole entry, at the new due time")
	require.Equal(t, farDue, score("far"))

	// In flight, delivered, recorded, withheld, cancelled: as a cancel answers.
	_, err = ws.Claim(ctx, []string{"inflight", "done", "recorded", "withheld"}, tok)
	require.NoError(t, err)
	require.NoError(t, release(ctx, ws, "done"))
	_, err = ws.Release(ctx, store.Recorded, store.Claim{ID: "recorded", Token: tok})
	require.NoError(t, err)
	_, err = ws.Release(ctx, store.Withheld, store.Claim{ID: "withheld", Token: tok})
	require.NoError(t, err)
	_, err = ws.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	for id, want := range map[string]store.RescheduleResult{"inflight": store.RescheduleTooLate, "done": store.RescheduleAlreadyDelivered,
		"recorded": store.RescheduleRecorded, "withheld": store.RescheduleWithheld, "cancelled": store.RescheduleCancelled,
		"never": store.RescheduleUnknown} {
		got, err := ws.Reschedule(ctx, id, now.Add(40*time.Second), reach)
		require.NoError(t, err)
		require.Equal(t, store.Rescheduled{Result: want}, got, id)
		require.False(t, want.Moved())
	}
	inflight, err := rdb.ZScore(ctx, "{"+prefix+"}:inflight", "inflight").Result()
	require.NoError(t, err)
	require.NotZero(t, inflight, "still in flight")
	n, err := rdb.ZCard(ctx, "{"+prefix+"}:due").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n, "later and far wait; no refused id came back to the due index")
}

// TestWheelStageRescheduleHopping moves an alert that is hopping through the broker: to
// the due time its message carries or later, the record decides where Put routes it
// when it reaches the wheel stage; earlier is refused, naming the carried due time (the
// hops lead there, and no arrival reads the record on the way).
func TestWheelStageRescheduleHopping(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour})
	now := redisNow(t, rdb)
	due := now.Add(10 * time.Minute).Truncate(time.Millisecond)
	for _, id := range []string{"later", "back", "early"} {
		require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: id, Due: due, Target: "ops", Hops: 1, Delay: 2 * time.Minute})) // back in about 2 minutes
	}

	later := due.Add(time.Hour)
	got, err := ws.Reschedule(ctx, "later", later, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleHopMoved, DueAt: later}, got)
	ttl, err := rdb.PTTL(ctx, "{"+prefix+"}:resched:later").Result()
	require.NoError(t, err)
	require.InDelta(t, (2 * time.Hour).Seconds(), ttl.Seconds(), 5, "the record lives as long as a tombstone")
	// A hop noted after the move keeps the record's due time in the trace.
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "later", Due: due, Target: "ops", Hops: 2, Delay: 2 * time.Minute}))
	st, err := ws.Inspect(ctx, "later")
	require.NoError(t, err)
	require.Equal(t, later, st.DueAt, "the trace shows the new due time")

	// Moved later, then back towards the carried due time: accepted down to it.
	_, err = ws.Reschedule(ctx, "back", later, time.Minute)
	require.NoError(t, err)
	back := due.Add(time.Minute)
	got, err = ws.Reschedule(ctx, "back", back, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleHopMoved, DueAt: back}, got)
	got, err = ws.Reschedule(ctx, "back", due.Add(-time.Second), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleInHop, DueAt: due}, got, "before the carried due time, after a move")

	// Before the carried due time: refused, naming it.
	got, err = ws.Reschedule(ctx, "early", now.Add(5*time.Minute), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleInHop, DueAt: due}, got)
	_, ok, err := ws.RescheduledDue(ctx, "early")
	require.NoError(t, err)
	require.False(t, ok, "nothing recorded")

	for id, want := range map[string]time.Time{"later": later, "back": back} {
		at, ok, err := ws.RescheduledDue(ctx, id)
		require.NoError(t, err)
		require.True(t, ok)
		require.Equal(t, want, at)
		// An arrival with the old due time is refused; with the record's, stored.
		res, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
		require.Equal(t, store.PutMoved, res, id)
		res, err = ws.Put(ctx, entryAt(id, want))
		require.NoError(t, err)
		require.Equal(t, store.PutStored, res, id)
		st, err := ws.Inspect(ctx, id)
		require.NoError(t, err)
		require.Equal(t, want, st.NextDue)
		require.Equal(t, want, st.DueAt, "the trace shows the new due time")
	}
	// Once waiting, it moves in the wheel stage, and the record follows, so a late copy
	// of an old hop is still routed by the latest time.
	latest := now.Add(20 * time.Second).Truncate(time.Millisecond)
	got, err = ws.Reschedule(ctx, "back", latest, time.Hour)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleMoved, DueAt: latest}, got)
	at, _, err := ws.RescheduledDue(ctx, "back")
	require.NoError(t, err)
	require.Equal(t, latest, at)
}

// TestWheelStageRecallsAHoppingAlert moves a hopping alert earlier than its message
// carries when its trace names its last hop's message: the answer is a generation and
// that message to read back (Recall), and nothing changes until the copy's generation
// is settled; committed, the move is on the record (its author, both times), the list
// of pending alerts has the new time, the copy of the old generation is stale (its hop
// notes leave the trace alone, its arrival is dropped) and the new copy is the alert.
// Without a message to read back (a hop noted by an earlier release) it is refused as
// before.
func TestWheelStageRecallsAHoppingAlert(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour})
	now := redisNow(t, rdb)
	due := now.Add(10 * time.Minute).Truncate(time.Millisecond)
	for _, id := range []string{"recall", "refused", "old-release"} {
		msg := "OM-" + id
		if id == "old-release" {
			msg = ""
		}
		require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: id, Due: due, Target: "ops", Hops: 1, Delay: 2 * time.Minute, Msg: msg}))
	}
	soon := now.Add(5 * time.Second).Truncate(time.Millisecond)
	got, err := ws.Reschedule(store.WithAuthor(ctx, "ana"), "recall", soon, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleInHop, DueAt: due,
		Recall: &store.Recall{ID: "recall", Gen: 1, Msg: "OM-recall", DueAt: soon}}, got)
	st, err := ws.Inspect(ctx, "recall")
	require.NoError(t, err)
	require.Equal(t, due, st.DueAt, "nothing moved before the settle")
	require.Zero(t, st.MoveCount)

	// Until it is settled, notes of the copy (and of any generation no reschedule
	// allocated) leave the trace alone, and a generation never allocated is stale.
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "recall", Due: soon, Target: "ops", Hops: 2, Delay: time.Second, Msg: "OM-undecided", Gen: 1}))
	forged := entryAt("recall", soon)
	forged.Gen = 99
	put, err := ws.Put(ctx, forged)
	require.NoError(t, err)
	require.Equal(t, store.PutStale, put, "a generation no reschedule allocated cannot displace the alert")

	// The copy arrives first and settles itself (naming no one): the move is by who asked
	// for it; the rescheduler's settle then learns the decision.
	res, err := ws.SettleRequeue(ctx, "recall", 1, soon, true)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleRequeued, DueAt: soon}, res)
	moved, err := ws.MovedTo(ctx, "recall")
	require.NoError(t, err)
	require.Equal(t, soon, moved, "a move by someone named, before the rescheduler's own settle")
	res, err = ws.SettleRequeue(store.WithAuthor(ctx, "ana"), "recall", 1, soon, true)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleRequeued, DueAt: soon}, res)
	st, err = ws.Inspect(ctx, "recall")
	require.NoError(t, err)
	require.Equal(t, soon, st.DueAt)
	require.Equal(t, due, st.FirstDueAt, "the first due time is kept")
	require.Len(t, st.Moves, 1)
	require.Equal(t, store.Move{At: st.Moves[0].At, From: due, To: soon, By: "ana"}, st.Moves[0])
	page, err := ws.Pending(ctx, store.PendingQuery{})
	require.NoError(t, err)
	listed := map[string]time.Time{}
	for _, p := range page.Alerts {
		listed[p.ID] = p.DueAt
	}
	require.Equal(t, map[string]time.Time{"recall": soon, "refused": due, "old-release": due}, listed)

	// The old copy hops on: its notes are a stale generation's, and leave the trace alone.
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "recall", Due: due, Target: "ops", Hops: 2, Delay: 2 * time.Minute, Msg: "OM-stale"}))
	// Nor do the notes of another principal's message with the same id.
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "recall", Due: soon, Target: "ops", Hops: 2, Delay: 2 * time.Minute,
		Msg: "OM-mallory", Gen: 1, Principal: "mallory"}))
	om, err := rdb.HGet(ctx, "{"+prefix+"}:trace:recall", "om").Result()
	require.NoError(t, err)
	require.Equal(t, "OM-recall", om)
	// The new copy's hop is noted; its arrival is stored, the old copy's is dropped.
	copyAt := entryAt("recall", soon)
	copyAt.Gen = 1
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "recall", Due: soon, Target: "ops", Hops: 2, Delay: time.Second, Msg: "OM-copy", Gen: 1}))
	om, err = rdb.HGet(ctx, "{"+prefix+"}:trace:recall", "om").Result()
	require.NoError(t, err)
	require.Equal(t, "OM-copy", om)
	put, err = ws.Put(ctx, copyAt)
	require.NoError(t, err)
	require.Equal(t, store.PutStored, put)
	put, err = ws.Put(ctx, entryAt("recall", due))
	require.NoError(t, err)
	require.Equal(t, store.PutStale, put)

	// A refused settle (the publish failed) changes nothing; the next move asks again.
	got, err = ws.Reschedule(ctx, "refused", soon, time.Minute)
	require.NoError(t, err)
	require.NotNil(t, got.Recall)
	res, err = ws.SettleRequeue(ctx, "refused", got.Recall.Gen, soon, false)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooFar, res.Result)
	st, err = ws.Inspect(ctx, "refused")
	require.NoError(t, err)
	require.Equal(t, due, st.DueAt)
	require.Zero(t, st.MoveCount)
	again, err := ws.Reschedule(ctx, "refused", soon, time.Minute)
	require.NoError(t, err)
	require.Equal(t, got.Recall.Gen+1, again.Recall.Gen)

	// Noted without its message: refused, naming the carried time.
	got, err = ws.Reschedule(ctx, "old-release", soon, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleInHop, DueAt: due}, got)
}

// TestWheelStageRescheduleRacesTheClaim moves alerts at the very moment they fall due,
// while a claimer takes them, many rounds: each alert is claimed exactly once, and never
// before the due time the reschedule answered (or, refused, its own).
func TestWheelStageRescheduleRacesTheClaim(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{})
	const rounds = 100
	for round := range rounds {
		id := fmt.Sprintf("race-%d", round)
		due := redisNow(t, rdb).Add(5 * time.Millisecond).Truncate(time.Millisecond)
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
		var (
			wg      sync.WaitGroup
			moved   store.Rescheduled
			claims  []time.Time // Redis now right after each claim that took it
			claimer = fmt.Sprintf("claim-%d", round)
		)
		to := due.Add(30 * time.Millisecond)
		wg.Add(2)
		go func() {
			defer wg.Done()
			waitRedisPast(t, rdb, due.Add(-time.Millisecond))
			var err error
			moved, err = ws.Reschedule(ctx, id, to, time.Minute)
			require.NoError(t, err)
		}()
		go func() {
			defer wg.Done()
			// Past the new due time too: a second claim would show a double delivery.
			end, deadline := to.Add(100*time.Millisecond), time.Now().Add(10*time.Second)
			for (len(claims) == 0 || redisNow(t, rdb).Before(end)) && time.Now().Before(deadline) {
				c, err := ws.Claim(ctx, []string{id}, claimer)
				require.NoError(t, err)
				if len(c.Entries) > 0 {
					claims = append(claims, redisNow(t, rdb))
					require.NoError(t, release(ctx, ws, id))
					claimer += "-again"
				}
			}
		}()
		wg.Wait()
		require.Len(t, claims, 1, "round %d: claimed %d times (reschedule %s)", round, len(claims), moved.Result)
		switch moved.Result {
		case store.RescheduleMoved:
			// The time asked, or Redis's now when a stalled machine asked it after it passed.
			require.False(t, moved.DueAt.Before(to), "round %d: moved to %s, before the %s asked", round, moved.DueAt, to)
			require.False(t, claims[0].Before(moved.DueAt), "round %d: claimed %s before its new due time", round, moved.DueAt.Sub(claims[0]))
		case store.RescheduleTooLate, store.RescheduleAlreadyDelivered:
			require.False(t, claims[0].Before(due), "round %d: claimed early", round)
		default:
			t.Fatalf("round %d: unexpected answer %s", round, moved.Result)
		}
	}
}

// TestFailedSendsReschedule moves a pending row's next attempt, ends a claim that did not
// confirm, and refuses a confirmed row and rows that are not pending.
func TestFailedSendsReschedule(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	pending := record(t, fs, store.NewFailedSend{MessageID: "r-pending", Target: "ops", NextAttemptAt: time.Now()})

	// Claimed but not confirmed: the reschedule wins, and the claim cannot send it.
	claimed, err := fs.ClaimDue(ctx, 10, "job-1", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	to := time.Now().Add(time.Hour).Truncate(time.Microsecond)
	got, err := fs.Reschedule(ctx, "r-pending", to)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRowMoved, got.Result)
	require.Equal(t, []int64{pending}, got.Rows)
	require.True(t, to.Equal(got.DueAt), "%s, want %s", got.DueAt, to)
	require.ErrorIs(t, fs.Confirm(ctx, pending, "job-1", 0), store.ErrNotHeld)
	row, err := fs.Get(ctx, pending)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, row.Status)
	require.True(t, to.Equal(*row.NextAttemptAt))
	require.Nil(t, row.ClaimedBy)
	claimed, err = fs.ClaimDue(ctx, 10, "job-2", nil)
	require.NoError(t, err)
	require.Empty(t, claimed, "not due before the new time")

	// Earlier, into the past: due now, by Postgres's clock.
	got, err = fs.Reschedule(ctx, "r-pending", time.Now().Add(-time.Hour))
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRowMoved, got.Result)
	require.WithinDuration(t, time.Now(), got.DueAt, 5*time.Second)
	claimed, err = fs.ClaimDue(ctx, 10, "job-3", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)

	// Confirmed: its request may be in flight.
	require.NoError(t, fs.Confirm(ctx, pending, "job-3", 0))
	got, err = fs.Reschedule(ctx, "r-pending", to)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleTooLate, Rows: []int64{pending}}, got)

	// Dead, delivered, cancelled, none.
	dead := record(t, fs, store.NewFailedSend{MessageID: "r-dead", Target: "ops", NextAttemptAt: time.Now()})
	claimed, err = fs.ClaimDue(ctx, 10, "job-4", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, fs.MarkDead(ctx, dead, "job-4", 20, store.FailedAttempt{Class: "transient"}))
	delivered := record(t, fs, store.NewFailedSend{MessageID: "r-delivered", Target: "ops", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(t, fs.MarkDelivered(ctx, delivered))
	cancelled := record(t, fs, store.NewFailedSend{MessageID: "r-cancelled", Target: "ops", NextAttemptAt: time.Now().Add(time.Hour)})
	_, err = fs.Cancel(ctx, "r-cancelled", store.CancelNote{By: "test"})
	require.NoError(t, err)
	for id, want := range map[string]store.Rescheduled{
		"r-dead":      {Result: store.RescheduleNotPending, Rows: []int64{dead}},
		"r-delivered": {Result: store.RescheduleAlreadyDelivered, Rows: []int64{delivered}},
		"r-cancelled": {Result: store.RescheduleCancelled, Rows: []int64{cancelled}},
		"r-never":     {},
	} {
		got, err := fs.Reschedule(ctx, id, to)
		require.NoError(t, err)
		require.Equal(t, want, got, id)
	}
}

// TestWheelStageRequeue sends alerts waiting in the wheel stage back to the broker
// (a reschedule beyond the stage's reach), settling their generation at every point a
// rescheduler can stop: once settled exactly one copy can be stored, whichever of the
// rescheduler and the arriving copy settles first, and a refused or unsettled
// generation leaves the entry as it was.
func TestWheelStageRequeue(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour})
	const reach = time.Minute
	now := redisNow(t, rdb)
	old := now.Add(30 * time.Second).Truncate(time.Millisecond)
	far := now.Add(time.Hour).Truncate(time.Millisecond)
	ids := []string{"commit", "arrive-first", "refuse", "crash-before-publish", "claimed", "twice", "cancelled", "delivered-long-ago"}
	for _, id := range ids {
		_, err := ws.Put(ctx, entryAt(id, old))
		require.NoError(t, err)
	}
	requeue := func(id string) store.Requeue {
		got, err := ws.Reschedule(ctx, id, far, reach)
		require.NoError(t, err)
		require.Equal(t, store.RescheduleTooFar, got.Result, id)
		require.NotNil(t, got.Requeue, id)
		return *got.Requeue
	}
	waiting := func(id string) bool {
		_, err := rdb.ZScore(ctx, "{"+prefix+"}:due", id).Result()
		return err == nil
	}
	put := func(id string, due time.Time, gen int64) store.PutResult { return putGen(t, ws, id, due, gen) }

	// Published, then settled: the waiting entry is gone, the new generation is the
	// alert; the old one (a redelivered copy of the original message) is stale, the new
	// one is stored once.
	q := requeue("commit")
	require.Equal(t, int64(1), q.Gen)
	got, err := ws.SettleRequeue(ctx, "commit", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleRequeued, DueAt: far}, got)
	require.False(t, waiting("commit"))
	st, err := ws.Inspect(ctx, "commit")
	require.NoError(t, err)
	require.Equal(t, "hopping", st.Stage)
	require.Equal(t, far, st.DueAt)
	r, err := ws.Routing(ctx, "commit")
	require.NoError(t, err)
	require.Equal(t, store.Routing{Due: far, Live: 1, Decided: 1}, r)
	require.Equal(t, store.PutStale, put("commit", old, 0))
	require.Equal(t, store.PutStored, put("commit", far, 1))
	require.Equal(t, store.PutDuplicate, put("commit", far, 1))
	again, err := ws.SettleRequeue(ctx, "commit", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, got, again, "settling twice answers the same")

	// Crash after the publish: the copy arrives unsettled (Put says so), the scheduler
	// settles it, and the rescheduler's late settle learns the outcome.
	q = requeue("arrive-first")
	require.Equal(t, store.PutUndecided, put("arrive-first", far, q.Gen))
	got, err = ws.SettleRequeue(ctx, "arrive-first", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRequeued, got.Result)
	require.Equal(t, store.PutStored, put("arrive-first", far, q.Gen))
	got, err = ws.SettleRequeue(ctx, "arrive-first", q.Gen, far, false)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRequeued, got.Result, "a publish error reported late does not undo the move")

	// The publish failed: refused, the entry waits at its old time; a copy that did land
	// after all is stale.
	q = requeue("refuse")
	got, err = ws.SettleRequeue(ctx, "refuse", q.Gen, far, false)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooFar, got.Result)
	require.True(t, waiting("refuse"))
	require.Equal(t, store.PutStale, put("refuse", far, q.Gen))
	got, err = ws.SettleRequeue(ctx, "refuse", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooLate, got.Result, "refused once, refused for good")
	require.True(t, waiting("refuse"))

	// Crash before the publish: only a generation was allocated; the entry waits, and the
	// next requeue takes a newer generation.
	q = requeue("crash-before-publish")
	require.True(t, waiting("crash-before-publish"))
	require.Equal(t, store.PutDuplicate, put("crash-before-publish", old, 0), "the waiting copy is still the live one")
	q2 := requeue("crash-before-publish")
	require.Greater(t, q2.Gen, q.Gen)

	// Claimed between the publish and the settle: too late, the new copy is dropped.
	q = requeue("claimed")
	_, err = rdb.ZAdd(ctx, "{"+prefix+"}:due", redis.Z{Score: float64(now.UnixMilli()), Member: "claimed"}).Result()
	require.NoError(t, err)
	claimed, err := ws.Claim(ctx, []string{"claimed"}, tok)
	require.NoError(t, err)
	require.Len(t, claimed.Entries, 1)
	got, err = ws.SettleRequeue(ctx, "claimed", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooLate, got.Result)
	require.Equal(t, store.PutStale, put("claimed", far, q.Gen))

	// Two requeues of one alert: the later settle wins, the copy of the other is stale.
	q = requeue("twice")
	q2 = requeue("twice")
	got, err = ws.SettleRequeue(ctx, "twice", q2.Gen, far.Add(time.Minute), true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRequeued, got.Result)
	got, err = ws.SettleRequeue(ctx, "twice", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooLate, got.Result)
	require.Equal(t, store.PutStale, put("twice", far, q.Gen))
	require.Equal(t, store.PutStored, put("twice", far.Add(time.Minute), q2.Gen))

	// Cancelled meanwhile: refused as cancelled.
	q = requeue("cancelled")
	_, err = ws.Cancel(ctx, "cancelled")
	require.NoError(t, err)
	got, err = ws.SettleRequeue(ctx, "cancelled", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleCancelled, got.Result)
	require.Equal(t, store.PutStale, put("cancelled", far, q.Gen))

	// Not settled, the original delivered at its old time, and its done marker and trace
	// expired (doneTTL) before the copy, due far later, arrives: the copy is refused, not
	// sent again. (It was committed as if the alert were still hopping.)
	q = requeue("delivered-long-ago")
	_, err = rdb.ZRem(ctx, "{"+prefix+"}:due", "delivered-long-ago").Result()
	require.NoError(t, err)
	require.NoError(t, rdb.HDel(ctx, "{"+prefix+"}:entries", "delivered-long-ago").Err())
	require.NoError(t, rdb.Del(ctx, "{"+prefix+"}:trace:delivered-long-ago").Err())
	require.Equal(t, store.PutUndecided, put("delivered-long-ago", far, q.Gen))
	got, err = ws.SettleRequeue(ctx, "delivered-long-ago", q.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooLate, got.Result, "nothing says the alert still hops: the copy is not the alert")
	require.Equal(t, store.PutStale, put("delivered-long-ago", far, q.Gen))
}

// The last move accepted wins: a move answered "moved" or "hop moved" refuses an
// earlier move's generation that is not settled yet, whose copy would otherwise have
// undone it (the alert sent at the earlier move's time, or a move within reach dropped);
// and it keeps the generation record as long as the reschedule record, so that a copy
// hopping on past the record's first lifetime is still its alert's (it was dropped as
// stale, the alert lost).
func TestTheLastMoveAcceptedWins(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{CancelTTL: 2 * time.Hour, Shards: 1}) // one shard: its keys are named below
	const reach = time.Minute
	now := redisNow(t, rdb)
	old := now.Add(30 * time.Second).Truncate(time.Millisecond)
	far, farther := now.Add(time.Hour).Truncate(time.Millisecond), now.Add(90*time.Minute).Truncate(time.Millisecond)
	put := func(id string, due time.Time, gen int64) store.PutResult { return putGen(t, ws, id, due, gen) }
	reschedule := func(id string, due time.Time) store.Rescheduled {
		got, err := ws.Reschedule(ctx, id, due, reach)
		require.NoError(t, err)
		return got
	}

	// A move far (a copy of generation 1 on its way), then one within reach, answered
	// moved: the copy's settle is too late, and the copy is stale.
	require.Equal(t, store.PutStored, put("near-wins", old, 0))
	q := reschedule("near-wins", far)
	require.Equal(t, store.RescheduleTooFar, q.Result)
	soon := now.Add(40 * time.Second).Truncate(time.Millisecond)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleMoved, DueAt: soon}, reschedule("near-wins", soon))
	got, err := ws.SettleRequeue(ctx, "near-wins", q.Requeue.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleTooLate, got.Result, "the move within reach was the last accepted")
	require.Equal(t, store.PutStale, put("near-wins", far, q.Requeue.Gen))
	st, err := ws.Inspect(ctx, "near-wins")
	require.NoError(t, err)
	require.Equal(t, soon, st.DueAt)

	// Settled far and hopping; its generation record near its end; moved farther (hop
	// moved): the record lives as long as the move's, and the copy, when it arrives, is
	// the alert.
	require.Equal(t, store.PutStored, put("outlives", old, 0))
	q = reschedule("outlives", far)
	got, err = ws.SettleRequeue(ctx, "outlives", q.Requeue.Gen, far, true)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRequeued, got.Result)
	gen := "{" + prefix + "}:gen:outlives"
	require.NoError(t, rdb.PExpire(ctx, gen, time.Second).Err()) // as if most of its lifetime had passed
	require.Equal(t, store.Rescheduled{Result: store.RescheduleHopMoved, DueAt: farther}, reschedule("outlives", farther))
	ttl, err := rdb.PTTL(ctx, gen).Result()
	require.NoError(t, err)
	require.Greater(t, ttl, time.Hour, "the generation record is kept with the move's record")
	require.Equal(t, store.PutMoved, put("outlives", far, q.Requeue.Gen), "its copy arrives: routed to the move's time")
}

// A move of a waiting alert is on its record (the due time it was accepted with, each
// move with its time and author, oldest first) and is announced on the moves channel
// the moment it lands, with the new due time.
func TestRescheduleIsRecordedAndAnnounced(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, ws := newWheelStage(t, store.WheelStageOptions{})
	subCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	moves := ws.Moves(subCtx)
	first := time.Now().Add(45 * time.Second).Truncate(time.Millisecond)
	_, err := ws.Put(ctx, entryAt("mv", first))
	require.NoError(t, err)
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "mv", Due: first, Target: "ops"})) // the trace a consumer starts

	// The subscription is live once a move sent after it arrives: move until one does.
	var got store.Moved
	second := first.Add(-40 * time.Second)
	require.Eventually(t, func() bool {
		res, err := ws.Reschedule(store.WithAuthor(ctx, "alice"), "mv", second, time.Minute)
		require.NoError(t, err)
		require.Equal(t, store.RescheduleMoved, res.Result)
		select {
		case got = <-moves:
			return true
		case <-time.After(100 * time.Millisecond):
			return false
		}
	}, 10*time.Second, time.Millisecond)
	require.Equal(t, store.Moved{ID: "mv", DueAt: second}, normalizeMoved(got))
	third := second.Add(time.Second)
	_, err = ws.Reschedule(store.WithAuthor(ctx, "bob"), "mv", third, time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.Moved{ID: "mv", DueAt: third}, normalizeMoved(<-moves))

	st, err := ws.Inspect(ctx, "mv")
	require.NoError(t, err)
	require.True(t, st.FirstDueAt.Equal(first), "accepted due %s, recorded %s", first, st.FirstDueAt)
	require.True(t, st.DueAt.Equal(third))
	require.GreaterOrEqual(t, st.MoveCount, 2)
	last := st.Moves[len(st.Moves)-1]
	require.Equal(t, "bob", last.By)
	require.True(t, last.From.Equal(second) && last.To.Equal(third), "last move %+v", last)
	require.Equal(t, "alice", st.Moves[0].By)
	require.True(t, st.Moves[0].From.Equal(first), "the first move starts from the accepted due time")
}

// normalizeMoved drops the monotonic reading and location of m's time.
func normalizeMoved(m store.Moved) store.Moved {
	m.DueAt = time.UnixMilli(m.DueAt.UnixMilli())
	return m
}

// putGen puts the copy of generation gen of the alert id, due at due, and returns how
// the put went.
func putGen(t *testing.T, ws *store.WheelStage, id string, due time.Time, gen int64) store.PutResult {
	t.Helper()
	e := entryAt(id, due)
	e.Gen = gen
	res, err := ws.Put(context.Background(), e)
	require.NoError(t, err)
	return res
}
