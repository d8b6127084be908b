package console_test

import (
	"context"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/store"
)

const anaToken = "ana-operator-token-0123456789"

// Named operators: each logs in with a token of their own, the console shows who is
// signed in, and what they do is recorded as theirs — an acknowledgement (which the chat
// is told) and a cancel's note. Before, every action was "console"'s.
func TestConsoleOperatorsActAsThemselves(t *testing.T) {
	s := newSiteWith(t, console.Access{Token: token, Operators: []config.Operator{{Name: "ana", Token: anaToken}}})
	ctx := context.Background()
	resp, _ := s.post("/ui/login", url.Values{"token": {anaToken}, "next": {"/ui/escalations"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	s.fire("pay-ana", "Payments down")
	_, body := s.get("/ui/escalations")
	s.acksAs(body, "pay-ana", "ana")

	s.record("ana-row", "ops", `{"msgtype":"text","text":{"content":"x"}}`, "transient")
	_, page := s.get("/ui/alerts/ana-row/cancel")
	resp, _ = s.post("/ui/alerts/ana-row/cancel", url.Values{"csrf": {s.csrf(page)}, "reason": {"duplicate"}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	rows, _, err := s.fs.List(ctx, store.Filter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.NotNil(t, rows[0].CancelledBy)
	require.Equal(t, "ana", *rows[0].CancelledBy, "the cancel's note names the operator")

	resp, _ = s.another().post("/ui/login", url.Values{"token": {"not-anyones-token-0123456789"}, "next": {"/ui/failed"}}, s.srv.URL)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode)
}

// acksAs checks that page shows operator signed in, acknowledges the episode key from it,
// and checks that the acknowledgement is recorded as operator's.
func (s *site) acksAs(page, key, operator string) {
	s.t.Helper()
	require.Contains(s.t, page, `<span class="operator">`+operator+`</span>`)
	resp, _ := s.post("/ui/escalations/ack", s.ackForm(page, key), s.srv.URL)
	require.Equal(s.t, http.StatusSeeOther, resp.StatusCode)
	ep, err := s.eps.Get(context.Background(), key)
	require.NoError(s.t, err)
	require.Equal(s.t, store.EpisodeAcked, ep.State)
	require.Equal(s.t, operator, ep.AckedBy)
}

// Behind an authenticating proxy (admin.proxyUserHeader), the person the proxy names is
// signed in without a login, and their acknowledgement is recorded as theirs; the same
// header from an address that is not a trusted proxy is ignored (the login page).
func TestConsoleProxyNamesThePerson(t *testing.T) {
	trusted, err := proxies.Parse([]string{"127.0.0.1/32", "::1/128"})
	require.NoError(t, err)
	s := newSiteWith(t, console.Access{Token: token, Proxies: trusted, ProxyUserHeader: "X-Forwarded-User",
		Operators: []config.Operator{{Name: "ana", Token: "ana-token-0123456789abcdef"}}})
	get := func(s *site, path, user string) (*http.Response, string) {
		req, err := http.NewRequest(http.MethodGet, s.srv.URL+path, nil)
		require.NoError(t, err)
		if user != "" {
			req.Header.Set("X-Forwarded-User", user)
		}
		resp, err := s.client.Do(req)
		require.NoError(t, err)
		defer resp.Body.Close()
		b := new(strings.Builder)
		_, _ = io.Copy(b, resp.Body)
		return resp, b.String()
	}
	s.fire("pay-bo", "Payments down")
	bo := s.behind("bo@example.com")
	resp, body := bo.get("/ui/escalations")
	require.Equal(t, http.StatusOK, resp.StatusCode, "no login behind the proxy")
	bo.acksAs(body, "pay-bo", "bo@example.com")

	resp, body = get(s, "/ui/escalations", "cy")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, body, `<span class="operator">cy</span>`, "another person through the same browser is signed in as themselves")
	resp, _ = get(s.another(), "/ui/escalations", "<script>")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "a name no operator may have asks for a login")
	for _, name := range []string{"admin", "ana"} {
		resp, _ = get(s.another(), "/ui/escalations", name)
		require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the proxy cannot name %s, a login of a token", name)
	}
	resp, _ = get(s, "/ui/escalations", "")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode,
		"cy's session, opened by the proxy, does not hold for a request the proxy did not name cy in")

	untrusted := newSiteWith(t, console.Access{Token: token, ProxyUserHeader: "X-Forwarded-User"})
	resp, _ = get(untrusted, "/ui/escalations", "bo@example.com")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "from an address that is no trusted proxy the header is ignored")
	require.Contains(t, resp.Header.Get("Location"), "/ui/login")
}

// behind is s as seen through an authenticating proxy that names user in every request
// (X-Forwarded-User), with s's cookies.
func (s *site) behind(user string) *site {
	c := *s
	base := s.client.Transport
	if base == nil {
		base = http.DefaultTransport
	}
	c.client = &http.Client{Jar: s.client.Jar, CheckRedirect: s.client.CheckRedirect, Transport: namedBy{base, user}}
	return &c
}

// namedBy adds the proxy's user header to each request.
type namedBy struct {
	base http.RoundTripper
	user string
}

func (n namedBy) RoundTrip(r *http.Request) (*http.Response, error) {
	r = r.Clone(r.Context())
	r.Header.Set("X-Forwarded-User", n.user)
	return n.base.RoundTrip(r)
}
