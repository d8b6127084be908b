package slack_test

import (
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/slack"
)

// Slack's webhooks: the path after /services/, 404 no_service for one it does not know,
// 400 for a body without text or not JSON, "ok" on success; 2 a second and 60 a minute,
// answered 429 rate_limited with a Retry-After past them, and no lock-out.
func TestSlackRules(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 7, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sim, root := testenv.ChatSim(t, []sender.Platform{slack.Platform},
		chatsim.Options{Robots: []chatsim.Robot{{Name: "s1", Token: "T1/B1/x1"}}, Now: clock})
	base := sim.URL(root, "slack")
	require.Equal(t, root+strings.TrimSuffix(slack.SimPath, "/"), base)
	post := func(path, body string) (int, string, string) {
		t.Helper()
		resp, err := http.Post(base+path, "application/json", strings.NewReader(body))
		require.NoError(t, err)
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		require.NoError(t, err)
		return resp.StatusCode, string(b), resp.Header.Get("Retry-After")
	}
	code, word, _ := post("/T1/B1/nope", `{"text":"x"}`)
	require.Equal(t, []any{404, "no_service"}, []any{code, word})
	code, word, _ = post("/T1/B1/x1", `{"username":"x"}`)
	require.Equal(t, []any{400, "no_text"}, []any{code, word})
	code, word, _ = post("/T1/B1/x1", `{"text":`)
	require.Equal(t, []any{400, "invalid_payload"}, []any{code, word})
	sent := 0
	for i := range 60 {
		if i%2 == 0 && i > 0 {
			now = now.Add(time.Second) // 2 a second
		}
		code, word, _ = post("/T1/B1/x1", `{"text":"x"}`)
		require.Equal(t, []any{200, "ok"}, []any{code, word}, "message %d", i)
		sent++
		if i == 1 {
			code, word, retry := post("/T1/B1/x1", `{"text":"a third in one second"}`)
			require.Equal(t, []any{429, "rate_limited", "1"}, []any{code, word, retry})
		}
	}
	now = now.Add(time.Second)
	code, word, retry := post("/T1/B1/x1", `{"text":"the 61st within a minute"}`)
	require.Equal(t, []any{429, "rate_limited", "30"}, []any{code, word, retry}, "when the first of the minute leaves it")
	now = now.Add(time.Minute)
	code, _, _ = post("/T1/B1/x1", `{"text":"a minute later"}`)
	require.Equal(t, 200, code, "no lock-out")
	st := sim.Stats()
	require.Equal(t, 2, st.OverLimit)
	require.Equal(t, sent+1, st.Accepted)
	require.Equal(t, "slack", sim.Accepted()[0].Kind)
}
