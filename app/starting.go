package app

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cenkalti/backoff/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/migrations"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
)

// A replica started while Redis, Postgres or RocketMQ's name servers cannot be reached
// waits for them rather than exiting: it tries again with backoff (from 500ms up to every
// 15s), serves /healthz (it is alive: a liveness probe must not restart it) and answers
// everything else 503, /readyz naming what it waits for. What can never work (a Redis
// key prefix of another deployment, a schema that is behind, a bad URL, a topic the
// name servers answered they do not know and nobody may create) still ends the start.

// stores are the connections a replica needs before anything else starts.
type stores struct {
	rdb  redis.UniversalClient
	beat redis.UniversalClient // the heartbeat's own (store.OpenBeatRedis)
	pg   *pgxpool.Pool
	// layout is the wheel stage's layout this replica acts in (store.ClaimShards).
	layout store.Layout
}

func (s stores) close() {
	for _, c := range []interface{ Close() error }{s.rdb, s.beat} {
		if c != nil {
			_ = c.Close()
		}
	}
	if s.pg != nil {
		s.pg.Close()
	}
}

// openStores opens the stores, trying again while one is unavailable (store.ErrUnavailable)
// until ctx ends; wait shows what it waits for.
func openStores(ctx context.Context, cfg config.Config, logger *slog.Logger, wait *starting) (stores, error) {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 500*time.Millisecond, 15*time.Second
	waiting := ""
	st, err := backoff.Retry(ctx, func() (stores, error) {
		st, which, err := openStoresOnce(ctx, cfg, logger)
		if err == nil {
			return st, nil
		}
		if !errors.Is(err, store.ErrUnavailable) || ctx.Err() != nil {
			return stores{}, backoff.Permanent(err)
		}
		wait.waitFor(which, err)
		if which != waiting {
			logger.Warn("waiting for a store; trying again", "store", which, "err", err)
			waiting = which
		}
		return stores{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if err != nil {
		return stores{}, err
	}
	if waiting != "" {
		logger.Info("the stores answer; starting", "waited_for", waiting)
	}
	return st, nil
}

// waitForNameServers returns once one of RocketMQ's name servers answers, trying again
// with backoff until ctx ends; wait shows what it waits for.
func waitForNameServers(ctx context.Context, cfg config.Config, logger *slog.Logger, wait *starting) error {
	b := backoff.NewExponentialBackOff()
	b.InitialInterval, b.MaxInterval = 500*time.Millisecond, 15*time.Second
	waited := false
	_, err := backoff.Retry(ctx, func() (struct{}, error) {
		err := scheduler.ReachNameServers(ctx, cfg.RocketMQ.NameServers, scheduler.AccessFromConfig(cfg), cfg.RocketMQ.Topic)
		if err == nil || ctx.Err() != nil {
			return struct{}{}, ctx.Err()
		}
		wait.waitFor("rocketmq", err)
		if !waited {
			logger.Warn("waiting for RocketMQ's name servers; trying again", "name_servers", strings.Join(cfg.RocketMQ.NameServers, ","), "err", err)
			waited = true
		}
		return struct{}{}, err
	}, backoff.WithBackOff(b), backoff.WithMaxElapsedTime(0))
	if err != nil {
		return err
	}
	if waited {
		logger.Info("RocketMQ's name servers answer; starting")
	}
	return nil
}

// openStoresOnce opens every store once; which names the one that failed.
func openStoresOnce(ctx context.Context, cfg config.Config, logger *slog.Logger) (st stores, which string, err error) {
	defer func() {
		if err != nil {
			st.close()
			st = stores{}
		}
	}()
	// Each is kept only once open: a failed open's client is a typed nil.
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	if err != nil {
		return st, "redis", err
	}
	st.rdb = rdb
	if err = store.ClaimPrefix(ctx, st.rdb, cfg.Redis.KeyPrefix, cfg.RocketMQ.Topic+"/"+cfg.RocketMQ.Group); err != nil {
		return st, "redis", fmt.Errorf("serve: %w", err)
	}
	if st.layout, err = store.ClaimShards(ctx, st.rdb, cfg.Redis.KeyPrefix, max(cfg.Redis.Shards, 1), cfg.Scheduler.Liveness > 0); err != nil {
		return st, "redis", fmt.Errorf("serve: %w", err)
	}
	// The heartbeat has connections of its own: a beat never waits behind the hand-offs.
	beat, err := store.OpenBeatRedis(ctx, cfg.Redis)
	if err != nil {
		return st, "redis", err
	}
	st.beat = beat
	pg, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	if err != nil {
		return st, "postgres", err
	}
	st.pg = pg
	if err = migrations.RequireCurrent(ctx, st.pg, logger); err != nil {
		return st, "postgres", err
	}
	return st, "", nil
}

// starting answers while the replica waits for its stores.
type starting struct {
	admin config.Secret
	mu    sync.Mutex
	which string // the store waited for; "" before the first try failed
	err   error
}

func newStarting(admin config.Secret) *starting { return &starting{admin: admin} }

func (s *starting) waitFor(which string, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.which, s.err = which, err
}

func (s *starting) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/healthz" {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		_, _ = w.Write([]byte("ok\n"))
		return
	}
	s.mu.Lock()
	which, err := s.which, s.err
	s.mu.Unlock()
	report := readyReport{Status: "starting", Checks: map[string]string{}}
	if which != "" {
		report.Checks[which] = "waiting: " + failing
		got, bearer := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if bearer && s.admin != "" && s.admin.Matches(strings.TrimSpace(got)) {
			report.Checks[which] = "waiting: " + err.Error()
		}
	}
	w.Header().Set("Retry-After", "5")
	writeReport(w, http.StatusServiceUnavailable, report)
}

// switchHandler serves with the handler set last: the starting one, then the service's.
type switchHandler struct{ h atomic.Pointer[http.Handler] }

func (s *switchHandler) set(h http.Handler) { s.h.Store(&h) }

func (s *switchHandler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	(*s.h.Load()).ServeHTTP(w, r)
}
