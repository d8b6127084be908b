package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Plan shows the hops a delay takes through RocketMQ's default delay levels.
func ExamplePlan() {
	levels := config.MustParseDelayLevels(config.DefaultLevels)
	hops, remainder := scheduler.Plan(3*time.Hour+25*time.Minute+17*time.Second, scheduler.Route{Levels: levels, Threshold: time.Minute})
	for _, h := range hops {
		fmt.Printf("level %d (%s), reached %s\n", h.Level, h.Delay, h.Reached)
	}
	fmt.Println("wheel stage:", remainder)
	// Output:
	// level 18 (2h0m0s), reached 2h0m0s
	// level 17 (1h0m0s), reached 3h0m0s
	// level 15 (20m0s), reached 3h20m0s
	// level 9 (5m0s), reached 3h25m0s
	// wheel stage: 17s
}

// A producer publishes an alert due in 90 minutes to the robot group "ops"; the README's
// Go example, run against the local broker. Publishing the same ID again is harmless: a
// running scheduler hands the alert off once, as the second half shows.
func TestProducerPublishAsTheREADMEShows(t *testing.T) {
	ns := []string{testenv.NameServer(t)}
	topic := testenv.Unique("rd_example_")
	require.NoError(t, scheduler.EnsureTopic(context.Background(), ns, wire.Access{}, topic,
		[]string{testenv.Brokers(t)}, slog.New(slog.DiscardHandler)))
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: ns, Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	before := time.Now().Truncate(time.Millisecond) // RD_DELIVER_AT_MS keeps milliseconds
	res, err := p.Publish(context.Background(), wire.Publication{
		Target: "ops",
		In:     90 * time.Minute,
		ID:     "order-4711-recheck",
		Body:   []byte(`{"msgtype":"markdown","markdown":{"title":"Order 4711","text":"### Order 4711 is still dirty"}}`),
	})
	after := time.Now()
	require.NoError(t, err)
	require.Equal(t, "order-4711-recheck", res.ID)
	require.False(t, res.DeliverAt.Before(before.Add(90*time.Minute)) || res.DeliverAt.After(after.Add(90*time.Minute)),
		"due %s: not 90m after the publish", res.DeliverAt)
	require.NotEmpty(t, res.MsgID, "the broker stored it")

	// The same ID published twice, due in a second, to a running scheduler: one hand-off.
	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Liveness: 3 * time.Second})
	handoffs := &countingDelivery{n: map[string]int{}}
	reg := prometheus.NewRegistry()
	s, err := scheduler.New(scheduler.Options{
		NameServers: ns, Topic: topic, Group: testenv.Unique("rd_example_"), Brokers: []string{testenv.Brokers(t)},
		Levels: testenv.Levels(t), Threshold: 5 * time.Second, Horizon: 24 * time.Hour,
		KnownTarget: func(name string) bool { return name == "ops" }, InstanceName: testenv.Unique("example"),
		Liveness: ws.Liveness(nil),
	}, ws, handoffs, testenv.Logger(), scheduler.NewMetrics(reg), time.Now)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, s.Start(ctx))
	defer func() { require.NoError(t, s.Stop(ctx)) }()
	for range 2 {
		_, err := p.Publish(ctx, wire.Publication{Target: "ops", In: time.Second, ID: "order-4712-recheck",
			Body: []byte("order 4712 is still dirty")})
		require.NoError(t, err)
	}
	// Settled: both copies reached the wheel stage (one stored, one dropped as a duplicate
	// or as done), the alert was delivered, and nothing waits or is in flight.
	require.Eventually(t, func() bool {
		waiting, inflight, err := ws.Stats(ctx)
		delivered, _ := ws.IsDelivered(ctx, "order-4712-recheck")
		return err == nil && waiting == 0 && inflight == 0 && delivered && testenv.Metric(t, reg, "rocketdelay_wheel_stage_puts_total") >= 2
	}, 40*time.Second, 50*time.Millisecond, "the two copies were not both handled")
	require.Equal(t, 1, handoffs.count("order-4712-recheck"), "one hand-off for two publishes of one ID")
}

// countingDelivery counts the hand-offs of each alert; it rejects nothing.
type countingDelivery struct {
	mu sync.Mutex
	n  map[string]int
}

func (d *countingDelivery) Deliver(_ context.Context, a sender.Alert) (store.Receipt, error) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.n[a.ID]++
	return store.Receipt{Outcome: store.Delivered}, nil
}

func (d *countingDelivery) Reject(context.Context, delivery.Rejected) error { return nil }

func (d *countingDelivery) Stop() {}

func (d *countingDelivery) count(id string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return d.n[id]
}
