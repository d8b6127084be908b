package app

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"
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
