package scheduler

import (
	"context"
	"net"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func TestPlanTimerExamples(t *testing.T) {
	r := Route{Levels: defaultLevels, Threshold: time.Minute, Timer: &Timer{Margin: 2 * time.Second, Max: 72 * time.Hour}}
	// 47h: one timer hop to 2s before the due time, where the levels take 24.
	hops, rem := Plan(47*time.Hour, r)
	require.Equal(t, []Hop{{Delay: 47*time.Hour - 2*time.Second, Reached: 47*time.Hour - 2*time.Second}}, hops)
	require.Equal(t, 2*time.Second, rem)
	levelHops, _ := Plan(47*time.Hour, Route{Levels: defaultLevels, Threshold: time.Minute})
	require.Len(t, levelHops, 24)

	// Beyond the maximum: whole-maximum hops, then the rest.
	hops, rem = Plan(170*time.Hour, r)
	require.Equal(t, []Hop{
		{Delay: 72 * time.Hour, Reached: 72 * time.Hour},
		{Delay: 72 * time.Hour, Reached: 144 * time.Hour},
		{Delay: 26*time.Hour - 2*time.Second, Reached: 170*time.Hour - 2*time.Second},
	}, hops)
	require.Equal(t, 2*time.Second, rem)

	// Below the threshold the wheel stage takes it all.
	hops, rem = Plan(59*time.Second, r)
	require.Empty(t, hops)
	require.Equal(t, 59*time.Second, rem)
}

// TestPlanTimerProperties: a timer hop never ends past the due time nor exceeds the
// broker's maximum; the wheel stage is left at least the margin and less than the
// threshold (the whole delay when it is below the threshold); the hops are as few as
// the maximum allows.
func TestPlanTimerProperties(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		margin := time.Duration(rapid.Int64Range(1, 5000).Draw(t, "marginMs")) * time.Millisecond
		threshold := margin + time.Duration(rapid.Int64Range(1, 120_000).Draw(t, "aboveMs"))*time.Millisecond
		maxHop := time.Duration(rapid.Int64Range(1, 300).Draw(t, "maxS")) * time.Second
		delay := time.Duration(rapid.Int64Range(-1000, 3_600_000).Draw(t, "delayMs")) * time.Millisecond
		hops, rem := Plan(delay, Route{Levels: testLevels, Threshold: threshold, Timer: &Timer{Margin: margin, Max: maxHop}})
		var sum time.Duration
		for _, h := range hops {
			require.Zero(t, h.Level)
			require.Positive(t, h.Delay)
			require.LessOrEqual(t, h.Delay, maxHop)
			sum += h.Delay
			require.Equal(t, sum, h.Reached)
		}
		if delay < threshold {
			require.Empty(t, hops)
			require.Equal(t, max(delay, 0), rem)
			return
		}
		require.GreaterOrEqual(t, rem, margin)
		require.Less(t, rem, threshold)
		require.Equal(t, delay, sum+rem)
		require.LessOrEqual(t, len(hops), int((delay-margin+maxHop-1)/maxHop), "as few hops as the maximum allows")
	})
}

func TestProbeFindsTheLocalBrokersTimers(t *testing.T) {
	h := newHarness(t, 5*time.Second)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	// The harness's producer creates the topic on its first send.
	h.publish("probe-warm-up", 0, "warm up")
	sup, err := ProbeTimer(ctx, h.raw, h.topic)
	require.NoError(t, err)
	require.True(t, sup.Supported, "the local broker runs with timerWheelEnable=true: %s", sup.Answer)
	if testenv.Env(t, "ROCKETDELAY_LOCAL_PROFILE") == "test" {
		require.Equal(t, 20*time.Second, sup.Max, "the test profile's timerMaxDelaySec")
	} else {
		require.Equal(t, 72*time.Hour, sup.Max, "the default profile's timerMaxDelaySec")
	}
}

// TestTimerModeEndToEnd runs a replica in timer mode: alerts up to 50s out (beyond the
// test broker's 20s timer maximum, so up to three timer hops) are handed off exactly
// once, never early; hops are timer messages only; a cancelled alert is not handed off.
func TestTimerModeEndToEnd(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.mode = config.ModeTimer
	_, m := h.start("timer")
	require.Equal(t, 1.0, testutil.ToFloat64(m.mode.WithLabelValues(config.ModeTimer)))

	const n = 80
	keys := ids("timer", n)
	due := h.publishAll(keys, randomDelays(n, 50*time.Second, uint64(time.Now().UnixNano())), "alert")
	h.publish("timer-cancelled", 30*time.Second, "cancel me while hopping")
	res, err := h.ws.Cancel(context.Background(), "timer-cancelled")
	require.NoError(t, err)
	require.Equal(t, store.CancelTombstoned, res)

	h.rec.waitAll(t, keys, 120*time.Second)
	require.Eventually(t, func() bool { return testutil.ToFloat64(m.cancelled) == 1 }, 60*time.Second, 100*time.Millisecond,
		"the cancelled alert reaches the wheel stage and is dropped there")
	h.settle(keys, m)
	p50, p99, worst := h.rec.latenessReport(t, due)
	require.Zero(t, h.rec.count("timer-cancelled"))
	timerHops := testutil.ToFloat64(m.hops.WithLabelValues("timer"))
	t.Logf("%d alerts, delays 0–50s in timer mode: %.0f timer hops (%.2f per alert); lateness p50 %s, p99 %s, max %s",
		n, timerHops, timerHops/n, p50, p99, worst)
	require.Positive(t, timerHops)
	require.Equal(t, timerHops, total(m.hops), "timer mode takes no delay-level hop")
	// Every alert takes at most ceil((50s-2s)/19.6s) = 3 timer hops.
	require.LessOrEqual(t, timerHops, float64(3*(n+1)))
}

func TestBrokerConfigReadsTheLocalBroker(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	cfg, err := BrokerConfig(ctx, testenv.Brokers(t))
	require.NoError(t, err)
	require.Equal(t, "true", cfg["timerWheelEnable"])
	require.Equal(t, "1000", cfg["timerPrecisionMs"])
	require.Equal(t, testenv.Levels(t).String(), cfg["messageDelayLevel"])

	// Something that is not a broker gets an error that says so.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	go func() {
		c, err := ln.Accept()
		if err == nil {
			_, _ = c.Write([]byte("HTTP/1.1 400 Bad Request\r\n\r\n"))
			c.Close()
		}
	}()
	_, err = BrokerConfig(ctx, ln.Addr().String())
	require.ErrorContains(t, err, "not a RocketMQ answer")
}

// TestTimerModeRefusesAMarginBelowThePrecision: a timer hop landing closer to the due
// time than the broker's precision could land after it; timer mode refuses to start,
// auto mode uses delay levels.
func TestTimerModeRefusesAMarginBelowThePrecision(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	opts := h.options("tight")
	opts.Mode, opts.TimerMargin = config.ModeTimer, 500*time.Millisecond
	s, err := New(opts, h.ws, h.rec, discardLogger(), NewMetrics(prometheus.NewRegistry()), time.Now)
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	err = s.Start(ctx)
	require.ErrorContains(t, err, "scheduler.timerMargin 500ms is below the brokers' timer precision 1s")
	require.NoError(t, s.Stop(ctx))

	opts = h.options("tight-auto")
	opts.Mode, opts.TimerMargin = config.ModeAuto, 500*time.Millisecond
	m := NewMetrics(prometheus.NewRegistry())
	s, err = New(opts, h.ws, h.rec, discardLogger(), m, time.Now)
	require.NoError(t, err)
	require.NoError(t, s.Start(ctx))
	defer stop(t, s)
	require.Equal(t, 1.0, testutil.ToFloat64(m.mode.WithLabelValues(config.ModeLevels)))
	require.Nil(t, s.broker.route.Timer)
}

// A producer's message carries what only the broker or rocketdelay sets: in timer mode a
// TIMER_DEL_UNIQKEY (copied onto the hop, it made the hop a request to delete a timer
// message, which the broker never delivers), and an RD_PROBE with a target (dropped
// silently as a start-up probe). Each alert is delivered once all the same.
func TestBrokerAndProbePropertiesOfAProducerTakeNothing(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.mode = config.ModeTimer
	h.start("timer")
	send := func(id string, props map[string]string) {
		m := primitive.NewMessage(h.topic, []byte(`{"msgtype":"text","text":{"content":"`+id+`"}}`))
		m.WithProperty(wire.PropTarget, "ops")
		m.WithProperty(wire.PropID, id)
		m.WithProperty(wire.PropDeliverAt, strconv.FormatInt(time.Now().Add(25*time.Second).UnixMilli(), 10))
		for k, v := range props {
			m.WithProperty(k, v)
		}
		res, err := h.raw.SendSync(context.Background(), m)
		require.NoError(t, err)
		require.Equal(t, primitive.SendOK, res.Status)
	}
	send("del-key", map[string]string{"TIMER_DEL_UNIQKEY": "someone-elses-key"})
	send("probe", map[string]string{PropProbe: "route"})
	h.rec.waitAll(t, []string{"del-key", "probe"}, 90*time.Second)
}

// A producer's message whose properties fill nearly all the broker takes (32767 bytes
// encoded) cannot hop: the hop adds rocketdelay's and the broker's own. It is rejected
// on arrival with its reason, not retried for ever (it held its queue: every hop and
// send-back was refused, and nothing recorded it).
func TestPropertiesTooLargeToHopAreRejected(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	h.start("a")
	m := primitive.NewMessage(h.topic, []byte(`{"msgtype":"text","text":{"content":"big"}}`))
	m.WithProperty(wire.PropTarget, "ops")
	m.WithProperty(wire.PropID, "big-props")
	m.WithProperty(wire.PropDeliverAt, strconv.FormatInt(time.Now().Add(20*time.Second).UnixMilli(), 10))
	m.WithProperty("NOTE", strings.Repeat("x", 32767-300))
	refusedForItsProperties := func(id string) {
		t.Helper()
		res, err := h.raw.SendSync(context.Background(), m)
		require.NoError(t, err)
		require.Equal(t, primitive.SendOK, res.Status)
		require.Eventually(t, func() bool {
			h.rec.mu.Lock()
			defer h.rec.mu.Unlock()
			for _, r := range h.rec.rejected {
				if r.Alert.ID == id && r.Reason == string(wire.RejectDestination) {
					return true
				}
			}
			return false
		}, 30*time.Second, 50*time.Millisecond, "%s rejected with its reason", id)
		require.Zero(t, h.rec.count(id))
	}
	refusedForItsProperties("big-props")

	// A producer's RD_HOPS buys nothing: weighed with a hop's room, it is refused too
	// (it was not weighed, and its hop was refused by the broker for ever).
	m.WithProperty(wire.PropID, "big-props-hops")
	m.WithProperty(wire.PropHops, "1")
	m.WithProperty("NOTE", strings.Repeat("x", 32767-200))
	refusedForItsProperties("big-props-hops")
}
