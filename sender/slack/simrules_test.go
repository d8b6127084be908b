package slack_test

import (
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

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

// A simulator told to answer as Rocket.Chat does serves its webhooks at /hooks/ and
// answers {"success":true}; the channel takes that for success, so the message goes once.
func TestRocketChatRulesAnswerSuccess(t *testing.T) {
	p := slack.Platform
	p.Sim = slack.SimRules{RocketChat: true}
	sim, root := testenv.ChatSim(t, []sender.Platform{p},
		chatsim.Options{Robots: []chatsim.Robot{{Name: "rc1", Kind: slack.Kind, Token: "id1/tok1"}}})
	base := sim.URL(root, slack.Kind)
	require.Equal(t, root+"/hooks", base)

	resp, err := http.Post(base+"/id1/tok1", "application/json", strings.NewReader(`{"text":"x"}`))
	require.NoError(t, err)
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.JSONEq(t, `{"success":true}`, string(b))
	resp, err = http.Post(base+"/id1/tok1", "application/json", strings.NewReader(`{"username":"x"}`))
	require.NoError(t, err)
	b, err = io.ReadAll(resp.Body)
	require.NoError(t, err)
	require.NoError(t, resp.Body.Close())
	require.Equal(t, http.StatusBadRequest, resp.StatusCode)
	require.JSONEq(t, `{"success":false,"error":"no_text"}`, string(b))

	client := sender.NewClient(time.Second, time.Now)
	defer client.Close()
	o := slack.New(base).Post(t.Context(), client, sender.Robot{Name: "rc1", Token: "id1/tok1"},
		sender.Message{Format: sender.FormatText, Text: "disk full"})
	require.True(t, o.OK, o.Reason)
	require.Equal(t, 2, sim.Stats().Accepted, "the message went once")
}

// Slack truncates a text past 40,000 characters (not bytes): the simulator records what
// the channel shows, the first 40,000 characters, and none of the markup past them.
func TestSimTruncatesLongTexts(t *testing.T) {
	const shown = 40_000 // characters (DESIGN.md)
	check := func(text string) sender.SimReceived {
		t.Helper()
		body := `{"text":"` + text + `"}`
		got, refused := slack.SimRules{}.Check(sender.SimRequest{Request: httptest.NewRequest("POST", slack.SimPath+"T1/B1/x1", strings.NewReader(body)),
			Body: []byte(body), Now: time.Now(), Skew: time.Hour})
		require.Nil(t, refused)
		return got
	}
	whole := strings.Repeat("é", shown-1) + "x" // 40,000 characters, 80,001 bytes
	require.Equal(t, whole, check(whole).Text, "a text of 40,000 characters is shown whole")

	got := check(whole + "yz <!channel>")
	require.Equal(t, shown, utf8.RuneCountInString(got.Text))
	require.Equal(t, whole, got.Text)
	require.Empty(t, got.Markup, "the mention past the cut is not shown")
}
