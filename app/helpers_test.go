package app

import (
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
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
