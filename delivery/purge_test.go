package delivery_test

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// onLog is a slog handler that runs do on every record whose message contains match.
type onLog struct {
	match string
	do    func(slog.Record)
}

func (h onLog) Enabled(context.Context, slog.Level) bool { return true }
func (h onLog) Handle(_ context.Context, r slog.Record) error {
	if strings.Contains(r.Message, h.match) {
		h.do(r)
	}
	return nil
}
func (h onLog) WithAttrs([]slog.Attr) slog.Handler { return h }
func (h onLog) WithGroup(string) slog.Handler      { return h }

// seedFinal inserts n delivered rows whose last change was 40 days ago, in one statement.
func seedFinal(t testing.TB, pool *pgxpool.Pool, n int) {
	t.Helper()
	_, err := pool.Exec(context.Background(), `INSERT INTO failed_sends
		(message_id, target, payload, status, error_class, created_at, updated_at)
		SELECT 'old-' || i, 'ops', '\x78', 'delivered', 'transient',
		       now() - interval '41 days', now() - interval '40 days' + i * interval '1 millisecond'
		FROM generate_series(1, $1) AS i`, n)
	require.NoError(t, err)
}

// countFinal counts the rows seedFinal inserted that are left.
func countFinal(t testing.TB, pool *pgxpool.Pool) int64 {
	t.Helper()
	var n int64
	require.NoError(t, pool.QueryRow(context.Background(), `SELECT count(*) FROM failed_sends WHERE message_id LIKE 'old-%'`).Scan(&n))
	return n
}

// A purge of a large backlog never stalls the retries of the replica that runs it: a
// pending row that comes due once the purge has begun (its first pass's progress line)
// is retried in the round right after that pass, while the rest of the backlog waits
// for the passes after it, not once the purge is over.
func TestPurgeNeverStallsRetries(t *testing.T) {
	t.Parallel()
	const rows, perPass = 50_000, 500
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	seedFinal(t, pool, rows)
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "due-during-purge", Target: "ops", Payload: []byte("due-during-purge"),
		ErrorClass: "transient", NextAttemptAt: time.Now().Add(time.Hour)})
	require.NoError(t, err)
	id := rowID(t, fs, "due-during-purge")

	var mu sync.Mutex
	var leftAtSend []int64
	snd := newFakeSender(func(string) error {
		n := countFinal(t, pool)
		mu.Lock()
		leftAtSend = append(leftAtSend, n)
		mu.Unlock()
		return nil
	})
	var once sync.Once
	var first map[string]string // the first pass's progress line
	logger := slog.New(onLog{match: "past their retention deleted", do: func(r slog.Record) {
		once.Do(func() {
			first = map[string]string{}
			r.Attrs(func(a slog.Attr) bool { first[a.Key] = a.Value.String(); return true })
			makeDue(t, pool, id)
		})
	}})
	reg := prometheus.NewRegistry()
	d := delivery.New(delivery.Channels{"ops": snd, "": snd}, stageFor(t, fs), fs, delivery.Options{}, logger, delivery.NewMetrics(reg), time.Now)
	job := delivery.NewRetryJob(d, delivery.RetryOptions{Interval: 50 * time.Millisecond, Retention: 30 * 24 * time.Hour,
		PurgePassRows: perPass, PurgePause: time.Millisecond})
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- job.Run(runCtx) }()
	require.Eventually(t, func() bool {
		return testenv.Metric(t, reg, "rocketdelay_failed_sends_purged_total") == rows
	}, time.Minute, 10*time.Millisecond, "the purge did not finish")
	require.Eventually(t, func() bool {
		row, err := fs.Get(ctx, id)
		return err == nil && row.Status == store.StatusDelivered
	}, time.Minute, 10*time.Millisecond)
	stop()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	require.Len(t, leftAtSend, 1)
	require.Equal(t, int64(rows-perPass), leftAtSend[0], "the row due during the purge was not retried right after the first pass")
	require.Zero(t, countFinal(t, pool))
	require.Zero(t, testenv.Metric(t, reg, "rocketdelay_failed_sends_purge_left"))
	require.Equal(t, fmt.Sprint(perPass), first["rows"])
	require.Equal(t, fmt.Sprint(rows-perPass), first["rows_left"], "the progress line says what is left: %v", first)
}

// TestBigPurgeMeasured measures a purge of 2,000,000 rows past their retention with the
// job's default pass bound and pause, while pending rows come due every second during
// it: how long the purge takes, in how many passes, and how late each pending row is
// retried (Interval is 1s: a row due is retried at the next round). Opt in with
// ROCKETDELAY_BIG_PURGE=1; it prints the figures.
func TestBigPurgeMeasured(t *testing.T) {
	if os.Getenv("ROCKETDELAY_BIG_PURGE") != "1" {
		t.Skip("set ROCKETDELAY_BIG_PURGE=1 to purge 2,000,000 rows and print the figures")
	}
	const rows, pending = 2_000_000, 60
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	start := time.Now()
	seedFinal(t, pool, rows)
	t.Logf("inserted %d rows past their retention in %s (one INSERT … SELECT generate_series)", rows, time.Since(start).Round(time.Millisecond))
	_, err := pool.Exec(ctx, "ANALYZE failed_sends")
	require.NoError(t, err)

	// Pending rows due 1s, 2s, … 60s from the start of the job, by Postgres's clock.
	_, err = pool.Exec(ctx, `INSERT INTO failed_sends (message_id, target, payload, status, error_class, next_attempt_at)
		SELECT 'due-' || i, 'ops', convert_to('due-' || i, 'UTF8'), 'pending', 'transient', now() + (i + 5) * interval '1 second'
		FROM generate_series(1, $1) AS i`, pending)
	require.NoError(t, err)
	due := map[string]time.Time{}
	r, err := pool.Query(ctx, `SELECT message_id, next_attempt_at FROM failed_sends WHERE message_id LIKE 'due-%'`)
	require.NoError(t, err)
	var id string
	var at time.Time
	_, err = pgx.ForEachRow(r, []any{&id, &at}, func() error { due[id] = at; return nil })
	require.NoError(t, err)

	var mu sync.Mutex
	late := map[string]time.Duration{}
	leftAt := map[string]int64{}
	snd := newFakeSender(func(body string) error {
		n := countFinal(t, pool)
		mu.Lock()
		defer mu.Unlock()
		late[body] = time.Since(due[body])
		leftAt[body] = n
		return nil
	})
	var passes sync.WaitGroup
	passes.Add(1)
	var passCount int
	var purgeDone sync.Once
	logger := slog.New(onLog{match: "past their retention deleted", do: func(r slog.Record) {
		mu.Lock()
		passCount++
		mu.Unlock()
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "done" && a.Value.Bool() {
				purgeDone.Do(passes.Done)
			}
			return true
		})
	}})
	reg := prometheus.NewRegistry()
	d := delivery.New(delivery.Channels{"ops": snd, "": snd}, stageFor(t, fs), fs, delivery.Options{}, logger, delivery.NewMetrics(reg), time.Now)
	job := delivery.NewRetryJob(d, delivery.RetryOptions{Interval: time.Second, Retention: 30 * 24 * time.Hour})
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	done := make(chan error)
	start = time.Now()
	go func() { done <- job.Run(runCtx) }()
	passes.Wait()
	took := time.Since(start)
	require.Eventually(t, func() bool { mu.Lock(); defer mu.Unlock(); return len(late) == pending }, 2*time.Minute, 100*time.Millisecond)
	stop()
	require.NoError(t, <-done)

	mu.Lock()
	defer mu.Unlock()
	var worst, sum time.Duration
	during := 0
	for body, l := range late {
		worst, sum = max(worst, l), sum+l
		if leftAt[body] > 0 {
			during++
		}
	}
	t.Logf("purge: %d rows in %s, %d passes, %.0f rows/s (pass bound %s, pause %s)", rows, took.Round(time.Millisecond), passCount,
		float64(rows)/took.Seconds(), store.DefaultPurgePass, delivery.DefaultPurgePause)
	t.Logf("retries: %d pending rows due during the first minute, %d of them retried while the purge had rows left; lateness after due: mean %s, worst %s (Interval 1s)",
		pending, during, (sum / time.Duration(pending)).Round(time.Millisecond), worst.Round(time.Millisecond))
	require.Equal(t, float64(rows), testenv.Metric(t, reg, "rocketdelay_failed_sends_purged_total"))
}
