package migrations_test

import (
	"context"
	"io"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/migrations"
)

func TestUpTwiceIsANoOp(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	m, err := migrations.New(pool, slog.New(slog.NewTextHandler(io.Discard, nil)))
	require.NoError(t, err)
	defer m.Close()

	st, err := m.Status(ctx)
	require.NoError(t, err)
	require.NotEmpty(t, st)
	for _, s := range st {
		require.False(t, s.Applied, "%s applied on a fresh schema", s.Name)
	}

	first, err := m.Up(ctx)
	require.NoError(t, err)
	require.Len(t, first, len(st))
	require.Equal(t, "00001_create_failed_sends.sql", first[0].Name)

	second, err := m.Up(ctx)
	require.NoError(t, err)
	require.Empty(t, second)

	st, err = m.Status(ctx)
	require.NoError(t, err)
	for _, s := range st {
		require.True(t, s.Applied, "%s not applied", s.Name)
	}

	// The table exists and enforces its statuses.
	_, err = pool.Exec(ctx, `INSERT INTO failed_sends (message_id, payload, error_class, next_attempt_at)
		VALUES ('m1', 'x', 'transient', now())`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO failed_sends (message_id, payload, error_class, status)
		VALUES ('m2', 'x', 'transient', 'lost')`)
	require.ErrorContains(t, err, "failed_sends_status_check")
	_, err = pool.Exec(ctx, `INSERT INTO failed_sends (message_id, payload, error_class, next_attempt_at)
		VALUES ('m1', 'y', 'transient', now())`)
	require.ErrorContains(t, err, "duplicate key")
}

// Two migrators racing on one database serialise on the advisory lock: both succeed and
// every migration is applied exactly once.
func TestConcurrentUpIsSerialised(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	var wg sync.WaitGroup
	applied := make([]int, 2)
	errs := make([]error, 2)
	for i := range 2 {
		wg.Go(func() {
			m, err := migrations.New(pool, logger)
			if err != nil {
				errs[i] = err
				return
			}
			defer m.Close()
			res, err := m.Up(ctx)
			applied[i], errs[i] = len(res), err
		})
	}
	wg.Wait()
	require.NoError(t, errs[0])
	require.NoError(t, errs[1])
	st, err := func() ([]migrations.Status, error) {
		m, err := migrations.New(pool, logger)
		require.NoError(t, err)
		defer m.Close()
		return m.Status(ctx)
	}()
	require.NoError(t, err)
	require.Equal(t, len(st), applied[0]+applied[1], "each migration applied exactly once")
}
