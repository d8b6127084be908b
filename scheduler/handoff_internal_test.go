package scheduler

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
)

// givenBack is a WheelStage that records give-backs and releases; deliver uses no more.
type givenBack struct {
	WheelStage // nil: any other method panics
	mu         sync.Mutex
	back       map[string]time.Time
	released   []store.Outcome
}

func (g *givenBack) GiveBack(_ context.Context, c store.Claim, at time.Time, _ int) (bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.back[c.ID] = at
	return true, nil
}

func (g *givenBack) ReleaseAll(_ context.Context, rs []store.Released) ([]bool, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, r := range rs {
		g.released = append(g.released, r.Receipt.Outcome)
	}
	return make([]bool, len(rs)), nil
}

// An entry claimed before its due time by this replica's clock (the sweeper trusts
// Redis's clock, which may be ahead) is given back until it is due, never handed off
// early; one that is due is handed off and released.
func TestDeliverRefusesWhatIsNotDueByTheReplicasClock(t *testing.T) {
	now := time.Date(2026, 12, 2, 12, 0, 0, 0, time.UTC)
	wheel, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { wheel.Stop() })
	stage := &givenBack{back: map[string]time.Time{}}
	rec := newRecorder()
	m := NewMetrics(prometheus.NewRegistry())
	p := newHandoffPool(Options{RetryDelay: time.Second, RetryMaxDelay: time.Minute}.withDefaults(), stage, rec,
		discardLogger(), m, func() time.Time { return now }, wheel, nil)

	ahead := store.Entry{ID: "ahead", Target: "ops", DueAt: now.Add(3 * time.Second), Token: "t"}
	p.deliver(ahead, false)
	require.Zero(t, rec.count("ahead"), "handed off 3s early by this replica's clock")
	require.True(t, ahead.DueAt.Equal(stage.back["ahead"]), "given back for its due time")
	require.Equal(t, 1.0, testutil.ToFloat64(m.handoffs.WithLabelValues("not_due")))
	require.Equal(t, 1, wheel.Len(), "and put back in the wheel")

	barely := store.Entry{ID: "barely", Target: "ops", DueAt: now.Add(time.Millisecond), Token: "t"}
	p.deliver(barely, false)
	require.Zero(t, rec.count("barely"), "handed off 1ms early: never early, by any margin")
	require.True(t, barely.DueAt.Equal(stage.back["barely"]))

	p.deliver(store.Entry{ID: "due", Target: "ops", DueAt: now, Token: "t"}, false)
	require.Equal(t, 1, rec.count("due"))
	p.releases.wait()
	stage.mu.Lock()
	defer stage.mu.Unlock()
	require.Equal(t, []store.Outcome{store.Delivered}, stage.released)
}

// lostClaim is a Delivery whose every hand-off finds its claim gone.
type lostClaim struct{ *recorder }

func (lostClaim) Deliver(context.Context, sender.Alert) (store.Receipt, error) {
	return store.Receipt{}, store.ErrNotHeld
}

// A hand-off whose claim was lost (this replica was paused past its lease) is neither
// released nor given back: the replica that holds it now does that.
func TestDeliverDropsALostClaim(t *testing.T) {
	stage := &givenBack{back: map[string]time.Time{}}
	m := NewMetrics(prometheus.NewRegistry())
	p := newHandoffPool(Options{}.withDefaults(), stage, lostClaim{newRecorder()}, discardLogger(), m, time.Now, nil, nil)
	p.deliver(store.Entry{ID: "a", DueAt: time.Now().Add(-time.Second), Token: "t"}, false)
	require.Empty(t, stage.back)
	require.Empty(t, stage.released)
	require.Empty(t, p.handingOff(), "the hand-off is over")
	require.Equal(t, 1.0, testutil.ToFloat64(m.claimsLost))
	require.Equal(t, 1.0, testutil.ToFloat64(m.handoffs.WithLabelValues("claim_lost")))
}
