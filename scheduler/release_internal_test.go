package scheduler

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// heldRelease is the wheel stage with its releases counted, and the first of them held
// until open is closed.
type heldRelease struct {
	*store.WheelStage
	open  chan struct{}
	mu    sync.Mutex
	calls []int // the releases of each call
}

func (h *heldRelease) ReleaseAll(ctx context.Context, rs []store.Released) ([]bool, error) {
	h.mu.Lock()
	h.calls = append(h.calls, len(rs))
	h.mu.Unlock()
	<-h.open
	return h.WheelStage.ReleaseAll(ctx, rs)
}

// Hand-offs that finish while a release is on its way are released together, and never
// wait for Redis: 300 releases queued behind two held calls all return at once, go in at
// most two more calls (of at most releaseBatch each) rather than one each, each learns
// whether its claim was lost, and all are released.
func TestReleasesFinishingTogetherShareACall(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	const n = 300
	var ids []string
	for i := range n {
		id := fmt.Sprintf("rel-%03d", i)
		ids = append(ids, id)
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: time.Now().Add(-time.Second), Body: []byte("x")})
		require.NoError(t, err)
	}
	c, err := ws.Claim(ctx, ids, "r/1")
	require.NoError(t, err)
	require.Len(t, c.Entries, n)

	stage := &heldRelease{WheelStage: ws, open: make(chan struct{})}
	rl := newReleaser(ctx, stage, NewMetrics(prometheus.NewRegistry()))
	lost := make([]bool, n)
	errs := make([]error, n)
	var landed atomic.Int32
	for i, id := range ids {
		token := "r/1"
		if i == n-1 {
			token = "r/other" // a claim that was lost on the way
		}
		require.NoError(t, rl.reserve())
		rl.release(store.Released{Claim: store.Claim{ID: id, Token: token}, Receipt: store.Receipt{Outcome: store.Delivered}},
			func(l bool, err error) { lost[i], errs[i] = l, err; landed.Add(1) })
	}
	require.Zero(t, landed.Load(), "a release landed while every call was held")
	close(stage.open)
	rl.wait()
	require.EqualValues(t, n, landed.Load())

	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, i == n-1, lost[i], ids[i])
	}
	stage.mu.Lock()
	calls := stage.calls
	stage.mu.Unlock()
	require.LessOrEqual(t, len(calls), releaseFlushes+2, "calls: %v", calls)
	sum := 0
	for _, k := range calls {
		require.LessOrEqual(t, k, releaseBatch, "calls: %v", calls)
		sum += k
	}
	require.Equal(t, n, sum, "calls: %v", calls)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{waiting, inflight})
}

// heldCalls is a wheel stage whose releases wait until open is closed, then land with
// no claim lost; it touches no Redis, so that a test can run in a synctest bubble.
type heldCalls struct {
	WheelStage
	open chan struct{}
}

func (h heldCalls) ReleaseAll(_ context.Context, rs []store.Released) ([]bool, error) {
	<-h.open
	return make([]bool, len(rs)), nil
}

func (h heldCalls) MarkAllDelivered(context.Context, []string) error {
	<-h.open
	return nil
}

// markedCalls is a wheel stage whose releases wait until open is closed, and whose done
// markers land at once, each noted.
type markedCalls struct {
	heldCalls
	mu     sync.Mutex
	marked map[string]bool
}

func (m *markedCalls) MarkAllDelivered(_ context.Context, ids []string) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	for _, id := range ids {
		m.marked[id] = true
	}
	return nil
}

// While the releases of a burst wait, their done markers go ahead and give the slots
// back: the burst is handed off whole with no release landed, and of what was sent at
// most releaseOutstanding have neither marker nor release (a kill would send those
// again, and only those); once the releases land, nothing is left in flight.
func TestDoneMarkersGoAheadOfReleasesThatWait(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec, m := markedPool(t)
		p.start()
		n := 4 * releaseOutstanding
		entries, ids := dueNow(n)
		go p.enqueue(t.Context(), entries)
		synctest.Wait()
		require.Equal(t, n, rec.countAll(ids), "sent while every release is held")
		stage.mu.Lock()
		marked := len(stage.marked)
		stage.mu.Unlock()
		require.GreaterOrEqual(t, marked, n-releaseOutstanding, "sent with neither marker nor release")
		require.EqualValues(t, marked, testutil.ToFloat64(m.marked))
		close(stage.open)
		synctest.Wait()
		close(p.quit)
		p.wait(t.Context())
		require.Empty(t, p.handingOff())
		require.Zero(t, testutil.ToFloat64(m.releasing))
	})
}

// A hand-off waits for a slot once releaseOutstanding are taken, and only then: what a
// replica killed mid-burst has sent without its release having landed is bounded.
func TestReleasesOutstandingAreBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		stage := heldCalls{open: make(chan struct{})}
		rl := newReleaser(t.Context(), stage, NewMetrics(prometheus.NewRegistry()))
		var landed atomic.Int32
		for i := range releaseOutstanding {
			require.NoError(t, rl.reserve())
			rl.release(store.Released{Claim: store.Claim{ID: fmt.Sprint(i), Token: "r/1"}}, func(bool, error) { landed.Add(1) })
		}
		var returned atomic.Bool
		go func() {
			if rl.reserve() == nil {
				rl.release(store.Released{Claim: store.Claim{ID: "one more", Token: "r/1"}}, func(bool, error) { landed.Add(1) })
			}
			returned.Store(true)
		}()
		synctest.Wait()
		require.False(t, returned.Load(), "a hand-off past the bound did not wait for a slot")
		require.Zero(t, landed.Load())
		require.Equal(t, float64(releaseOutstanding), testutil.ToFloat64(rl.metrics.releasing), "rocketdelay_releases_waiting")
		close(stage.open)
		synctest.Wait()
		require.True(t, returned.Load())
		rl.wait()
		require.EqualValues(t, releaseOutstanding+1, landed.Load())
		require.Zero(t, testutil.ToFloat64(rl.metrics.releasing))
	})
}

// The bound counts what was sent, not only what was queued: a hand-off takes its
// release's slot before it sends, so with every release held a burst larger than the
// bound and the workers together has at most releaseOutstanding alerts sent (a worker
// that sent first and then waited for a slot made one more each, up to
// releaseOutstanding + HandoffWorkers sent without their release).
func TestWhatIsSentWithoutItsReleaseIsBounded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec := heldPool(t)
		p.start()
		n := releaseOutstanding + 2*p.opts.HandoffWorkers
		entries, ids := dueNow(n)
		go p.enqueue(t.Context(), entries)
		synctest.Wait()
		require.Equal(t, releaseOutstanding, rec.countAll(ids), "sent while every release is held")
		close(stage.open)
		synctest.Wait()
		close(p.quit)
		p.wait(t.Context())
		require.Equal(t, n, rec.countAll(ids))
		require.Empty(t, p.handingOff())
	})
}

// Markers go ahead of the releases only while fewer than half the backlog's releases
// wait: past that the hand-offs wait for releases again (here held, so for good), rather
// than every release waiting until the backlog is full.
func TestMarkersYieldToReleasesPastHalfTheBacklog(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec, _ := markedPool(t)
		p.start()
		n := releaseBacklog/2 + 2*releaseOutstanding
		entries, ids := dueNow(n)
		go p.enqueue(t.Context(), entries)
		synctest.Wait()
		sent := rec.countAll(ids)
		require.Less(t, sent, n, "markers went on past half the backlog")
		require.GreaterOrEqual(t, sent, releaseBacklog/2, "markers stopped before half the backlog")
		close(stage.open)
		synctest.Wait()
		require.Equal(t, n, rec.countAll(ids))
		close(p.quit)
		p.wait(t.Context())
		require.Empty(t, p.handingOff())
	})
}

// dueNow is n entries due now, each for a target of its own, and their ids.
func dueNow(n int) ([]store.Entry, []string) {
	entries, ids := make([]store.Entry, n), make([]string, n)
	for i := range entries {
		ids[i] = fmt.Sprint("a", i)
		entries[i] = store.Entry{ID: ids[i], Target: fmt.Sprint("t", i), DueAt: time.Now(), Token: "t"}
	}
	return entries, ids
}

// markedPool is a hand-off pool whose releases wait until stage.open is closed and whose
// done markers land at once, its hand-offs recorded by rec and its metrics m; its wheel
// stops when t ends. For a synctest bubble.
func markedPool(t *testing.T) (*handoffPool, *markedCalls, *recorder, *Metrics) {
	wheel, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { wheel.Stop() })
	stage := &markedCalls{heldCalls: heldCalls{open: make(chan struct{})}, marked: map[string]bool{}}
	rec, m := newRecorder(), NewMetrics(prometheus.NewRegistry())
	return newHandoffPool(Options{}.withDefaults(), stage, rec, discardLogger(), m, time.Now, wheel, nil), stage, rec, m
}

// heldPool is a hand-off pool whose releases wait until stage.open is closed, its
// hand-offs recorded by rec; its wheel stops when t ends. For a synctest bubble.
func heldPool(t *testing.T) (*handoffPool, heldCalls, *recorder) {
	wheel, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { wheel.Stop() })
	stage := heldCalls{open: make(chan struct{})}
	rec := newRecorder()
	return newHandoffPool(Options{}.withDefaults(), stage, rec, discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now, wheel, nil),
		stage, rec
}

// An alert handed off whose release has not landed yet is still being handed off: a
// graceful stop keeps it out of what it hands back (handingOff) and waits for its release
// (wait), so no other replica takes over, and sends again, what this one sent.
func TestAStopWaitsForTheReleasesOfWhatWasSent(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec := heldPool(t)
		p.deliver(store.Entry{ID: "sent", Target: "ops", DueAt: time.Now(), Token: "t"}, false)
		require.Equal(t, 1, rec.count("sent"))
		require.Equal(t, []string{"sent"}, p.handingOff(), "sent, its release not landed: still being handed off")

		var waited atomic.Bool
		go func() {
			p.wait(context.Background())
			waited.Store(true)
		}()
		synctest.Wait()
		require.False(t, waited.Load(), "the stop did not wait for the release")
		close(stage.open)
		synctest.Wait()
		require.True(t, waited.Load())
		require.Empty(t, p.handingOff())
	})
}

// A corrupt entry recorded as rejected is this replica's until its release lands, as a
// hand-off is: a stop keeps it out of what it hands back, so no other replica records
// it a second time meanwhile.
func TestAQuarantinedEntryIsHeldUntilItsReleaseLands(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec := heldPool(t)
		p.quarantine(t.Context(), []store.Corrupt{{Claim: store.Claim{ID: "damaged", Token: "t"}, Record: []byte("?"), Err: errors.New("bad record")}})
		require.Len(t, rec.rejected, 1)
		require.Equal(t, []string{"damaged"}, p.handingOff(), "recorded, its release not landed: still this replica's")
		close(stage.open)
		p.releases.wait()
		require.Empty(t, p.handingOff())
	})
}

// slowReject is a recorder whose rejections wait until open is closed.
type slowReject struct {
	*recorder
	open chan struct{}
}

func (s slowReject) Reject(ctx context.Context, r delivery.Rejected) error {
	<-s.open
	return s.recorder.Reject(ctx, r)
}

// A corrupt entry is this replica's from the start of its record, not only once its
// release is queued: a stop meanwhile keeps it out of what it hands back, so no other
// replica records it a second time.
func TestAQuarantinedEntryIsHeldWhileItIsRecorded(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec := heldPool(t)
		slow := slowReject{recorder: rec, open: make(chan struct{})}
		p.delivery = slow
		go p.quarantine(t.Context(), []store.Corrupt{{Claim: store.Claim{ID: "damaged", Token: "t"}, Record: []byte("?"), Err: errors.New("bad record")}})
		synctest.Wait()
		require.Equal(t, []string{"damaged"}, p.handingOff(), "being recorded: this replica's")
		close(slow.open)
		close(stage.open)
		synctest.Wait()
		p.releases.wait()
		require.Len(t, rec.rejected, 1)
		require.Empty(t, p.handingOff())
	})
}

// slowAdopt is a wheel stage whose first adopt lands but answers only after its caller
// gave up (a Redis slow past the sender's bound); a repeat with the same token returns
// what that token took, as the adopt script does.
type slowAdopt struct {
	heldCalls
	mu    sync.Mutex
	calls int
	took  []store.Entry
}

func (s *slowAdopt) Adopt(ctx context.Context, _ string, _ int, token string) (store.Claimed, int, error) {
	s.mu.Lock()
	s.calls++
	first := s.calls == 1
	if first {
		s.took = []store.Entry{{ID: "parked", Target: "ops", DueAt: time.Now(), Token: token}}
	}
	took := slices.Clone(s.took)
	s.mu.Unlock()
	if first {
		<-ctx.Done()
		return store.Claimed{}, 0, ctx.Err()
	}
	return store.Claimed{Entries: took}, 0, nil
}

func (*slowAdopt) Lease() time.Duration { return time.Minute }

// An adopt whose caller gave up while it landed (its deadline passed with Redis slow)
// is repeated with its token until its outcome is known, and what it took is handed
// off: the adopted alerts were this replica's, spared by the sweeper while it lives, and
// nobody sent them until it stopped.
func TestAnAdoptPastItsCallersDeadlineIsHandedOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		p, stage, rec := heldPool(t)
		close(stage.open)
		slow := &slowAdopt{heldCalls: stage}
		p.store = slow
		p.releases = newReleaser(p.ctx, slow, p.metrics)
		ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
		defer cancel()
		_, _, err := p.adopt(ctx, "ops", 10, "r/adopt-1")
		require.ErrorIs(t, err, context.DeadlineExceeded)
		time.Sleep(2 * claimAgainAfter)
		synctest.Wait()
		require.Equal(t, 1, rec.count("parked"), "handed off once its outcome was known")
		p.cancel()
		p.closeAdopting()
		p.adopting.running.Wait()
		p.releases.wait()
	})
}
