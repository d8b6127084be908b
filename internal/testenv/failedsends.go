package testenv

import (
	"context"
	"testing"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/stretchr/testify/require"
)

// MakeDead puts row id of failed_sends (in the schema of pool, from FailedSends) in the
// state the retry job leaves a row it gave up on after attempts attempts, without a
// claim: tests of the operators' views start from dead rows.
func MakeDead(t testing.TB, pool *pgxpool.Pool, id int64, attempts int, class, lastError string) {
	t.Helper()
	tag, err := pool.Exec(context.Background(), `UPDATE failed_sends
		SET status = 'dead', attempts = $2, error_class = $3, last_error = $4, next_attempt_at = NULL,
		    claimed_by = NULL, lease_until = NULL, updated_at = now()
		WHERE id = $1`, id, attempts, class, lastError)
	require.NoError(t, err)
	require.Equal(t, int64(1), tag.RowsAffected(), "no failed_sends row %d", id)
}
