package console

import (
	"context"
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"net/http"
	"strconv"
	"strings"
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
	// Operators are the named logins (config admin.operators); Token logs in as "admin".
	Operators []config.Operator
	// ProxyUserHeader names the header by which an authenticating proxy (one of Proxies)
	// names the person (config admin.proxyUserHeader): a request from one that carries
	// it is that person's, without a login. "": none.
	ProxyUserHeader string
}

// adminOperator is the operator admin.token logs in as.
const adminOperator = "admin"

// signedIn is who a request of a valid session is: its session and its operator.
type signedIn struct{ session, operator string }

// operatorOf is the operator of an authed request (see Console.authed): the name the
// console records and shows for what the request does.
func operatorOf(r *http.Request) string {
	in, _ := r.Context().Value(ctxKey{}).(signedIn)
	return in.operator
}

// proxyUser is the person an authenticating proxy names in the request (Access.
// ProxyUserHeader), when the request came from a trusted proxy and the name is one an
// operator may have.
func (c *Console) proxyUser(r *http.Request) (string, bool) {
	if c.access.ProxyUserHeader == "" || !c.access.Proxies.From(r) {
		return "", false
	}
	name := strings.TrimSpace(r.Header.Get(c.access.ProxyUserHeader))
	if !config.ValidOperatorName(name) {
		if name != "" {
			c.logger.Warn("console: the proxy's user header names no operator; asking for a login",
				"header", c.access.ProxyUserHeader, "client", c.access.Proxies.Client(r))
		}
		return "", false
	}
	if c.tokenOperator(name) {
		// What it does would be recorded as that login's (admin.token's, an operator's
		// token's), and could not be told from it.
		c.logger.Warn("console: the proxy's user header names a login of the console's tokens; asking for a login",
			"header", c.access.ProxyUserHeader, "operator", name, "client", c.access.Proxies.Client(r))
		return "", false
	}
	return name, true
}

// tokenOperator reports whether name is the login of a token: admin (admin.token) or an
// operator of admin.operators.
func (c *Console) tokenOperator(name string) bool {
	if name == adminOperator {
		return true
	}
	for _, o := range c.access.Operators {
		if o.Name == name {
			return true
		}
	}
	return false
}

// loginOfToken is the login of the operator whose token is got (admin.token: admin), if
// any.
func (c *Console) loginOfToken(got string) (login, bool) {
	sum := sha256.Sum256([]byte(got))
	in, found := login{}, false
	if subtle.ConstantTimeCompare(sum[:], c.token[:]) == 1 {
		in, found = login{way: "t", operator: adminOperator, print: c.adminPrint}, true
	}
	for _, o := range c.access.Operators {
		t := sha256.Sum256([]byte(o.Token.Reveal()))
		if subtle.ConstantTimeCompare(sum[:], t[:]) == 1 {
			in, found = login{way: "t", operator: o.Name, print: tokenPrint(o.Token.Reveal())}, true
		}
	}
	return in, found
}

// Sessions are the console's sessions and failed logins, kept for every replica.
type Sessions interface {
	Open(ctx context.Context, session string, ttl time.Duration) error
	Alive(ctx context.Context, session string) (bool, error)
	End(ctx context.Context, session string) error
	// LoginAttempt counts a login about to be tried as a failure (0), or says how long
	// the client must wait (not counted); LoginSucceeded takes a counted one back.
	LoginAttempt(ctx context.Context, client string, l store.LoginLimits) (time.Duration, error)
	LoginSucceeded(ctx context.Context, client string) error
}

// LoginLimits are the console's, and every route's that takes the admin token: a client
// that failed 5 logins within 5 minutes waits out the 5 minutes (as Grafana locks a
// login), and after 100 failures from everyone in 5 minutes every client does.
var LoginLimits = store.LoginLimits{PerClient: 5, Total: 100, Window: 5 * time.Minute}

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
	client := proxies.ThrottleKey(c.access.Proxies.Client(r))
	wait, err := c.access.Sessions.LoginAttempt(r.Context(), client, LoginLimits)
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
	who, ok := c.loginOfToken(r.PostForm.Get("token"))
	if !ok { // counted already
		c.logger.Warn("console login refused: wrong token", "client", client)
		c.render(w, r, http.StatusUnauthorized, "login", map[string]any{"Next": next, "Error": "That is not an operator's token."})
		return
	}
	if err := c.access.Sessions.LoginSucceeded(r.Context(), client); err != nil {
		c.unavailable(w, r, err)
		return
	}
	if _, err := c.openSession(w, r, who); err != nil {
		c.unavailable(w, r, err)
		return
	}
	c.logger.Info("console login", "client", client, "operator", who.operator)
	http.Redirect(w, r, next, http.StatusSeeOther)
}

// openSession opens a session of the operator of in and sets its cookie on w.
func (c *Console) openSession(w http.ResponseWriter, r *http.Request, in login) (string, error) {
	session := c.session(c.now().Add(sessionTTL), in)
	if err := c.access.Sessions.Open(r.Context(), session, sessionTTL); err != nil {
		return "", err
	}
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: session, Path: Prefix,
		MaxAge: int(sessionTTL / time.Second), HttpOnly: true, Secure: c.access.Proxies.Secure(r), SameSite: http.SameSiteStrictMode})
	return session, nil
}

func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	if in, ok := r.Context().Value(ctxKey{}).(signedIn); ok {
		if err := c.access.Sessions.End(r.Context(), in.session); err != nil {
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
