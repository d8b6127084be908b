package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
)

// reloadPoll is how often serve reads its configuration file again: a Kubernetes
// ConfigMap's update reaches the mounted file within about a minute, and the new
// configuration is in force within this much after.
const reloadPoll = 5 * time.Second

// Reloading is how serve applies a changed configuration file without a restart of the
// process, as Alertmanager does: on SIGHUP, and when the file's content changed (read
// every reloadPoll), the file is loaded and validated first. One that does not load
// keeps the running configuration, and a log line says why (once per content). One that
// loads and differs replaces the running one as a whole: the running service stops
// gracefully — it leaves the consumer group and hands back everything it holds, as at a
// SIGTERM — and the service starts again with the new configuration. The other replicas
// carry the load meanwhile, as during a rolling restart, so nothing is lost; a replica
// alone is unready for the moment of its restart. A new configuration that cannot start
// (a key prefix another deployment owns) is said, and the previous one starts again.
// rocketdelay_config_info names the running configuration by its digest, and
// rocketdelay_config_reloads_total counts the reloads by result.
type Reloading struct {
	// Path is the configuration file (config.File's answer); Getenv reads the
	// environment, which every load applies over the file.
	Path   string
	Getenv func(string) string
	// Hup receives a value for each SIGHUP. Nil: the file is only polled.
	Hup <-chan os.Signal
	// Logger makes the service's logger from a configuration (its log section).
	Logger func(config.Config) *slog.Logger
	// Poll is how often the file is read again. Default reloadPoll.
	Poll time.Duration
}

// reloadMetrics are Reloading's metrics, kept across the service's restarts.
type reloadMetrics struct {
	reg     *prometheus.Registry
	info    *prometheus.GaugeVec
	reloads *prometheus.CounterVec
}

func newReloadMetrics() *reloadMetrics {
	m := &reloadMetrics{
		reg: prometheus.NewRegistry(),
		info: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_config_info",
			Help: "Always 1; digest names the configuration file's content in force (the first 12 hex digits of its SHA-256).",
		}, []string{"digest"}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_config_reloads_total",
			Help: "Reloads of the configuration file: applied, invalid (it did not load; the running configuration stays), failed (it loaded but could not start; the previous one started again).",
		}, []string{"result"}),
	}
	for _, r := range []string{"applied", "invalid", "failed"} {
		m.reloads.WithLabelValues(r)
	}
	m.reg.MustRegister(m.info, m.reloads)
	return m
}

func (m *reloadMetrics) inForce(digest string) {
	m.info.Reset()
	m.info.WithLabelValues(digest).Set(1)
}

// fileDigest names a configuration file's content: the first 12 hex digits of its
// SHA-256.
func fileDigest(b []byte) string {
	sum := sha256.Sum256(b)
	return hex.EncodeToString(sum[:6])
}

// Serve runs the service with cfg, loaded from r.Path, and applies each change of the
// file as the type's documentation says, until ctx ends.
func (r Reloading) Serve(ctx context.Context, cfg config.Config, opts ServeOptions) error {
	if r.Poll <= 0 {
		r.Poll = reloadPoll
	}
	m := newReloadMetrics()
	opts.Gatherer = m.reg
	raw, err := os.ReadFile(r.Path)
	if err != nil {
		return fmt.Errorf("serve: read %s: %w", r.Path, err)
	}
	digest := fileDigest(raw)
	refused := "" // the digest of the last file that did not load, said once
	// fallback is the configuration before the last reload while the reloaded one has not
	// failed: a service that fails with it starts again with this one, once.
	var fallback *config.Config
	fallbackDigest := ""
	for {
		m.inForce(digest)
		opts.Logger = r.Logger(cfg)
		opts.Logger.Info("configuration in force", "file", r.Path, "digest", digest)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		go func() { done <- Serve(runCtx, cfg, opts) }()
		next, nextDigest, err := r.wait(ctx, done, digest, &refused, m, opts.Logger)
		if ctx.Err() != nil {
			stop()
			return err
		}
		if err != nil { // the service ended on its own
			stop()
			if fallback == nil {
				return err
			}
			m.reloads.WithLabelValues("failed").Inc()
			opts.Logger.Error("the service failed with the reloaded configuration; the previous one starts again",
				"digest", digest, "previous", fallbackDigest, "err", err)
			refused = digest // not again until the file changes
			cfg, digest, fallback = *fallback, fallbackDigest, nil
			continue
		}
		stop() // a graceful stop, as at a SIGTERM: everything held is handed back
		if err := <-done; err != nil {
			return err
		}
		m.reloads.WithLabelValues("applied").Inc()
		opts.Logger.Info("configuration reloaded: the service restarts with it", "file", r.Path, "from", digest, "to", nextDigest)
		previous := cfg
		fallback, fallbackDigest = &previous, digest
		cfg, digest = next, nextDigest
	}
}

// wait returns once the running service ended (its error), ctx ended, or the file holds
// a new valid configuration (that configuration and its digest; the service is still
// running and the caller stops it). A file that does not load is said once per content
// and counted.
func (r Reloading) wait(ctx context.Context, done <-chan error, digest string, refused *string, m *reloadMetrics, logger *slog.Logger) (config.Config, string, error) {
	t := time.NewTicker(r.Poll)
	defer t.Stop()
	for {
		hup := false
		select {
		case <-ctx.Done():
			return config.Config{}, "", <-done
		case err := <-done:
			if err == nil {
				err = errors.New("serve: the service stopped on its own")
			}
			return config.Config{}, "", err
		case <-t.C:
		case <-r.Hup:
			hup = true
		}
		raw, err := os.ReadFile(r.Path)
		if err != nil {
			if hup || *refused != "unreadable" {
				logger.Error("configuration file unreadable; the running configuration stays", "file", r.Path, "err", err)
				m.reloads.WithLabelValues("invalid").Inc()
				*refused = "unreadable"
			}
			continue
		}
		d := fileDigest(raw)
		if d == digest {
			if hup {
				logger.Info("SIGHUP: the configuration file is unchanged", "digest", d)
			}
			continue
		}
		if d == *refused && !hup {
			continue
		}
		next, err := config.Load(r.Path, r.Getenv)
		if err != nil {
			logger.Error("configuration file does not load; the running configuration stays", "file", r.Path, "digest", d, "err", err)
			m.reloads.WithLabelValues("invalid").Inc()
			*refused = d
			continue
		}
		return next, d, nil
	}
}
