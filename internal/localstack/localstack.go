// Package localstack starts the pieces that tests, benchmarks and the fault suite need
// beside the shared stack deploy/local starts: a Redis server of their own, and a fresh
// Postgres schema with every migration applied. It does not import testing, so the
// bench and fault-suite commands use it as the tests do (package testenv wraps it for
// a testing.TB). It is tooling, not product: nothing under cmd links it but the bench
// command.
package localstack

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/migrations"
	"github.com/rocketdelay/rocketdelay/store"
)

// RedisServer is a redis-server process of the caller's own.
type RedisServer struct {
	// Addr is its loopback host:port.
	Addr string
	// Dir is its working directory (AOF, log), removed by Stop.
	Dir string

	cmd    *exec.Cmd
	exited chan struct{}
}

// redisStarts is how many ports StartRedis tries.
const redisStarts = 3

// StartRedis starts Debian's redis-server (deploy/local/up installs it) on a free
// loopback port, with RDB snapshots off and args added to its command line, in a
// temporary directory of its own, and waits until it answers PING. The free port comes
// from the kernel's ephemeral range, so another process's client connection can take it
// before redis-server binds it: StartRedis then starts again on another port, up to
// three times.
func StartRedis(ctx context.Context, args ...string) (*RedisServer, error) {
	var errs []error
	for range redisStarts {
		s, err := startRedis(ctx, args)
		if err == nil {
			return s, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}

func startRedis(ctx context.Context, args []string) (*RedisServer, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	addr := ln.Addr().String()
	_, port, _ := net.SplitHostPort(addr)
	ln.Close()
	dir, err := os.MkdirTemp("", "rocketdelay-redis-")
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	logFile := filepath.Join(dir, "redis.log")
	cmd := exec.Command("redis-server", append([]string{"--bind", "127.0.0.1", "--port", port, "--dir", dir,
		"--save", "", "--logfile", logFile}, args...)...)
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localstack: start redis-server (deploy/local/up installs it): %w", err)
	}
	s := &RedisServer{Addr: addr, Dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(s.exited) }()
	rdb := redis.NewClient(&redis.Options{Addr: addr})
	defer rdb.Close()
	deadline := time.Now().Add(10 * time.Second)
	for rdb.Ping(ctx).Err() != nil {
		select {
		case <-s.exited:
			log, _ := os.ReadFile(logFile)
			s.Stop()
			return nil, fmt.Errorf("localstack: redis-server on %s exited at start: %s", addr, lastLine(string(log)))
		case <-time.After(20 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			s.Stop()
			return nil, fmt.Errorf("localstack: redis-server on %s did not answer within 10s", addr)
		}
	}
	return s, nil
}

// Stop kills the server, waits for it and removes its directory.
func (s *RedisServer) Stop() {
	_ = s.cmd.Process.Kill()
	<-s.exited
	os.RemoveAll(s.Dir)
}

func lastLine(s string) string {
	lines := strings.Split(strings.TrimSpace(s), "\n")
	return lines[len(lines)-1]
}

// Schema is a Postgres schema of the caller's own.
type Schema struct {
	// Name is the schema's name.
	Name string
	// DSN selects it (search_path).
	DSN string

	admin *pgxpool.Pool
}

// NewSchema creates a schema on the database of dsn and returns it. name "" takes a new
// unique name (test_…); an existing schema of the name is reused.
func NewSchema(ctx context.Context, dsn, name string) (*Schema, error) {
	if name == "" {
		var b [6]byte
		_, _ = rand.Read(b[:])
		name = "test_" + hex.EncodeToString(b[:])
	}
	admin, err := store.OpenPostgres(ctx, dsn)
	if err != nil {
		return nil, err
	}
	if _, err := admin.Exec(ctx, "CREATE SCHEMA IF NOT EXISTS "+pgx.Identifier{name}.Sanitize()); err != nil {
		admin.Close()
		return nil, fmt.Errorf("localstack: create schema %s: %w", name, err)
	}
	sep := "?"
	if strings.Contains(dsn, "?") {
		sep = "&"
	}
	return &Schema{Name: name, DSN: dsn + sep + "search_path=" + name, admin: admin}, nil
}

// Migrate applies every migration in the schema.
func (s *Schema) Migrate(ctx context.Context) error {
	pool, err := store.OpenPostgres(ctx, s.DSN)
	if err != nil {
		return err
	}
	defer pool.Close()
	m, err := migrations.New(pool, slog.New(slog.DiscardHandler))
	if err != nil {
		return err
	}
	defer m.Close()
	if _, err := m.Up(ctx); err != nil {
		return fmt.Errorf("localstack: migrate schema %s: %w", s.Name, err)
	}
	return nil
}

// Close lets go of the schema, dropping it when drop is set.
func (s *Schema) Close(ctx context.Context, drop bool) error {
	defer s.admin.Close()
	if !drop {
		return nil
	}
	if _, err := s.admin.Exec(ctx, "DROP SCHEMA "+pgx.Identifier{s.Name}.Sanitize()+" CASCADE"); err != nil {
		return fmt.Errorf("localstack: drop schema %s: %w", s.Name, err)
	}
	return nil
}
