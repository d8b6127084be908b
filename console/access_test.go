package console_test

import (
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/proxies"
)

// loginFrom posts a login with tok as a browser behind the trusted proxy would, for
// client, over HTTPS when https.
func (s *site) loginFrom(client, tok string, https bool) *http.Response {
	s.t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.srv.URL+"/ui/login", strings.NewReader(url.Values{"token": {tok}}.Encode()))
	require.NoError(s.t, err)
	req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
	req.Header.Set("Origin", s.srv.URL)
	if client != "" {
		req.Header.Set("X-Forwarded-For", client)
	}
	if https {
		req.Header.Set("X-Forwarded-Proto", "https")
	}
	resp, err := s.client.Do(req)
	require.NoError(s.t, err)
	resp.Body.Close()
	return resp
}

// A client that failed 5 logins waits out the window (429 with Retry-After, even with
// the right token), others do not; 100 failures from everyone make every client wait.
// Behind a trusted proxy the client is the one it forwards; from anyone else the header
// is ignored.
func TestConsoleLimitsFailedLogins(t *testing.T) {
	direct := newSite(t, token)
	for i := range 5 {
		require.Equal(t, http.StatusUnauthorized, direct.loginFrom("198.51.100."+strconv.Itoa(i), "wrong", false).StatusCode,
			"failure %d", i+1)
	}
	resp := direct.loginFrom("198.51.100.99", token, false)
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "a stranger's X-Forwarded-For changes no client")
	after, err := strconv.Atoi(resp.Header.Get("Retry-After"))
	require.NoError(t, err)
	require.True(t, after > 0 && after <= 300, "Retry-After %d s, within the 5-minute window", after)
	require.Empty(t, resp.Cookies(), "no session while waiting")

	proxied := newSiteBehind(t, token, mustTrust(t, "127.0.0.0/8"))
	for range 5 {
		require.Equal(t, http.StatusUnauthorized, proxied.loginFrom("198.51.100.1", "wrong", false).StatusCode)
	}
	require.Equal(t, http.StatusTooManyRequests, proxied.loginFrom("198.51.100.1", token, false).StatusCode)
	resp = proxied.loginFrom("198.51.100.2", token, false)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "another client logs in")
	for i := range 19 * 5 {
		require.Equal(t, http.StatusUnauthorized, proxied.loginFrom("203.0.113."+strconv.Itoa(i/5), "wrong", false).StatusCode)
	}
	require.Equal(t, http.StatusTooManyRequests, proxied.loginFrom("192.0.2.1", token, false).StatusCode,
		"100 failures in the window: everyone waits")

	// An IPv6 client is its /64: taking its addresses in turn tries nothing anew.
	v6 := newSiteBehind(t, token, mustTrust(t, "127.0.0.0/8"))
	for i := range 5 {
		require.Equal(t, http.StatusUnauthorized, v6.loginFrom("2001:db8:1:2::"+strconv.Itoa(i+1), "wrong", false).StatusCode)
	}
	require.Equal(t, http.StatusTooManyRequests, v6.loginFrom("2001:db8:1:2::99", token, false).StatusCode, "the same /64")
	require.Equal(t, http.StatusSeeOther, v6.loginFrom("2001:db8:1:3::1", token, false).StatusCode, "another /64")
}

// The session cookie is Secure over HTTPS, also behind a trusted proxy that terminated
// it, and never because an untrusted client says so.
func TestConsoleSecureCookieBehindAProxy(t *testing.T) {
	proxied := newSiteBehind(t, token, mustTrust(t, "127.0.0.1"))
	resp := proxied.loginFrom("198.51.100.1", token, true)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)
	require.True(t, resp.Cookies()[0].Secure, "HTTPS at the proxy")
	resp = proxied.another().loginFrom("198.51.100.1", token, false)
	require.False(t, resp.Cookies()[0].Secure, "plain HTTP at the proxy")
	direct := newSite(t, token)
	resp = direct.loginFrom("", token, true)
	require.False(t, resp.Cookies()[0].Secure, "X-Forwarded-Proto from a client that is no proxy")
}

// A logout ends the session on the server: its cookie, kept and sent again, opens
// nothing; another browser's session stays open. A login form larger than a login is
// refused.
func TestConsoleLogoutEndsTheSession(t *testing.T) {
	s := newSite(t, token)
	s.login()
	other := s.another()
	other.login()
	kept := s.sessionCookie()
	_, page := s.get("/ui/failed")
	resp, _ := s.post("/ui/logout", url.Values{"csrf": {s.csrf(page)}}, s.srv.URL)
	require.Equal(t, http.StatusSeeOther, resp.StatusCode)

	u, _ := url.Parse(s.srv.URL + "/ui/")
	s.client.Jar.SetCookies(u, []*http.Cookie{{Name: "rd_console", Value: kept, Path: "/ui/"}})
	resp, _ = s.get("/ui/failed")
	require.Equal(t, http.StatusSeeOther, resp.StatusCode, "the logged-out cookie opens nothing")
	resp, _ = s.post("/ui/escalations/ack", url.Values{"csrf": {s.csrf(page)}}, s.srv.URL)
	require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "nor posts anything")
	resp, _ = other.get("/ui/failed")
	require.Equal(t, http.StatusOK, resp.StatusCode, "the other browser's session is its own")

	resp, _ = s.post("/ui/login", url.Values{"token": {strings.Repeat("x", 5000)}}, s.srv.URL)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
}

// TestConsoleRefusesALargeForm: a logged-in form of 2 MiB (Go reads 10 MB by default) is
// refused with 413, and what it asked is not done.
func TestConsoleRefusesALargeForm(t *testing.T) {
	s := newSite(t, token)
	s.login()
	_, page := s.get("/ui/failed")
	resp, body := s.post("/ui/escalations/ack", url.Values{"csrf": {s.csrf(page)}, "key": {"k"}, "pad": {strings.Repeat("x", 2<<20)}}, s.srv.URL)
	require.Equal(t, http.StatusRequestEntityTooLarge, resp.StatusCode)
	require.Contains(t, body, "larger than any of the console")
	resp, _ = s.post("/ui/escalations/ack", url.Values{"csrf": {s.csrf(page)}, "pad": {strings.Repeat("x", 1<<10)}}, s.srv.URL)
	require.NotEqual(t, http.StatusRequestEntityTooLarge, resp.StatusCode, "a form of ordinary size is read")
}

func mustTrust(t *testing.T, entries ...string) proxies.Trusted {
	t.Helper()
	trusted, err := proxies.Parse(entries)
	require.NoError(t, err)
	return trusted
}
