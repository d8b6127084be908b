package escalation_test

import (
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
)

func TestMain(m *testing.M) {
	scheduler.RouteClientLog(testenv.Logger())
	goleak.VerifyTestMain(m, testenv.RocketMQStragglers...)
}

// A link opens to the episode it was signed for until it expires; a link that is not
// exactly as signed — any one character changed, the number of another episode, another
// service's key — opens to nothing.
func TestLinks(t *testing.T) {
	t.Parallel()
	links := escalation.NewLinks("https://rd.example.com/", "ingest-secret", time.Hour)
	now := time.Unix(1_700_000_000, 0)
	for _, key := range []string{"db-primary", "am:{}:{group=\"disk\"}:ops", "a.b.c", "组-1"} {
		u := links.URL(key, 42, now)
		token, ok := strings.CutPrefix(u, "https://rd.example.com"+escalation.AckPath)
		require.True(t, ok, u)
		require.Equal(t, url.PathEscape(token), token, "the token needs no escaping in a URL")
		k, seq, err := links.Open(token, now)
		require.NoError(t, err)
		require.Equal(t, key, k)
		require.Equal(t, int64(42), seq)
		_, _, err = links.Open(token, now.Add(time.Hour))
		require.NoError(t, err, "valid up to its expiry")
		_, _, err = links.Open(token, now.Add(time.Hour+time.Second))
		require.ErrorIs(t, err, escalation.ErrExpiredLink)
	}

	token := links.Token("db-primary", 42, now.Add(time.Hour))
	const alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_."
	for i := range len(token) {
		for _, c := range []byte(alphabet) {
			if c == token[i] {
				continue
			}
			tampered := token[:i] + string(c) + token[i+1:]
			_, _, err := links.Open(tampered, now)
			require.ErrorIs(t, err, escalation.ErrBadLink, "%q: character %d changed to %q opens", tampered, i, c)
		}
	}
	parts := strings.Split(token, ".")
	parts[1] = "43"
	_, _, err := links.Open(strings.Join(parts, "."), now)
	require.ErrorIs(t, err, escalation.ErrBadLink, "another episode's number")
	parts = strings.Split(token, ".")
	parts[2] = strconv.FormatInt(now.Add(365*24*time.Hour).Unix(), 10)
	_, _, err = links.Open(strings.Join(parts, "."), now)
	require.ErrorIs(t, err, escalation.ErrBadLink, "a later expiry")

	other := escalation.NewLinks("https://rd.example.com", "another-secret", time.Hour)
	_, _, err = other.Open(token, now)
	require.ErrorIs(t, err, escalation.ErrBadLink, "another service's key")
	for _, bad := range []string{"", ".", "...", "a.b.c", "a.b.c.d.e", token + ".x", token[:len(token)-1], token + "A",
		token + "/x", strings.ReplaceAll(token, ".", "")} {
		_, _, err := links.Open(bad, now)
		require.ErrorIs(t, err, escalation.ErrBadLink, "%q", bad)
	}
}
