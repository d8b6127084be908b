// Package console is the operators' web console that `serve` mounts under /ui/: the
// failed sends (filter, page, open a row, retry or discard it, the stats), the
// scheduler's state (the wheel stage, the robot pool, recent lateness), the live
// escalation episodes (their next step and its due time; acknowledge one) and a page that
// renders an Alertmanager notification with a target's template. It is plain
// server-rendered HTML from embedded templates, with no JavaScript and no asset from
// outside the binary.
//
// Security: the console is off without an admin token, like the admin API. An operator
// logs in by posting the token once; the answer is a session cookie (HttpOnly,
// SameSite=Strict, Secure over HTTPS, also behind a trusted proxy; one per login, signed
// with a key derived from the token, so changing the token ends every session) that is
// also held in Redis, so a logout ends it on every replica. A client that failed 5
// logins in 5 minutes waits (429), and so does everyone after 100 (access.go). No secret appears in a URL
// or a page. Every POST carries a CSRF token derived from its own session and must come
// from the console's own origin. Answers forbid framing and carry a
// Content-Security-Policy that allows only the console's own stylesheet; templates escape
// everything they print, and every id or value in a URL is escaped for its place in it
// (url.PathEscape for a path segment, url.Values for a query: see pagePath, pageQuery).
package console

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"html/template"
	"io/fs"
	"log/slog"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/sender"
)

// Prefix is the path the console is served under; mount Handler on it.
const Prefix = "/ui/"

// sessionTTL is how long a login lasts.
const sessionTTL = 12 * time.Hour

const (
	sessionCookie = "rd_console"
	csp           = "default-src 'none'; style-src 'self'; img-src 'self'; form-action 'self'; frame-ancestors 'none'; base-uri 'none'"
)

//go:embed assets
var assets embed.FS

// State is what the scheduler view shows.
type State struct {
	// Mode is how hops cross the broker (levels or timer).
	Mode string
	// Waiting counts alerts in the Redis wheel stage not yet claimed; InFlight those
	// claimed by a replica and being handed off.
	Waiting, InFlight int64
	// Due lists the entries due soonest, with their target.
	Due []Due
	// Robots is the shared robot pool.
	Robots []sender.RobotStatus
	// Lateness is the recent hand-off lateness (due → sender) of this replica.
	Lateness Lateness
}

// Due is one entry of the wheel stage.
type Due struct {
	ID     string
	Target string
	At     time.Time
}

// Lateness summarises the hand-off lateness histogram.
type Lateness struct {
	Count    uint64
	P50, P99 time.Duration
}

// StateFunc reads the scheduler's state; app wires it to the wheel stage, the robot pool
// and the metrics.
type StateFunc func(ctx context.Context) (State, error)

// Console serves the pages.
type Console struct {
	failed   failed.Store
	targets  failed.Targets
	alerts   Alerts
	state    StateFunc
	episodes Escalations
	renderer Renderer // nil: no template page
	access   Access
	key      []byte // signs sessions and CSRF tokens; empty when the console is off
	token    [32]byte
	// adminPrint is admin.token's print (tokenPrint), kept in the admin's sessions
	adminPrint string
	pages      map[string]*template.Template
	logger     *slog.Logger
	now        func() time.Time
}

// Handler returns the console for the failed_sends table failedSends (each row's target
// described by targets), the alerts (found and cancelled by id), the scheduler state,
// the escalation episodes and the targets' templates (renderer, nil for none), to those
// access lets in; without access's token it answers 503 on every page, saying how to
// turn it on.
func Handler(failedSends failed.Store, targets failed.Targets, alerts Alerts, state StateFunc, episodes Escalations, renderer Renderer,
	access Access, logger *slog.Logger) http.Handler {
	c := &Console{failed: failedSends, targets: targets, alerts: alerts, state: state, episodes: episodes, renderer: renderer, pages: parsePages(),
		access: access, logger: logger.With("component", "console"), now: time.Now}
	if token := access.Token; token != "" {
		k := sha256.Sum256([]byte("rocketdelay console session key\x00" + token.Reveal()))
		c.key = k[:]
		c.token = sha256.Sum256([]byte(token.Reveal()))
		c.adminPrint = tokenPrint(token.Reveal())
	}
	mux := http.NewServeMux()
	static, _ := fs.Sub(assets, "assets") // cannot fail: the directory is embedded
	mux.Handle("GET "+Prefix+"static/", http.StripPrefix(Prefix+"static/", http.FileServerFS(static)))
	mux.HandleFunc("GET "+Prefix+"login", c.loginPage)
	mux.HandleFunc("POST "+Prefix+"login", c.login)
	mux.HandleFunc("POST "+Prefix+"logout", c.authed(c.logout))
	mux.HandleFunc("GET "+Prefix+"{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Prefix+"failed", http.StatusSeeOther)
	})
	mux.HandleFunc("GET "+Prefix+"failed", c.authed(c.list))
	mux.HandleFunc("GET "+Prefix+"failed/{id}", c.authed(c.detail))
	mux.HandleFunc("GET "+Prefix+"failed/{id}/{action}", c.authed(c.confirm))
	mux.HandleFunc("GET "+Prefix+"failed/bulk/{action}", c.authed(c.bulk))
	mux.HandleFunc("POST "+Prefix+"failed/bulk/{action}", c.authed(c.bulk))
	mux.HandleFunc("GET "+Prefix+"alerts", c.authed(c.alert))
	mux.HandleFunc("GET "+Prefix+"alerts/{id}/cancel", c.authed(c.cancelPage))
	mux.HandleFunc("POST "+Prefix+"alerts/{id}/cancel", c.authed(c.cancel))
	mux.HandleFunc("POST "+Prefix+"alerts/{id}/reschedule", c.authed(c.reschedule))
	mux.HandleFunc("POST "+Prefix+"failed/{id}/{action}", c.authed(c.act))
	mux.HandleFunc("GET "+Prefix+"scheduler", c.authed(c.scheduler))
	mux.HandleFunc("GET "+Prefix+"scheduled", c.authed(c.scheduled))
	mux.HandleFunc("GET "+Prefix+"scheduled/{action}", c.authed(c.bulkScheduled))
	mux.HandleFunc("POST "+Prefix+"scheduled/{action}", c.authed(c.bulkScheduled))
	mux.HandleFunc("GET "+Prefix+"escalations", c.authed(c.escalations))
	mux.HandleFunc("POST "+Prefix+"escalations/ack", c.authed(c.ack))
	mux.HandleFunc("GET "+Prefix+"template", c.authed(c.templatePage))
	mux.HandleFunc("POST "+Prefix+"template", c.authed(c.templatePage))
	mux.HandleFunc(Prefix, func(w http.ResponseWriter, r *http.Request) {
		c.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.Path+".")
	})
	return c.secure(mux)
}

// secure sets the headers of every answer and turns the console off without a token.
func (c *Console) secure(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		h := w.Header()
		h.Set("Content-Security-Policy", csp)
		h.Set("X-Frame-Options", "DENY")
		h.Set("X-Content-Type-Options", "nosniff")
		h.Set("Referrer-Policy", "same-origin") // "no-referrer" would make browsers send Origin: null with the console's own forms
		h.Set("Cache-Control", "no-store")
		if c.key == nil {
			http.Error(w, "The console is off: set admin.token (ROCKETDELAY_ADMIN_TOKEN) to turn it on.", http.StatusServiceUnavailable)
			return
		}
		if r.Method == http.MethodPost && !sameOrigin(r) {
			http.Error(w, "Refused: this form was not sent from the console's own pages.", http.StatusForbidden)
			return
		}
		next.ServeHTTP(w, r)
	})
}

// sameOrigin reports whether a POST came from a page of this host: browsers send Origin
// (or at least Referer) with every POST; a request with neither is refused too.
func sameOrigin(r *http.Request) bool {
	from := r.Header.Get("Origin")
	if from == "" || from == "null" {
		from = r.Header.Get("Referer")
	}
	u, err := url.Parse(from)
	return err == nil && from != "" && u.Host == r.Host
}

// session is the signed cookie value "expiry-unix.nonce.who.signature", who (base64url)
// being how the operator came in (login, below): the random nonce makes each login a
// session of its own, even two in the same second, so the CSRF token of one (derived
// from the whole value) is good for no other.
func (c *Console) session(expires time.Time, in login) string {
	v := strconv.FormatInt(expires.Unix(), 10) + "." + rand.Text() + "." + base64.RawURLEncoding.EncodeToString([]byte(in.String()))
	return v + "." + c.sign("session", v)
}

// login is how an operator came in: by a token ("t", with a fingerprint of the token,
// so that a session ends when its operator's token changes or the operator is removed)
// or named by the authenticating proxy ("p").
type login struct{ way, operator, print string }

func (l login) String() string { return l.way + ":" + l.operator + ":" + l.print }

// tokenPrint is a fingerprint of a login token, kept in its sessions.
func tokenPrint(tok string) string {
	sum := sha256.Sum256([]byte("rocketdelay console token print\x00" + tok))
	return hex.EncodeToString(sum[:8])
}

// current reports whether a session of l is still good: a token's operator must still
// have that token (the admin, admin.token).
func (c *Console) current(l login) bool {
	switch l.way {
	case "p":
		return true
	case "t":
		if l.operator == adminOperator {
			return hmac.Equal([]byte(l.print), []byte(c.adminPrint))
		}
		for _, o := range c.access.Operators {
			if o.Name == l.operator {
				return hmac.Equal([]byte(l.print), []byte(tokenPrint(o.Token.Reveal())))
			}
		}
	}
	return false
}

func (c *Console) sign(purpose, v string) string {
	m := hmac.New(sha256.New, c.key)
	m.Write([]byte(purpose + "\x00" + v))
	return hex.EncodeToString(m.Sum(nil))
}

// validSession returns the request's session and its operator when its cookie is
// signed, current and still open (no logout ended it); an error when the session store
// cannot say. A session of a release before named operators (no operator in it) is
// admin's.
func (c *Console) validSession(r *http.Request) (signedIn, bool, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil {
		return signedIn{}, false, nil
	}
	i := strings.LastIndexByte(ck.Value, '.')
	if i < 0 || !hmac.Equal([]byte(ck.Value[i+1:]), []byte(c.sign("session", ck.Value[:i]))) {
		return signedIn{}, false, nil
	}
	parts := strings.Split(ck.Value[:i], ".")
	unix, err := strconv.ParseInt(parts[0], 10, 64)
	if err != nil || !c.now().Before(time.Unix(unix, 0)) {
		return signedIn{}, false, nil
	}
	in := signedIn{session: ck.Value, operator: adminOperator}
	if len(parts) == 3 {
		who, err := base64.RawURLEncoding.DecodeString(parts[2])
		way, rest, _ := strings.Cut(string(who), ":")
		i := strings.LastIndexByte(rest, ':')
		if err != nil || i < 0 {
			return signedIn{}, false, nil
		}
		l := login{way: way, operator: rest[:i], print: rest[i+1:]}
		if !c.current(l) {
			return signedIn{}, false, nil
		}
		if l.way == "p" {
			// A session the proxy opened holds only while the proxy still names its
			// person: not past a change of the header's setting, nor from a client that
			// reaches the console around the proxy.
			if person, named := c.proxyUser(r); !named || person != l.operator {
				return signedIn{}, false, nil
			}
		}
		in.operator = l.operator
	}
	alive, err := c.access.Sessions.Alive(r.Context(), ck.Value)
	return in, alive, err
}

// csrf is the token forms of a session carry.
func (c *Console) csrf(session string) string { return c.sign("csrf", session) }

type ctxKey struct{}

// authed lets a request with a valid session through (and checks the CSRF token of a
// POST); others go to the login page. Behind an authenticating proxy (Access.
// ProxyUserHeader) a page the proxy's person asks for opens a session of theirs when the
// request has none, or one of another person.
func (c *Console) authed(h http.HandlerFunc) http.HandlerFunc {
	return func(w http.ResponseWriter, r *http.Request) {
		s, ok, err := c.validSession(r)
		if err != nil {
			c.unavailable(w, r, err)
			return
		}
		if person, named := c.proxyUser(r); named && (!ok || s.operator != person) {
			ok = false
			if r.Method != http.MethodPost {
				session, err := c.openSession(w, r, login{way: "p", operator: person})
				if err != nil {
					c.unavailable(w, r, err)
					return
				}
				c.logger.Info("console login by the proxy's user header", "client", c.access.Proxies.Client(r), "operator", person)
				s, ok = signedIn{session: session, operator: person}, true
			}
		}
		if !ok {
			if r.Method == http.MethodPost {
				c.fail(w, r, http.StatusUnauthorized, "Your session has ended: log in again.")
				return
			}
			http.Redirect(w, r, pageQuery("login", "next", r.URL.RequestURI()), http.StatusSeeOther)
			return
		}
		if r.Method == http.MethodPost {
			r.Body = http.MaxBytesReader(w, r.Body, maxForm)
			err := r.ParseForm()
			if tooLarge := (*http.MaxBytesError)(nil); errors.As(err, &tooLarge) {
				c.fail(w, r, http.StatusRequestEntityTooLarge, "Refused: the form is larger than any of the console's.")
				return
			}
			if err != nil || !hmac.Equal([]byte(r.PostForm.Get("csrf")), []byte(c.csrf(s.session))) {
				c.fail(w, r, http.StatusForbidden, "Refused: the form's security token is missing or stale. Reload the page and try again.")
				return
			}
		}
		h(w, r.WithContext(context.WithValue(r.Context(), ctxKey{}, s)))
	}
}

func (c *Console) loginPage(w http.ResponseWriter, r *http.Request) {
	c.render(w, r, http.StatusOK, "login", map[string]any{"Next": safeNext(r.URL.Query().Get("next"))})
}

// safeNext keeps a post-login redirect inside the console.
func safeNext(next string) string {
	if !strings.HasPrefix(next, Prefix) || strings.HasPrefix(next, "//") || strings.Contains(next, "\\") {
		return Prefix + "failed"
	}
	return next
}

// render executes page with data plus what every page needs.
func (c *Console) render(w http.ResponseWriter, r *http.Request, status int, page string, data map[string]any) {
	if in, ok := r.Context().Value(ctxKey{}).(signedIn); ok {
		data["CSRF"] = c.csrf(in.session)
		data["LoggedIn"] = true
		data["Operator"] = in.operator
	}
	data["Page"] = page
	var b strings.Builder
	if err := c.pages[page].ExecuteTemplate(&b, "layout", data); err != nil {
		c.logger.Error("console: render page", "page", page, "err", err)
		http.Error(w, "The page could not be rendered; the log has the details.", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "text/html; charset=utf-8")
	w.WriteHeader(status)
	_, _ = w.Write([]byte(b.String()))
}

// fail shows an error page with a message a person can act on.
func (c *Console) fail(w http.ResponseWriter, r *http.Request, status int, msg string) {
	c.render(w, r, status, "error", map[string]any{"Status": status, "Message": msg})
}

// storeFail answers a store error as every operator's interface does (failed.Answer):
// what a person can act on, never SQL or connection details, logged when it hides them.
func (c *Console) storeFail(w http.ResponseWriter, r *http.Request, op string, err error) {
	code, msg, logIt := failed.Answer(err)
	if logIt {
		c.logger.Error("console: "+op, "err", err)
	}
	c.fail(w, r, code, "Could not "+op+": "+msg+".")
}

func parsePages() map[string]*template.Template {
	funcs := template.FuncMap{
		"when": func(t *time.Time) string {
			if t == nil {
				return "—"
			}
			return t.UTC().Format("2006-01-02 15:04:05Z")
		},
		"at":  func(t time.Time) string { return t.UTC().Format("2006-01-02 15:04:05.000Z") },
		"ago": func(t time.Time) string { return time.Since(t).Round(time.Second).String() },
		"deref": func(p *int) string {
			if p == nil {
				return "—"
			}
			return strconv.Itoa(*p)
		},
		"page":  pagePath,
		"query": pageQuery,
	}
	pages := map[string]*template.Template{}
	for _, p := range []string{"login", "error", "list", "detail", "confirm", "scheduler", "scheduled", "scheduled-bulk", "alert", "cancel", "bulk", "escalations", "template"} {
		pages[p] = template.Must(template.New(p).Funcs(funcs).ParseFS(assets, "assets/layout.html", "assets/"+p+".html"))
	}
	return pages
}

// pagePath is the console's page at the path segments segs, each escaped as a path
// segment: an id holding "/", "?" or "#" stays one segment of the page it names, where
// html/template's escaping of a URL would leave those characters as they are.
func pagePath(segs ...any) string {
	parts := make([]string, len(segs))
	for i, s := range segs {
		parts[i] = url.PathEscape(fmt.Sprint(s))
	}
	return Prefix + strings.Join(parts, "/")
}

// pageQuery is the console's page with the query of the names and values kv (name,
// value, name, value, …), encoded by url.Values.
func pageQuery(page string, kv ...string) string {
	q := url.Values{}
	for i := 0; i+1 < len(kv); i += 2 {
		q.Set(kv[i], kv[i+1])
	}
	return Prefix + page + "?" + q.Encode()
}
