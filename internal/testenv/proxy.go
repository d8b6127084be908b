package testenv

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/netproxy"
)

// Proxy is a loopback TCP proxy to a real server that a test can take down and bring
// back, to cut one process off a shared server (Postgres, Redis) without stopping it for
// the other tests (netproxy.Proxy, closed when the test ends).
type Proxy struct {
	t testing.TB
	*netproxy.Proxy
}

// StartProxy listens on a free loopback port and forwards every connection to target.
// It is closed when the test ends.
func StartProxy(t testing.TB, target string) *Proxy {
	t.Helper()
	p, err := netproxy.Start(target)
	require.NoError(t, err)
	t.Cleanup(p.Close)
	return &Proxy{t: t, Proxy: p}
}

// Up listens again on the same address.
func (p *Proxy) Up() {
	p.t.Helper()
	require.NoError(p.t, p.Proxy.Up())
}
