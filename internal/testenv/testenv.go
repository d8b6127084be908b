// Package testenv gives tests the real Redis, Postgres and RocketMQ started by
// deploy/local (make test), each isolated per test: a key prefix in Redis, a fresh schema
// in Postgres, unique topic and group names in RocketMQ.
//
// The addresses come from the environment deploy/local/env prints. A test that needs a
// server fails when its variable is missing, with a message saying how to start the
// stack; under `go test -short` such tests are skipped instead.
package testenv

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"log/slog"
	"net"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/localstack"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// Env reads one variable of the local stack, or ends the test.
func Env(t testing.TB, name string) string {
	t.Helper()
	if testing.Short() {
		t.Skipf("needs the local stack (%s); skipped under -short", name)
	}
	v := os.Getenv(name)
	if v == "" {
		t.Fatalf("%s is not set: run the tests with `make test`, or start the stack with "+
			"`deploy/local/up --profile test` and `eval \"$(deploy/local/env)\"`", name)
	}
	return v
}

// Unique returns prefix plus a random suffix, usable in topic, group, key and schema
// names.
func Unique(prefix string) string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return prefix + hex.EncodeToString(b)
}

// RedisURL is the local Redis URL.
func RedisURL(t testing.TB) string { return Env(t, "ROCKETDELAY_REDIS_URL") }

// PostgresURL is the local Postgres DSN.
func PostgresURL(t testing.TB) string { return Env(t, "ROCKETDELAY_POSTGRES_URL") }

// NameServer is the local RocketMQ name server address.
func NameServer(t testing.TB) string { return Env(t, "ROCKETDELAY_NAMESRV") }

// Brokers is the local broker's address, on which tests create their topics.
func Brokers(t testing.TB) string { return Env(t, "ROCKETDELAY_BROKERS") }

// Levels are the delay levels of the local broker's profile.
func Levels(t testing.TB) config.DelayLevels {
	t.Helper()
	l, err := config.ParseDelayLevels(Env(t, "ROCKETDELAY_LEVELS"))
	require.NoError(t, err)
	return l
}

// Logger drops logs unless RD_TEST_LOG is set; then it writes them, debug included, to
// stderr.
func Logger() *slog.Logger {
	if os.Getenv("RD_TEST_LOG") != "" {
		return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	return slog.New(slog.DiscardHandler)
}

// QuietRedisLog routes go-redis's own log lines (store.RouteRedisLog) into Logger. Redis
// does it for every test.
func QuietRedisLog() { store.RouteRedisLog(Logger()) }

var quietRedisLog sync.Once

// Redis connects to the local Redis and returns the client and a key prefix that belongs
// to this test alone; keys under it are deleted when the test ends.
// ROCKETDELAY_TEST_REDIS=sentinel or cluster runs the test against the local stack's
// Sentinel deployment or Cluster instead of the single node (deploy/local/up sentinel
// redis-cluster starts them; make test-topologies runs the store tests on each).
func Redis(t testing.TB) (redis.UniversalClient, string) {
	t.Helper()
	quietRedisLog.Do(QuietRedisLog)
	var c config.Redis
	switch topo := os.Getenv("ROCKETDELAY_TEST_REDIS"); topo {
	case "", "single":
		c.URL = config.Secret(RedisURL(t))
	case "sentinel":
		c.Sentinel = &config.RedisSentinel{MasterName: Env(t, "ROCKETDELAY_LOCAL_SENTINEL_MASTER"),
			Addresses: strings.Split(Env(t, "ROCKETDELAY_LOCAL_SENTINEL"), ",")}
	case "cluster":
		c.Cluster = &config.RedisCluster{Addresses: strings.Split(Env(t, "ROCKETDELAY_LOCAL_REDIS_CLUSTER"), ",")}
	default:
		t.Fatalf("ROCKETDELAY_TEST_REDIS=%q: want single, sentinel or cluster", topo)
	}
	rdb, err := store.OpenRedisConfig(context.Background(), c)
	require.NoError(t, err)
	prefix := Unique("rdtest")
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		defer cancel()
		_, _ = store.DeleteKeys(ctx, rdb, prefix)
		rdb.Close()
	})
	return rdb, prefix
}

// Postgres returns a pool on the local database whose search_path is a fresh schema
// owned by this test; the schema is dropped when the test ends.
func Postgres(t testing.TB) *pgxpool.Pool {
	t.Helper()
	pool, _ := PostgresSchema(t)
	return pool
}

// PostgresSchema is Postgres, also returning a DSN that selects the same schema, for
// code under test that opens its own connections.
func PostgresSchema(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, sch := schema(t)
	return pool, sch.DSN
}

// schema creates a schema of the test's own (localstack.NewSchema), dropped when the test
// ends, and a pool selecting it.
func schema(t testing.TB) (*pgxpool.Pool, *localstack.Schema) {
	t.Helper()
	ctx := context.Background()
	sch, err := localstack.NewSchema(ctx, PostgresURL(t), Unique("test_"))
	require.NoError(t, err)
	pool, err := store.OpenPostgres(ctx, sch.DSN)
	require.NoError(t, err)
	t.Cleanup(func() {
		pool.Close()
		if err := sch.Close(context.Background(), true); err != nil {
			t.Error(err)
		}
	})
	return pool, sch
}

// MigratedPostgres returns the DSN of a fresh schema with every migration applied, for a
// rocketdelay process the test starts.
func MigratedPostgres(t testing.TB) string {
	t.Helper()
	_, dsn := migrated(t)
	return dsn
}

// FailedSends returns the failed_sends table in a fresh, migrated schema of its own, and
// the pool it uses.
func FailedSends(t testing.TB) (*pgxpool.Pool, *store.FailedSends) {
	t.Helper()
	pool, _ := migrated(t)
	return pool, store.NewFailedSends(pool, store.FailedSendsOptions{})
}

func migrated(t testing.TB) (*pgxpool.Pool, string) {
	t.Helper()
	pool, sch := schema(t)
	require.NoError(t, sch.Migrate(context.Background()))
	return pool, sch.DSN
}

// RocketMQStragglers are goroutines rocketmq-client-go leaves running after Shutdown
// (upstream issue #1147).
var RocketMQStragglers = []goleak.Option{
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.1"),
	goleak.IgnoreTopFunction("github.com/patrickmn/go-cache.(*janitor).Run"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*remotingClient).connect.func1"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal/remote.(*remotingClient).receiveResponse"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/primitive.WithRecover.func1"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*pushConsumer).Start.func1.1"),
	// a long-polling pull still waiting for the broker's answer when Shutdown returns
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*pushConsumer).pullMessage"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*traceDispatcher).process"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*namesrvs).UpdateNameServerAddress"),
	// Timers the client starts asleep and never wakes at Shutdown; each returns once its
	// first sleep is over. Only these: a goroutine of our own left in time.Sleep is a leak.
	// A push consumer's expired-message cleaner sleeps its ConsumeTimeout (15 minutes).
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*pushConsumer).Start.func1.2"),
	// A push consumer's statistics printers sleep until the next minute, hour and month.
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func4"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func5"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/consumer.(*statsItemSet).init.func6"),
	// A client's route updater sleeps 10ms, its heartbeat 1s and its offset persister 10s
	// before their first rounds (internal/client.go, rmqClient.Start).
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.2"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.3"),
	goleak.IgnoreAnyFunction("github.com/apache/rocketmq-client-go/v2/internal.(*rmqClient).Start.func1.4"),
}

// DingTalkSim runs a DingTalk simulator on a local port until the test ends and returns
// it with its base URL (the webhook endpoint), ready for config sender.baseURL.
func DingTalkSim(t testing.TB, opts chatsim.Options) (*chatsim.Server, string) {
	t.Helper()
	s, root := ChatSim(t, append([]sender.Platform{dingtalk.Platform}, opts.Platforms...), opts)
	return s, root + dingtalk.SimPath
}

// ChatSim starts a chat-robot simulator (package chatsim) of platforms and the robots of
// opts on a loopback port for the test and returns it with its root URL
// ("http://127.0.0.1:port"); Server.URL gives each platform's webhook base.
func ChatSim(t testing.TB, platforms []sender.Platform, opts chatsim.Options) (*chatsim.Server, string) {
	t.Helper()
	opts.Platforms = platforms
	s := chatsim.New(opts)
	ts := httptest.NewServer(s)
	t.Cleanup(ts.Close)
	return s, ts.URL
}

// RedisServer starts a Redis of the test's own (localstack.StartRedis: Debian's
// redis-server, as deploy/local installs it) on a free loopback port with args added to
// its command line, stops it when the test ends, and returns a client and its address.
// Tests that change Redis's configuration, or need a primary and a replica, use it
// instead of the shared one.
func RedisServer(t testing.TB, args ...string) (*redis.Client, string) {
	t.Helper()
	Env(t, "ROCKETDELAY_REDIS_URL") // the stack is up, so redis-server is installed
	srv, err := localstack.StartRedis(context.Background(), args...)
	require.NoError(t, err)
	t.Cleanup(srv.Stop)
	rdb := redis.NewClient(&redis.Options{Addr: srv.Addr})
	t.Cleanup(func() { _ = rdb.Close() })
	return rdb, srv.Addr
}

// ClosedAddr returns a loopback address nothing listens on: a port taken and released,
// for "the server cannot be reached".
func ClosedAddr(t testing.TB) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	return addr
}
