package app

import (
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
)

// newHTTPServer is the service's HTTP server with cfg's limits: how long it reads a
// request's headers and its body, how long it writes the answer, how long it keeps an
// idle connection, and how large the headers may be. Its log goes to logger at warn.
func newHTTPServer(cfg config.HTTP, h http.Handler, logger *slog.Logger) *http.Server {
	return &http.Server{
		Handler:           h,
		ReadHeaderTimeout: cfg.ReadHeaderTimeout,
		ReadTimeout:       cfg.ReadTimeout,
		WriteTimeout:      cfg.WriteTimeout,
		IdleTimeout:       cfg.IdleTimeout,
		MaxHeaderBytes:    cfg.MaxHeaderBytes,
		ErrorLog:          slog.NewLogLogger(logger.Handler(), slog.LevelWarn),
	}
}

// overCap is what a connection over http.maxConnections reads before it is closed.
const overCap = "HTTP/1.1 503 Service Unavailable\r\nRetry-After: 1\r\nConnection: close\r\n" +
	"Content-Type: text/plain; charset=utf-8\r\nContent-Length: 40\r\n\r\ntoo many connections; try again shortly\n"

// capListener serves at most max connections at once. A connection over the cap is
// answered 503 and closed as soon as it is accepted: it costs no goroutine, and its
// client learns at once rather than waiting in the kernel's backlog (as with
// golang.org/x/net/netutil.LimitListener, which stops accepting).
type capListener struct {
	net.Listener
	max     int64
	open    atomic.Int64
	gauge   prometheus.Gauge
	refused prometheus.Counter
}

// capConnections wraps ln; its gauge and counter are registered in reg.
func capConnections(ln net.Listener, max int, reg prometheus.Registerer) net.Listener {
	l := &capListener{Listener: ln, max: int64(max),
		gauge: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "rocketdelay_http_open_connections",
			Help: "Connections the HTTP server holds open now.",
		}),
		refused: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "rocketdelay_http_connections_refused_total",
			Help: "Connections closed on accept because http.maxConnections were open.",
		}),
	}
	reg.MustRegister(l.gauge, l.refused)
	return l
}

// Accept returns the next connection within the cap, answering the others 503.
func (l *capListener) Accept() (net.Conn, error) {
	for {
		c, err := l.Listener.Accept()
		if err != nil {
			return nil, err
		}
		if l.open.Add(1) <= l.max {
			l.gauge.Inc()
			return &cappedConn{Conn: c, l: l}, nil
		}
		l.open.Add(-1)
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
