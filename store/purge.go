package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"

	"github.com/rocketdelay/rocketdelay/config"
)

var (
	qPurge        = query("failed_purge.sql")
	qPurgeLock    = query("failed_purge_lock.sql")
	qPurgeUnlock  = query("failed_purge_unlock.sql")
	qTableSize    = query("failed_table_size.sql")
	qPurgeBacklog = query("failed_purge_backlog.sql")
)

// Bounds and defaults of Purge.
const (
	// MaxPurgeBatch bounds the rows one purge statement deletes.
	MaxPurgeBatch = 1000
	// DefaultPurgePass bounds the time one call of Purge deletes for.
	DefaultPurgePass = 250 * time.Millisecond
)

// PurgeOptions say which rows Purge deletes, and how many at a time.
type PurgeOptions struct {
	// Retention: delivered, discarded, cancelled and rejected rows whose last change is
	// older are deleted. Required.
	Retention time.Duration
	// DeadRetention: dead rows whose last change is older are deleted; 0 keeps them.
	DeadRetention time.Duration
	// Batch is how many rows one statement deletes, 1 to MaxPurgeBatch. Default
	// MaxPurgeBatch.
	Batch int
	// Pass bounds the time one call deletes for: no statement starts once it has passed
	// (the one running finishes). Default DefaultPurgePass.
	Pass time.Duration
	// PassRows, when above 0, bounds the rows one call deletes as well.
	PassRows int
}

// PurgePass is what one call of Purge did.
type PurgePass struct {
	// Ran is false when another replica holds the purge's lock: nothing was done.
	Ran bool
	// Deleted counts the rows deleted, by status; Rows is their sum.
	Deleted map[FailedStatus]int64
	Rows    int64
	// Done reports that the pass found no more rows past their retention: the purge is
	// over until more rows reach it.
	Done bool
}

// Purge runs one pass of the purge: it deletes rows whose retention is over, oldest
// first, a batch per statement, until none is left, opts.Pass has passed or opts.PassRows
// rows went, whichever comes first, so a backlog of millions is deleted over many passes
// with other work (the retry job's retries) between them. It holds an advisory lock
// during the pass, so that one replica purges at a time: Ran is false when another holds
// it (nothing was done). It never deletes a pending row, and so never a claimed one. On
// an error, the pass says what it deleted before.
func (s *FailedSends) Purge(ctx context.Context, opts PurgeOptions) (pass PurgePass, err error) {
	if opts.Retention <= 0 || opts.DeadRetention < 0 {
		return PurgePass{}, fmt.Errorf("store: purge failed sends: %w: a positive retention is required", ErrInvalid)
	}
	if opts.Batch <= 0 || opts.Batch > MaxPurgeBatch {
		opts.Batch = MaxPurgeBatch
	}
	config.Default(&opts.Pass, DefaultPurgePass)
	started := time.Now()
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return PurgePass{}, pgErr(ctx, "purge failed sends", err)
	}
	defer conn.Release()
	lctx, cancel := s.bound(ctx)
	err = conn.QueryRow(lctx, qPurgeLock).Scan(&pass.Ran)
	cancel()
	if err != nil || !pass.Ran {
		return PurgePass{}, pgErrOrNil(ctx, "purge failed sends: lock", err)
	}
	defer func() {
		uctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), s.timeout)
		defer cancel()
		if _, uerr := conn.Exec(uctx, qPurgeUnlock); uerr != nil {
			// A session lock that cannot be released goes with its connection.
			conn.Conn().Close(uctx)
			err = errors.Join(err, pgErr(uctx, "purge failed sends: unlock", uerr))
		}
	}()
	pass.Deleted = map[FailedStatus]int64{}
	for ctx.Err() == nil && time.Since(started) < opts.Pass {
		batch := opts.Batch
		if opts.PassRows > 0 {
			if left := int64(opts.PassRows) - pass.Rows; left <= 0 {
				break
			} else if left < int64(batch) {
				batch = int(left)
			}
		}
		n, err := s.purgeBatch(ctx, conn, opts, batch, pass.Deleted)
		pass.Rows += n
		if err != nil {
			return pass, err
		}
		if n < int64(batch) {
			pass.Done = true
			break
		}
	}
	return pass, ctx.Err()
}

// purgeBatch deletes up to batch rows past their retention in one statement, counts
// them into deleted by status, and returns how many went.
func (s *FailedSends) purgeBatch(ctx context.Context, conn *pgxpool.Conn, opts PurgeOptions, batch int, deleted map[FailedStatus]int64) (int64, error) {
	bctx, cancel := s.bound(ctx)
	defer cancel()
	rows, err := conn.Query(bctx, qPurge, opts.Retention, deadRetention(opts), batch)
	if err != nil {
		return 0, pgErr(bctx, "purge failed sends", err)
	}
	var status string
	var n, total int64
	_, err = pgx.ForEachRow(rows, []any{&status, &n}, func() error {
		deleted[FailedStatus(status)] += n
		total += n
		return nil
	})
	if err != nil {
		return total, pgErr(bctx, "purge failed sends", err)
	}
	return total, nil
}

// PurgeBacklog counts the rows past their retention (those Purge deletes with opts), up
// to limit: a count that reaches limit means "at least limit".
func (s *FailedSends) PurgeBacklog(ctx context.Context, opts PurgeOptions, limit int) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, qPurgeBacklog, opts.Retention, deadRetention(opts), max(limit, 0)).Scan(&n); err != nil {
		return 0, pgErr(ctx, "count failed sends past their retention", err)
	}
	return n, nil
}

// deadRetention is opts.DeadRetention as the purge's queries take it: NULL keeps dead
// rows.
func deadRetention(opts PurgeOptions) any {
	if opts.DeadRetention > 0 {
		return opts.DeadRetention
	}
	return nil
}

// TableBytes returns the bytes failed_sends takes on disk, indexes and payloads included.
func (s *FailedSends) TableBytes(ctx context.Context) (int64, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var n int64
	if err := s.pool.QueryRow(ctx, qTableSize).Scan(&n); err != nil {
		return 0, pgErr(ctx, "failed_sends size", err)
	}
	return n, nil
}

func pgErrOrNil(ctx context.Context, op string, err error) error {
	if err == nil {
		return nil
	}
	return pgErr(ctx, op, err)
}
