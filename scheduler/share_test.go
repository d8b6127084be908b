package scheduler

import (
	"context"
	"fmt"
	"regexp"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// shareID is the id of an alert of TestBusyTargetIsOneQueueForAllReplicas.
var shareID = regexp.MustCompile(`share-\d{4}`)

// TestBusyTargetIsOneQueueForAllReplicas: three replicas, each with its own sender, hand
// off alerts of one robot whose budget is a tenth of their arrival rate. The alerts a
// replica holds while the target is busy are parked, and each send, on whichever
// replica, adopts what every replica parked: DingTalk receives every alert exactly once,
// never early by its own clock, never over the robot's limit, and replicas send alerts
// other replicas claimed.
func TestBusyTargetIsOneQueueForAllReplicas(t *testing.T) {
	t.Parallel()
	const (
		n      = 90
		window = 2 * time.Second
		limit  = 6 // 3 sends a second: a token every 333ms
	)
	h := newHarness(t, 5*time.Second)
	sim, url := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "share-token"}},
		Window: window})
	rdb, _ := testenv.Redis(t)
	_, fs := testenv.FailedSends(t)
	var ms []*Metrics
	var senders []*prometheus.Registry
	for i := range 3 {
		reg := prometheus.NewRegistry()
		snd, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{"ops": {Protocol: dingtalk.New(url),
			Robots: []sender.Robot{{Name: "r1", Token: config.Secret("share-token")}}}}, Limit: limit, HTTPTimeout: 2 * time.Second},
			store.NewRobotPool(rdb, h.prefix, window), discardLogger(), sender.NewMetrics(reg), nil)
		require.NoError(t, err)
		t.Cleanup(snd.Close)
		d := delivery.New(delivery.Channels{"ops": snd}, h.ws, fs, delivery.Options{}, discardLogger(), nil, time.Now)
		s, m := h.startWith(fmt.Sprintf("share-%d", i), d)
		snd.SetParking(s)
		ms, senders = append(ms, m), append(senders, reg)
	}

	// 30 alerts a second for 3s, 10 times the robot's budget.
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	base := time.Now().Add(3 * time.Second)
	due := map[string]time.Time{}
	var all []string
	for i := range n {
		id := fmt.Sprintf("share-%04d", i)
		pub, err := h.producer.Publish(ctx, wire.Publication{Target: "ops", ID: id, At: base.Add(time.Duration(i) * 33 * time.Millisecond),
			Body: []byte("alert " + id)})
		require.NoError(t, err)
		due[id], all = pub.DeliverAt, append(all, id)
	}
	received := func() map[string][]time.Time {
		got := map[string][]time.Time{}
		for _, m := range sim.Accepted() {
			inMessage := map[string]bool{} // a merged message names its first alert twice
			for _, id := range shareID.FindAllString(m.Text, -1) {
				inMessage[id] = true
			}
			for id := range inMessage {
				got[id] = append(got[id], m.At)
			}
		}
		return got
	}
	require.Eventually(t, func() bool { return len(received()) == n }, 90*time.Second, 100*time.Millisecond,
		"every alert reaches DingTalk")
	h.settle(all, ms...)

	got := received()
	for id, at := range got {
		require.Len(t, at, 1, "alert %s accepted in %d messages", id, len(at))
		require.False(t, at[0].Before(due[id]), "alert %s accepted %s before its due time (DingTalk's clock)", id, due[id].Sub(at[0]))
	}
	require.Zero(t, sim.Stats().OverLimit, "never over the robot's limit")

	var parked, adopted float64
	crossed := false
	for i, m := range ms {
		p := testutil.ToFloat64(m.handoffs.WithLabelValues("parked"))
		a := testutil.ToFloat64(m.claims.WithLabelValues("adopted"))
		t.Logf("replica %d: parked %.0f, adopted %.0f, sender adopted %.0f", i, p, a,
			testenv.Metric(t, senders[i], "rocketdelay_sender_shared_alerts_total"))
		parked, adopted = parked+p, adopted+a
		crossed = crossed || a > p
	}
	require.Positive(t, parked, "a busy target's alerts are parked")
	require.Equal(t, parked, adopted, "every parked alert was adopted by a send, none left to the park's lease")
	require.True(t, crossed, "some replica sent alerts that other replicas had parked")
	_, err := h.ws.Liveness(nil).Beat(ctx, "check")
	require.NoError(t, err)
	_, left, err := h.ws.Adopt(ctx, "ops", 0, "check")
	require.NoError(t, err)
	require.Zero(t, left, "the park is empty")
	t.Logf("%d alerts in %d messages", n, len(sim.Accepted()))
}
