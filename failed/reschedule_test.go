package failed_test

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
)

// The rescheduler answers for an alert wherever it is: the wheel stage's answer while it
// is there, its pending failed_sends row's once its send failed (the row's next attempt
// moves), unknown when neither knows it; a time past the horizon is refused up front.
func TestReschedulerAnswersWhereverTheAlertIs(t *testing.T) {
	t.Parallel()
	_, ws, fs := inspectWorld(t)
	ctx := context.Background()
	r := failed.Rescheduler{Stage: ws, Rows: fs, Reach: time.Minute, Horizon: 24 * time.Hour}
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	_, err := ws.Put(ctx, store.Entry{ID: "waiting", Target: "ops", DueAt: time.Now().Add(time.Minute), Body: []byte("x")})
	require.NoError(t, err)
	_, err = ws.Put(ctx, store.Entry{ID: "failed", Target: "ops", DueAt: due, Body: []byte("x")})
	require.NoError(t, err)
	got, err := ws.Claim(ctx, []string{"failed"}, "replica-a/failed")
	require.NoError(t, err)
	require.Len(t, got.Entries, 1)
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "failed", Target: "ops", DueAt: &due, ErrorClass: "transient",
		LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	_, err = ws.Release(ctx, store.Recorded, got.Entries[0].Claim())
	require.NoError(t, err)

	to := time.Now().Add(20 * time.Second).Truncate(time.Millisecond)
	res, err := r.Reschedule(ctx, "waiting", to)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleMoved, DueAt: to}, res)

	res, err = r.Reschedule(ctx, "failed", to)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleRowMoved, res.Result, "its row was its live copy")
	require.True(t, to.Equal(res.DueAt))
	rows, err := fs.ByMessageID(ctx, "failed")
	require.NoError(t, err)
	require.True(t, to.Equal(*rows[0].NextAttemptAt))

	res, err = r.Reschedule(ctx, "never", to)
	require.NoError(t, err)
	require.Equal(t, store.Rescheduled{Result: store.RescheduleUnknown}, res)

	_, err = r.Reschedule(ctx, "waiting", time.Now().Add(25*time.Hour))
	require.ErrorIs(t, err, store.ErrInvalid)
	require.Contains(t, err.Error(), "beyond the horizon of 24h0m0s")
}
