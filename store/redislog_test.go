package store_test

import (
	"bytes"
	"context"
	"log/slog"
	"net"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// go-redis's own lines reach the service's log, as structured records with a level: a
// pool that cannot dial is a warning that names the address.
func TestRedisLogGoesToTheServiceLog(t *testing.T) { // not parallel: go-redis's logger is global
	var buf bytes.Buffer
	store.RouteRedisLog(slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug})))
	t.Cleanup(testenv.QuietRedisLog)

	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close()) // nothing listens there now: every dial is refused
	rdb := redis.NewClient(&redis.Options{Addr: addr, MaxRetries: -1, DialTimeout: time.Second})
	defer rdb.Close()
	for range 6 { // go-redis logs after several failed dials in a row
		require.Error(t, rdb.Ping(context.Background()).Err())
	}
	require.Eventually(t, func() bool { return bytes.Contains(buf.Bytes(), []byte(addr)) },
		5*time.Second, 20*time.Millisecond, "no go-redis line about %s in the log: %s", addr, buf.String())
	out := buf.String()
	require.Contains(t, out, `"component":"go-redis"`)
	require.Contains(t, out, `"level":"WARN"`)
	require.Contains(t, out, `"msg":"connection pool: failed to dial`)
}
