package app

import (
	"log/slog"
	"net/http"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/store"
)

// guardAdmin limits guesses of the admin token on h's routes (the admin API, inspect,
// /readyz) as the console limits its logins, on the same counters: a wrong bearer token
// counts as a failed login (atomically, before it is answered), and past the limits a
// request waits, 429 with Retry-After, whatever token it presents, so that a right guess
// made then is not confirmed. The right token counts nothing, so requests of the admin at
// once are never held by one another. A request without a bearer token (the readiness
// probe) is never counted nor held; with Redis unreachable the routes answer unguarded
// (the token is still compared), as /readyz must say what is down.
func guardAdmin(h http.Handler, token config.Secret, logins *store.ConsoleAccess, trusted proxies.Trusted, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !bearer || token == "" {
			h.ServeHTTP(w, r)
			return
		}
		client := proxies.ThrottleKey(trusted.Client(r))
		var wait time.Duration
		var err error
		if token.Matches(strings.TrimSpace(got)) {
			wait, err = logins.LoginWait(r.Context(), client, console.LoginLimits)
		} else {
			wait, err = logins.LoginAttempt(r.Context(), client, console.LoginLimits)
		}
		if err != nil {
			logger.Warn("admin token guesses could not be counted; answering unguarded", "client", client, "err", err)
			h.ServeHTTP(w, r)
			return
		}
		if wait > 0 {
			logger.Warn("admin token refused: too many wrong tokens", "client", client, "retry_after", wait.Round(time.Second))
			w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
			http.Error(w, "too many wrong tokens from this client: send it again after Retry-After", http.StatusTooManyRequests)
			return
		}
		h.ServeHTTP(w, r)
	})
}
