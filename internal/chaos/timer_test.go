package chaos

import (
	"context"
	"io"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestTimerModeOnABrokerWithoutTimers starts a private name server and broker with
// timerWheelEnable=false: scheduler.mode timer refuses to start with an error that says
// why, and auto mode falls back to delay levels and delivers.
func TestTimerModeOnABrokerWithoutTimers(t *testing.T) {
	if testing.Short() {
		t.Skip("needs a private RocketMQ broker; skipped under -short")
	}
	root, err := findRepoRoot()
	require.NoError(t, err)
	ctx, cancel := testContext(t, 6*time.Minute)
	defer cancel()
	st, err := StartStack(ctx, StackOptions{RepoRoot: root, Components: []string{"namesrv", "broker"},
		Env: []string{"RD_TIMER_WHEEL=false"}})
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, st.Stop(context.Background())) })

	rdb, prefix := testenv.Redis(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Liveness: config.DefaultLiveness})
	levels, err := config.ParseDelayLevels(st.Env["ROCKETDELAY_LEVELS"])
	require.NoError(t, err)
	opts := scheduler.Options{
		NameServers: []string{st.Env["ROCKETDELAY_NAMESRV"]},
		Brokers:     []string{st.Env["ROCKETDELAY_BROKERS"]},
		Topic:       testenv.Unique("rd_notimer_"),
		Group:       testenv.Unique("rd_notimer_"),
		Levels:      levels,
		Threshold:   5 * time.Second,
		Horizon:     24 * time.Hour,
		KnownTarget: func(name string) bool { return name == "ops" },
		Mode:        config.ModeTimer,
		Liveness:    ws.Liveness(nil),
	}
	logger := slog.New(slog.NewTextHandler(io.Discard, nil))
	scheduler.RouteClientLog(logger)
	got := make(chan sender.Alert, 4)
	d := chanDelivery(got)

	s, err := scheduler.New(opts, ws, d, logger, scheduler.NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	err = s.Start(ctx)
	require.ErrorIs(t, err, scheduler.ErrNoTimers)
	require.ErrorContains(t, err, "timerWheelEnable is false")
	require.ErrorContains(t, err, "scheduler.mode timer")
	require.NoError(t, s.Stop(ctx))

	opts.Mode = config.ModeAuto
	opts.InstanceName = testenv.Unique("auto")
	reg := prometheus.NewRegistry()
	s, err = scheduler.New(opts, ws, d, logger, scheduler.NewMetrics(reg), time.Now)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx), "auto mode falls back to delay levels")
	defer func() { require.NoError(t, s.Stop(context.Background())) }()
	mode, err := testutil.GatherAndCount(reg, "rocketdelay_scheduler_mode")
	require.NoError(t, err)
	require.Equal(t, 1, mode)
	require.NoError(t, testutil.GatherAndCompare(reg, strings.NewReader(`
# HELP rocketdelay_scheduler_mode 1 for the way hops cross the broker that this replica settled on at start (levels or timer; scheduler.mode auto probes the brokers).
# TYPE rocketdelay_scheduler_mode gauge
rocketdelay_scheduler_mode{mode="levels"} 1
`), "rocketdelay_scheduler_mode"))

	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: opts.NameServers, Topic: opts.Topic})
	require.NoError(t, err)
	defer p.Close()
	pub, err := p.Publish(ctx, wire.Publication{Target: "ops", ID: "auto-levels", In: 8 * time.Second, Body: []byte("via delay levels")})
	require.NoError(t, err)
	select {
	case a := <-got:
		require.Equal(t, "auto-levels", a.ID)
		require.False(t, time.Now().Before(pub.DeliverAt), "handed off early")
	case <-time.After(60 * time.Second):
		t.Fatal("the alert was not handed off within 60s in auto mode on levels")
	}
}

// chanDelivery hands every due alert to its channel and counts it delivered.
type chanDelivery chan sender.Alert

func (c chanDelivery) Deliver(_ context.Context, a sender.Alert) (store.Receipt, error) {
	c <- a
	return store.Receipt{Outcome: store.Delivered}, nil
}

func (c chanDelivery) Reject(context.Context, delivery.Rejected) error { return nil }

func (c chanDelivery) Stop() {}
