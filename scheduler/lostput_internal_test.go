package scheduler

import (
	"context"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
	"github.com/rocketdelay/rocketdelay/wire"
)

// lostReply is a wheel stage whose first Put stores the entry in Redis and then answers
// as if Redis had not (a cut reply, a WAIT short of its replicas).
type lostReply struct {
	WheelStage
	lost atomic.Bool
}

func (l *lostReply) Put(ctx context.Context, e store.Entry) (store.PutResult, error) {
	res, err := l.WheelStage.Put(ctx, e)
	if err == nil && l.lost.CompareAndSwap(false, true) {
		return 0, store.ErrNotReplicated
	}
	return res, err
}

// An arrival whose Put stored the alert but lost its answer is handed back; its copy
// delivered again finds the alert stored (a duplicate) and holds it in the wheel. It was
// held by no wheel at all, and waited for the sweeper: late by the grace and a sweep.
func TestAnArrivalWhosePutLostItsAnswerIsHeldInTheWheel(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	rdb, prefix := testenv.Redis(t)
	ws := &lostReply{WheelStage: store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})}
	wheel, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	t.Cleanup(func() { wheel.Stop() })
	s := &Scheduler{opts: Options{KnownTarget: func(string) bool { return true }, Horizon: time.Hour}.withDefaults(),
		store: ws, wheel: wheel, logger: discardLogger(), metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now,
		broker: brokerSide{route: Route{Levels: []time.Duration{time.Second}, Threshold: time.Minute}}}

	msg := &primitive.MessageExt{Message: primitive.Message{Body: []byte("disk full")}, MsgId: "m1"}
	msg.WithProperty(wire.PropTarget, "ops")
	msg.WithProperty(wire.PropID, "lost-reply")
	msg.WithProperty(wire.PropDeliverAt, strconv.FormatInt(time.Now().Add(30*time.Second).UnixMilli(), 10))
	_, err = s.handle(t.Context(), msg)
	require.ErrorIs(t, err, store.ErrNotReplicated, "handed back to RocketMQ")
	require.Zero(t, wheel.Len())

	_, err = s.handle(t.Context(), msg) // RocketMQ delivers it again
	require.NoError(t, err)
	require.Equal(t, 1, wheel.Len(), "held in the wheel, due at its time")
}

// A message under the service's own id, refused for another reason, is judged by the
// proof it carries: a proven Alertmanager notification due too long ago is refused
// stale (an operator may retry it), not bad_id, which its proof was not read for.
func TestAProvenServiceIDKeepsItsRefusalsReason(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	rdb, prefix := testenv.Redis(t)
	rec := newRecorder()
	s := &Scheduler{opts: Options{KnownTarget: func(string) bool { return true }, Horizon: time.Hour, DedupeWindow: time.Hour,
		Principal: func(e store.Entry) string { return e.Props[wire.PropPrincipal] }}.withDefaults(),
		store: store.NewWheelStage(rdb, prefix, store.WheelStageOptions{}), delivery: rec, logger: discardLogger(),
		metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now}
	msg := &primitive.MessageExt{Message: primitive.Message{Body: []byte("disk full")}, MsgId: "m2"}
	msg.WithProperty(wire.PropTarget, "ops")
	msg.WithProperty(wire.PropID, "am-0a1b2c")
	msg.WithProperty(wire.PropPrincipal, "team")
	msg.WithProperty(wire.PropDeliverAt, strconv.FormatInt(time.Now().Add(-2*time.Hour).UnixMilli(), 10))
	_, err := s.handle(t.Context(), msg)
	require.NoError(t, err)
	rec.mu.Lock()
	defer rec.mu.Unlock()
	require.Len(t, rec.rejected, 1)
	require.Equal(t, string(wire.RejectStale), rec.rejected[0].Reason)
}

// A producer's message with RD_HOPS under another alert's RD_ID and no target, refused
// for its missing target, leaves that alert in the list of pending alerts (it unlisted
// it: an empty target matched whatever the alert's was).
func TestARefusalWithoutATargetUnlistsNothing(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	require.NoError(t, ws.TraceHop(t.Context(), store.HopNote{ID: "victim", Target: "ops", Due: time.Now().Add(time.Hour), Hops: 1, Delay: time.Hour}))
	s := &Scheduler{opts: Options{KnownTarget: func(string) bool { return true }, Horizon: 2 * time.Hour}.withDefaults(),
		store: ws, delivery: newRecorder(), logger: discardLogger(), metrics: NewMetrics(prometheus.NewRegistry()), now: time.Now}
	msg := &primitive.MessageExt{Message: primitive.Message{Body: []byte("x")}, MsgId: "m3"}
	msg.WithProperty(wire.PropID, "victim")
	msg.WithProperty(wire.PropHops, "1")
	_, err := s.handle(t.Context(), msg)
	require.NoError(t, err)
	c, err := ws.CountPending(t.Context(), time.Now(), 0)
	require.NoError(t, err)
	require.Equal(t, int64(1), c.Total, "the victim is still listed")
}
