package scheduler

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
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

// Hand-offs that finish while a release is on its way are released together: 300
// workers whose releases queue behind two held calls go in two more calls (256 and the
// rest) rather than 298, each learns whether its claim was lost, and all are released.
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
	rl := &releaser{store: stage, metrics: NewMetrics(prometheus.NewRegistry())}
	lost := make([]bool, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i, id := range ids {
		token := "r/1"
		if i == n-1 {
			token = "r/other" // a claim that was lost on the way
		}
		wg.Go(func() {
			lost[i], errs[i] = rl.release(ctx, store.Released{Claim: store.Claim{ID: id, Token: token},
				Receipt: store.Receipt{Outcome: store.Delivered}})
		})
	}
	// Two flushers are on their way (held); the other 298 releases queue behind them.
	require.Eventually(t, func() bool {
		rl.mu.Lock()
		defer rl.mu.Unlock()
		return len(rl.queued) == n-releaseFlushes
	}, time.Minute, time.Millisecond)
	close(stage.open)
	wg.Wait()

	for i := range n {
		require.NoError(t, errs[i])
		require.Equal(t, i == n-1, lost[i], ids[i])
	}
	stage.mu.Lock()
	calls := stage.calls
	stage.mu.Unlock()
	require.Len(t, calls, releaseFlushes+2, "calls: %v", calls)
	require.ElementsMatch(t, []int{1, 1, releaseBatch, n - releaseFlushes - releaseBatch}, calls)
	waiting, inflight, err := ws.Stats(ctx)
	require.NoError(t, err)
	require.Equal(t, [2]int64{0, 0}, [2]int64{waiting, inflight})
}
