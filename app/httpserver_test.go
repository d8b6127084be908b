package app

import (
	"bufio"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
)

// The HTTP server's limits, on the real server Serve runs.

// getOn sends a keep-alive GET on c and reads the answer.
func getOn(t *testing.T, c net.Conn, r *bufio.Reader, path string) *http.Response {
	t.Helper()
	_, err := io.WriteString(c, "GET "+path+" HTTP/1.1\r\nHost: rocketdelay\r\n\r\n")
	require.NoError(t, err)
	resp, err := http.ReadResponse(r, nil)
	require.NoError(t, err)
	_, _ = io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	return resp
}

// closedByServer reads c until the server closes it (true) or within reads nothing for
// within (false).
func closedByServer(c net.Conn, r io.Reader, within time.Duration) bool {
	_ = c.SetReadDeadline(time.Now().Add(within))
	_, err := io.Copy(io.Discard, r)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return false
	}
	return true // EOF (io.Copy's nil) or a reset
}

// TestIdleConnectionIsClosed: a keep-alive connection that carries no request after its
// first is closed by the server after http.idleTimeout (it was kept forever).
func TestIdleConnectionIsClosed(t *testing.T) {
	t.Parallel()
	cfg := stackConfig(t)
	cfg.HTTP.IdleTimeout = 500 * time.Millisecond
	base, _ := serveReplica(t, cfg, io.Discard)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer c.Close()
	r := bufio.NewReader(c)
	require.Equal(t, http.StatusOK, getOn(t, c, r, "/healthz").StatusCode)
	require.True(t, closedByServer(c, r, 30*time.Second), "an idle connection is still open 30s after a 500ms idle timeout")
}

// TestSlowBodyIsCutOff: a client that sends its body a byte at a time, on a path that
// answers 401 at once, is cut off at http.readTimeout rather than read to the end.
func TestSlowBodyIsCutOff(t *testing.T) {
	t.Parallel()
	cfg := stackConfig(t)
	cfg.HTTP.ReadTimeout = time.Second
	cfg.Ingress.Token = "ingest-secret"
	base, _ := serveReplica(t, cfg, io.Discard)
	c, err := net.Dial("tcp", strings.TrimPrefix(base, "http://"))
	require.NoError(t, err)
	defer c.Close()
	const size = 600 // at a byte per 50ms, 30s of body
	_, err = io.WriteString(c, "POST /api/v1/alerts HTTP/1.1\r\nHost: rocketdelay\r\nContent-Type: application/json\r\n"+
		"Content-Length: 600\r\n\r\n")
	require.NoError(t, err)
	closed := make(chan struct{})
	go func() { defer close(closed); closedByServer(c, c, time.Minute) }()
	tick := time.NewTicker(50 * time.Millisecond)
	defer tick.Stop()
	for sent := 0; sent < size; sent++ {
		select {
		case <-closed:
			return // cut off before the body was whole
		case <-tick.C:
		}
		if _, err := c.Write([]byte{' '}); err != nil {
			return // reset: cut off
		}
	}
	t.Fatalf("the server read a %d-byte body sent over 30s with a 1s read timeout", size)
}

// TestConnectionsOverTheCapAreRefused: with http.maxConnections open, 1,000 more are each
// answered 503 and closed at once, without a goroutine each; the open ones still work.
func TestConnectionsOverTheCapAreRefused(t *testing.T) {
	const capacity, over = 20, 1000
	cfg := stackConfig(t)
	cfg.HTTP.MaxConnections = capacity
	reg := prometheus.NewRegistry()
	base, _ := serveWith(t, cfg, ServeOptions{Logger: slog.New(slog.DiscardHandler), Registry: reg})
	addr := strings.TrimPrefix(base, "http://")
	http.DefaultClient.CloseIdleConnections() // the readiness probe's
	require.Eventually(t, func() bool { return metricValue(t, reg, "rocketdelay_http_open_connections") == 0 },
		10*time.Second, 10*time.Millisecond, "the readiness probe's connection is closed")

	var held []net.Conn
	var readers []*bufio.Reader
	for range capacity {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, getOn(t, c, r, "/healthz").StatusCode)
		held, readers = append(held, c), append(readers, r)
	}
	before := runtime.NumGoroutine()
	for i := range over {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		_ = c.SetReadDeadline(time.Now().Add(10 * time.Second))
		answer, err := io.ReadAll(c)
		c.Close()
		require.NoError(t, err, "connection %d over the cap: the server neither answered nor closed it", i)
		require.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 503 "), "connection %d over the cap got %q", i, answer)
	}
	grown := runtime.NumGoroutine() - before
	require.Less(t, grown, 50, "the goroutines grew by %d over %d refused connections", grown, over)
	require.Equal(t, float64(over), metricValue(t, reg, "rocketdelay_http_connections_refused_total"))
	require.Equal(t, float64(capacity), metricValue(t, reg, "rocketdelay_http_open_connections"))
	require.Equal(t, http.StatusOK, getOn(t, held[0], readers[0], "/healthz").StatusCode, "a connection within the cap still works")
}

// metricValue is the value of the unlabelled gauge or counter name in reg.
func metricValue(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	families, err := reg.Gather()
	require.NoError(t, err)
	for _, f := range families {
		if f.GetName() != name {
			continue
		}
		m := f.GetMetric()[0]
		if m.GetGauge() != nil {
			return m.GetGauge().GetValue()
		}
		return m.GetCounter().GetValue()
	}
	t.Fatalf("no metric %s", name)
	return 0
}
