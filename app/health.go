package app

import (
	"context"
	"encoding/json"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// check is one dependency readiness depends on.
type check struct {
	name string
	fn   func(context.Context) error
}

// health serves /healthz (the process is alive) and /readyz (the process can do its
// work: every check passes and it is not shutting down).
type health struct {
	checks   []check
	timeout  time.Duration
	draining atomic.Bool
	up       *prometheus.GaugeVec
}

func newHealth(reg prometheus.Registerer, checks ...check) *health {
	up := prometheus.NewGaugeVec(prometheus.GaugeOpts{
		Name: "rocketdelay_dependency_up",
		Help: "1 when the dependency answered the last readiness check, 0 when it did not.",
	}, []string{"dependency"})
	reg.MustRegister(up)
	return &health{checks: checks, timeout: 2 * time.Second, up: up}
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
				if err != nil {
					report.Checks[c.name] = err.Error()
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
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(report)
}
