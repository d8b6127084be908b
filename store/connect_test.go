package store_test

import (
	"context"
	"errors"
	"net"
	"net/url"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestRedisRoundTrip(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	key := prefix + ":roundtrip"
	require.NoError(t, rdb.Set(ctx, key, "v1", time.Minute).Err())
	got, err := rdb.Get(ctx, key).Result()
	require.NoError(t, err)
	require.Equal(t, "v1", got)

	// The stack runs Redis with AOF on: the durability the design relies on.
	aof, err := rdb.ConfigGet(ctx, "appendonly").Result()
	require.NoError(t, err)
	require.Equal(t, "yes", aof["appendonly"])
	fsync, err := rdb.ConfigGet(ctx, "appendfsync").Result()
	require.NoError(t, err)
	require.Equal(t, "everysec", fsync["appendfsync"])
}

func TestPostgresRoundTrip(t *testing.T) {
	pool := testenv.Postgres(t)
	ctx := context.Background()
	_, err := pool.Exec(ctx, `CREATE TABLE roundtrip (id int PRIMARY KEY, body text NOT NULL)`)
	require.NoError(t, err)
	_, err = pool.Exec(ctx, `INSERT INTO roundtrip (id, body) VALUES ($1, $2)`, 7, "seven")
	require.NoError(t, err)
	var body string
	require.NoError(t, pool.QueryRow(ctx, `SELECT body FROM roundtrip WHERE id = $1`, 7).Scan(&body))
	require.Equal(t, "seven", body)
	err = pool.QueryRow(ctx, `SELECT body FROM roundtrip WHERE id = $1`, 8).Scan(&body)
	require.ErrorIs(t, err, pgx.ErrNoRows)
}

// Errors of unreachable stores say which host failed and never carry the password.
func TestUnreachableStoresErrWithoutSecrets(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Second)
	defer cancel()

	_, err := store.OpenRedis(ctx, "redis://:s3cret-redis-pw@127.0.0.1:1/0")
	require.Error(t, err)
	require.True(t, errors.Is(err, store.ErrUnavailable), "%v", err)
	require.Contains(t, err.Error(), "127.0.0.1:1")
	require.NotContains(t, err.Error(), "s3cret-redis-pw")

	_, err = store.OpenPostgres(ctx, "postgres://rd:s3cret-pg-pw@127.0.0.1:1/rd?sslmode=disable&connect_timeout=2")
	require.Error(t, err)
	require.True(t, errors.Is(err, store.ErrUnavailable), "%v", err)
	require.Contains(t, err.Error(), "127.0.0.1")
	require.NotContains(t, err.Error(), "s3cret-pg-pw")

	_, err = store.OpenPostgres(ctx, "postgres://rd:s3cret-pg-pw@127.0.0.1:notaport/rd")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret-pg-pw")

	_, err = store.OpenRedis(ctx, "mysql://:s3cret-redis-pw@x")
	require.Error(t, err)
	require.NotContains(t, err.Error(), "s3cret-redis-pw")

	_, err = store.OpenRedisConfig(ctx, config.Redis{Cluster: &config.RedisCluster{Addresses: []string{"127.0.0.1:1"},
		Password: "s3cret-cluster-pw"}})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, "the cluster at 127.0.0.1:1")
	require.NotContains(t, err.Error(), "s3cret-cluster-pw")
	_, err = store.OpenRedisConfig(ctx, config.Redis{Sentinel: &config.RedisSentinel{MasterName: "m", Addresses: []string{"127.0.0.1:1"},
		Password: "s3cret-data-pw", SentinelPassword: "s3cret-sentinel-pw"}})
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.ErrorContains(t, err, `primary "m" through the sentinels 127.0.0.1:1`)
	require.NotContains(t, err.Error(), "s3cret-data-pw")
	require.NotContains(t, err.Error(), "s3cret-sentinel-pw")
}

// A wrong password is reported as such, still without the password.
func TestPostgresWrongPasswordErr(t *testing.T) {
	u, err := url.Parse(testenv.PostgresURL(t))
	require.NoError(t, err)
	u.User = url.UserPassword(u.User.Username(), "not-the-pw-123")
	ctx := context.Background()
	_, err = store.OpenPostgres(ctx, u.String())
	require.Error(t, err)
	require.NotContains(t, err.Error(), "not-the-pw-123")
	require.Contains(t, err.Error(), "password authentication failed")
}

// TestBeatClientHonoursContextDeadlines: a command of the heartbeat's client gives up at
// its context's deadline (a network timeout), as the heartbeat needs to try again in
// time; the ordinary client waits for the command's own answer (here a blocking pop's
// timeout, redis.Nil).
func TestBeatClientHonoursContextDeadlines(t *testing.T) {
	_, prefix := testenv.Redis(t)
	c := config.Redis{URL: config.Secret(testenv.RedisURL(t))}
	pop := func(open func(context.Context, config.Redis) (redis.UniversalClient, error)) error {
		rdb, err := open(context.Background(), c)
		require.NoError(t, err)
		defer rdb.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
		defer cancel()
		return rdb.BLPop(ctx, time.Second, prefix+":never").Err()
	}
	var timeout net.Error
	require.ErrorAs(t, pop(store.OpenBeatRedis), &timeout)
	require.True(t, timeout.Timeout(), "%v", timeout)
	require.ErrorIs(t, pop(store.OpenRedisConfig), redis.Nil)
}
