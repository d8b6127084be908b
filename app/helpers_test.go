package app

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
)

func prometheusRegistry(*testing.T) *prometheus.Registry { return prometheus.NewRegistry() }

type recorded struct {
	code int
	body string
}

func doRequest(h http.Handler, path string) recorded {
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest(http.MethodGet, path, nil))
	body, _ := io.ReadAll(rec.Result().Body)
	return recorded{code: rec.Code, body: string(body)}
}

// lockedWriter lets the server's goroutines and the test share one buffer.
type lockedWriter struct {
	mu sync.Mutex
	w  io.Writer
}

func (l *lockedWriter) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.(fmt.Stringer).String()
}

func (l *lockedWriter) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.w.Write(p)
}

// startReplica runs Serve with cfg on a loopback port until the test ends, waits until
// it is ready, and returns its base URL. Replicas started with one configuration are one
// deployment (the same Redis key prefix, consumer group and topic).
func startReplica(t *testing.T, cfg config.Config) string {
	t.Helper()
	base, stop := serveReplica(t, cfg, io.Discard)
	t.Cleanup(func() { require.NoError(t, stop()) })
	return base
}

// serveReplica runs Serve with cfg on a loopback port, its log (JSON) to log, waits
// until it is ready, and returns its base URL and stop: it cancels Serve's context, as a
// SIGTERM does, and returns what Serve returned (again when called again). It is called
// when the test ends, if the test did not.
func serveReplica(t *testing.T, cfg config.Config, log io.Writer) (base string, stop func() error) {
	t.Helper()
	return serveWith(t, cfg, ServeOptions{Logger: slog.New(slog.NewJSONHandler(log, nil))})
}

// serveWith is serveReplica with opts (a Listener in it is replaced by a loopback one).
func serveWith(t *testing.T, cfg config.Config, opts ServeOptions) (base string, stop func() error) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	opts.Listener = ln
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- Serve(ctx, cfg, opts) }()
	var once sync.Once
	var served error
	stop = func() error {
		once.Do(func() { cancel(); served = <-done })
		return served
	}
	t.Cleanup(func() { _ = stop() })
	base = "http://" + ln.Addr().String()
	require.Eventually(t, func() bool {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
		}
		return err == nil && resp.StatusCode == http.StatusOK
	}, 30*time.Second, 50*time.Millisecond)
	return base, stop
}

// cliStack is what a command run against the shared Redis and Postgres, with no broker,
// needs: a config file with a Redis key prefix of the test's own (rdb and prefix), and
// the environment naming the stores (USER unset).
func cliStack(t *testing.T) (file string, env map[string]string, rdb redis.UniversalClient, prefix string) {
	t.Helper()
	dsn := testenv.MigratedPostgres(t)
	rdb, prefix = testenv.Redis(t)
	file = filepath.Join(t.TempDir(), "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:1"]}
redis: {keyPrefix: `+prefix+`}
`), 0o600))
	return file, map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t), "ROCKETDELAY_POSTGRES_URL": dsn}, rdb, prefix
}
