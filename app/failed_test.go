package app

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// The commands read their filters with the admin API's and the console's rules
// (failed.Query) and say which flag is wrong in the same words; nothing is opened first.
func TestFailedCommandsShareTheOperatorsRules(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"failed", "list", "--since", "yesterday"}, "--since: \"yesterday\" is neither an RFC 3339 time (2006-01-02T15:04:05Z) nor a duration back from now (90m, 6h, 3d)"},
		{[]string{"failed", "list", "--status", "lost"}, "--status: unknown status \"lost\": want one of pending, dead, rejected, discarded, cancelled, delivered"},
		{[]string{"failed", "list", "--limit", "0"}, "--limit: want a whole number from 1 to 1000"},
		{[]string{"failed", "list", "--after", "-3"}, "--after: want the next-page cursor of a previous listing"},
		{[]string{"failed", "retry", "--status", "delivered"}, "--status: status \"delivered\" cannot be retried: want dead, rejected, discarded, pending"},
	} {
		_, _, err := run(t, nil, tc.args...)
		require.Error(t, err, "%v", tc.args)
		require.True(t, errors.Is(err, ErrUsage), "%v: %v", tc.args, err)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
	}
}

// `failed retry --dry-run` and `failed discard --dry-run` print the count and a sample
// of the rows they would change, against the real table, and change none of them.
func TestFailedDryRunCommands(t *testing.T) {
	dsn := testenv.MigratedPostgres(t)
	ctx := context.Background()
	pool, err := store.OpenPostgres(ctx, dsn)
	require.NoError(t, err)
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	for i := range 3 {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprintf("m-%d", i), Target: "ops", Payload: []byte("x"),
			ErrorClass: "transient", LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Hour)})
		require.NoError(t, err)
	}
	testenv.MakeDead(t, pool, 1, 20, "transient", "HTTP 503")
	testenv.MakeDead(t, pool, 2, 20, "transient", "HTTP 503")
	env := map[string]string{"ROCKETDELAY_POSTGRES_URL": dsn}
	rows := func() []store.FailedSend {
		r, _, err := fs.List(ctx, store.Filter{})
		require.NoError(t, err)
		return r
	}
	before := rows()

	out, _, err := run(t, env, "failed", "retry", "--status", "dead", "--dry-run")
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(out, "dry run: would retry 2 rows (status dead)\nID "), out)
	require.Regexp(t, `(?m)^2 +dead +ops`, out)
	require.Regexp(t, `(?m)^1 +dead +ops`, out)
	require.True(t, strings.HasSuffix(out, "nothing changed (dry run)\n"), out)

	out, _, err = run(t, env, "failed", "discard", "1", "3", "9", "--reason", "dup", "--dry-run")
	require.Equal(t, ExitNotFound, ExitCode(err), "row 9 does not exist: %v", err)
	require.ErrorContains(t, err, "no failed send has the row id 9")
	require.True(t, strings.HasPrefix(out, "dry run: would discard 2 rows: 1, 3\nID "), out)
	require.Equal(t, before, rows(), "nothing changed")

	// A row that does not exist is exit 3 (not found), after the rows that do are
	// retried: a script that retries a row it read wrong learns it.
	out, _, err = run(t, env, "failed", "retry", "3", "9")
	require.Equal(t, ExitNotFound, ExitCode(err), "%v", err)
	require.Equal(t, "retried 1 row: 3\n", out)

	out, _, err = run(t, env, "failed", "retry", "--status", "dead")
	require.NoError(t, err)
	require.Equal(t, "retried 2 rows: 1, 2\n", out)
}
