package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/store"
)

// Access is who may use the console and how they are held to it.
type Access struct {
	// Token is the admin token, the console's login; "" turns the console off.
	Token config.Secret
	// Sessions keeps the open sessions and counts failed logins, for every replica
	// (store.ConsoleAccess): a logout ends a session everywhere.
	Sessions Sessions
	// Proxies are the trusted reverse proxies (config http.trustedProxies): behind one,
	// the client's address and HTTPS are what it forwards.
	Proxies proxies.Trusted
}

// Sessions are the console's sessions and failed logins, kept for every replica.
type Sessions interface {
	Open(ctx context.Context, session string, ttl time.Duration) error
	Alive(ctx context.Context, session string) (bool, error)
	End(ctx context.Context, session string) error
	LoginWait(ctx context.Context, client string, l store.LoginLimits) (time.Duration, error)
	LoginFailed(ctx context.Context, client string, window time.Duration) error
}

// loginLimits are the console's: a client that failed 5 logins within 5 minutes waits
// out the 5 minutes (as Grafana locks a login), and after 100 failures from everyone in
// 5 minutes every client does.
var loginLimits = store.LoginLimits{PerClient: 5, Total: 100, Window: 5 * time.Minute}

// maxLoginBody bounds a login form: a token and where to go next.
const maxLoginBody = 4 << 10

// maxForm bounds any other form of the console: the largest is the template page's, an
// alert and a template to render.
const maxForm = 64 << 10

func (c *Console) login(w http.ResponseWriter, r *http.Request) {
	r.Body = http.MaxBytesReader(w, r.Body, maxLoginBody)
	if err := r.ParseForm(); err != nil {
		if mbe := (*http.MaxBytesError)(nil); errors.As(err, &mbe) {
			c.fail(w, r, http.StatusRequestEntityTooLarge, "The login form is larger than a login.")
			return
		}
		c.fail(w, r, http.StatusBadRequest, "The login form could not be read.")
		return
	}
	next := safeNext(r.PostForm.Get("next"))
	client := c.access.Proxies.Client(r)
	wait, err := c.access.Sessions.LoginWait(r.Context(), client, loginLimits)
	if err != nil {
		c.unavailable(w, r, err)
		return
	}
	if wait > 0 {
		c.logger.Warn("console login refused: too many failed logins", "client", client, "retry_after", wait.Round(time.Second))
		secs := int((wait + time.Second - 1) / time.Second)
		w.Header().Set("Retry-After", strconv.Itoa(secs))
		c.render(w, r, http.StatusTooManyRequests, "login", map[string]any{"Next": next,
			"Error": "Too many failed logins: try again in " + (time.Duration(secs) * time.Second).String() + "."})
		return
	}
	got := sha256.Sum256([]byte(r.PostForm.Get("token")))
	if subtle.ConstantTimeCompare(got[:], c.token[:]) != 1 {
		if err := c.access.Sessions.LoginFailed(r.Context(), client, loginLimits.Window); err != nil {
			c.unavailable(w, r, err)
			return
		}
		c.logger.Warn("console login refused: wrong token", "client", client)
		c.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "That is not the admin token."})
		return
	}
	session := c.session(c.now().Add(sessionTTL))
	if err := c.access.Sessions.Open(r.Context(), session, sessionTTL); err != nil {
		c.unavailable(w, r, err)
		return
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: session, Path: Prefix,
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: c.access.Proxies.Secure(r), SameSite: http.SameSiteStrictMode})
	c.logger.Info("console login", "client", client)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if s, ok := r.Context().Value(ctxKey{}).(string); ok {
		if err := c.access.Sessions.End(r.Context(), s); err != nil {
			c.unavailable(w, r, err)
			return
		}
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: "", Path: Prefix, MaxAge: -1, HttpOnly: true,
		Secure: c.access.Proxies.Secure(r), SameSite: http.SameSiteStrictMode})
	http.Redirect(w, r, Prefix+"login", http.StatusSeeOther)
}

// unavailable answers a request the session store could not serve: 503, try again.
func (c *Console) unavailable(w http.ResponseWriter, r *http.Request, err error) {
	c.logger.Warn("console: the session store is unavailable", "err", err)
	w.Header().Set("Retry-After", "5")
	c.fail(w, r, http.StatusServiceUnavailable, "Sessions cannot be checked right now (Redis is unavailable): try again in a moment.")
}
