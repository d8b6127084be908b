package delivery_test

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

func TestBackoff(t *testing.T) {
	base, ceiling := 30*time.Second, time.Hour
	want := []time.Duration{30 * time.Second, time.Minute, 2 * time.Minute, 4 * time.Minute, 8 * time.Minute,
		16 * time.Minute, 32 * time.Minute, time.Hour, time.Hour}
	for i, w := range want {
		require.Equal(t, w, delivery.Backoff(i+1, base, ceiling), "attempt %d", i+1)
	}
	require.Equal(t, time.Hour, delivery.Backoff(1000, base, ceiling))
	require.Equal(t, base, delivery.Backoff(0, base, ceiling))
}

// makeDue moves row id's next attempt to Postgres's now: the test's way past a backoff,
// which runs on Postgres's clock.
func makeDue(t testing.TB, pool *pgxpool.Pool, id int64) {
	t.Helper()
	_, err := pool.Exec(context.Background(), "UPDATE failed_sends SET next_attempt_at = now() WHERE id = $1", id)
	require.NoError(t, err)
}

func TestJobBacksOffThenGivesUpAfterMaxAttempts(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "m-1", Target: "ops", Payload: []byte("disk full"),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)

	snd := newFakeSender(func(string) error { return &sender.Failure{Class: sender.ClassTransient, HTTPStatus: 503} })
	job := newJob(t, fs, snd, delivery.RetryOptions{MaxAttempts: 4, BackoffBase: time.Minute, BackoffCap: 3 * time.Minute},
		nil, time.Now)
	get := func() store.FailedSend {
		rows, _, err := fs.List(ctx, store.Filter{})
		require.NoError(t, err)
		require.Len(t, rows, 1)
		return rows[0]
	}

	// Attempt n fails; the next is due Backoff(n) later by Postgres's clock: 1m, 2m, then
	// the cap, 3m (the row's updated_at is that clock's now when it was marked).
	for n, wait := range []time.Duration{time.Minute, 2 * time.Minute, 3 * time.Minute} {
		r, err := job.RunOnce(ctx)
		require.NoError(t, err)
		require.Equal(t, delivery.Round{Retried: 1}, r, "attempt %d", n+1)
		row := get()
		require.Equal(t, n+1, row.Attempts)
		require.Equal(t, store.StatusPending, row.Status)
		require.Equal(t, 503, *row.HTTPStatus)
		require.Nil(t, row.ClaimedBy, "settled")
		require.Equal(t, wait, row.NextAttemptAt.Sub(row.UpdatedAt), "attempt %d", n+1)

		r, err = job.RunOnce(ctx)
		require.NoError(t, err)
		require.Zero(t, r, "not due before its backoff has passed")
		makeDue(t, pool, row.ID)
	}
	r, err := job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Dead: 1}, r)
	row := get()
	require.Equal(t, store.StatusDead, row.Status)
	require.Equal(t, 4, row.Attempts)
	require.Nil(t, row.NextAttemptAt)
	delivered, failures := snd.snapshot()
	require.Empty(t, delivered)
	require.Equal(t, 4, failures)
}

func TestJobDeadAtOnceOnPermanentFailureOrMaxAge(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	for _, id := range []string{"too-big", "old"} {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: id, Payload: []byte(id), ErrorClass: "transient", NextAttemptAt: now})
		require.NoError(t, err)
	}
	tooBig := &sender.Failure{Class: sender.ClassPermanent, Target: "ops", Code: 460101, Reason: "message too long"}
	snd := newFakeSender(func(p string) error {
		if p == "too-big" {
			return fmt.Errorf("send: %w", tooBig)
		}
		return &sender.Failure{Class: sender.ClassThrottled}
	})
	// 25h later, "old" is past the 24h max age after one more failed attempt.
	later := now.Add(25 * time.Hour)
	job := newJob(t, fs, snd, delivery.RetryOptions{}, nil, func() time.Time { return later })
	r, err := job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Dead: 2}, r)
	rows, _, err := fs.List(ctx, store.Filter{Status: store.StatusDead})
	require.NoError(t, err)
	require.Len(t, rows, 2)
	for _, row := range rows {
		require.Equal(t, 1, row.Attempts)
		if row.MessageID == "too-big" {
			require.Equal(t, "permanent", row.ErrorClass)
			require.Equal(t, 460101, *row.Errcode)
			require.Nil(t, row.HTTPStatus)
			require.Equal(t, tooBig.Error(), row.LastError, "the failure, as a hand-off records it")
		} else {
			require.Equal(t, "throttled", row.ErrorClass)
		}
	}
}

func TestJobHandsBackRowsWhenStopped(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 3 {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprint(i), ErrorClass: "transient", NextAttemptAt: time.Now()})
		require.NoError(t, err)
	}
	started := make(chan struct{}, 3)
	snd := blockingSender{started: started}
	job := newJob(t, fs, snd, delivery.RetryOptions{}, nil, time.Now)
	done := make(chan delivery.Round)
	go func() {
		r, _ := job.RunOnce(ctx)
		done <- r
	}()
	<-started
	cancel()
	r := <-done
	require.Equal(t, delivery.Round{Released: 3}, r)
	rows, _, err := fs.List(context.Background(), store.Filter{})
	require.NoError(t, err)
	require.Len(t, rows, 3)
	for _, row := range rows {
		require.Equal(t, store.StatusPending, row.Status)
		require.Zero(t, row.Attempts, "an attempt cut short by a shutdown does not count")
		require.Nil(t, row.ClaimedBy, "handed back: another instance may take it at once")
		require.WithinDuration(t, time.Now(), *row.NextAttemptAt, 10*time.Second, "due again at once, not after the claim lease")
	}
}

// A stop while a row's request is on the wire (its claim confirmed) lets the request go
// on to its answer and settles the row by it; only what waits is handed back. Cut, the
// platform may have taken it, and the replica that took the row would send it again.
func TestJobStoppedMidRequestLetsItFinish(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	for i := range 2 {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprint("wire-", i), ErrorClass: "transient", NextAttemptAt: time.Now()})
		require.NoError(t, err)
	}
	snd := &wireSender{onWire: make(chan struct{}, 2), answer: make(chan struct{})}
	job := newJob(t, fs, snd, delivery.RetryOptions{}, nil, time.Now)
	done := make(chan delivery.Round)
	go func() {
		r, _ := job.RunOnce(ctx)
		done <- r
	}()
	<-snd.onWire
	cancel() // the stop, while the first row's request is on the wire
	close(snd.answer)
	r := <-done
	require.Equal(t, delivery.Round{Delivered: 1, Released: 1}, r)
	rows, _, err := fs.List(context.Background(), store.Filter{})
	require.NoError(t, err)
	statuses := map[string]int{}
	for _, row := range rows {
		statuses[string(row.Status)]++
	}
	require.Equal(t, map[string]int{string(store.StatusDelivered): 1, string(store.StatusPending): 1}, statuses)
	require.Equal(t, 1, snd.sent(), "the request on the wire was answered, the other never started")
}

// wireSender confirms the claim (the request is then on the wire), says so on onWire,
// and answers once answer is closed, unless its context ends first.
type wireSender struct {
	onWire chan struct{}
	answer chan struct{}
	mu     sync.Mutex
	n      int
}

func (s *wireSender) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	if err := a.Claim.Confirm(ctx, 0); err != nil {
		return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "not sent: " + err.Error(), Err: err}
	}
	s.onWire <- struct{}{}
	select {
	case <-s.answer:
	case <-ctx.Done():
		return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "cut on the wire", Err: ctx.Err()}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.n++
	return sender.Sent{Merged: 1, Parts: 1}, nil
}

func (s *wireSender) sent() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.n
}

type blockingSender struct{ started chan struct{} }

func (s blockingSender) Send(ctx context.Context, _ sender.Alert) (sender.Sent, error) {
	s.started <- struct{}{}
	<-ctx.Done()
	return sender.Sent{}, errBlocked
}

// Two retry jobs run side by side through an outage: every send fails until the
// outage ends. Afterwards every row has been delivered exactly once.
func TestTwoJobsThroughAnOutageDeliverEachRowExactlyOnce(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	const n = 60
	now := time.Now()
	for i := range n {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: fmt.Sprintf("m-%02d", i), Target: "ops",
			Payload: fmt.Appendf(nil, "alert %02d", i), ErrorClass: "transient", NextAttemptAt: now})
		require.NoError(t, err)
	}
	var down atomic.Bool
	down.Store(true)
	outage := func(string) error {
		if down.Load() {
			return &sender.Failure{Class: sender.ClassTransient, HTTPStatus: 503}
		}
		return nil
	}
	senders := []*fakeSender{newFakeSender(outage), newFakeSender(outage)}
	regs := []*prometheus.Registry{prometheus.NewRegistry(), prometheus.NewRegistry()}
	opts := delivery.RetryOptions{Interval: 10 * time.Millisecond, BatchSize: 7, MaxAttempts: 1000,
		BackoffBase: 5 * time.Millisecond, BackoffCap: 40 * time.Millisecond}
	runCtx, stop := context.WithCancel(ctx)
	var wg sync.WaitGroup
	for i := range 2 {
		job := newJob(t, fs, senders[i], opts, delivery.NewMetrics(regs[i]), time.Now)
		wg.Go(func() {
			if err := job.Run(runCtx); err != nil {
				t.Error(err)
			}
		})
	}
	require.Eventually(t, func() bool {
		_, f0 := senders[0].snapshot()
		_, f1 := senders[1].snapshot()
		return f0+f1 >= 3*n
	}, 20*time.Second, 5*time.Millisecond, "the outage should cause failed attempts")
	down.Store(false)
	require.Eventually(t, func() bool {
		st, err := fs.Stats(ctx)
		return err == nil && st.ByStatus[store.StatusDelivered] == n
	}, 30*time.Second, 10*time.Millisecond)
	time.Sleep(50 * time.Millisecond) // a few more rounds: nothing may be sent again
	stop()
	wg.Wait()

	total := map[string]int{}
	var succeeded float64
	for i, s := range senders {
		d, _ := s.snapshot()
		for k, v := range d {
			total[k] += v
		}
		succeeded += testenv.Metric(t, regs[i], "rocketdelay_failed_send_retries_succeeded_total")
		t.Logf("job %d delivered %d rows", i, len(d))
	}
	require.Len(t, total, n)
	for k, v := range total {
		require.Equal(t, 1, v, "%s delivered %d times", k, v)
	}
	require.Equal(t, float64(n), succeeded)
	st, err := fs.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, map[store.FailedStatus]int64{store.StatusDelivered: n}, st.ByStatus)
	require.Nil(t, st.OldestPending)
}

func TestMetricsFollowTheTable(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	now := time.Now()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "later", ErrorClass: "transient", NextAttemptAt: now.Add(time.Hour)})
	require.NoError(t, err)
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "bad", Rejected: true})
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	job := newJob(t, fs, newFakeSender(nil), delivery.RetryOptions{Interval: time.Hour}, delivery.NewMetrics(reg),
		func() time.Time { return now.Add(10 * time.Minute) })
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- job.Run(runCtx) }()
	require.Eventually(t, func() bool {
		return testenv.Metric(t, reg, "rocketdelay_failed_sends_oldest_pending_age_seconds") > 0
	}, 10*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	age := testenv.Metric(t, reg, "rocketdelay_failed_sends_oldest_pending_age_seconds")
	require.InDelta(t, 600, age, 5)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rocketdelay_failed_sends Rows of the failed_sends table by status, as of the retry job's last round (every replica reports the same table).
# TYPE rocketdelay_failed_sends gauge
rocketdelay_failed_sends{status="cancelled"} 0
rocketdelay_failed_sends{status="dead"} 0
rocketdelay_failed_sends{status="delivered"} 0
rocketdelay_failed_sends{status="discarded"} 0
rocketdelay_failed_sends{status="pending"} 1
rocketdelay_failed_sends{status="rejected"} 1
`), "rocketdelay_failed_sends"))
}

// The job's purge deletes what is past its retention and reports it, with the table's
// size; Run purges on its first round.
func TestJobPurgesPastRetention(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	ctx := context.Background()
	for _, id := range []string{"done-1", "done-2", "fresh"} {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: id, Rejected: true, ErrorClass: "rejected_bad_body"})
		require.NoError(t, err)
	}
	_, err := pool.Exec(ctx, `UPDATE failed_sends SET updated_at = now() - interval '3 hours' WHERE message_id LIKE 'done-%'`)
	require.NoError(t, err)
	reg := prometheus.NewRegistry()
	job := newJob(t, fs, newFakeSender(nil), delivery.RetryOptions{Interval: time.Hour, Retention: 2 * time.Hour},
		delivery.NewMetrics(reg), time.Now)
	runCtx, stop := context.WithCancel(ctx)
	done := make(chan error)
	go func() { done <- job.Run(runCtx) }()
	require.Eventually(t, func() bool {
		return testenv.Metric(t, reg, "rocketdelay_failed_sends_purged_total") == 2
	}, 10*time.Second, 5*time.Millisecond)
	stop()
	require.NoError(t, <-done)
	require.Positive(t, testenv.Metric(t, reg, "rocketdelay_failed_sends_table_bytes"))
	rows, _, err := fs.List(ctx, store.Filter{Limit: 10})
	require.NoError(t, err)
	require.Len(t, rows, 1)
	require.Equal(t, "fresh", rows[0].MessageID)
}

// A failure that says "not before 30s" is not retried at the 1s backoff, so a long
// local condition (every breaker open) does not burn the row's attempts.
func TestJobHonoursRetryAfter(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "m-ra", Target: "ops", Payload: []byte("x"),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	snd := newFakeSender(func(string) error {
		return &sender.Failure{Class: sender.ClassTransient, Reason: "every circuit breaker is open", RetryAfter: 30 * time.Second}
	})
	job := newJob(t, fs, snd, delivery.RetryOptions{BackoffBase: time.Second, BackoffCap: time.Minute},
		nil, time.Now)
	r, err := job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Retried: 1}, r)
	rows, _, err := fs.List(ctx, store.Filter{})
	require.NoError(t, err)
	require.Equal(t, 30*time.Second, rows[0].NextAttemptAt.Sub(rows[0].UpdatedAt))
}

// A row whose alert the done marker shows delivered (by a hand-off, or by an attempt
// whose MarkDelivered failed) is marked delivered without being sent again; a row the
// job delivers leaves the done marker; a split alert is sent from the part that failed.
func TestJobSeesDeliveriesAndParts(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	ws := stageFor(t, fs)
	now := time.Now()
	for _, id := range []string{"sent-elsewhere", "split"} {
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte(id),
			ErrorClass: "transient", NextAttemptAt: now, PartsSent: map[string]int{"split": 2}[id]})
		require.NoError(t, err)
	}
	require.NoError(t, ws.MarkDelivered(ctx, "sent-elsewhere"))
	snd := newFakeSender(nil)
	r, err := newJob(t, fs, snd, delivery.RetryOptions{}, nil, time.Now).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Delivered: 2}, r)
	delivered, _ := snd.snapshot()
	require.Equal(t, map[string]int{"split": 1}, delivered, "the alert delivered elsewhere is not sent again")
	require.Equal(t, []int{3}, snd.fromParts, "parts 1 and 2 were delivered before")
	done, err := ws.IsDelivered(ctx, "split")
	require.NoError(t, err)
	require.True(t, done, "the job's delivery leaves the done marker")
	st, err := fs.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, int64(2), st.ByStatus[store.StatusDelivered])
}

// An attempt's outcome that cannot be written because Postgres is briefly unreachable is
// written once Postgres is back, within the claim lease: the row is not left hidden
// behind its claim until the lease runs out.
func TestJobWritesTheOutcomeOncePostgresIsBack(t *testing.T) {
	t.Parallel()
	dsn := testenv.MigratedPostgres(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	u.Host = proxy.Addr()
	ctx := context.Background()
	pool, err := store.OpenPostgres(ctx, u.String())
	require.NoError(t, err)
	defer pool.Close()
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{ClaimLease: time.Minute})

	for _, tc := range []struct {
		name       string
		sendErr    error
		wantRound  delivery.Round
		wantStatus store.FailedStatus
	}{
		{"failed attempt", &sender.Failure{Class: sender.ClassTransient, HTTPStatus: 503}, delivery.Round{Retried: 1}, store.StatusPending},
		{"delivered", nil, delivery.Round{Delivered: 1}, store.StatusDelivered},
	} {
		id := "pg-back-" + strings.ReplaceAll(tc.name, " ", "-")
		_, err := fs.Record(ctx, store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte(id),
			ErrorClass: "transient", NextAttemptAt: time.Now()})
		require.NoError(t, err, tc.name)
		// Postgres goes away during the send and comes back 1.5s later.
		var cut sync.WaitGroup
		snd := newFakeSender(func(string) error {
			proxy.Down()
			cut.Go(func() { time.Sleep(1500 * time.Millisecond); proxy.Up() })
			return tc.sendErr
		})
		job := newJob(t, fs, snd, delivery.RetryOptions{BackoffBase: 30 * time.Second, MaxAttempts: 10, SendTimeout: 10 * time.Second}, nil, time.Now)
		start := time.Now()
		r, err := job.RunOnce(ctx)
		cut.Wait()
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.wantRound, r, tc.name)
		row, err := fs.Get(ctx, rowID(t, fs, id))
		require.NoError(t, err, tc.name)
		require.Equal(t, tc.wantStatus, row.Status, tc.name)
		if tc.wantStatus == store.StatusPending {
			require.Equal(t, 1, row.Attempts, "%s: the failed attempt is counted", tc.name)
			require.WithinRange(t, *row.NextAttemptAt, start.Add(30*time.Second), time.Now().Add(30*time.Second),
				"%s: next attempt after the backoff, not at the claim lease's end", tc.name)
		}
	}
}

// rowID is the id of the row of failed_sends recorded for messageID.
func rowID(t *testing.T, fs *store.FailedSends, messageID string) int64 {
	t.Helper()
	rows, _, err := fs.List(context.Background(), store.Filter{Limit: 1000})
	require.NoError(t, err)
	for _, r := range rows {
		if r.MessageID == messageID {
			return r.ID
		}
	}
	t.Fatalf("no row for %s", messageID)
	return 0
}

// gatedSender holds every send until the test opens its gate, then confirms the claim
// right before the request, as the DingTalk sender does, and counts what it sent.
type gatedSender struct {
	arrived chan string // the row's body, once a send waits at the gate
	gate    chan struct{}
	mu      sync.Mutex
	sent    []string
}

func newGatedSender() *gatedSender {
	return &gatedSender{arrived: make(chan string, 16), gate: make(chan struct{})}
}

func (s *gatedSender) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	s.arrived <- string(a.Body)
	select {
	case <-s.gate:
	case <-ctx.Done():
		return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "gave up", Err: ctx.Err()}
	}
	if err := a.Claim.Confirm(ctx, 0); err != nil {
		return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "not sent: " + err.Error(), Err: err}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.sent = append(s.sent, string(a.Body))
	return sender.Sent{Merged: 1, Parts: 1}, nil
}

func (s *gatedSender) sends() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.sent...)
}

// A retry job cut off from Postgres past its claim lease while its send waits (a paused
// replica, a long wait for a robot) loses the row to another job, which sends it; when
// the first one gets to its request, its confirm fails and it sends nothing. Without the
// fence both would send.
func TestTwoJobsNeverSendTheSameRow(t *testing.T) {
	t.Parallel()
	dsn := testenv.MigratedPostgres(t)
	u, err := url.Parse(dsn)
	require.NoError(t, err)
	proxy := testenv.StartProxy(t, u.Host)
	direct := u.String()
	u.Host = proxy.Addr()
	ctx := context.Background()
	cutPool, err := store.OpenPostgres(ctx, u.String())
	require.NoError(t, err)
	defer cutPool.Close()
	pool, err := store.OpenPostgres(ctx, direct)
	require.NoError(t, err)
	defer pool.Close()
	const lease = time.Second
	zombieFS := store.NewFailedSends(cutPool, store.FailedSendsOptions{ClaimLease: lease})
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{ClaimLease: lease})
	stages.Store(zombieFS, stageFor(t, fs)) // one Redis for both, as for two replicas
	_, err = fs.Record(ctx, store.NewFailedSend{MessageID: "fenced", Target: "ops", Payload: []byte("fenced"),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	id := rowID(t, fs, "fenced")

	zombieSender := newGatedSender()
	zombie := newJob(t, zombieFS, zombieSender, delivery.RetryOptions{}, nil, time.Now)
	zombieRound := make(chan delivery.Round, 1)
	go func() { r, _ := zombie.RunOnce(ctx); zombieRound <- r }()
	require.Equal(t, "fenced", <-zombieSender.arrived)
	proxy.Down() // the zombie can renew nothing now
	require.Eventually(t, func() bool {
		row, err := fs.Get(ctx, id)
		var now time.Time
		return err == nil && pool.QueryRow(ctx, "SELECT now()").Scan(&now) == nil && row.LeaseUntil.Before(now)
	}, 10*time.Second, 20*time.Millisecond, "the zombie's lease never ran out")

	other := newGatedSender()
	close(other.gate)
	r, err := newJob(t, fs, other, delivery.RetryOptions{}, nil, time.Now).RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Delivered: 1}, r)

	proxy.Up()
	require.Eventually(t, func() bool { return cutPool.Ping(ctx) == nil }, 10*time.Second, 20*time.Millisecond)
	close(zombieSender.gate)
	require.Equal(t, delivery.Round{Lost: 1}, <-zombieRound)
	require.Empty(t, zombieSender.sends(), "the zombie sent a row another job had taken over")
	require.Equal(t, []string{"fenced"}, other.sends())
	row, err := fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusDelivered, row.Status)
}

// An operator's retry of a row that a job is sending right now does not let a second job
// take it mid-send: it is sent once.
func TestOperatorRetryMidSendIsSentOnce(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "mid", Target: "ops", Payload: []byte("mid"),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	id := rowID(t, fs, "mid")

	first := newGatedSender()
	round := make(chan delivery.Round, 1)
	go func() { r, _ := newJob(t, fs, first, delivery.RetryOptions{}, nil, time.Now).RunOnce(ctx); round <- r }()
	<-first.arrived
	retried, err := fs.Retry(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, retried)

	second := newGatedSender()
	close(second.gate)
	r, err := newJob(t, fs, second, delivery.RetryOptions{}, nil, time.Now).RunOnce(ctx)
	require.NoError(t, err)
	require.Zero(t, r, "a row being sent was claimed again after an operator's retry")
	close(first.gate)
	require.Equal(t, delivery.Round{Delivered: 1}, <-round)
	require.Equal(t, []string{"mid"}, first.sends())
	require.Empty(t, second.sends())
}

// An operator's retry of a row whose attempt is on the wire (after its confirm) is kept
// when the attempt fails: the row is due again at once, even past its last attempt,
// where the attempt's settle pushed it back, or gave up on it, and the retry answered
// "retried" did nothing.
func TestOperatorRetryMidRequestOutlivesItsFailure(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	msg := testenv.Unique("mid-fail-")
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: msg, Target: "ops", Payload: []byte("x"),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	id := rowID(t, fs, msg)
	snd := &failOnWire{onWire: make(chan struct{}, 1), answer: make(chan struct{})}
	round := make(chan delivery.Round, 1)
	go func() {
		r, _ := newJob(t, fs, snd, delivery.RetryOptions{MaxAttempts: 1}, nil, time.Now).RunOnce(ctx)
		round <- r
	}()
	<-snd.onWire
	retried, err := fs.Retry(ctx, []int64{id})
	require.NoError(t, err)
	require.Equal(t, []int64{id}, retried)
	close(snd.answer)
	<-round
	row, err := fs.Get(ctx, id)
	require.NoError(t, err)
	require.Equal(t, store.StatusPending, row.Status, "the operator's retry outlives the attempt's failure")
	require.NotNil(t, row.NextAttemptAt)
	require.WithinDuration(t, time.Now(), *row.NextAttemptAt, 10*time.Second, "due at once")
}

// failOnWire confirms the claim, says so on onWire, and fails (transient) once answer
// is closed.
type failOnWire struct {
	onWire chan struct{}
	answer chan struct{}
}

func (s *failOnWire) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	if err := a.Claim.Confirm(ctx, 0); err != nil {
		return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "not sent: " + err.Error(), Err: err}
	}
	s.onWire <- struct{}{}
	<-s.answer
	return sender.Sent{}, &sender.Failure{Class: sender.ClassTransient, Reason: "HTTP 503"}
}

// TestTakeOverRunsARoundAtOnce: the retry job of replica ra claimed a row and went
// silent mid-send (its send waits at a gate). The job of rb, between two rounds an hour
// apart, takes over what ra's job held, as a survivor does once ra departed: rb's job
// sends the row at once, and ra's send, when it goes on, fails its confirm and sends
// nothing.
func TestTakeOverRunsARoundAtOnce(t *testing.T) {
	t.Parallel()
	_, fs := testenv.FailedSends(t)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "m", Payload: []byte("row"), ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	sndA, sndB := newGatedSender(), newGatedSender()
	close(sndB.gate)
	jobA := newJob(t, fs, sndA, delivery.RetryOptions{Replica: "ra"}, nil, time.Now)
	roundA := make(chan delivery.Round, 1)
	go func() {
		r, _ := jobA.RunOnce(ctx)
		roundA <- r
	}()
	require.Equal(t, "row", <-sndA.arrived, "ra's job holds the row")

	reg := prometheus.NewRegistry()
	jobB := newJob(t, fs, sndB, delivery.RetryOptions{Replica: "rb", Interval: time.Hour}, delivery.NewMetrics(reg), time.Now)
	runB := make(chan error, 1)
	go func() { runB <- jobB.Run(ctx) }()
	require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_failed_sends") == 1 },
		10*time.Second, 10*time.Millisecond, "rb's first round never ran")
	require.Empty(t, sndB.sends(), "rb's first round found the row held by ra")

	n, err := jobB.TakeOver(ctx, "ra")
	require.NoError(t, err)
	require.Equal(t, 1, n)
	require.Eventually(t, func() bool { return len(sndB.sends()) == 1 }, 10*time.Second, 10*time.Millisecond,
		"rb's job did not send the row it took over before its next round, an hour away")
	close(sndA.gate)
	require.Equal(t, delivery.Round{Lost: 1}, <-roundA)
	require.Empty(t, sndA.sends())
	cancel()
	require.NoError(t, <-runB)
}
