package console_test

import (
	"context"
	"encoding/json"
	"fmt"
	"html"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/store"
)

// fire starts an episode of key under policy db, as a receiver or the API does.
func (s *site) fire(key, title string) int64 {
	s.t.Helper()
	content, err := json.Marshal(escalation.Content{Title: title, Text: "x"})
	require.NoError(s.t, err)
	f, err := s.eps.Fire(context.Background(), key, "db", content, time.Hour)
	require.NoError(s.t, err)
	require.Equal(s.t, "started", f.Result)
	return f.Seq
}

// ackForm is the Acknowledge form of the row of key on the escalations page: its hidden
// fields, as a browser would post them.
func (s *site) ackForm(page, key string) url.Values {
	s.t.Helper()
	re := regexp.MustCompile(`<input type="hidden" name="csrf" value="([0-9a-f]+)"><input type="hidden" name="key" value="` +
		regexp.QuoteMeta(html.EscapeString(key)) + `"><input type="hidden" name="seq" value="(\d+)"><button>Acknowledge</button>`)
	m := re.FindStringSubmatch(page)
	require.NotNil(s.t, m, "no Acknowledge button for %s", key)
	return url.Values{"csrf": {m[1]}, "key": {key}, "seq": {m[2]}}
}

// The escalations page lists the live episodes with their state, steps sent, next step,
// its target and due time; Acknowledge on a running one acknowledges that episode for
// "admin", the admin token's operator (its outbox then names the cancel of the next step and the announcement);
// a second press, and a press for an older episode of the key, change nothing and say
// why; a foreign CSRF token is refused; a resolved episode is no longer listed.
func TestConsoleEscalationsView(t *testing.T) {
	s := newSite(t, token)
	s.login()
	ctx := context.Background()
	resp, body := s.get("/ui/escalations")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, "No episode is live.")
	require.Contains(t, body, `<a href="/ui/escalations" class="here">Escalations</a>`)

	seq := s.fire("pay-1", "Payments down")
	send, why, err := s.eps.StepDue(ctx, "pay-1", seq, 0, "ops", 1)
	require.NoError(t, err)
	require.True(t, send, why)
	other := s.fire("disk-2", "Disk full")
	ep, err := s.eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	due := ep.Started.Add(10 * time.Minute).UTC().Format("2006-01-02 15:04:05Z")

	resp, body = s.get("/ui/escalations")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, fmt.Sprintf(`<td>pay-1</td><td>%d</td><td class="principal">—</td><td>db</td><td>pending</td><td>[0-9: Z-]+ \((now|\d+s ago)\)</td>`+
		`<td>1 of 2</td><td>2 → lead</td><td>%s \(in (9m5\ds|10m0s)\)</td><td>—</td>`, seq, regexp.QuoteMeta(due)), body)
	require.Regexp(t, fmt.Sprintf(`<td>disk-2</td><td>%d</td><td class="principal">—</td><td>db</td><td>pending</td><td>[^<]+</td><td>0 of 2</td><td>1 → ops</td>`, other), body)

	form := s.ackForm(body, "pay-1")
	require.Equal(t, strconv.FormatInt(seq, 10), form.Get("seq"))
	forged := url.Values{"csrf": {strings.Repeat("0", len(form.Get("csrf")))}, "key": form["key"], "seq": form["seq"]}
	resp, _ = s.post("/ui/escalations/ack", forged, s.srv.URL)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	resp, _ = s.post("/ui/escalations/ack", form, "https://evil.example")
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	ep, err = s.eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodePending, ep.State, "a refused form acknowledges nothing")

	resp, _ = s.post("/ui/escalations/ack", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/ui/escalations", loc.Path)
	require.Equal(t, fmt.Sprintf("Acknowledged episode %d of pay-1: no more steps are sent, and the chat is told.", seq), loc.Query().Get("done"))
	ep, err = s.eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeAcked, ep.State)
	require.Equal(t, "admin", ep.AckedBy, "the admin token logs in as admin")
	require.Equal(t, store.EpisodeOutbox{Publish: -1, Cancel: 1, Ack: true}, ep.Outbox, "the next step to cancel, the acknowledgement to announce")

	_, body = s.get(resp.Header.Get("Location"))
	require.Contains(t, body, `id="flash">Acknowledged episode`)
	require.Regexp(t, fmt.Sprintf(`<td>pay-1</td><td>%d</td><td class="principal">—</td><td>db</td><td>acked</td><td>[^<]+</td><td>1 of 2</td><td>—</td><td>—</td><td>admin</td>\s*<td></td>`, seq), body, "no Acknowledge button any more")

	resp, _ = s.post("/ui/escalations/ack", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err = url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("Not acknowledged: episode %d of pay-1 was acknowledged by admin before.", seq), loc.Query().Get("done"))

	stale := url.Values{"csrf": form["csrf"], "key": {"disk-2"}, "seq": {strconv.FormatInt(other-1, 10)}}
	resp, _ = s.post("/ui/escalations/ack", stale, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err = url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("Not acknowledged: episode %d of disk-2 does not run any more.", other-1), loc.Query().Get("done"))
	ep, err = s.eps.Get(ctx, "disk-2")
	require.NoError(t, err)
	require.Equal(t, store.EpisodePending, ep.State, "an acknowledgement of another episode of the key changes nothing")

	for _, bad := range []url.Values{{"key": {"disk-2"}}, {"key": {"disk-2"}, "seq": {"x"}}, {"seq": {"1"}}} {
		bad.Set("csrf", form.Get("csrf"))
		resp, body = s.post("/ui/escalations/ack", bad, s.srv.URL)
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "%v", bad)
		require.Contains(t, body, "which episode to acknowledge")
	}

	_, err = s.eps.Resolve(ctx, "pay-1", nil)
	require.NoError(t, err)
	_, body = s.get("/ui/escalations")
	require.NotContains(t, body, "<td>pay-1</td>", "a resolved episode is not live")
	require.Contains(t, body, "<td>disk-2</td>")
}

// An episode key is escaped wherever the page prints it (a cell, the form's hidden field,
// the message after acknowledging, carried in a URL query): keys the API takes are
// [A-Za-z0-9._:-], but a key is data, so one holding markup or URL syntax is shown as
// text and acknowledged as itself.
func TestConsoleEscalationsEscapeKeys(t *testing.T) {
	s := newSite(t, token)
	s.login()
	key := `<b id="k">x</b>&a=1?#/../ack`
	seq := s.fire(key, "<script>alert(1)</script>")
	_, body := s.get("/ui/escalations")
	require.NotContains(t, body, `<b id="k">`)
	require.Contains(t, body, "<td>"+html.EscapeString(key)+"</td>")

	form := s.ackForm(body, key)
	resp, _ := s.post("/ui/escalations/ack", form, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	loc, err := url.Parse(resp.Header.Get("Location"))
	require.NoError(t, err)
	require.Equal(t, "/ui/escalations", loc.Path, "the key stays inside the query")
	require.Equal(t, fmt.Sprintf("Acknowledged episode %d of %s: no more steps are sent.", seq, key), loc.Query().Get("done"))
	ep, err := s.eps.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, store.EpisodeAcked, ep.State)

	_, body = s.get(resp.Header.Get("Location"))
	require.NotContains(t, body, `<b id="k">`)
	require.Contains(t, body, html.EscapeString(key))
}

// The escalations page names the principal that started each episode through the HTTP
// ways in, and "—" where none is recorded.
func TestConsoleEscalationsShowThePrincipal(t *testing.T) {
	s := newSite(t, token)
	s.login()
	s.fire("owned-1", "Owned")
	s.fire("unowned-1", "Unowned")
	_, err := s.owners.Own(context.Background(), store.OwnEpisode, "owned-1", "shop", time.Hour)
	require.NoError(t, err)
	_, body := s.get("/ui/escalations")
	cell := func(key string) string {
		m := regexp.MustCompile(`<td>` + regexp.QuoteMeta(key) + `</td><td>\d+</td><td class="principal">([^<]*)</td>`).FindStringSubmatch(body)
		require.NotNil(t, m, "no row for %s", key)
		return m[1]
	}
	require.Equal(t, "shop", cell("owned-1"))
	require.Equal(t, "—", cell("unowned-1"))
}
