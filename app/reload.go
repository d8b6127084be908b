package app

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
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
// (a key prefix another deployment owns), or that has not started within Fallback (a
// Redis, Postgres or name server it names that never answers), is said, and the previous
// one starts again; it is not tried again until the file changes or a SIGHUP.
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
	// Fallback is how long after a reload the service must have started, and within
	// which a failure starts the previous configuration again. Default fallbackWithin.
	Fallback time.Duration
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

// contentDigest names a configuration's content: the first 12 hex digits of the SHA-256
// of its file's bytes (raw) and of those of every file its values come from (files:
// config.Config.Files, such as a Kubernetes Secret's mounted file:). A file that cannot
// be read counts as missing, so its arrival is a change.
func contentDigest(raw []byte, files []string) string {
	h := sha256.New()
	h.Write(raw)
	for _, f := range files {
		b, err := os.ReadFile(f)
		if err != nil {
			fmt.Fprintf(h, "\x00%d:%s missing", len(f), f)
			continue
		}
		fmt.Fprintf(h, "\x00%d:%s %d:", len(f), f, len(b))
		h.Write(b)
	}
	return hex.EncodeToString(h.Sum(nil)[:6])
}

// fallbackWithin is how long after a reload the service must have started (waiting,
// unready, for the stores and name servers the new configuration names), and within
// which a service that fails starts again with the previous configuration; one that
// fails later ends, as it would without a reload.
const fallbackWithin = 2 * time.Minute

// errNotStarted is a reloaded service that did not start within Reloading.Fallback.
var errNotStarted = errors.New("serve: the reloaded configuration did not start in time (a store or name server it names does not answer?)")

// Serve runs the service with cfg, loaded from r.Path, and applies each change of the
// file as the type's documentation says, until ctx ends.
func (r Reloading) Serve(ctx context.Context, cfg config.Config, opts ServeOptions) error {
	if r.Poll <= 0 {
		r.Poll = reloadPoll
	}
	if r.Fallback <= 0 {
		r.Fallback = fallbackWithin
	}
	m := newReloadMetrics()
	opts.Gatherer = m.reg
	raw, err := os.ReadFile(r.Path)
	if err != nil {
		return fmt.Errorf("serve: read %s: %w", r.Path, err)
	}
	digest := contentDigest(raw, cfg.Files())
	st := reloadState{}
	// fallback is the last configuration that started, before the last reload, while the
	// reloaded one has not failed: a service that fails with it within Fallback, or has
	// not started by then, starts again with this one, once.
	var fallback *config.Config
	fallbackDigest := ""
	for {
		m.inForce(digest)
		opts.Logger = r.Logger(cfg)
		opts.Logger.Info("configuration in force", "file", r.Path, "digest", digest)
		runCtx, stop := context.WithCancel(ctx)
		done := make(chan error, 1)
		started := time.Now()
		up := make(chan struct{})
		opts.Started = sync.OnceFunc(func() { close(up) })
		go func() { done <- Serve(runCtx, cfg, opts) }()
		startBy := time.NewTimer(r.Fallback) // a reloaded configuration must start in time
		if fallback == nil {
			startBy.Stop()
		}
		next, nextDigest, err := r.wait(ctx, done, up, startBy.C, digest, cfg.Files(), &st, m, opts.Logger)
		startBy.Stop()
		if ctx.Err() != nil {
			stop()
			if nextDigest != "" || errors.Is(err, errNotStarted) { // the service still runs: its stop finishes first
				err = <-done
			}
			return err
		}
		if errors.Is(err, errNotStarted) {
			stop()
			<-done // it waited for what never answered: nothing to hand back
		}
		if err != nil { // the service ended on its own, or never started
			stop()
			if fallback == nil || time.Since(started) > r.Fallback && !errors.Is(err, errNotStarted) {
				return err
			}
			m.reloads.WithLabelValues("failed").Inc()
			opts.Logger.Error("the service failed with the reloaded configuration; the previous one starts again",
				"digest", digest, "previous", fallbackDigest, "err", err)
			if !errors.Is(err, store.ErrUnavailable) {
				st.failed = digest // not again until it changes; a store cut off for a moment is tried again
			}
			cfg, digest, fallback = *fallback, fallbackDigest, nil
			continue
		}
		stop() // a graceful stop, as at a SIGTERM: everything held is handed back
		if err := <-done; err != nil {
			return err
		}
		m.reloads.WithLabelValues("applied").Inc()
		opts.Logger.Info("configuration reloaded: the service restarts with it", "file", r.Path, "from", digest, "to", nextDigest)
		select {
		case <-up: // it started: the one to fall back to
			previous := cfg
			fallback, fallbackDigest = &previous, digest
		default: // stopped while it started (waiting for a store): the fallback stays the last that started
		}
		cfg, digest = next, nextDigest
	}
}

// reloadState is what the reloading remembers between polls: the error of the last file
// that did not load (said once), and the digest of the last configuration that loaded
// but could not start (not tried again until it changes, or a SIGHUP).
type reloadState struct {
	refused string
	failed  string
}

// wait returns once the running service ended (its error), ctx ended, the service has
// not started (up) by startBy (errNotStarted; it still runs, and the caller stops it), or
// the file, or a file its values come from (files, the running configuration's), holds a
// new valid configuration (that configuration and its digest; the service is still
// running and the caller stops it). A file that does not load is tried again at each
// poll, as a file it needs may come later (a Secret mounted after the ConfigMap), and
// said once per error, and counted.
func (r Reloading) wait(ctx context.Context, done <-chan error, up <-chan struct{}, startBy <-chan time.Time, digest string,
	files []string, st *reloadState, m *reloadMetrics, logger *slog.Logger) (config.Config, string, error) {
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
		case <-up:
			up, startBy = nil, nil
			continue
		case <-startBy:
			return config.Config{}, "", errNotStarted
		case <-t.C:
		case <-r.Hup:
			hup = true
		}
		raw, err := os.ReadFile(r.Path)
		if err != nil {
			if hup || st.refused != "unreadable" {
				logger.Error("configuration file unreadable; the running configuration stays", "file", r.Path, "err", err)
				m.reloads.WithLabelValues("invalid").Inc()
				st.refused = "unreadable"
			}
			continue
		}
		if d := contentDigest(raw, files); d == digest {
			if hup {
				logger.Info("SIGHUP: the configuration is unchanged", "digest", d)
			}
			continue
		}
		next, err := config.Load(r.Path, r.Getenv)
		if err != nil {
			if hup || st.refused != err.Error() {
				logger.Error("configuration file does not load; the running configuration stays", "file", r.Path, "err", err)
				m.reloads.WithLabelValues("invalid").Inc()
				st.refused = err.Error()
			}
			continue
		}
		st.refused = ""
		d := contentDigest(raw, next.Files())
		if d == digest || d == st.failed && !hup {
			continue
		}
		return next, d, nil
	}
}
