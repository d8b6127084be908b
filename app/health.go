package app

import (
	"context"
	"encoding/json"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
)

// check is one dependency readiness depends on; an advisory one only says it is
// degraded, the replica staying ready.
type check struct {
	name     string
	fn       func(context.Context) error
	advisory bool
}

// health serves /healthz (the process is alive) and /readyz (the process can do its
// work: every check passes and it is not shutting down). /readyz names a failing
// dependency to anyone (a probe needs no credential) but shows its error only with the
// admin token: an error can say where a dependency is and how it is reached. The error
// is logged.
type health struct {
	checks   []check
	timeout  time.Duration
	draining atomic.Bool
	up       *prometheus.GaugeVec
	admin    config.Secret
	logger   *slog.Logger
}

// failing is what /readyz says of a failed check to a caller without the admin token.
const failing = "failing (the error is logged, and shown with the admin token)"

func newHealth(reg prometheus.Registerer, admin config.Secret, logger *slog.Logger, checks ...check) *health {
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rocketdelay_dependency_up",
		Help: "1 when the dependency answered the last readiness check, 0 when it did not.",
	}, []string{"dependency"})
	reg.MustRegister(up)
	return &health{checks: checks, timeout: 2 * time.Second, up: up, admin: admin, logger: logger}
}

// drain turns readiness off for good: the first step of a graceful shutdown.
func (h *health) drain() { h.draining.Store(true) }

func (h *health) live(w http.ResponseWriter, _ *http.Request) {
	w.Header().Set("Content-Type", "text/plain; charset=utf-8")
	_, _ = w.Write([]byte("ok\n"))
}

type readyReport struct {
	Status string            `json:"status"`
	Checks map[string]string `json:"checks"`
}

func (h *health) ready(w http.ResponseWriter, r *http.Request) {
	report := readyReport{Status: "ready", Checks: make(map[string]string, len(h.checks))}
	got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	admin := bearer && h.admin != "" && h.admin.Matches(strings.TrimSpace(got))
	code := http.StatusOK
	if h.draining.Load() {
		report.Status, code = "shutting down", http.StatusServiceUnavailable
	} else {
		ctx, cancel := context.WithTimeout(r.Context(), h.timeout)
		defer cancel()
		var mu sync.Mutex
		var wg sync.WaitGroup
		for _, c := range h.checks {
			wg.Go(func() {
				err := c.fn(ctx)
				mu.Lock()
				defer mu.Unlock()
				if err != nil && c.advisory {
					report.Checks[c.name] = "degraded: " + err.Error() // says what is missing, names nothing
					return
				}
				if err != nil {
					h.logger.Warn("not ready: a dependency failed its check", "dependency", c.name, "err", err)
					report.Checks[c.name] = failing
					if admin {
						report.Checks[c.name] = err.Error()
					}
					report.Status, code = "not ready", http.StatusServiceUnavailable
					h.up.WithLabelValues(c.name).Set(0)
					return
				}
				report.Checks[c.name] = "ok"
				h.up.WithLabelValues(c.name).Set(1)
			})
		}
		wg.Wait()
	}
	writeReport(w, code, report)
}

func writeReport(w http.ResponseWriter, code int, report readyReport) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(report)
}
