package slack

import (
	"bytes"
	"net/http"
	"net/http/httptest"
	"net/url"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
)

func TestParse(t *testing.T) {
	ch := New("")
	m, err := ch.Parse([]byte("disk full"))
	require.NoError(t, err)
	require.Equal(t, sender.Message{Format: sender.FormatText, Text: "disk full", Type: TypeText}, m)

	m, err = ch.Parse([]byte(`{"text":"*cpu* high"}`))
	require.NoError(t, err)
	require.Equal(t, sender.Message{Format: sender.FormatText, Text: "*cpu* high", Type: TypeText}, m, "text alone merges")

	m, err = ch.Parse([]byte(`{"text":"fallback","blocks":[{"type":"section","text":{"type":"mrkdwn","text":"*cpu*"}}]}`))
	require.NoError(t, err)
	require.Equal(t, sender.FormatNative, m.Format)
	require.Equal(t, TypeBlocks, m.Type)

	for body, why := range map[string]string{
		``:                                   "empty",
		`{"username":"x"}`:                   "needs text, blocks or attachments",
		`{"text": "x"`:                       "not valid JSON",
		strings.Repeat("x", MaxSplitBytes+1): "at most",
		`{"blocks":[` + strings.Repeat(`{"type":"divider"},`, 20000) + `{"type":"divider"}]}`: "at most",
	} {
		_, err := ch.Parse([]byte(body))
		require.ErrorIs(t, err, sender.ErrInvalidBody, body)
		require.ErrorContains(t, err, why)
	}
}

// A markdown message starts with its title in bold unless its text names it; mentions
// come last as <@U…> and <!channel>, each once; Slack mentions nobody by mobile number.
func TestRender(t *testing.T) {
	r := render(sender.Message{Format: sender.FormatMarkdown, Title: "[FIRING:1] Disk", Text: "disk at 97% <@U1>",
		Mentions: sender.Mentions{All: true, Users: []string{"U1", "U2"}, Mobiles: []string{"138"}}}).(Message)
	require.Equal(t, "*[FIRING:1] Disk*\ndisk at 97% <@U1>\n<!channel> <@U2>", r.Text)
	r = render(sender.Message{Format: sender.FormatMarkdown, Title: "Disk", Text: "*Disk* full"}).(Message)
	require.Equal(t, "*Disk* full", r.Text)

	body, err := New("").Body(sender.Message{Format: sender.FormatText, Text: "a & b"})
	require.NoError(t, err)
	require.JSONEq(t, `{"text":"a & b"}`, string(body))
	back, err := New("").Parse(body)
	require.NoError(t, err)
	require.Equal(t, "a & b", back.Text, "Parse reads Body back")

	require.Equal(t, MaxTextBytes-3, New("").Room(sender.Message{Format: sender.FormatText, Text: "abc"}))
	require.Equal(t, "*3 alerts*", New("").Style().Heading(3))
}

// A long alert is split so that Slack shows every part whole: each part's text is at
// most MaxTextBytes, and so fewer characters than Slack's cut, TruncateChars.
func TestSplitPartsStayUnderSlacksCut(t *testing.T) {
	require.Less(t, MaxTextBytes, TruncateChars, "a character is at least a byte")
	ch := New("")
	for _, text := range []string{strings.Repeat("disk full ", 30_000), strings.Repeat("磁盘满", 20_000)} {
		for _, f := range []sender.Format{sender.FormatText, sender.FormatMarkdown} {
			parts, err := sender.Split(ch, sender.Message{Format: f, Title: "disk", Text: text, Mentions: sender.Mentions{All: true}}, 0)
			require.NoError(t, err)
			require.Greater(t, len(parts), 1)
			for i, p := range parts {
				r := render(p).(Message)
				require.LessOrEqual(t, len(r.Text), MaxTextBytes, "part %d", i)
				require.Less(t, utf8.RuneCountInString(r.Text), TruncateChars, "part %d", i)
			}
		}
	}
}

// A label can open no mention or link in Slack's mrkdwn.
func TestEscape(t *testing.T) {
	require.Equal(t, "&lt;!channel&gt; &lt;@U1&gt; &lt;https://x|y&gt; a &amp;amp; b", Escape("<!channel> <@U1> <https://x|y> a &amp; b"))
}

// Success is 200 "ok" and nothing else; refusals are judged by their status: 400 refuses
// the message, 403/404/410 take the webhook out, 429 throttles it (with its Retry-After),
// 5xx and network errors are transient, a 200 of something else is not an answer.
func TestClassify(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	answer := func(status int, body string, header ...string) sender.Answer {
		h := http.Header{"Content-Type": {"text/plain"}}
		if len(header) == 2 {
			h.Set(header[0], header[1])
		}
		return sender.Answer{Status: status, Header: h, Body: []byte(body)}
	}
	require.True(t, failures.Classify(answer(200, "ok\n"), now).OK)
	for _, c := range []struct {
		a     sender.Answer
		class sender.Class
	}{
		{answer(400, "invalid_payload"), sender.ClassPermanent},
		{answer(400, "no_text"), sender.ClassPermanent},
		{answer(403, "action_prohibited"), sender.ClassRobotBroken},
		{answer(403, "posting_to_general_channel_denied"), sender.ClassRobotBroken},
		{answer(404, "channel_not_found"), sender.ClassRobotBroken},
		{answer(404, "no_service"), sender.ClassRobotBroken},
		{answer(410, "channel_is_archived"), sender.ClassRobotBroken},
		{answer(429, "rate_limited", "Retry-After", "3"), sender.ClassThrottled},
		{answer(503, "<html>busy</html>"), sender.ClassTransient},
		{answer(200, "<html>a proxy's page</html>"), sender.ClassTransient},
		{answer(418, "teapot"), sender.ClassTransient},
		{sender.Answer{Err: http.ErrHandlerTimeout}, sender.ClassTransient},
	} {
		o := failures.Classify(c.a, now)
		require.False(t, o.OK, "%d %s", c.a.Status, c.a.Body)
		require.Equal(t, c.class, o.Class, "%d %s: %s", c.a.Status, c.a.Body, o.Reason)
	}
	o := failures.Classify(answer(429, "rate_limited", "Retry-After", "3"), now)
	require.Equal(t, 3*time.Second, o.RetryAfter)
	require.Equal(t, "HTTP 429: rate_limited", o.Reason)
}

// Rocket.Chat's incoming webhooks answer a post with HTTP 200 and {"success":true}: that
// is success, never "not an answer" (which would post the message again). Its refusal,
// {"success":false,"error":…}, comes with HTTP 400 and refuses the message, its error
// word in the reason; the same refusal under a 200 is judged as that 400.
func TestClassifyRocketChatAnswers(t *testing.T) {
	now := time.Date(2026, 12, 5, 10, 0, 0, 0, time.UTC)
	answer := func(status int, body string) sender.Answer {
		return sender.Answer{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
	}
	for _, body := range []string{`{"success":true}`, "{\n  \"success\": true\n}\n", `{"success":true,"responses":[]}`} {
		o := failures.Classify(answer(200, body), now)
		require.True(t, o.OK, "%s: %s", body, o.Reason)
	}
	for _, c := range []struct {
		a      sender.Answer
		reason string
	}{
		{answer(400, `{"success":false,"error":"overriding destination channel is disabled for this integration"}`),
			"HTTP 400: overriding destination channel is disabled for this integration"},
		{answer(200, `{"success":false,"error":"unknown-error"}`), "HTTP 400: unknown-error"},
		{answer(200, `{"success":false}`), "HTTP 400: "},
	} {
		o := failures.Classify(c.a, now)
		require.False(t, o.OK, "%d %s", c.a.Status, c.a.Body)
		require.Equal(t, sender.ClassPermanent, o.Class, "%d %s: %s", c.a.Status, c.a.Body, o.Reason)
		require.Equal(t, c.reason, o.Reason)
	}
	for _, body := range []string{`{"success":"yes"}`, `{"ok":true}`, `{}`, `[true]`} {
		o := failures.Classify(answer(200, body), now)
		require.False(t, o.OK, body)
		require.Equal(t, sender.ClassTransient, o.Class, "%s is not an answer: %s", body, o.Reason)
	}
}

// A webhook URL's credential is its path after /services/ (Slack) or /hooks/
// (Mattermost, Rocket.Chat).
func TestCredential(t *testing.T) {
	for raw, want := range map[string]string{
		"https://hooks.slack.com/services/T000/B000/XXXX": "T000/B000/XXXX",
		"https://mm.example.com/hooks/abc123":             "abc123",
		"https://rc.example.com/hooks/id/tok/":            "id/tok",
		"https://hooks.slack.com/other":                   "",
	} {
		u, err := url.Parse(raw)
		require.NoError(t, err)
		require.Equal(t, want, credential(u), raw)
	}
}

// Post sends the rendered text to the webhook's own URL, and never shows its path.
func TestPost(t *testing.T) {
	var got *http.Request
	var body bytes.Buffer
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got = r
		_, _ = body.ReadFrom(r.Body)
		w.WriteHeader(http.StatusNotFound)
		_, _ = w.Write([]byte("no_service"))
	}))
	defer srv.Close()
	client := sender.NewClient(time.Second, time.Now)
	defer client.Close()
	r := sender.Robot{Name: "w1", Token: "T1/B1/secretpath"}
	o := New(srv.URL+"/services").Post(t.Context(), client, r, sender.Message{Format: sender.FormatText, Text: "hi"})
	require.Equal(t, "/services/T1/B1/secretpath", got.URL.Path)
	require.JSONEq(t, `{"text":"hi"}`, body.String())
	require.Equal(t, sender.ClassRobotBroken, o.Class)
	require.NotContains(t, o.Reason, "secretpath")
}
