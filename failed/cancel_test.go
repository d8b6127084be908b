package failed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
)

// The canceller answers for an alert wherever it is, and truly: the wheel stage's answer
// while the alert is there, its failed_sends row's once its send failed. Inspect then
// says what became of it, and who cancelled it, and why.
func TestCancellerAnswersWhereverTheAlertIs(t *testing.T) {
	t.Parallel()
	in, ws, fs := inspectWorld(t)
	ctx := context.Background()
	c := failed.Canceller{Stage: ws, Rows: fs, Note: store.CancelNote{By: "console", Reason: "order was paid"}}
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	claim := func(id string) store.Claim {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
		got, err := ws.Claim(ctx, []string{id}, "replica-a/"+id)
		require.NoError(t, err)
		require.Len(t, got.Entries, 1, id)
		return got.Entries[0].Claim()
	}
	// recorded is a hand-off that recorded its failure: a pending row, then the release.
	recorded := func(id string) int64 {
		cl := claim(id)
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: id, Target: "ops", DueAt: &due, ErrorClass: "transient",
			LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
		_, err = ws.Release(ctx, store.Recorded, cl)
		require.NoError(t, err)
		rows, err := fs.ByMessageID(ctx, id)
		require.NoError(t, err)
		require.Len(t, rows, 1)
		return rows[0].ID
	}

	_, err := ws.Put(ctx, store.Entry{ID: "waiting", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.NoError(t, err)
	claim("in-flight")
	_, err = ws.Release(ctx, store.Delivered, claim("delivered"))
	require.NoError(t, err)
	failedRow := recorded("failed")
	recorded("sent-by-the-job")
	rows, err := fs.ClaimDue(ctx, 10, "job-1", nil) // nothing is due for an hour
	require.NoError(t, err)
	require.Empty(t, rows)
	sending := recorded("being-retried")
	_, err = fs.Retry(ctx, []int64{sending})
	require.NoError(t, err)
	rows, err = fs.ClaimDue(ctx, 10, "job-1", nil)
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.NoError(t, fs.Confirm(ctx, sending, "job-1", 0))
	retried := recorded("delivered-on-retry")
	require.NoError(t, fs.MarkDelivered(ctx, retried))
	// A dead row whose done marker has expired: only failed_sends knows of it.
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "long-dead", Target: "ops", ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)

	for id, want := range map[string]store.CancelResult{
		"waiting":            store.CancelRemoved,
		"hopping":            store.CancelTombstoned,
		"in-flight":          store.CancelTooLate,
		"delivered":          store.CancelAlreadyDelivered,
		"failed":             store.CancelRowCancelled,
		"being-retried":      store.CancelTooLate,
		"delivered-on-retry": store.CancelAlreadyDelivered,
		"long-dead":          store.CancelRowCancelled,
	} {
		got, err := c.Cancel(ctx, id)
		require.NoError(t, err, id)
		require.Equal(t, want, got, "%s: %s", id, got.Explain())
	}
	row, err := fs.Get(ctx, sending)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, row.Status, "a row being sent is not cancelled")

	rep, err := in.Inspect(ctx, "failed")
	require.NoError(t, err)
	require.Equal(t, failed.StateCancelled, rep.State, rep.Summary)
	require.Contains(t, rep.Summary, "cancelled by console (order was paid)")
	require.Contains(t, rep.Summary, "it will not be sent")
	require.Contains(t, rep.History[len(rep.History)-1].What, "cancelled by console (order was paid)")
	require.Equal(t, "console", *rep.Rows[0].CancelledBy)
	rep, err = in.Inspect(ctx, "being-retried")
	require.NoError(t, err)
	require.Equal(t, failed.StateFailed, rep.State, rep.Summary)

	// The row is gone (past its retention): nothing is left to cancel, and the answer
	// says so rather than "cancelled".
	_, err = fs.Purge(ctx, store.PurgeOptions{Retention: time.Nanosecond})
	require.NoError(t, err)
	_, err = fs.Get(ctx, failedRow)
	require.ErrorIs(t, err, store.ErrNotFound)
	got, err := c.Cancel(ctx, "failed")
	require.NoError(t, err)
	require.Equal(t, store.CancelRecorded, got)
	require.False(t, got.Cancelled())
}
