// Package migrations holds rocketdelay's Postgres schema as numbered goose SQL files,
// embedded in the binary, and applies them under a Postgres advisory lock so that several
// replicas (or a migration Job and a replica) never migrate at the same time.
//
// It must not hold queries the service runs at run time; those live with the store.
package migrations

import (
	"context"
	"database/sql"
	"embed"
	"fmt"
	"log/slog"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/jackc/pgx/v5/stdlib"
	"github.com/pressly/goose/v3"
	"github.com/pressly/goose/v3/lock"
)

//go:embed *.sql
var files embed.FS

// Table is the table in which goose records applied versions.
const Table = "rocketdelay_schema_version"

// Migrator applies the embedded migrations to one database.
type Migrator struct {
	db       *sql.DB
	provider *goose.Provider
}

// New returns a Migrator that runs on pool (see store.OpenPostgres).
func New(pool *pgxpool.Pool, logger *slog.Logger) (*Migrator, error) {
	db := stdlib.OpenDBFromPool(pool)
	locker, err := lock.NewPostgresSessionLocker(lock.WithLockTimeout(1, 600)) // poll every second, up to 10 min
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	provider, err := goose.NewProvider(goose.DialectPostgres, db, files,
		goose.WithSessionLocker(locker),
		goose.WithTableName(Table),
		goose.WithLogger(gooseLogger{logger}),
	)
	if err != nil {
		db.Close()
		return nil, fmt.Errorf("migrations: %w", err)
	}
	return &Migrator{db: db, provider: provider}, nil
}

// Result is one applied migration.
type Result struct {
	Version  int64
	Name     string
	Duration time.Duration
}

// Up applies every pending migration, in order, holding the advisory lock. Applying
// when nothing is pending is a no-op that returns no result.
func (m *Migrator) Up(ctx context.Context) ([]Result, error) {
	res, err := m.provider.Up(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: up: %w", err)
	}
	out := make([]Result, 0, len(res))
	for _, r := range res {
		out = append(out, Result{Version: r.Source.Version, Name: baseName(r.Source.Path), Duration: r.Duration})
	}
	return out, nil
}

// Status is the state of one known migration.
type Status struct {
	Version   int64
	Name      string
	Applied   bool
	AppliedAt time.Time // zero unless Applied
}

// Status lists every embedded migration and whether it has been applied.
func (m *Migrator) Status(ctx context.Context) ([]Status, error) {
	st, err := m.provider.Status(ctx)
	if err != nil {
		return nil, fmt.Errorf("migrations: status: %w", err)
	}
	out := make([]Status, 0, len(st))
	for _, s := range st {
		out = append(out, Status{
			Version:   s.Source.Version,
			Name:      baseName(s.Source.Path),
			Applied:   s.State == goose.StateApplied,
			AppliedAt: s.AppliedAt,
		})
	}
	return out, nil
}

// Close releases the Migrator's database handle; the pool stays open.
func (m *Migrator) Close() error { return m.db.Close() }

func baseName(p string) string {
	for i := len(p) - 1; i >= 0; i-- {
		if p[i] == '/' {
			return p[i+1:]
		}
	}
	return p
}

type gooseLogger struct{ l *slog.Logger }

func (g gooseLogger) Printf(format string, v ...any) { g.l.Info(fmt.Sprintf(format, v...)) }
func (g gooseLogger) Fatalf(format string, v ...any) { g.l.Error(fmt.Sprintf(format, v...)) }

// RequireCurrent returns an error, saying what to run, unless every migration is
// applied to the database of pool: a service refuses to start on a schema that is behind.
func RequireCurrent(ctx context.Context, pool *pgxpool.Pool, logger *slog.Logger) error {
	m, err := New(pool, logger)
	if err != nil {
		return err
	}
	defer m.Close()
	st, err := m.Status(ctx)
	if err != nil {
		return err
	}
	for _, s := range st {
		if !s.Applied {
			return fmt.Errorf("migrations: the Postgres schema is behind (migration %s is not applied): run `rocketdelay migrate up` first", s.Name)
		}
	}
	return nil
}
