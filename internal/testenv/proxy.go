package testenv

import (
	"testing"

	"github.com/redis/go-redis/v9"
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

// ProxiedRedis returns a client of the shared single-node Redis whose connections go
// through a proxy the test can take down, to cut one component off Redis while the rest
// of the test keeps it; both are closed when the test ends.
func ProxiedRedis(t testing.TB) (*redis.Client, *Proxy) {
	t.Helper()
	opts, err := redis.ParseURL(RedisURL(t))
	require.NoError(t, err)
	proxy := StartProxy(t, opts.Addr)
	opts.Addr = proxy.Addr()
	rdb := redis.NewClient(opts)
	t.Cleanup(func() { rdb.Close() })
	return rdb, proxy
}
