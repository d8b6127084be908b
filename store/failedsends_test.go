package store_test

import (
	"context"
	"fmt"
	"net"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

func ptr[T any](v T) *T { return &v }

func record(t testing.TB, fs *store.FailedSends, in store.NewFailedSend) int64 {
	t.Helper()
	ctx := context.Background()
	if in.ErrorClass == "" && !in.Rejected {
		in.ErrorClass = "transient"
	}
	res, err := fs.Record(ctx, in)
	require.NoError(t, err)
	require.Equal(t, store.RecordInserted, res, "%s recorded before", in.MessageID)
	rows, _, err := fs.List(ctx, store.Filter{Limit: 1})
	require.NoError(t, err)
	require.Equal(t, in.MessageID, rows[0].MessageID)
	return rows[0].ID
}

// A new failure of an RD_ID whose row is from an earlier episode (delivered, rejected,
// dead, discarded) replaces that row instead of vanishing.
func TestFailedSendsRecordReplacesAnEarlierEpisode(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	old := record(t, fs, store.NewFailedSend{MessageID: "order-1", Target: "nobody", Rejected: true,
		ErrorClass: "rejected_unknown_target", LastError: "unknown target"})
	res, err := fs.Record(ctx, store.NewFailedSend{MessageID: "order-1", Target: "ops", Payload: []byte("again"),
		ErrorClass: "throttled", LastError: "send too fast", NextAttemptAt: time.Now(), PartsSent: 1})
	require.NoError(t, err)
	require.Equal(t, store.RecordReplaced, res)
	got, err := fs.Get(ctx, old)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, got.Status, "the new failure is pending for the retry job")
	require.Equal(t, "ops", got.Target)
	require.Equal(t, "throttled", got.ErrorClass)
	require.Equal(t, []byte("again"), got.Payload)
	require.Equal(t, 1, got.PartsSent)
	require.NotNil(t, got.NextAttemptAt)
}

func TestFailedSendsRecordIsIdempotent(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	due := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	in := store.NewFailedSend{
		MessageID:  "m-1",
		Target:     "ops",
		Payload:    []byte(`{"msgtype":"text","text":{"content":"disk full"}}`),
		Properties: map[string]string{"RD_TARGET": "ops", "RD_ID": "m-1"},
		DueAt:      &due,
		ErrorClass: "transient",
		LastError:  "HTTP 503 from DingTalk",
		HTTPStatus: ptr(503),
	}
	res, err := fs.Record(ctx, in)
	require.NoError(t, err)
	require.Equal(t, store.RecordInserted, res)

	in.LastError = "something else"
	res, err = fs.Record(ctx, in)
	require.NoError(t, err)
	require.Equal(t, store.RecordKept, res, "a second Record of the same pending failure is a no-op")

	rows, next, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Zero(t, next)
	require.Len(t, rows, 1)
	got, err := fs.Get(ctx, rows[0].ID)
	require.NoError(t, err)
	require.Equal(t, "m-1", got.MessageID)
	require.Equal(t, store.StatusPending, got.Status)
	require.Equal(t, "HTTP 503 from DingTalk", got.LastError)
	require.Equal(t, in.Payload, got.Payload)
	require.Equal(t, in.Properties, got.Properties)
	require.True(t, due.Equal(*got.DueAt))
	require.Equal(t, 503, *got.HTTPStatus)
	require.Nil(t, got.Errcode)
	require.NotNil(t, got.NextAttemptAt)
	require.Zero(t, got.Attempts)

	res, err = fs.Record(ctx, store.NewFailedSend{MessageID: "bad-1", Payload: []byte{0xff, 0xfe}, Rejected: true, LastError: "unknown target"})
	require.NoError(t, err)
	require.Equal(t, store.RecordInserted, res)
	rows, _, err = fs.List(ctx, store.Filter{Status: store.StatusRejected})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "rejected", rows[0].ErrorClass)
	require.Nil(t, rows[0].NextAttemptAt)
	require.Equal(t, []byte{0xff, 0xfe}, rows[0].Payload)

	_, err = fs.Get(ctx, 999999)
	require.ErrorIs(t, err, store.ErrNotFound)
	_, err = fs.Record(ctx, store.NewFailedSend{ErrorClass: "transient"})
	require.ErrorIs(t, err, store.ErrInvalid)
}

func TestFailedSendsRecordUnavailable(t *testing.T) {
	t.Parallel()
	testenv.PostgresURL(t) // skipped under -short like the other store tests
	pool, err := pgxpool.New(context.Background(), "postgres://rd:pw-secret-9@127.0.0.1:1/rd?connect_timeout=2")
	require.NoError(t, err)
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	_, err = fs.Record(context.Background(), store.NewFailedSend{MessageID: "m", ErrorClass: "transient"})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.NotContains(t, err.Error(), "pw-secret-9")
}

// dbNow reads Postgres's clock, the one claims and backoffs are measured by.
func dbNow(t testing.TB, pool *pgxpool.Pool) time.Time {
	t.Helper()
	var now time.Time
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT clock_timestamp()").Scan(&now))
	return now
}

// A replica claims only the rows of its own targets; the targets of the due rows it
// leaves are listed, and a target's due, unheld pending rows can be given up at once,
// dead with the reason, while a claimed row of it is left to its claim and a row not due
// yet to its time.
func TestFailedSendsClaimOnlyTheirTargets(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	past := time.Now().Add(-time.Minute)
	ops := record(t, fs, store.NewFailedSend{MessageID: "ops-1", Target: "ops", NextAttemptAt: past})
	newt := record(t, fs, store.NewFailedSend{MessageID: "newt-1", Target: "newt", NextAttemptAt: past})
	gone1 := record(t, fs, store.NewFailedSend{MessageID: "gone-1", Target: "gone", NextAttemptAt: past})
	gone2 := record(t, fs, store.NewFailedSend{MessageID: "gone-2", Target: "gone", NextAttemptAt: past})
	goneLater := record(t, fs, store.NewFailedSend{MessageID: "gone-later", Target: "gone", NextAttemptAt: time.Now().Add(time.Hour)})
	record(t, fs, store.NewFailedSend{MessageID: "other-later", Target: "other", NextAttemptAt: time.Now().Add(time.Hour)})

	got, err := fs.ClaimDue(ctx, 10, "b/1", []string{"ops"})
	require.NoError(t, err)
	require.Equal(t, []int64{ops}, rowIDs(got), "B has ops only")
	none, err := fs.ClaimDue(ctx, 10, "b/2", []string{})
	require.NoError(t, err)
	require.Empty(t, none, "no targets, no rows")
	elsewhere, err := fs.PendingElsewhere(ctx, []string{"ops"})
	require.NoError(t, err)
	require.Equal(t, []string{"gone", "newt"}, elsewhere, "the targets of due rows only")

	held, err := fs.ClaimDue(ctx, 1, "a/1", []string{"gone"})
	require.NoError(t, err)
	require.Len(t, held, 1)
	n, err := fs.GiveUpTarget(ctx, "gone", "no replica has it")
	require.NoError(t, err)
	require.Equal(t, 1, n, "the row a claim holds is its claim's to settle")
	for _, id := range []int64{gone1, gone2} {
		r, err := fs.Get(ctx, id)
		require.NoError(t, err)
		if id == held[0].ID {
			require.Equal(t, store.StatusPending, r.Status)
			continue
		}
		require.Equal(t, store.StatusDead, r.Status)
		require.Equal(t, store.ClassUnknownTarget, r.ErrorClass)
		require.Equal(t, "no replica has it", r.LastError)
		require.Nil(t, r.NextAttemptAt)
	}
	r, err := fs.Get(ctx, newt)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, r.Status, "another target's rows are untouched")
	r, err = fs.Get(ctx, goneLater)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, r.Status, "a row not due yet waits for its time")
	all, err := fs.ClaimDue(ctx, 10, "a/2", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{newt}, rowIDs(all), "nil claims any target's")
}

func TestFailedSendsClaimDue(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	a := record(t, fs, store.NewFailedSend{MessageID: "a", NextAttemptAt: now.Add(-2 * time.Minute)})
	b := record(t, fs, store.NewFailedSend{MessageID: "b", NextAttemptAt: now.Add(-time.Minute)})
	record(t, fs, store.NewFailedSend{MessageID: "later", NextAttemptAt: now.Add(time.Hour)})
	record(t, fs, store.NewFailedSend{MessageID: "rej", Rejected: true})

	before := dbNow(t, pool)
	got, err := fs.ClaimDue(ctx, 10, "t1", nil)
	require.NoError(t, err)
	after := dbNow(t, pool)
	require.ElementsMatch(t, []int64{a, b}, rowIDs(got))
	for _, r := range got {
		require.Equal(t, "t1", *r.ClaimedBy)
		require.False(t, r.LeaseUntil.Before(before.Add(fs.ClaimLease())), "the lease runs from Postgres's now")
		require.False(t, r.LeaseUntil.After(after.Add(fs.ClaimLease())))
	}
	again, err := fs.ClaimDue(ctx, 10, "t2", nil)
	require.NoError(t, err)
	require.Empty(t, again, "claimed rows stay hidden during the lease")

	// Outcomes, settled by the claim's holder only.
	require.NoError(t, fs.MarkDelivered(ctx, a))
	attempt := store.FailedAttempt{Class: "transient", LastError: "HTTP 502", HTTPStatus: ptr(502)}
	require.ErrorIs(t, fs.MarkRetry(ctx, b, "t2", 1, 0, attempt), store.ErrNotHeld, "t2 never held b")
	require.NoError(t, fs.MarkRetry(ctx, b, "t1", 1, 0, attempt))
	rb, err := fs.Get(ctx, b)
	require.NoError(t, err)
	require.Equal(t, 1, rb.Attempts)
	require.Equal(t, "HTTP 502", rb.LastError)
	require.Nil(t, rb.ClaimedBy, "settled: the claim ended")
	require.ErrorIs(t, fs.MarkRetry(ctx, b, "t1", 2, 0, attempt), store.ErrNotHeld, "a settled claim settles nothing more")
	got, err = fs.ClaimDue(ctx, 10, "t3", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{b}, rowIDs(got))
	require.NoError(t, fs.MarkDead(ctx, b, "t3", 2, store.FailedAttempt{Class: "payload_permanent", LastError: "errcode 430101", Errcode: ptr(430101)}))
	rb, err = fs.Get(ctx, b)
	require.NoError(t, err)
	require.Equal(t, store.StatusDead, rb.Status)
	require.Equal(t, 430101, *rb.Errcode)
	require.Nil(t, rb.NextAttemptAt)
	ra, err := fs.Get(ctx, a)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, ra.Status)

	// The backoff of MarkRetry runs on Postgres's clock.
	c := record(t, fs, store.NewFailedSend{MessageID: "c", NextAttemptAt: now.Add(-time.Second)})
	_, err = fs.ClaimDue(ctx, 10, "t4", nil)
	require.NoError(t, err)
	before = dbNow(t, pool)
	require.NoError(t, fs.MarkRetry(ctx, c, "t4", 1, time.Hour, store.FailedAttempt{Class: "transient"}))
	after = dbNow(t, pool)
	rc, err := fs.Get(ctx, c)
	require.NoError(t, err)
	require.False(t, rc.NextAttemptAt.Before(before.Add(time.Hour)))
	require.False(t, rc.NextAttemptAt.After(after.Add(time.Hour)))

	// A discarded row is not resurrected by a late MarkRetry.
	d := record(t, fs, store.NewFailedSend{MessageID: "d", NextAttemptAt: now.Add(-time.Second)})
	_, err = fs.ClaimDue(ctx, 10, "t5", nil)
	require.NoError(t, err)
	_, err = fs.Discard(ctx, []int64{d}, "operator gave up")
	require.NoError(t, err)
	require.ErrorIs(t, fs.MarkRetry(ctx, d, "t5", 1, 0, store.FailedAttempt{Class: "transient"}), store.ErrNotHeld)
	rd, err := fs.Get(ctx, d)
	require.NoError(t, err)
	require.Equal(t, store.StatusDiscarded, rd.Status)
}

// The fence of the retry job: a claim whose lease ran out (its replica froze, or waited
// long for a robot) is taken over, and from then on its confirm and its settles fail;
// the confirm renews the lease of the holder and notes the parts delivered whoever
// asks; an operator's retry of a row being sent does not let a second claim take it.
func TestFailedSendsClaimsAreFenced(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.FailedSends(t)
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{ClaimLease: 3 * time.Second})
	ctx := context.Background()
	id := record(t, fs, store.NewFailedSend{MessageID: "z", NextAttemptAt: time.Now().Add(-time.Second)})
	got, err := fs.ClaimDue(ctx, 10, "zombie", nil)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// An operator asks for a retry while the zombie holds it: nobody else may take it.
	retried, err := fs.Retry(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, retried)
	// The lease is long enough that only a machine stalled for seconds between two
	// statements would see it run out here: that fails too, and says so.
	taken, err := fs.ClaimDue(ctx, 10, "other", nil)
	require.NoError(t, err)
	require.Empty(t, taken, "claimed while its lease runs, after an operator's retry (or the machine stalled past the 3s lease)")
	renewed, err := fs.ExtendClaims(ctx, []int64{id, 999999}, "zombie")
	require.NoError(t, err)
	require.Equal(t, []int64{id}, renewed)

	// The zombie freezes past its lease; the sweep of another instance takes the row.
	taken = nil
	for deadline := time.Now().Add(10 * time.Second); len(taken) == 0; time.Sleep(50 * time.Millisecond) {
		require.True(t, time.Now().Before(deadline), "an expired lease was never taken over")
		taken, err = fs.ClaimDue(ctx, 10, "sweeper", nil)
		require.NoError(t, err)
	}
	require.Equal(t, []int64{id}, rowIDs(taken))

	require.ErrorIs(t, fs.Confirm(ctx, id, "zombie", 0), store.ErrNotHeld)
	require.ErrorIs(t, fs.MarkRetry(ctx, id, "zombie", 1, 0, store.FailedAttempt{Class: "transient"}), store.ErrNotHeld)
	require.ErrorIs(t, fs.MarkDead(ctx, id, "zombie", 1, store.FailedAttempt{Class: "transient"}), store.ErrNotHeld)
	renewed, err = fs.ExtendClaims(ctx, []int64{id}, "zombie")
	require.NoError(t, err)
	require.Empty(t, renewed)

	lease := *taken[0].LeaseUntil
	require.NoError(t, fs.Confirm(ctx, id, "sweeper", 2))
	row, err := fs.Get(ctx, id)
	require.NoError(t, err)
	require.True(t, row.LeaseUntil.After(lease), "the confirm renewed the lease")
	require.Equal(t, 2, row.PartsSent)
	// The zombie delivered a third part before it noticed: noted, but still not held.
	require.ErrorIs(t, fs.Confirm(ctx, id, "zombie", 3), store.ErrNotHeld)
	require.NoError(t, fs.Confirm(ctx, id, "sweeper", 1)) // never lowered
	row, err = fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 3, row.PartsSent)
	require.ErrorIs(t, fs.Confirm(ctx, 999999, "sweeper", 0), store.ErrNotFound)
	require.NoError(t, fs.MarkRetry(ctx, id, "sweeper", 1, 0, store.FailedAttempt{Class: "transient", PartsSent: 1}))
	row, err = fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, 3, row.PartsSent, "parts delivered are never lowered by a settle either")
}

func TestFailedSendsConcurrentClaimersNeverShareARow(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	const n = 300
	for i := range n {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprintf("m-%03d", i), ErrorClass: "transient",
			NextAttemptAt: now.Add(-time.Duration(i) * time.Millisecond)})
		require.NoError(t, err)
	}
	var mu sync.Mutex
	seen := map[int64]int{}
	var wg sync.WaitGroup
	for range 4 {
		wg.Go(func() {
			for {
				got, err := fs.ClaimDue(ctx, 7, newToken(), nil)
				if err != nil {
					t.Error(err)
					return
				}
				if len(got) == 0 {
					return
				}
				mu.Lock()
				for _, r := range got {
					seen[r.ID]++
				}
				mu.Unlock()
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, n)
	for id, c := range seen {
		require.Equal(t, 1, c, "row %d claimed %d times", id, c)
	}
}

func TestFailedSendsListFiltersAndPages(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	for i := range 7 {
		target := "ops"
		if i%2 == 1 {
			target = "dev"
		}
		record(t, fs, store.NewFailedSend{MessageID: fmt.Sprintf("m-%d", i), Target: target, ErrorClass: []string{"transient", "throttled"}[i%3/2]})
	}
	var all []int64
	var after int64
	for page := 0; ; page++ {
		rows, next, err := fs.List(ctx, store.Filter{Limit: 3, AfterID: after})
		require.NoError(t, err)
		all = append(all, rowIDs(rows)...)
		if next == 0 {
			break
		}
		require.Less(t, page, 3)
		after = next
	}
	require.Len(t, all, 7)
	require.True(t, slices.IsSortedFunc(all, func(a, b int64) int { return int(b - a) }), "newest first: %v", all)

	rows, _, err := fs.List(ctx, store.Filter{Target: "dev"})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	rows, _, err = fs.List(ctx, store.Filter{ErrorClass: "throttled", Target: "ops"})
	require.NoError(t, err)
	require.Len(t, rows, 1, "m-2 is the one throttled row of ops")
	for _, r := range rows {
		require.Equal(t, "throttled", r.ErrorClass)
		require.Equal(t, "ops", r.Target)
	}
	rows, _, err = fs.List(ctx, store.Filter{Since: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	require.Empty(t, rows)
	rows, _, err = fs.List(ctx, store.Filter{Until: time.Now().Add(time.Hour), Since: time.Now().Add(-time.Hour)})
	require.NoError(t, err)
	require.Len(t, rows, 7)

	_, _, err = fs.List(ctx, store.Filter{Limit: store.MaxListLimit + 1})
	require.ErrorIs(t, err, store.ErrInvalid)

	// Injection attempts are plain values: they match nothing and break nothing.
	for _, evil := range []string{`' OR 1=1 --`, `"; DROP TABLE failed_sends; --`, `ops'; DELETE FROM failed_sends; --`, `%`, `\`} {
		rows, _, err := fs.List(ctx, store.Filter{Target: evil, ErrorClass: evil})
		require.NoError(t, err, evil)
		require.Empty(t, rows, evil)
		_, _, err = fs.List(ctx, store.Filter{Status: store.FailedStatus(evil)})
		require.ErrorIs(t, err, store.ErrInvalid)
		require.NotContains(t, strings.ToUpper(err.Error()), "SELECT")
		changed, err := fs.RetryWhere(ctx, store.StatusDead, evil)
		require.NoError(t, err)
		require.Empty(t, changed)
	}
	var count int
	require.NoError(t, pool.QueryRow(ctx, "SELECT count(*) FROM failed_sends").Scan(&count))
	require.Equal(t, 7, count)
}

// An alert whose id came back after its done marker passed has a row per episode; with
// two of them discarded, a retry of the discarded rows retries its newest (one live row
// per RD_ID), where it failed whole (a unique violation) and retried nothing.
func TestRetryOfAnAlertsDiscardedRowsTakesItsNewest(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	// The ids are this test's own: the table is shared with the package's other tests.
	msg, other := testenv.Unique("episodes-"), testenv.Unique("alone-")
	var rows []int64
	for i := range 2 {
		due := time.Now().Add(time.Duration(i) * time.Hour) // another episode: another due time
		id := record(t, fs, store.NewFailedSend{MessageID: msg, Target: "ops", DueAt: &due, NextAttemptAt: time.Now()})
		_, err := fs.Discard(ctx, []int64{id}, "an earlier episode")
		require.NoError(t, err)
		rows = append(rows, id)
	}
	alone := record(t, fs, store.NewFailedSend{MessageID: other, Target: "ops", NextAttemptAt: time.Now()})
	_, err := fs.Discard(ctx, []int64{alone}, "noise")
	require.NoError(t, err)

	changed, err := fs.Retry(ctx, []int64{rows[0], rows[1], alone})
	require.NoError(t, err)
	require.ElementsMatch(t, []int64{rows[1], alone}, changed, "the alert's newest row, and the other alert's")
	_, err = fs.Discard(ctx, []int64{rows[1], alone}, "again")
	require.NoError(t, err)
	changed, err = fs.RetryWhere(ctx, store.StatusDiscarded, "ops")
	require.NoError(t, err)
	require.Subset(t, changed, []int64{rows[1], alone})
	require.NotContains(t, changed, rows[0])
}

func TestFailedSendsRetryAndDiscardChangeExactlyTheRowsNamed(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	var id []int64
	for i := range 6 {
		id = append(id, record(t, fs, store.NewFailedSend{MessageID: fmt.Sprintf("m-%d", i), Target: []string{"ops", "dev"}[i%2],
			NextAttemptAt: now.Add(time.Hour)}))
	}
	// 0,1,2 dead; 3 delivered; 4,5 pending (due in an hour).
	for _, i := range []int{0, 1, 2} {
		testenv.MakeDead(t, pool, id[i], 20, "transient", "HTTP 503")
	}
	require.NoError(t, fs.MarkDelivered(ctx, id[3]))

	before := time.Now().Truncate(time.Microsecond) // Postgres keeps microseconds
	changed, err := fs.Retry(ctx, []int64{id[0], id[3], id[4], 424242})
	require.NoError(t, err)
	after := time.Now()
	require.Equal(t, []int64{id[0], id[4]}, changed, "delivered and unknown rows do not change")
	r0, err := fs.Get(ctx, id[0])
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, r0.Status)
	require.Equal(t, 20, r0.Attempts, "history is kept")
	require.Equal(t, "HTTP 503", r0.LastError)
	require.False(t, r0.NextAttemptAt.Before(before) || r0.NextAttemptAt.After(after), "due again at %s, not during the retry (%s to %s)",
		*r0.NextAttemptAt, before, after)
	for _, i := range []int{1, 2} {
		r, err := fs.Get(ctx, id[i])
		require.NoError(t, err)
		require.Equal(t, store.StatusDead, r.Status)
	}

	changed, err = fs.RetryWhere(ctx, store.StatusDead, "dev")
	require.NoError(t, err)
	require.Equal(t, []int64{id[1]}, changed)
	_, err = fs.RetryWhere(ctx, store.StatusDelivered, "")
	require.ErrorIs(t, err, store.ErrInvalid)

	_, err = fs.Discard(ctx, []int64{id[2]}, "  ")
	require.ErrorIs(t, err, store.ErrInvalid)
	changed, err = fs.Discard(store.WithAuthor(ctx, "alice"), []int64{id[2], id[3], id[5]}, "noise from the test cluster")
	require.NoError(t, err)
	require.Equal(t, []int64{id[2], id[5]}, changed)
	r5, err := fs.Get(ctx, id[5])
	require.NoError(t, err)
	require.Equal(t, store.StatusDiscarded, r5.Status)
	require.Equal(t, "noise from the test cluster", *r5.DiscardReason)
	require.Equal(t, "alice", *r5.DiscardedBy, "who discarded it")
	require.Nil(t, r5.NextAttemptAt)
	require.Nil(t, r0.RetriedBy, "a retry by nobody named names nobody")
	require.NotNil(t, r0.RetriedAt)

	st, err := fs.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[store.FailedStatus]int64{store.StatusPending: 3, store.StatusDiscarded: 2, store.StatusDelivered: 1}, st.ByStatus)
	require.Equal(t, map[string]int64{"ops": 2, "dev": 1}, st.ByTarget)
	require.Equal(t, map[string]int64{"transient": 3}, st.ByErrorClass)
	require.NotNil(t, st.OldestPending)

	// Retried, a discarded row comes back without its discard reason, as bob's retry.
	changed, err = fs.Retry(store.WithAuthor(ctx, "bob"), []int64{id[5]})
	require.NoError(t, err)
	require.Equal(t, []int64{id[5]}, changed)
	r5, err = fs.Get(ctx, id[5])
	require.NoError(t, err)
	require.Nil(t, r5.DiscardReason)
	require.Nil(t, r5.DiscardedBy)
	require.Equal(t, "bob", *r5.RetriedBy)
	require.WithinDuration(t, time.Now(), *r5.RetriedAt, time.Minute)
}

func rowIDs(rows []store.FailedSend) []int64 {
	out := make([]int64, len(rows))
	for i, r := range rows {
		out[i] = r.ID
	}
	return out
}

func TestFailedSendsReleaseOnlyTheOwnClaim(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	a := record(t, fs, store.NewFailedSend{MessageID: "a", NextAttemptAt: now.Add(-time.Second)})
	got, err := fs.ClaimDue(ctx, 10, "mine", nil)
	require.NoError(t, err)
	require.Len(t, got, 1)

	// A release by another claim changes nothing.
	require.NoError(t, fs.Release(ctx, []int64{a}, "theirs"))
	again, err := fs.ClaimDue(ctx, 10, "next", nil)
	require.NoError(t, err)
	require.Empty(t, again)

	require.NoError(t, fs.Release(ctx, []int64{a}, "mine"))
	again, err = fs.ClaimDue(ctx, 10, "next", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{a}, rowIDs(again))
}

// A final row (delivered, discarded) is never overwritten: a stale record of the same
// alert (same due time) leaves it as it is, a later episode of the RD_ID gets a row of
// its own; a rejection never overwrites another live row of its RD_ID.
func TestFailedSendsRecordNeverOverwritesAFinalRow(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	due := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	for _, final := range []store.FailedStatus{store.StatusDelivered, store.StatusDiscarded} {
		msg := "x-" + string(final)
		id := record(t, fs, store.NewFailedSend{MessageID: msg, DueAt: &due, NextAttemptAt: time.Now().Add(-time.Second)})
		if final == store.StatusDelivered {
			require.NoError(t, fs.MarkDelivered(ctx, id))
		} else {
			_, err := fs.Discard(ctx, []int64{id}, "not needed")
			require.NoError(t, err)
		}
		res, err := fs.Record(ctx, store.NewFailedSend{MessageID: msg, DueAt: &due, ErrorClass: "transient", LastError: "stale"})
		require.NoError(t, err)
		require.Equal(t, store.RecordFinal, res)
		row, err := fs.Get(ctx, id)
		require.NoError(t, err)
		require.Equal(t, final, row.Status, "a stale re-record revived a %s row", final)
		require.NotEqual(t, "stale", row.LastError)

		later := due.Add(24 * time.Hour)
		res, err = fs.Record(ctx, store.NewFailedSend{MessageID: msg, DueAt: &later, ErrorClass: "transient", LastError: "new episode"})
		require.NoError(t, err)
		require.Equal(t, store.RecordInserted, res)
		rows, _, err := fs.List(ctx, store.Filter{Limit: 10})
		require.NoError(t, err)
		var statuses []store.FailedStatus
		for _, r := range rows {
			if r.MessageID == msg {
				statuses = append(statuses, r.Status)
			}
		}
		require.Equal(t, []store.FailedStatus{store.StatusPending, final}, statuses, "the history is kept")
	}

	// A rejection of an RD_ID whose live row is pending writes nothing there.
	pending := record(t, fs, store.NewFailedSend{MessageID: "busy", DueAt: &due})
	rej := store.NewFailedSend{MessageID: "busy", Rejected: true, ErrorClass: "rejected_bad_body", Payload: []byte("junk")}
	res, err := fs.Record(ctx, rej)
	require.NoError(t, err)
	require.Equal(t, store.RecordOccupied, res)
	row, err := fs.Get(ctx, pending)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, row.Status)
	// The same rejection twice is one row.
	rej.MessageID = "rejected:key-1"
	res, err = fs.Record(ctx, rej)
	require.NoError(t, err)
	require.Equal(t, store.RecordInserted, res)
	res, err = fs.Record(ctx, rej)
	require.NoError(t, err)
	require.Equal(t, store.RecordKept, res)
	// Another rejection of the same name does not overwrite it.
	rej.ErrorClass, rej.Payload = "rejected_unknown_target", []byte("other")
	res, err = fs.Record(ctx, rej)
	require.NoError(t, err)
	require.Equal(t, store.RecordOccupied, res)
}

// blackhole accepts connections and never answers, like a Postgres host whose packets
// are dropped after the handshake.
func blackhole(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	var mu sync.Mutex
	var conns []net.Conn
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	return ln.Addr().String()
}

// A Postgres that stops answering never pins a caller whose context has no deadline:
// every call is bounded by the statement timeout and says Postgres is unavailable, so
// the caller keeps what it was storing and tries again.
func TestFailedSendsBoundsEveryCall(t *testing.T) {
	t.Parallel()
	testenv.PostgresURL(t) // skipped under -short like the other store tests
	pool, err := pgxpool.New(context.Background(), "postgres://rd:pw@"+blackhole(t)+"/rd")
	require.NoError(t, err)
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{StatementTimeout: 300 * time.Millisecond})
	calls := map[string]func(context.Context) error{
		"record": func(ctx context.Context) error {
			_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "m", ErrorClass: "transient"})
			return err
		},
		"claim":   func(ctx context.Context) error { _, err := fs.ClaimDue(ctx, 1, "t", nil); return err },
		"confirm": func(ctx context.Context) error { return fs.Confirm(ctx, 1, "t", 0) },
		"stats":   func(ctx context.Context) error { _, err := fs.Stats(ctx); return err },
	}
	for name, call := range calls {
		done := make(chan error, 1)
		go func() { done <- call(context.Background()) }()
		select {
		case err := <-done:
			require.ErrorIs(t, err, store.ErrUnavailable, name)
		case <-time.After(30 * time.Second): // a hundred statement timeouts: it is not bounded
			t.Fatalf("%s: no answer after 30s from a call bounded by a 300ms statement timeout", name)
		}
	}
}

// Cancel cancels the rows of an RD_ID that could still be sent, noting who and why; it
// leaves a row alone once the retry job confirmed its request (too late), and a confirm
// after the cancel fails. A cancelled row is final: a stale re-record of the same alert,
// an operator's retry or discard, and a repeated cancel change nothing.
func TestFailedSendsCancel(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	note := store.CancelNote{By: "console", Reason: "order was paid"}
	due := time.Now().Truncate(time.Millisecond)
	pending := record(t, fs, store.NewFailedSend{MessageID: "c-pending", Target: "ops", DueAt: &due, NextAttemptAt: time.Now()})

	// Claimed but not confirmed yet: the cancel wins, and the claim cannot send it.
	claimed, err := fs.ClaimDue(ctx, 10, "job-1", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	got, err := fs.Cancel(ctx, "c-pending", note)
	require.NoError(t, err)
	require.Equal(t, store.RowsCancel{Result: store.CancelRowCancelled, IDs: []int64{pending}}, got)
	require.ErrorIs(t, fs.Confirm(ctx, pending, "job-1", 0), store.ErrNotHeld)
	require.ErrorIs(t, fs.MarkRetry(ctx, pending, "job-1", 1, time.Minute, store.FailedAttempt{Class: "transient"}), store.ErrNotHeld)
	row, err := fs.Get(ctx, pending)
	require.NoError(t, err)
	require.Equal(t, store.StatusCancelled, row.Status)
	require.Equal(t, "console", *row.CancelledBy)
	require.Equal(t, "order was paid", *row.CancelReason)
	require.Nil(t, row.ClaimedBy)
	require.Nil(t, row.NextAttemptAt)

	res, err := fs.Record(ctx, store.NewFailedSend{MessageID: "c-pending", Target: "ops", DueAt: &due, ErrorClass: "transient"})
	require.NoError(t, err)
	require.Equal(t, store.RecordFinal, res, "a stale copy of a cancelled alert is not recorded again")
	changed, err := fs.Retry(ctx, []int64{pending})
	require.NoError(t, err)
	require.Empty(t, changed)
	changed, err = fs.Discard(ctx, []int64{pending}, "x")
	require.NoError(t, err)
	require.Empty(t, changed)
	got, err = fs.Cancel(ctx, "c-pending", store.CancelNote{By: "someone else"})
	require.NoError(t, err)
	require.Equal(t, store.CancelRowCancelled, got.Result, "a repeat answers the same")
	row, err = fs.Get(ctx, pending)
	require.NoError(t, err)
	require.Equal(t, "console", *row.CancelledBy, "and changes nothing")

	// Confirmed: its request may be in flight, so the cancel is too late, until the claim
	// settles the row.
	sending := record(t, fs, store.NewFailedSend{MessageID: "c-sending", Target: "ops", NextAttemptAt: time.Now()})
	claimed, err = fs.ClaimDue(ctx, 10, "job-2", nil)
	require.NoError(t, err)
	require.Len(t, claimed, 1)
	require.NoError(t, fs.Confirm(ctx, sending, "job-2", 0))
	got, err = fs.Cancel(ctx, "c-sending", note)
	require.NoError(t, err)
	require.Equal(t, store.RowsCancel{Result: store.CancelTooLate, IDs: []int64{sending}}, got)
	row, err = fs.Get(ctx, sending)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, row.Status, "nothing changed")
	require.NotNil(t, row.ConfirmedAt)
	require.NoError(t, fs.MarkRetry(ctx, sending, "job-2", 1, time.Hour, store.FailedAttempt{Class: "transient"}))
	got, err = fs.Cancel(ctx, "c-sending", note)
	require.NoError(t, err)
	require.Equal(t, store.CancelRowCancelled, got.Result, "settled, the row can be cancelled again")

	// Dead, rejected and discarded rows could still be sent by an operator's retry.
	for _, id := range []string{"c-dead", "c-rejected", "c-discarded"} {
		n := record(t, fs, store.NewFailedSend{MessageID: id, Target: "ops", Rejected: id == "c-rejected", NextAttemptAt: time.Now()})
		switch id {
		case "c-dead":
			claimed, err := fs.ClaimDue(ctx, 10, "job-3", nil)
			require.NoError(t, err)
			require.Len(t, claimed, 1)
			require.NoError(t, fs.MarkDead(ctx, n, "job-3", 20, store.FailedAttempt{Class: "transient"}))
		case "c-discarded":
			_, err := fs.Discard(ctx, []int64{n}, "noise")
			require.NoError(t, err)
		}
		got, err := fs.Cancel(ctx, id, note)
		require.NoError(t, err)
		require.Equal(t, store.RowsCancel{Result: store.CancelRowCancelled, IDs: []int64{n}}, got, id)
	}

	// Delivered by the retry job: already delivered; no row at all: nothing.
	delivered := record(t, fs, store.NewFailedSend{MessageID: "c-delivered", Target: "ops", NextAttemptAt: time.Now()})
	require.NoError(t, fs.MarkDelivered(ctx, delivered))
	got, err = fs.Cancel(ctx, "c-delivered", note)
	require.NoError(t, err)
	require.Equal(t, store.RowsCancel{Result: store.CancelAlreadyDelivered, IDs: []int64{delivered}}, got)
	got, err = fs.Cancel(ctx, "c-never", note)
	require.NoError(t, err)
	require.Zero(t, got)
	_, err = fs.Cancel(ctx, "c-never", store.CancelNote{})
	require.ErrorIs(t, err, store.ErrInvalid, "who cancels is required")
}

// claimedReplica is the replica failed_sends notes for row id's claim ("" when none).
func claimedReplica(t *testing.T, pool *pgxpool.Pool, id int64) string {
	t.Helper()
	var r *string
	require.NoError(t, pool.QueryRow(context.Background(), "SELECT claimed_replica FROM failed_sends WHERE id = $1", id).Scan(&r))
	if r == nil {
		return ""
	}
	return *r
}

// TestReleaseReplicaRows: once replica ra departed, one ReleaseReplica makes what its
// retry job's claims held claimable by any replica: an unconfirmed row at once, a row
// whose request was confirmed once the guard after that confirm ends; ra's claim can no
// longer confirm or settle either, and a row of another replica's claim is left alone.
func TestReleaseReplicaRows(t *testing.T) {
	t.Parallel()
	pool, _ := testenv.FailedSends(t)
	const guard = 2 * time.Second
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{Guard: guard})
	ctx := context.Background()
	now := time.Now()
	a := record(t, fs, store.NewFailedSend{MessageID: "a", NextAttemptAt: now.Add(-3 * time.Minute)})
	b := record(t, fs, store.NewFailedSend{MessageID: "b", NextAttemptAt: now.Add(-2 * time.Minute)})
	c := record(t, fs, store.NewFailedSend{MessageID: "c", NextAttemptAt: now.Add(-time.Minute)})
	got, err := fs.ClaimDue(ctx, 2, "ra/1", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{a, b}, rowIDs(got))
	got, err = fs.ClaimDue(ctx, 10, "rb/1", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{c}, rowIDs(got))
	require.Equal(t, "ra", claimedReplica(t, pool, a), "a claim notes its token's replica")
	require.Equal(t, "rb", claimedReplica(t, pool, c))
	require.NoError(t, fs.Confirm(ctx, b, "ra/1", 0)) // b's request may be about to start

	n, err := fs.ReleaseReplica(ctx, "ra")
	require.NoError(t, err)
	require.Equal(t, 2, n)
	got, err = fs.ClaimDue(ctx, 10, "rb/2", nil)
	require.NoError(t, err)
	require.Equal(t, []int64{a}, rowIDs(got), "a at once; b waits for its guard; c is rb/1's")
	require.Equal(t, "rb", claimedReplica(t, pool, a))
	require.ErrorIs(t, fs.Confirm(ctx, b, "ra/1", 0), store.ErrNotHeld, "ra's claim is void")
	require.ErrorIs(t, fs.MarkRetry(ctx, b, "ra/1", 1, 0, store.FailedAttempt{Class: "transient"}), store.ErrNotHeld)
	rb, err := fs.Get(ctx, b)
	require.NoError(t, err)
	require.Equal(t, "lapsed:ra", *rb.ClaimedBy)
	require.Equal(t, rb.ConfirmedAt.Add(guard), *rb.LeaseUntil, "b is released when the guard after its confirm ends")
	require.Empty(t, claimedReplica(t, pool, b))
	require.Eventually(t, func() bool {
		got, err := fs.ClaimDue(ctx, 10, "rb/3", nil)
		require.NoError(t, err)
		return len(got) == 1 && got[0].ID == b
	}, 30*time.Second, 50*time.Millisecond)
	require.False(t, dbNow(t, pool).Before(rb.ConfirmedAt.Add(guard)), "not before its guard ended")

	n, err = fs.ReleaseReplica(ctx, "ra")
	require.NoError(t, err)
	require.Zero(t, n, "ra holds nothing any more")
	rc, err := fs.Get(ctx, c)
	require.NoError(t, err)
	require.Equal(t, "rb/1", *rc.ClaimedBy, "another replica's claim is left alone")
}
