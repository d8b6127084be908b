package app

import (
	"bufio"
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"errors"
	"io"
	"log/slog"
	"math/big"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
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

// TestConnectionsOverTheCapAreRefused: with http.maxConnections open and none idle (each
// opened, its first request not sent yet), 1,000 more are each answered 503 and closed
// at once, without a goroutine each; the open ones still work.
func TestConnectionsOverTheCapAreRefused(t *testing.T) {
	const capacity, over = 20, 1000
	cfg := stackConfig(t)
	cfg.HTTP.ReadHeaderTimeout = time.Minute // the held connections wait that long for their first request
	addr, reg := servedCapped(t, cfg, capacity)

	var held []net.Conn
	var readers []*bufio.Reader
	for range capacity {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		held, readers = append(held, c), append(readers, bufio.NewReader(c))
	}
	require.Eventually(t, func() bool { return metricValue(t, reg, "rocketdelay_http_open_connections") == capacity },
		10*time.Second, 10*time.Millisecond, "the held connections are accepted")
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

// TestIdleConnectionsGiveWayAtTheCap: with http.maxConnections idle keep-alive
// connections open (a producer's pool between requests), a new connection is served —
// the kubelet's probe is not answered 503 and the replica not restarted for clients
// that send nothing — and the connection idle longest is closed in its place; one idle
// for less than minIdleToEvict (which may be in a request) is not.
func TestIdleConnectionsGiveWayAtTheCap(t *testing.T) {
	const capacity = 5
	minIdleToEvict.Store(int64(time.Hour)) // none gives way until the connections are all open
	t.Cleanup(func() { minIdleToEvict.Store(int64(5 * time.Second)) })
	addr, reg := servedCapped(t, stackConfig(t), capacity)

	var idle []net.Conn
	var readers []*bufio.Reader
	for range capacity {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		r := bufio.NewReader(c)
		require.Equal(t, http.StatusOK, getOn(t, c, r, "/healthz").StatusCode)
		idle, readers = append(idle, c), append(readers, r)
	}
	c, err := net.Dial("tcp", addr)
	require.NoError(t, err)
	answer, err := io.ReadAll(c)
	c.Close()
	require.NoError(t, err)
	require.True(t, strings.HasPrefix(string(answer), "HTTP/1.1 503 "), "none idle long enough: refused, got %q", answer)
	minIdleToEvict.Store(0)
	for range 3 {
		c, err := net.Dial("tcp", addr)
		require.NoError(t, err)
		t.Cleanup(func() { c.Close() })
		require.Equal(t, http.StatusOK, getOn(t, c, bufio.NewReader(c), "/healthz").StatusCode, "a new connection at the cap")
	}
	// Three of the five idle ones gave way (the idlest: which exactly depends on when
	// each one's server goroutine noted it idle); two stay.
	closed := 0
	for i := range capacity {
		if closedByServer(idle[i], readers[i], 200*time.Millisecond) {
			closed++
		}
	}
	require.Equal(t, 3, closed, "one idle connection gave way for each new one")
	require.Equal(t, float64(capacity), metricValue(t, reg, "rocketdelay_http_open_connections"))
	require.Equal(t, float64(1), metricValue(t, reg, "rocketdelay_http_connections_refused_total"))
}

// servedCapped serves cfg with at most capacity connections, once the readiness probe's
// connection is closed: its address, and the registry of its metrics.
func servedCapped(t *testing.T, cfg config.Config, capacity int) (string, *prometheus.Registry) {
	t.Helper()
	cfg.HTTP.MaxConnections = capacity
	reg := prometheus.NewRegistry()
	base, _ := serveWith(t, cfg, ServeOptions{Logger: slog.New(slog.DiscardHandler), Registry: reg})
	http.DefaultClient.CloseIdleConnections() // the readiness probe's
	require.Eventually(t, func() bool { return metricValue(t, reg, "rocketdelay_http_open_connections") == 0 },
		10*time.Second, 10*time.Millisecond, "the readiness probe's connection is closed")
	return strings.TrimPrefix(base, "http://"), reg
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

// selfSigned writes a self-signed certificate for 127.0.0.1 named cn, and its key, to
// certFile and keyFile, and returns the certificate.
func selfSigned(t *testing.T, cn, certFile, keyFile string) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	require.NoError(t, err)
	tmpl := &x509.Certificate{SerialNumber: big.NewInt(time.Now().UnixNano()), Subject: pkix.Name{CommonName: cn},
		NotBefore: time.Now().Add(-time.Hour), NotAfter: time.Now().Add(time.Hour),
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1")}, KeyUsage: x509.KeyUsageDigitalSignature,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	require.NoError(t, err)
	keyDER, err := x509.MarshalECPrivateKey(key)
	require.NoError(t, err)
	// Written beside and renamed over, as a mounted Secret's update is: never half a file.
	for file, block := range map[string]*pem.Block{certFile: {Type: "CERTIFICATE", Bytes: der}, keyFile: {Type: "EC PRIVATE KEY", Bytes: keyDER}} {
		require.NoError(t, os.WriteFile(file+".new", pem.EncodeToMemory(block), 0o600))
		require.NoError(t, os.Rename(file+".new", file))
	}
	cert, err := x509.ParseCertificate(der)
	require.NoError(t, err)
	return cert
}

// TestPublicListenerServesOnlyTheAcknowledgementPages: with http.publicAddr and a TLS
// certificate, the public listener answers /healthz and the acknowledgement pages and
// 404 for the API, the console and the metrics, all over HTTPS; the internal one serves
// everything over HTTPS; a renewed certificate is served without a restart.
func TestPublicListenerServesOnlyTheAcknowledgementPages(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	certFile, keyFile := filepath.Join(dir, "tls.crt"), filepath.Join(dir, "tls.key")
	first := selfSigned(t, "first", certFile, keyFile)
	cfg := stackConfig(t)
	cfg.HTTP.TLSCertFile, cfg.HTTP.TLSKeyFile = certFile, keyFile
	cfg.Admin.Token = "admin-token-public-test"
	require.NoError(t, cfg.Validate())
	internal, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	public, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.DiscardHandler), Listener: internal, PublicListener: public})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })

	// A client that trusts only the certificate being served now, and opens a new
	// connection for every request (so every request sees the certificate of the moment).
	client := func(trust *x509.Certificate) *http.Client {
		pool := x509.NewCertPool()
		pool.AddCert(trust)
		return &http.Client{Timeout: 10 * time.Second, Transport: &http.Transport{DisableKeepAlives: true,
			TLSClientConfig: &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}}}
	}
	status := func(c *http.Client, url string) int {
		resp, err := c.Get(url)
		if err != nil {
			return 0
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	in, out := "https://"+internal.Addr().String(), "https://"+public.Addr().String()
	c := client(first)
	require.Eventually(t, func() bool { return status(c, in+"/readyz") == http.StatusOK }, 30*time.Second, 50*time.Millisecond)
	require.Equal(t, http.StatusOK, status(c, out+"/healthz"))
	for _, path := range []string{"/api/v1/alerts/x", "/api/v1/failed", "/ui/", "/ui/login", "/metrics", "/readyz"} {
		require.Equal(t, http.StatusNotFound, status(c, out+path), "the public listener serves no %s", path)
		require.NotEqual(t, http.StatusNotFound, status(c, in+path), "the internal listener serves %s", path)
	}
	ack := status(c, out+"/ack/not-a-link")
	require.NotEqual(t, http.StatusNotFound, ack, "the public listener serves the acknowledgement pages")
	require.Equal(t, ack, status(c, in+"/ack/not-a-link"), "the same pages as the internal listener")
	plain := &http.Client{Timeout: 10 * time.Second}
	resp, err := plain.Get("http://" + public.Addr().String() + "/healthz")
	if err == nil {
		resp.Body.Close()
		require.Equal(t, http.StatusBadRequest, resp.StatusCode, "plain HTTP to a TLS listener")
	}

	second := selfSigned(t, "second", certFile, keyFile)
	c2 := client(second)
	require.Eventually(t, func() bool { return status(c2, out+"/healthz") == http.StatusOK }, 30*time.Second, 100*time.Millisecond,
		"the renewed certificate is served without a restart")
	require.Equal(t, 0, status(c, out+"/healthz"), "and the old one no longer")
}

// TestStreamsPerConnectionAreCapped: over HTTP/2 one connection carries many requests
// at once; the server serves at most http2Streams of one connection together, so that
// http.maxConnections bounds the requests in hand (it served 250 per connection, Go's
// default). 40 requests sent together to a handler that holds each a moment: never more
// than http2Streams of one connection in it at once, and every one answered.
func TestStreamsPerConnectionAreCapped(t *testing.T) {
	const sent = 40
	var mu sync.Mutex
	in, most, served := map[string]int{}, 0, 0
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		in[r.RemoteAddr]++
		most = max(most, in[r.RemoteAddr])
		proto := r.ProtoMajor
		mu.Unlock()
		select { // held so that the streams pile up
		case <-time.After(200 * time.Millisecond):
		case <-r.Context().Done():
		}
		mu.Lock()
		in[r.RemoteAddr]--
		if proto == 2 {
			served++
		}
		mu.Unlock()
	})
	srv := httptest.NewUnstartedServer(h)
	srv.Config = newHTTPServer(config.Config{}.WithDefaults().HTTP, h, nil, slog.New(slog.DiscardHandler))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	client := srv.Client()
	var wg sync.WaitGroup
	for range sent {
		wg.Go(func() {
			if resp, err := client.Get(srv.URL); err == nil {
				resp.Body.Close()
			}
		})
	}
	wg.Wait()
	require.Equal(t, sent, served, "every request answered, over HTTP/2")
	require.LessOrEqual(t, most, http2Streams, "at most %d requests of one connection served at once", http2Streams)
}

// TestAdminTokenGuessesAreThrottled: the admin API, the inspect route and /readyz take
// the admin token as the console's login does, and guesses of it count against the
// same limits: after 5 wrong tokens from one client, even the right one waits (429 with
// Retry-After); the admin's own requests at once are never held. On the code before, the
// admin API answered every guess, without limit.
func TestAdminTokenGuessesAreThrottled(t *testing.T) {
	cfg := stackConfig(t)
	cfg.Admin.Token = "the-admin-token-0123456789"
	base, _ := serveWith(t, cfg, ServeOptions{Logger: slog.New(slog.DiscardHandler), Registry: prometheus.NewRegistry()})
	ask := func(path, tok string) *http.Response {
		req, err := http.NewRequest(http.MethodGet, base+path, nil)
		require.NoError(t, err)
		req.Header.Set("Authorization", "Bearer "+tok)
		resp, err := http.DefaultClient.Do(req)
		require.NoError(t, err)
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		return resp
	}
	var wg sync.WaitGroup
	codes := make(chan int, 12)
	for range 12 { // the admin's requests at once hold none of one another
		wg.Go(func() { codes <- ask("/api/v1/failed", cfg.Admin.Token.Reveal()).StatusCode })
	}
	wg.Wait()
	close(codes)
	for c := range codes {
		require.Equal(t, http.StatusOK, c, "the right token counts nothing")
	}
	for i, path := range []string{"/api/v1/failed", "/api/v1/failed/stats", "/api/v1/alerts/some-id", "/readyz", "/api/v1/failed"} {
		resp := ask(path, "not-the-admin-token-0123456789")
		if path != "/readyz" { // which answers, its checks' errors hidden
			require.Equal(t, http.StatusUnauthorized, resp.StatusCode, "guess %d", i+1)
		}
		require.NotEqual(t, http.StatusTooManyRequests, resp.StatusCode, "guess %d", i+1)
	}
	resp := ask("/api/v1/failed", cfg.Admin.Token.Reveal())
	require.Equal(t, http.StatusTooManyRequests, resp.StatusCode, "after five guesses the client waits, with the right token too")
	require.NotEmpty(t, resp.Header.Get("Retry-After"))
	require.Equal(t, http.StatusOK, ask("/readyz", "").StatusCode, "the probe without a token is never held")
}
