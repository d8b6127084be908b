package app

import (
	"context"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// `rocketdelay cancel` stops an alert whose send failed and waits in failed_sends for a
// retry: it exits 0 saying so. An alert that was delivered is too late: it fails,
// saying so.
func TestCancelCommandStopsAFailedSend(t *testing.T) {
	file, env, rdb, prefix := cliStack(t)
	env["USER"] = "alice"
	ctx := context.Background()
	pg, err := store.OpenPostgres(ctx, env["ROCKETDELAY_POSTGRES_URL"])
	require.NoError(t, err)
	defer pg.Close()
	fs := store.NewFailedSends(pg, store.FailedSendsOptions{})
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	handOff := func(id string, outcome store.Outcome) {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
		c, err := ws.Claim(ctx, []string{id}, "replica-a/"+id)
		require.NoError(t, err)
		require.Len(t, c.Entries, 1)
		if outcome == store.Recorded {
			_, err = fs.Record(ctx, store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte("x"), DueAt: &due,
				ErrorClass: "transient", LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Minute)})
			require.NoError(t, err)
		}
		_, err = ws.Release(ctx, outcome, c.Entries[0].Claim())
		require.NoError(t, err)
	}
	handOff("order-11-recheck", store.Recorded)
	handOff("order-12-recheck", store.Delivered)

	out, _, err := run(t, env, "cancel", "-f", file, "--reason", "order was paid", "order-11-recheck")
	require.NoError(t, err)
	require.Equal(t, "cancelled order-11-recheck: its send had failed; its failed_sends row is cancelled, so it will not be retried\n", out)
	rows, err := fs.ByMessageID(ctx, "order-11-recheck")
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, store.StatusCancelled, rows[0].Status)
	require.Equal(t, "cli:alice", *rows[0].CancelledBy)
	require.Equal(t, "order was paid", *rows[0].CancelReason)

	_, _, err = run(t, env, "cancel", "-f", file, "order-12-recheck")
	require.EqualError(t, err, "cancel order-12-recheck: too late, it was already delivered")
	_, _, err = run(t, env, "cancel", "-f", file, "has space")
	require.ErrorIs(t, err, ErrUsage)
}
