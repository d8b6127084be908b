package app

import (
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
)

// http2Streams is the most requests one HTTP/2 connection has served at once (Go's
// default is 250): with http.maxConnections, it bounds the requests in hand. A browser
// loading the console asks fewer at once; more wait for a free stream.
const http2Streams = 16

// newHTTPServer is the service's HTTP server with cfg's limits: how long it reads a
// request's headers and its body, how long it writes the answer, how long it keeps an
// idle connection, how large the headers may be, and how many requests an HTTP/2
// connection carries at once (http2Streams). Its log goes to logger at warn.
func newHTTPServer(cfg config.HTTP, h http.Handler, tlsConf *tls.Config, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		TLSConfig:         tlsConf,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		HTTP2:             &http.HTTP2Config{MaxConcurrentStreams: http2Streams},
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// serveOn serves srv on ln, over TLS when srv has a TLS configuration; a capped ln
// learns which of its connections are idle.
func serveOn(srv *http.Server, ln net.Listener) error {
	if l, ok := ln.(*capListener); ok {
		srv.ConnState = l.track
	}
	if srv.TLSConfig != nil {
		return srv.ServeTLS(ln, "", "")
	}
	return srv.Serve(ln)
}

// publicMux is what the public listener serves: the acknowledgement pages and /healthz;
// everything else is 404 there.
func publicMux(h *health, ack http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /healthz", h.live)
	mux.Handle(escalation.AckPath, ack)
	mux.HandleFunc("/", http.NotFound)
	return mux
}

// servePublic starts the public listener (http.publicAddr, or ln when set) with the same
// limits as the internal one; its failure is sent to errs. Without a public listener the
// server returned is never started.
func servePublic(cfg config.HTTP, ln net.Listener, h http.Handler, tlsConf *tls.Config, conns *connMetrics,
	logger *slog.Logger, errs chan<- error) (*http.Server, error) {
	srv := newHTTPServer(cfg, h, tlsConf, logger)
	if ln == nil && cfg.PublicAddr == "" {
		return srv, nil
	}
	if ln == nil {
		var err error
		if ln, err = net.Listen("tcp", cfg.PublicAddr); err != nil {
			return nil, fmt.Errorf("serve: listen on %s (http.publicAddr): %w", cfg.PublicAddr, err)
		}
	}
	go func() {
		if err := serveOn(srv, capConnections(ln, cfg.MaxConnections, conns, "public")); !errors.Is(err, http.ErrServerClosed) {
			select {
			case errs <- err:
			default:
			}
		}
	}()
	logger.Info("serving the acknowledgement pages on the public listener", "http", ln.Addr().String())
	return srv, nil
}

// overCap is what a connection over http.maxConnections reads before it is closed.
const overCap = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 40\r\n\r\ntoo many connections; try again shortly\n"

// capListener serves at most max connections at once. At the cap, a new connection
// takes the place of the one idle longest, if it has been idle for minIdleToEvict (a
// keep-alive connection between requests, closed as its idle timeout would close it), so
// idle clients never lock out a probe or a producer; with none idle that long it is
// answered 503 and closed as soon as it is accepted: it
// costs no goroutine, and its client learns at once rather than waiting in the kernel's
// backlog (as with golang.org/x/net/netutil.LimitListener, which stops accepting).
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter
	mu      sync.Mutex
	idle    map[*cappedConn]time.Time // the connections between requests, and since when
}

// connMetrics count the listeners' connections, by listener (internal, public).
type connMetrics struct {
	open    *prometheus.GaugeVec
	refused *prometheus.CounterVec
}

func newConnMetrics(reg prometheus.Registerer) *connMetrics {
	m := &connMetrics{
		open: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "rocketdelay_http_open_connections",
			Help: "Connections the HTTP server holds open now, by listener (internal: http.addr, public: http.publicAddr).",
		}, []string{"listener"}),
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "rocketdelay_http_connections_refused_total",
			Help: "Connections closed on accept because http.maxConnections were open, by listener.",
		}, []string{"listener"}),
	}
	reg.MustRegister(m.open, m.refused)
	return m
}

// capConnections wraps ln, the listener named name, counting in m.
func capConnections(ln net.Listener, max int, m *connMetrics, name string) net.Listener {
	return &capListener{Listener: ln, max: int64(max), gauge: m.open.WithLabelValues(name), refused: m.refused.WithLabelValues(name),
		idle: map[*cappedConn]time.Time{}}
}

// track is the server's ConnState hook: it keeps the set of idle connections.
func (l *capListener) track(c net.Conn, state http.ConnState) {
	if t, ok := c.(*tls.Conn); ok {
		c = t.NetConn()
	}
	cc, ok := c.(*cappedConn)
	if !ok {
		return
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	if state == http.StateIdle {
		l.idle[cc] = time.Now()
	} else {
		delete(l.idle, cc)
	}
}

// take takes a place for a new connection: a free one, or the idlest connection's.
func (l *capListener) take() bool {
	if l.open.Add(1) <= l.max {
		return true
	}
	l.open.Add(-1)
	if !l.closeIdlest() { // its Close gave its place back
		return false
	}
	if l.open.Add(1) <= l.max {
		return true
	}
	l.open.Add(-1)
	return false
}

// minIdleToEvict is how long a connection must have been idle to give way at the cap.
// The server calls a connection idle before it has read a whole request (HTTP/1 until its
// headers are in; HTTP/2 before its first request, and as soon as its last answer is
// buffered, before it is flushed): one idle for a moment may be in a request, or owe an
// answer; one idle for seconds is a client between requests.
var minIdleToEvict atomic.Int64 // a time.Duration; set in init, tests change it

func init() { minIdleToEvict.Store(int64(5 * time.Second)) }

// closeIdlest closes the connection idle longest, if idle for minIdleToEvict, reporting
// whether there was one.
func (l *capListener) closeIdlest() bool {
	l.mu.Lock()
	var idlest *cappedConn
	for c, since := range l.idle {
		if idlest == nil || since.Before(l.idle[idlest]) {
			idlest = c
		}
	}
	if idlest != nil && time.Since(l.idle[idlest]) < time.Duration(minIdleToEvict.Load()) {
		idlest = nil
	}
	delete(l.idle, idlest)
	l.mu.Unlock()
	if idlest == nil {
		return false
	}
	_ = idlest.Close()
	return true
}

// Accept returns the next connection within the cap, answering the others 503.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.take() {
			l.gauge.Inc()
			return &cappedConn{Conn: c, l: l}, nil
		}
		l.refused.Inc()
		// A fresh socket's send buffer takes this at once; the deadline only guards
		// against a peer that already closed its window.
		_ = c.SetWriteDeadline(time.Now().Add(100 * time.Millisecond))
		_, _ = c.Write([]byte(overCap))
		_ = c.Close()
	}
}

// cappedConn gives its place back once, when it is closed.
type cappedConn struct {
	net.Conn
	l    *capListener
	once sync.Once
}

func (c *cappedConn) Close() error {
	c.once.Do(func() {
		c.l.open.Add(-1)
		c.l.gauge.Dec()
	})
	return c.Conn.Close()
}

// serverTLS is the TLS configuration of the listeners: nil without http.tlsCertFile.
func serverTLS(cfg config.HTTP, logger *slog.Logger) (*tls.Config, error) {
	if cfg.TLSCertFile == "" {
		return nil, nil
	}
	r := &certReloader{certFile: cfg.TLSCertFile, keyFile: cfg.TLSKeyFile, logger: logger}
	if err := r.load(); err != nil {
		return nil, fmt.Errorf("serve: http.tlsCertFile: %w", err)
	}
	return &tls.Config{MinVersion: tls.VersionTLS12, GetCertificate: r.get}, nil
}

// certReloader serves the certificate of its files, read again when either file's
// modification time changed (looked at once a second at most): a renewed certificate
// (cert-manager's, a mounted Secret's) is served without a restart. A renewal that does
// not load keeps the one before, and says so.
type certReloader struct {
	certFile, keyFile string
	logger            *slog.Logger
	mu                sync.Mutex
	cert              *tls.Certificate
	stamps            [2]time.Time
	looked            time.Time
}

// load reads the files.
func (r *certReloader) load() error {
	var stamps [2]time.Time
	for i, f := range []string{r.certFile, r.keyFile} {
		st, err := os.Stat(f)
		if err != nil {
			return err
		}
		stamps[i] = st.ModTime()
	}
	r.stamps = stamps // a pair that does not load is not tried again until it changes
	cert, err := tls.LoadX509KeyPair(r.certFile, r.keyFile)
	if err != nil {
		return err
	}
	r.cert = &cert
	return nil
}

func (r *certReloader) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if time.Since(r.looked) < time.Second {
		return r.cert, nil
	}
	r.looked = time.Now()
	changed := false
	for i, f := range []string{r.certFile, r.keyFile} {
		if st, err := os.Stat(f); err == nil && !st.ModTime().Equal(r.stamps[i]) {
			changed = true
		}
	}
	if changed {
		if err := r.load(); err != nil {
			r.logger.Warn("the TLS certificate's files changed but do not load; serving the one before", "err", err)
		} else {
			r.logger.Info("serving the renewed TLS certificate", "file", r.certFile)
		}
	}
	return r.cert, nil
}
