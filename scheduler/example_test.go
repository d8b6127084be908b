package scheduler_test

import (
	"context"
	"fmt"
	"log/slog"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
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
// Go example, run against the local broker. Publishing the same ID again is harmless: the
// alert is delivered once.
func TestProducerPublishAsTheREADMEShows(t *testing.T) {
	topic := testenv.Unique("rd_example_")
	require.NoError(t, scheduler.EnsureTopic(context.Background(), []string{testenv.NameServer(t)}, topic,
		[]string{testenv.Brokers(t)}, slog.New(slog.DiscardHandler)))
	p, err := scheduler.NewProducer(scheduler.ProducerOptions{NameServers: []string{testenv.NameServer(t)}, Topic: topic})
	require.NoError(t, err)
	defer p.Close()
	before := time.Now()
	res, err := p.Publish(context.Background(), scheduler.Publication{
		Target: "ops",
		In:     90 * time.Minute,
		ID:     "order-4711-recheck",
		Body:   []byte(`{"msgtype":"markdown","markdown":{"title":"Order 4711","text":"### Order 4711 is still dirty"}}`),
	})
	require.NoError(t, err)
	require.Equal(t, "order-4711-recheck", res.ID)
	require.WithinDuration(t, before.Add(90*time.Minute), res.DeliverAt, 5*time.Second)
	require.NotEmpty(t, res.MsgID, "the broker stored it")
}
