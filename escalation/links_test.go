package escalation_test

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A link opens to the episode it was signed for until it expires; a link that is not
// exactly as signed — any one character changed, the number of another episode, another
// service's key — opens to nothing.
func TestLinks(t *testing.T) {
	t.Parallel()
	links := escalation.NewLinks("https://rd.example.com/", mustSigner(t, "service-key-0123456789-0123456789"), time.Hour)
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

	other := escalation.NewLinks("https://rd.example.com", mustSigner(t, "another-key-0123456789-0123456789"), time.Hour)
	_, _, err = other.Open(token, now)
	require.ErrorIs(t, err, escalation.ErrBadLink, "another service's key")
	// A rotation: the new key signs, the old one, listed after it, still opens what it
	// signed; without it, nothing it signed opens.
	rotated := escalation.NewLinks("https://rd.example.com", mustSigner(t, "new-key-0123456789-0123456789-012", "service-key-0123456789-0123456789"), time.Hour)
	k, _, err := rotated.Open(token, now)
	require.NoError(t, err, "a link of the old key, after the rotation")
	require.Equal(t, "db-primary", k)
	_, _, err = links.Open(rotated.Token("db-primary", 42, now.Add(time.Hour)), now)
	require.ErrorIs(t, err, escalation.ErrBadLink, "the new key signs")
	for _, bad := range []string{"", ".", "...", "a.b.c", "a.b.c.d.e", token + ".x", token[:len(token)-1], token + "A",
		token + "/x", strings.ReplaceAll(token, ".", "")} {
		_, _, err := links.Open(bad, now)
		require.ErrorIs(t, err, escalation.ErrBadLink, "%q", bad)
	}
}

// mustSigner is the signer of keys.
func mustSigner(t *testing.T, keys ...string) *escalation.Signer {
	t.Helper()
	s, err := escalation.NewSigner(keys...)
	require.NoError(t, err)
	return s
}

// ackSite is the acknowledgement page of an Escalator on the local Redis, Postgres and
// broker, behind an httptest server; what the handler logs is kept.
type ackSite struct {
	t     *testing.T
	srv   *httptest.Server
	links *escalation.Links
	esc   *escalation.Escalator
	log   *syncBuffer
}

// syncBuffer is a buffer the server's goroutines write and the test reads.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// newAckSite starts the page; with brokenRows its cancels cannot reach failed_sends
// (its pool is closed), as when Postgres is down.
func newAckSite(t *testing.T, brokenRows bool) *ackSite {
	t.Helper()
	ns := testenv.NameServer(t)
	topic := testenv.Unique("rd_esc_")
	sinktest.CreateTopic(t, ns, topic)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{ns}, Topic: topic})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	rdb, prefix := testenv.Redis(t)
	_, fs := testenv.FailedSends(t)
	if brokenRows {
		pool, err := store.OpenPostgres(context.Background(), testenv.MigratedPostgres(t))
		require.NoError(t, err)
		pool.Close()
		fs = store.NewFailedSends(pool, store.FailedSendsOptions{})
	}
	cancels := failed.Canceller{Stage: store.NewWheelStage(rdb, prefix, store.WheelStageOptions{}), Rows: fs,
		Note: store.CancelNote{By: "escalation"}}
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops": {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	links := escalation.NewLinks("https://rd.example.com", mustSigner(t, "service-key-0123456789-0123456789"), time.Hour)
	policies := map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{After: time.Hour, Target: "ops"}, {After: 2 * time.Hour, Target: "ops"}}}}
	log := &syncBuffer{}
	logger := slog.New(slog.NewJSONHandler(log, &slog.HandlerOptions{Level: slog.LevelDebug}))
	esc := escalation.New(escalation.Options{Policies: policies, Links: links}, store.NewEpisodes(rdb, prefix, time.Hour), p,
		cancels, chat, logger, nil, time.Now)
	srv := httptest.NewServer(esc.AckHandler(nil, logger))
	t.Cleanup(srv.Close)
	return &ackSite{t: t, srv: srv, links: links, esc: esc, log: log}
}

// start starts an episode of key and returns its number and the token of its link.
func (s *ackSite) start(key string) (int64, string) {
	s.t.Helper()
	f, err := s.esc.Fire(context.Background(), key, "db", escalation.Content{Title: "Primary <db> down", Text: "db-1 refuses connections"})
	require.NoError(s.t, err)
	require.Equal(s.t, "started", f.Result)
	return f.Seq, s.links.Token(key, f.Seq, time.Now().Add(time.Hour))
}

// do sends a request to the page of token (a POST with form, and the cookie when
// cookie is not empty) and returns the answer and its body.
func (s *ackSite) do(method, token string, form url.Values, cookie string) (*http.Response, string) {
	s.t.Helper()
	var body io.Reader
	if form != nil {
		body = strings.NewReader(form.Encode())
	}
	req, err := http.NewRequest(method, s.srv.URL+escalation.AckPath+token, body)
	require.NoError(s.t, err)
	if form != nil {
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	}
	if cookie != "" {
		req.AddCookie(&http.Cookie{Name: "rd_ack_csrf", Value: cookie})
	}
	resp, err := http.DefaultClient.Do(req)
	require.NoError(s.t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(s.t, err)
	return resp, string(b)
}

var csrfField = regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"`)

// form opens the page of token and returns the CSRF token of its form and of its cookie.
func (s *ackSite) form(token string) (field, cookie string) {
	s.t.Helper()
	resp, body := s.do(http.MethodGet, token, nil, "")
	require.Equal(s.t, http.StatusOK, resp.StatusCode, body)
	m := csrfField.FindStringSubmatch(body)
	require.NotNil(s.t, m, "the page has a form: %s", body)
	for _, c := range resp.Cookies() {
		if c.Name == "rd_ack_csrf" {
			require.True(s.t, c.HttpOnly)
			require.Equal(s.t, http.SameSiteStrictMode, c.SameSite)
			require.Equal(s.t, escalation.AckPath, c.Path)
			return m[1], c.Value
		}
	}
	s.t.Fatal("the page sets no CSRF cookie")
	return "", ""
}

func (s *ackSite) state(key string) escalation.Status {
	s.t.Helper()
	st, err := s.esc.Status(context.Background(), key)
	require.NoError(s.t, err)
	return st
}

// The page acknowledges only a POST that brings the form's CSRF token and the same in
// its cookie, and a name of one line of at most 64 characters; anything else changes
// nothing and is answered 403 or 400. The name is shown escaped; the page sends no
// referrer, is never cached, and the token never reaches the log.
func TestAckPage(t *testing.T) {
	t.Parallel()
	s := newAckSite(t, false)
	key := testenv.Unique("db-")
	_, token := s.start(key)

	resp, body := s.do(http.MethodGet, token, nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"))
	require.Equal(t, "no-store", resp.Header.Get("Cache-Control"))
	require.Contains(t, resp.Header.Get("Content-Security-Policy"), "default-src 'none'")
	require.Contains(t, body, "Primary &lt;db&gt; down", "the page says what is acknowledged, escaped")
	require.Contains(t, body, "db-1 refuses connections")
	field, cookie := s.form(token)
	require.Equal(t, field, cookie, "double submit: the same token in the form and the cookie")

	for name, c := range map[string]struct {
		form   url.Values
		cookie string
	}{
		"no cookie":        {url.Values{"csrf": {field}, "by": {"mallory"}}, ""},
		"no form token":    {url.Values{"by": {"mallory"}}, cookie},
		"other form token": {url.Values{"csrf": {strings.Repeat("0", len(field))}, "by": {"mallory"}}, cookie},
		"other cookie":     {url.Values{"csrf": {field}, "by": {"mallory"}}, strings.Repeat("0", len(field))},
		"a form too large": {url.Values{"csrf": {field}, "by": {"mallory"}, "pad": {strings.Repeat("x", 8<<10)}}, cookie},
	} {
		resp, body := s.do(http.MethodPost, token, c.form, c.cookie)
		require.Equal(t, http.StatusForbidden, resp.StatusCode, "%s: %s", name, body)
		require.Contains(t, body, "open the link again", name)
		require.Equal(t, store.EpisodePending, s.state(key).State, name)
	}
	for name, by := range map[string]string{
		"no name": "  ", "a long name": strings.Repeat("é", 65), "two lines": "ana\nbo", "a NUL": "ana\x00",
		"a link": "[ana](http://evil.example)", "a mention": "<at id=all></at>", "markup": "<b>ana</b>"} {
		resp, body := s.do(http.MethodPost, token, url.Values{"csrf": {field}, "by": {by}}, cookie)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%s: %s", name, body)
		require.Contains(t, body, "give a name of 1 to 64 letters", name)
		require.Regexp(t, csrfField, body, "%s: the form is shown again", name)
		require.Equal(t, store.EpisodePending, s.state(key).State, name)
	}

	by := "Ana O'Neil-" + strings.Repeat("é", 53) // 64 characters
	resp, body = s.do(http.MethodPost, token, url.Values{"csrf": {field}, "by": {"  " + by + " "}}, cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Acknowledged by Ana O&#39;Neil-é", "the name is shown escaped")
	require.Contains(t, body, "No step was sent yet", "the chat is told only when a step was sent")
	require.NotRegexp(t, csrfField, body)
	st := s.state(key)
	require.Equal(t, store.EpisodeAcked, st.State)
	require.Equal(t, by, st.AckedBy)

	resp, body = s.do(http.MethodGet, token, nil, "")
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Already acknowledged by Ana O&#39;Neil-é")
	require.NotRegexp(t, csrfField, body, "no form once acknowledged")
	require.Empty(t, resp.Cookies())
	resp, body = s.do(http.MethodPost, token, url.Values{"csrf": {field}, "by": {"bo"}}, cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Already acknowledged by Ana O&#39;Neil-é", "a second acknowledgement changes nothing")
	require.Equal(t, by, s.state(key).AckedBy)

	require.Contains(t, s.log.String(), key, "the acknowledgement is logged")
	require.NotContains(t, s.log.String(), token, "the token is in the log")
}

// Links that cannot acknowledge: another service's or tampered (404), expired (410),
// for an episode that is over or none (404); a method other than GET and POST is 405,
// and without links (no ingress.publicURL) the page says they are off.
func TestAckPageRefusesLinks(t *testing.T) {
	t.Parallel()
	s := newAckSite(t, false)
	key := testenv.Unique("db-")
	seq, token := s.start(key)
	other := escalation.NewLinks("https://rd.example.com", mustSigner(t, "another-key-0123456789-0123456789"), time.Hour)
	i := len(token) / 2
	c := byte('A')
	if token[i] == c {
		c = 'B'
	}
	for name, want := range map[string]struct {
		token  string
		status int
		says   string
	}{
		"tampered":         {token[:i] + string(c) + token[i+1:], http.StatusNotFound, "not one of this service"},
		"other service":    {other.Token(key, seq, time.Now().Add(time.Hour)), http.StatusNotFound, "not one of this service"},
		"expired":          {s.links.Token(key, seq, time.Now().Add(-time.Second)), http.StatusGone, "has expired"},
		"another episode":  {s.links.Token(key, seq-1, time.Now().Add(time.Hour)), http.StatusNotFound, "This episode is over"},
		"no such episode":  {s.links.Token("nobody-"+key, seq, time.Now().Add(time.Hour)), http.StatusNotFound, "This episode is over"},
		"no token at all":  {"", http.StatusNotFound, "not one of this service"},
		"a path below one": {token + "/x", http.StatusNotFound, "not one of this service"},
	} {
		for _, method := range []string{http.MethodGet, http.MethodPost} {
			resp, body := s.do(method, want.token, url.Values{"csrf": {"x"}, "by": {"mallory"}}, "x")
			require.Equal(t, want.status, resp.StatusCode, "%s %s: %s", name, method, body)
			require.Contains(t, body, want.says, "%s %s", name, method)
			require.NotRegexp(t, csrfField, body, "%s %s: no form", name, method)
			require.Equal(t, "no-referrer", resp.Header.Get("Referrer-Policy"), name)
		}
	}
	resp, body := s.do(http.MethodPut, token, nil, "")
	require.Equal(t, http.StatusMethodNotAllowed, resp.StatusCode, body)
	require.Equal(t, "GET, POST", resp.Header.Get("Allow"))
	require.Equal(t, store.EpisodePending, s.state(key).State, "nothing acknowledged it")

	off := escalation.New(escalation.Options{}, nil, nil, nil, nil, testenv.Logger(), nil, time.Now)
	rec := httptest.NewRecorder()
	off.AckHandler(nil, testenv.Logger()).ServeHTTP(rec, httptest.NewRequest(http.MethodGet, escalation.AckPath+token, nil))
	require.Equal(t, http.StatusServiceUnavailable, rec.Code)
	require.Contains(t, rec.Body.String(), "ingress.publicURL")
}

// An acknowledgement that is recorded, but whose cancel cannot be carried out now
// (failed_sends is unreachable), is answered as acknowledged: the episode's gate
// withholds its steps, and the sweeper carries the cancel out later. "Try again" would
// not be true.
func TestAckPageWhenTheCancelFails(t *testing.T) {
	t.Parallel()
	s := newAckSite(t, true)
	key := testenv.Unique("db-")
	_, token := s.start(key)
	field, cookie := s.form(token)
	resp, body := s.do(http.MethodPost, token, url.Values{"csrf": {field}, "by": {"ana"}}, cookie)
	require.Equal(t, http.StatusOK, resp.StatusCode, body)
	require.Contains(t, body, "Acknowledged by ana.")
	st := s.state(key)
	require.Equal(t, store.EpisodeAcked, st.State)
	require.Equal(t, 0, st.Outbox.Cancel, "the cancel of step 1 is left to the sweeper")
	require.Contains(t, s.log.String(), "left to the sweeper")
}
