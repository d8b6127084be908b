package store_test

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// seedAged records a row per status given, and sets its status and its last change to
// age ago, as if it had been settled then.
func seedAged(t *testing.T, pool *pgxpool.Pool, fs *store.FailedSends, prefix string, age time.Duration, statuses ...store.FailedStatus) {
	t.Helper()
	ctx := context.Background()
	for i, s := range statuses {
		id := fmt.Sprintf("%s-%s-%d", prefix, s, i)
		record(t, fs, store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte("x"), NextAttemptAt: time.Now().Add(time.Hour)})
		_, err := pool.Exec(ctx, `UPDATE failed_sends SET status = $2,
			next_attempt_at = CASE WHEN $2 = 'pending' THEN next_attempt_at END,
			updated_at = now() - $3::interval WHERE message_id = $1`, id, string(s), age)
		require.NoError(t, err)
	}
}

func countByStatus(t *testing.T, fs *store.FailedSends) map[store.FailedStatus]int64 {
	st, err := fs.Stats(context.Background())
	require.NoError(t, err)
	return st.ByStatus
}

// Rows in a final state whose last change is older than the retention go, in batches;
// younger ones, pending ones (however old) and dead ones (unless their own retention is
// set) stay.
func TestPurgeDeletesOnlyWhatsRetentionIsOver(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	final := []store.FailedStatus{store.StatusDelivered, store.StatusDiscarded, store.StatusRejected}
	for i := range 3 {
		seedAged(t, pool, fs, fmt.Sprintf("old%d", i), 40*24*time.Hour, final...)
	}
	seedAged(t, pool, fs, "young", 2*24*time.Hour, final...)
	seedAged(t, pool, fs, "stuck", 90*24*time.Hour, store.StatusPending, store.StatusDead)
	// A claimed row is pending, whatever its age.
	_, err := pool.Exec(ctx, `UPDATE failed_sends SET claimed_by = 'replica-a', lease_until = now() + interval '1 minute'
		WHERE message_id LIKE 'stuck-pending%'`)
	require.NoError(t, err)

	pass, err := fs.Purge(ctx, store.PurgeOptions{Retention: 30 * 24 * time.Hour, Batch: 2})
	require.NoError(t, err)
	require.True(t, pass.Ran)
	require.True(t, pass.Done)
	require.Equal(t, map[store.FailedStatus]int64{store.StatusDelivered: 3, store.StatusDiscarded: 3, store.StatusRejected: 3}, pass.Deleted)
	require.Equal(t, int64(9), pass.Rows)
	require.Equal(t, map[store.FailedStatus]int64{store.StatusDelivered: 1, store.StatusDiscarded: 1, store.StatusRejected: 1,
		store.StatusPending: 1, store.StatusDead: 1}, countByStatus(t, fs))

	pass, err = fs.Purge(ctx, store.PurgeOptions{Retention: 30 * 24 * time.Hour, DeadRetention: 60 * 24 * time.Hour})
	require.NoError(t, err)
	require.Equal(t, map[store.FailedStatus]int64{store.StatusDead: 1}, pass.Deleted, "dead rows go once their own retention is set")
	require.Equal(t, int64(1), countByStatus(t, fs)[store.StatusPending])

	n, err := fs.TableBytes(ctx)
	require.NoError(t, err)
	require.Positive(t, n)
}

// One purger at a time: while one holds the lock, another does nothing and says so.
func TestPurgeRunsOnOneReplicaAtATime(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	seedAged(t, pool, fs, "old", 40*24*time.Hour, store.StatusDelivered)
	conn, err := pool.Acquire(ctx)
	require.NoError(t, err)
	defer conn.Release()
	var locked bool
	require.NoError(t, conn.QueryRow(ctx, `SELECT pg_try_advisory_lock(hashtext(current_schema() || '.failed_sends purge'))`).Scan(&locked))
	require.True(t, locked)

	pass, err := fs.Purge(ctx, store.PurgeOptions{Retention: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.False(t, pass.Ran, "another replica purges")
	require.Empty(t, pass.Deleted)
	require.Equal(t, int64(1), countByStatus(t, fs)[store.StatusDelivered])

	_, err = conn.Exec(ctx, `SELECT pg_advisory_unlock(hashtext(current_schema() || '.failed_sends purge'))`)
	require.NoError(t, err)
	pass, err = fs.Purge(ctx, store.PurgeOptions{Retention: 30 * 24 * time.Hour})
	require.NoError(t, err)
	require.True(t, pass.Ran)
	require.Equal(t, int64(1), pass.Deleted[store.StatusDelivered])
}

// A pass stops at its row bound and says whether rows past their retention are left;
// the backlog count says how many, up to its limit.
func TestPurgeIsBoundedPerPass(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	seedAged(t, pool, fs, "old", 40*24*time.Hour, slices.Repeat([]store.FailedStatus{store.StatusDelivered}, 7)...)
	opts := store.PurgeOptions{Retention: 30 * 24 * time.Hour, Batch: 2, PassRows: 3}
	n, err := fs.PurgeBacklog(ctx, opts, 100)
	require.NoError(t, err)
	require.Equal(t, int64(7), n)
	n, err = fs.PurgeBacklog(ctx, opts, 5)
	require.NoError(t, err)
	require.Equal(t, int64(5), n, "counted up to the limit")

	var passes []int64
	for {
		pass, err := fs.Purge(ctx, opts)
		require.NoError(t, err)
		require.True(t, pass.Ran)
		passes = append(passes, pass.Rows)
		if pass.Done {
			break
		}
		require.Less(t, len(passes), 10)
	}
	require.Equal(t, []int64{3, 3, 1}, passes)
	n, err = fs.PurgeBacklog(ctx, opts, 100)
	require.NoError(t, err)
	require.Zero(t, n)
}
