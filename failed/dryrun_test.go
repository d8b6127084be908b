package failed_test

import (
	"bytes"
	"context"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// tableIDs are the ids of the table rows in out, in order.
func tableIDs(out string) []string {
	var ids []string
	for _, m := range regexp.MustCompile(`(?m)^(\d+) +`).FindAllStringSubmatch(out, -1) {
		ids = append(ids, m[1])
	}
	return ids
}

// A dry run of a retry or a discard says how many rows would change and which, shows
// the newest ten, changes nothing, and agrees with what the real command then does: a
// delivered row, an unknown id, and a discarded row whose alert has a live row of a
// later episode are left alone.
func TestDryRunsChangeNothing(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	seed(t, fs, 14) // ids 1…14, m-0…m-13, targets ops, dev, ops, …
	for id := int64(1); id <= 12; id++ {
		testenv.MakeDead(t, pool, id, 20, "transient", "HTTP 503")
	}
	require.NoError(t, fs.MarkDelivered(ctx, 13))
	_, err := fs.Discard(ctx, []int64{12}, "given up")
	require.NoError(t, err)
	due := time.Now().Truncate(time.Millisecond)
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "m-11", Target: "dev", Payload: []byte("x"), DueAt: &due, ErrorClass: "transient",
		LastError: "HTTP 503", NextAttemptAt: time.Now().Add(time.Hour)}) // row 15: m-11's next episode, pending
	require.NoError(t, err)

	snapshot := func() []store.FailedSend {
		rows, next, err := fs.List(ctx, store.Filter{Limit: 100})
		require.NoError(t, err)
		require.Zero(t, next)
		require.Len(t, rows, 15)
		return rows
	}
	before := snapshot()
	var out bytes.Buffer
	op := failed.Operator{Store: fs, History: fs, Out: &out, Now: time.Now}

	require.NoError(t, op.RetryWhereDryRun(ctx, store.StatusDead, ""))
	require.True(t, strings.HasPrefix(out.String(), "dry run: would retry 11 rows (status dead)\nID "), out.String())
	require.Equal(t, []string{"11", "10", "9", "8", "7", "6", "5", "4", "3", "2"}, tableIDs(out.String()), "the newest ten")
	require.True(t, strings.HasSuffix(out.String(), "\n… and 1 more\nnothing changed (dry run)\n"), out.String())

	out.Reset()
	require.NoError(t, op.RetryWhereDryRun(ctx, store.StatusDead, "ops"))
	require.True(t, strings.HasPrefix(out.String(), "dry run: would retry 6 rows (status dead, target ops)\n"), out.String())
	require.Equal(t, []string{"11", "9", "7", "5", "3", "1"}, tableIDs(out.String()))

	out.Reset()
	require.NoError(t, op.RetryWhereDryRun(ctx, store.StatusDiscarded, ""))
	require.Equal(t, "dry run: would retry 0 rows (status discarded)\nnothing changed (dry run)\n", out.String(),
		"row 12's alert has a live row (15): a retry leaves it discarded")

	out.Reset()
	require.ErrorIs(t, op.RetryDryRun(ctx, []int64{14, 1, 12, 13, 99, 1}), store.ErrNotFound, "row 99 does not exist")
	require.True(t, strings.HasPrefix(out.String(), "dry run: would retry 2 rows: 1, 14\n"+
		"unchanged (delivered or cancelled already): 12, 13\nID "), out.String())
	require.Equal(t, []string{"14", "1"}, tableIDs(out.String()))

	out.Reset()
	require.NoError(t, op.DiscardDryRun(ctx, []int64{1, 12, 13}))
	require.True(t, strings.HasPrefix(out.String(), "dry run: would discard 1 row: 1\n"+
		"unchanged (delivered, cancelled or discarded already): 12, 13\n"), out.String())

	require.Equal(t, before, snapshot(), "a dry run changes no row")

	// What the commands then do is what their dry runs said.
	out.Reset()
	err = op.Retry(ctx, []int64{14, 1, 12, 13, 99, 1})
	require.ErrorIs(t, err, store.ErrNotFound)
	require.ErrorContains(t, err, "no failed send has the row id 99")
	require.True(t, strings.HasPrefix(out.String(), "retried 2 rows: 1, 14\n"), out.String())
	out.Reset()
	require.NoError(t, op.RetryWhere(ctx, store.StatusDiscarded, ""))
	require.Equal(t, "retried 0 rows\n", out.String())
}
