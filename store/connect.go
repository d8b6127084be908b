package store

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
)

// connectTimeout bounds the first ping of a new connection.
const connectTimeout = 10 * time.Second

// OpenRedis connects to the Redis at rawURL and pings it. The error names the host, never
// the URL's password.
func OpenRedis(ctx context.Context, rawURL string) (*redis.Client, error) {
	return openURL(ctx, rawURL, func(*redis.Options) {})
}

func openURL(ctx context.Context, rawURL string, tune func(*redis.Options)) (*redis.Client, error) {
	opts, err := redis.ParseURL(rawURL)
	if err != nil {
		return nil, fmt.Errorf("store: redis url: %s", scrub(err.Error(), rawURL))
	}
	tune(opts)
	client := redis.NewClient(opts)
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("store: connect to redis at %s: %s: %w", opts.Addr, scrub(err.Error(), rawURL), ErrUnavailable)
	}
	return client, nil
}

// OpenRedisConfig connects to the Redis that c describes — a single node (c.URL), a
// primary found through Sentinel, or a Cluster — and pings it. Errors never hold a
// password.
func OpenRedisConfig(ctx context.Context, c config.Redis) (redis.UniversalClient, error) {
	return openConfig(ctx, c, connTuning{})
}

// OpenBeatRedis connects to the Redis that c describes as OpenRedisConfig does, for a
// replica's heartbeat alone (WheelStage.Liveness): two connections, no retries of the
// client's own (the heartbeat tries again itself, at once), and every command bounded
// by its context, so that a beat stuck on a dead connection gives up in time for the
// next try instead of after the client's read timeout.
func OpenBeatRedis(ctx context.Context, c config.Redis) (redis.UniversalClient, error) {
	return openConfig(ctx, c, connTuning{poolSize: 2, maxRetries: -1, contextTimeouts: true})
}

// connTuning are the settings of a client that differ from go-redis's defaults; zero
// fields keep them.
type connTuning struct {
	poolSize, maxRetries int
	contextTimeouts      bool
}

func openConfig(ctx context.Context, c config.Redis, tune connTuning) (redis.UniversalClient, error) {
	var client redis.UniversalClient
	var where string
	tlsConfig, err := redisTLS(c.TLS)
	if err != nil {
		return nil, err
	}
	switch {
	case c.Sentinel != nil:
		s := c.Sentinel
		client = redis.NewFailoverClient(&redis.FailoverOptions{MasterName: s.MasterName, SentinelAddrs: s.Addresses,
			Password: s.Password.Reveal(), SentinelPassword: s.SentinelPassword.Reveal(), DB: s.DB, TLSConfig: tlsConfig,
			PoolSize: tune.poolSize, MaxRetries: tune.maxRetries, ContextTimeoutEnabled: tune.contextTimeouts})
		where = fmt.Sprintf("primary %q through the sentinels %s", s.MasterName, strings.Join(s.Addresses, ","))
	case c.Cluster != nil:
		client = redis.NewClusterClient(&redis.ClusterOptions{Addrs: c.Cluster.Addresses, Password: c.Cluster.Password.Reveal(),
			TLSConfig: tlsConfig, NewClient: nodeServerName, PoolSize: tune.poolSize, MaxRetries: tune.maxRetries,
			ContextTimeoutEnabled: tune.contextTimeouts})
		where = "the cluster at " + strings.Join(c.Cluster.Addresses, ",")
	default:
		return openURL(ctx, c.URL.Reveal(), func(o *redis.Options) {
			if tune.poolSize > 0 {
				o.PoolSize = tune.poolSize
			}
			if tune.maxRetries != 0 {
				o.MaxRetries = tune.maxRetries
			}
			o.ContextTimeoutEnabled = o.ContextTimeoutEnabled || tune.contextTimeouts
			if tlsConfig != nil { // a rediss:// URL (checked by config.Validate)
				o.TLSConfig = tlsConfig
			}
		})
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := client.Ping(pingCtx).Err(); err != nil {
		client.Close()
		return nil, fmt.Errorf("store: connect to redis, %s: %s: %w", where, scrubSecrets(err.Error(), c), ErrUnavailable)
	}
	return client, nil
}

// nodeServerName makes the client of one Cluster node, checking the node's certificate
// against the host it is reached at when redis.tls names no server: go-redis's Cluster
// client leaves the name empty, which TLS refuses.
func nodeServerName(o *redis.Options) *redis.Client {
	if o.TLSConfig != nil && o.TLSConfig.ServerName == "" {
		o.TLSConfig = o.TLSConfig.Clone()
		o.TLSConfig.ServerName, _, _ = net.SplitHostPort(o.Addr)
	}
	return redis.NewClient(o)
}

// redisTLS is the TLS configuration t describes, or nil when t is nil. Its errors name
// the setting and the file, never a key's contents.
func redisTLS(t *config.RedisTLS) (*tls.Config, error) {
	if t == nil {
		return nil, nil
	}
	c := &tls.Config{MinVersion: tls.VersionTLS12, ServerName: t.ServerName}
	if t.CAFile != "" {
		pem, err := os.ReadFile(t.CAFile)
		if err != nil {
			return nil, fmt.Errorf("store: redis.tls.caFile: %w", err)
		}
		c.RootCAs = x509.NewCertPool()
		if !c.RootCAs.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("store: redis.tls.caFile: %s holds no PEM certificate", t.CAFile)
		}
	}
	if t.CertFile != "" {
		cert, err := tls.LoadX509KeyPair(t.CertFile, t.KeyFile)
		if err != nil {
			return nil, fmt.Errorf("store: redis.tls.certFile and keyFile (%s, %s): %w", t.CertFile, t.KeyFile, err)
		}
		c.Certificates = []tls.Certificate{cert}
	}
	return c, nil
}

// scrubSecrets removes the passwords of c's Sentinel or Cluster from a driver's error
// text.
func scrubSecrets(msg string, c config.Redis) string {
	var pw []string
	if c.Sentinel != nil {
		pw = append(pw, c.Sentinel.Password.Reveal(), c.Sentinel.SentinelPassword.Reveal())
	}
	if c.Cluster != nil {
		pw = append(pw, c.Cluster.Password.Reveal())
	}
	for _, p := range pw {
		if p != "" {
			msg = strings.ReplaceAll(msg, p, "[redacted]")
		}
	}
	return msg
}

// OpenPostgres opens a connection pool to the Postgres at dsn and pings it. The error
// names the host and database, never the password.
func OpenPostgres(ctx context.Context, dsn string) (*pgxpool.Pool, error) {
	cfg, err := pgxpool.ParseConfig(dsn)
	if err != nil {
		return nil, fmt.Errorf("store: postgres url: %s", scrub(err.Error(), dsn))
	}
	pool, err := pgxpool.NewWithConfig(ctx, cfg)
	if err != nil {
		return nil, fmt.Errorf("store: postgres: %s", scrub(err.Error(), dsn))
	}
	pingCtx, cancel := context.WithTimeout(ctx, connectTimeout)
	defer cancel()
	if err := pool.Ping(pingCtx); err != nil {
		pool.Close()
		return nil, fmt.Errorf("store: connect to postgres database %q at %s:%d: %s: %w",
			cfg.ConnConfig.Database, cfg.ConnConfig.Host, cfg.ConnConfig.Port, scrub(err.Error(), dsn), ErrUnavailable)
	}
	return pool, nil
}

// ErrUnavailable marks errors caused by a store that cannot be reached; callers retry.
var ErrUnavailable = errors.New("store unavailable")

// scrub removes the DSN and its password from a driver's error text.
func scrub(msg, dsn string) string {
	if dsn == "" {
		return msg
	}
	msg = strings.ReplaceAll(msg, dsn, "<dsn>")
	if u, err := url.Parse(dsn); err == nil && u.User != nil {
		if pw, ok := u.User.Password(); ok && pw != "" {
			msg = strings.ReplaceAll(msg, pw, "<secret>")
			if esc := url.QueryEscape(pw); esc != pw {
				msg = strings.ReplaceAll(msg, esc, "<secret>")
			}
		}
	}
	return msg
}

// ErrCannotCheck is returned by CheckDurability when Redis does not let rocketdelay read
// its configuration (CONFIG and INFO are often disabled on managed Redis): the operator
// vouches for the setting.
var ErrCannotCheck = errors.New("cannot read the Redis configuration")

// CheckDurability checks that Redis can keep the promise of config redis.durability
// (mode and replicas as config.ParseDurability returns them): for "fsync", that it runs
// appendonly yes with appendfsync always; for "replicas", that at least that many
// replicas are connected now. "write" promises nothing to check. The error says what to
// change; one wrapping ErrCannotCheck means the check itself was refused.
func CheckDurability(ctx context.Context, rdb redis.UniversalClient, mode string, replicas int) error {
	switch mode {
	case "fsync":
		got := map[string]string{}
		for _, key := range []string{"appendonly", "appendfsync"} {
			v, err := rdb.ConfigGet(ctx, key).Result()
			if err != nil {
				return fmt.Errorf("store: redis.durability fsync: CONFIG GET %s: %v: %w", key, err, ErrCannotCheck)
			}
			got[key] = v[key]
		}
		if got["appendonly"] != "yes" || got["appendfsync"] != "always" {
			return fmt.Errorf("store: redis.durability is fsync but Redis runs appendonly %s, appendfsync %s: "+
				"set appendonly yes and appendfsync always (redis.conf, or CONFIG SET), or choose another durability",
				got["appendonly"], got["appendfsync"])
		}
	case "replicas":
		info, err := rdb.Info(ctx, "replication").Result()
		if err != nil {
			return fmt.Errorf("store: redis.durability replicas=%d: INFO replication: %v: %w", replicas, err, ErrCannotCheck)
		}
		connected := -1
		for line := range strings.Lines(info) {
			if v, ok := strings.CutPrefix(strings.TrimSpace(line), "connected_slaves:"); ok {
				connected, _ = strconv.Atoi(v)
			}
		}
		if connected < replicas {
			return fmt.Errorf("store: redis.durability is replicas=%d but the Redis primary has %d replicas connected: "+
				"every write will wait %s and be retried until they are", replicas, max(connected, 0), "redis.waitTimeout")
		}
	}
	return nil
}
