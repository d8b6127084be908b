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
// /readyz) as the console limits its logins, on the same counters: a request that
// presents a bearer token counts as a failed login before h compares it, and is taken
// back when it was the admin token. One over the limits waits: 429 with Retry-After,
// whatever token it presents. A request without a bearer token (the readiness probe) is
// never counted nor held.
func guardAdmin(h http.Handler, token config.Secret, logins *store.ConsoleAccess, trusted proxies.Trusted, logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !bearer || token == "" {
			h.ServeHTTP(w, r)
			return
		}
		client := proxies.ThrottleKey(trusted.Client(r))
		wait, err := logins.LoginAttempt(r.Context(), client, console.LoginLimits)
		if err != nil {
			logger.Warn("admin token guesses could not be counted", "client", client, "err", err)
			w.Header().Set("Retry-After", "1")
			http.Error(w, "the admin token cannot be checked now (Redis): send it again", http.StatusServiceUnavailable)
			return
		}
		if wait > 0 {
			logger.Warn("admin token refused: too many wrong tokens", "client", client, "retry_after", wait.Round(time.Second))
			w.Header().Set("Retry-After", strconv.Itoa(int((wait+time.Second-1)/time.Second)))
			http.Error(w, "too many wrong tokens from this client: send it again after Retry-After", http.StatusTooManyRequests)
			return
		}
		if token.Matches(strings.TrimSpace(got)) {
			if err := logins.LoginSucceeded(r.Context(), client); err != nil {
				logger.Warn("an admin token's attempt could not be taken back", "client", client, "err", err)
			}
		}
		h.ServeHTTP(w, r)
	})
}
