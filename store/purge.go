package store

import (
	"context"
	"errors"
	"fmt"
	"time"
)

var (
	qPurge       = query("failed_purge.sql")
	qPurgeLock   = query("failed_purge_lock.sql")
	qPurgeUnlock = query("failed_purge_unlock.sql")
	qTableSize   = query("failed_table_size.sql")
)

// MaxPurgeBatch bounds the rows one purge statement deletes.
const MaxPurgeBatch = 1000

// PurgeOptions say which rows Purge deletes.
type PurgeOptions struct {
	// Retention: delivered, discarded and rejected rows whose last change is older are
	// deleted. Required.
	Retention time.Duration
	// DeadRetention: dead rows whose last change is older are deleted; 0 keeps them.
	DeadRetention time.Duration
	// Batch is how many rows one statement deletes, 1 to MaxPurgeBatch. Default
	// MaxPurgeBatch.
	Batch int
}

// Purge deletes the rows whose retention is over, a batch per statement until none is
// left, holding an advisory lock so that one replica purges at a time: ran is false when
// another holds it (nothing was done). It never deletes a pending row, and so never a
// claimed one. It returns the rows deleted, by status; on an error, those deleted before.
func (s *FailedSends) Purge(ctx context.Context, opts PurgeOptions) (deleted map[FailedStatus]int64, ran bool, err error) {
	if opts.Retention <= 0 || opts.DeadRetention < 0 {
		return nil, false, fmt.Errorf("store: purge failed sends: %w: a positive retention is required", ErrInvalid)
	}
	if opts.Batch <= 0 || opts.Batch > MaxPurgeBatch {
		opts.Batch = MaxPurgeBatch
	}
	conn, err := s.pool.Acquire(ctx)
	if err != nil {
		return nil, false, pgErr(ctx, "purge failed sends", err)
	}
	defer conn.Release()
	lctx, cancel := s.bound(ctx)
	err = conn.QueryRow(lctx, qPurgeLock).Scan(&ran)
	cancel()
	if err != nil || !ran {
		return nil, false, pgErrOrNil(ctx, "purge failed sends: lock", err)
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
	var dead any // NULL: dead rows are kept
	if opts.DeadRetention > 0 {
		dead = opts.DeadRetention
	}
	deleted = map[FailedStatus]int64{}
	for ctx.Err() == nil {
		bctx, cancel := s.bound(ctx)
		rows, err := conn.Query(bctx, qPurge, opts.Retention, dead, opts.Batch)
		if err != nil {
			cancel()
			return deleted, true, pgErr(bctx, "purge failed sends", err)
		}
		var status string
		var n, batch int64
		for rows.Next() {
			if err := rows.Scan(&status, &n); err != nil {
				rows.Close()
				cancel()
				return deleted, true, pgErr(bctx, "purge failed sends", err)
			}
			deleted[FailedStatus(status)] += n
			batch += n
		}
		err = rows.Err()
		cancel()
		if err != nil {
			return deleted, true, pgErr(bctx, "purge failed sends", err)
		}
		if batch < int64(opts.Batch) {
			break
		}
	}
	return deleted, true, ctx.Err()
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
