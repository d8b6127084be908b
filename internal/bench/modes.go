package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"runtime"
	"slices"
	"strconv"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// ModesOptions configure Modes. A zero field takes its default.
type ModesOptions struct {
	// N is the number of alerts per run. Default 200.
	N int
	// MinDelay and MaxDelay bound the delay mix, drawn uniformly. Default 6s and 50s:
	// on the test profile (timers of at most 20s, standing for the default 72h) that
	// spans alerts within one timer maximum and up to 2.5 times it.
	MinDelay, MaxDelay time.Duration
	// Seed draws the delays. Default 1.
	Seed uint64
}

// modeRun is what one run measured.
type modeRun struct {
	name            string
	messages        []int // broker messages per alert: the publish and every hop
	within          []int // the same, for alerts due within one timer maximum
	p50, p99, worst time.Duration
	early           int
}

// Modes measures, in one run on the configured broker and Redis, the same delay mix
// delivered by the scheduler in levels mode and in timer mode, and the broker's own
// timer messages consumed directly (no wheel stage) as the anchor for precision: broker
// messages per alert and lateness p50/p99/max, early deliveries, and prints the table.
func Modes(ctx context.Context, cfg config.Config, o ModesOptions, out io.Writer) error {
	config.Default(&o.N, 200)
	config.Default(&o.MinDelay, 6*time.Second)
	config.Default(&o.MaxDelay, 50*time.Second)
	config.Default(&o.Seed, 1)
	if o.MinDelay > o.MaxDelay {
		return fmt.Errorf("bench: the minimum delay %s is above the maximum %s", o.MinDelay, o.MaxDelay)
	}
	if len(cfg.RocketMQ.Brokers) == 0 {
		return fmt.Errorf("bench: set rocketmq.brokers (ROCKETDELAY_BROKERS) so the benchmark can create its topics")
	}
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	scheduler.RouteClientLog(quiet)
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.RocketMQ.NameServers)),
		producer.WithGroupName("rd-bench-modes-p"), producer.WithInstanceName("rd-bench-modes-p-"+suffix), producer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	anchorTopic := "rd_bench_timer_" + suffix
	if err := createTopic(ctx, cfg, anchorTopic); err != nil {
		return err
	}
	sup, err := scheduler.ProbeTimer(ctx, p, anchorTopic)
	if err != nil {
		return err
	}
	if !sup.Supported {
		return fmt.Errorf("bench: the broker does not accept timer messages (%s); start it with timerWheelEnable=true", sup.Answer)
	}
	rng := rand.New(rand.NewPCG(o.Seed, 0))
	delays := make([]time.Duration, o.N)
	for i := range delays {
		delays[i] = o.MinDelay + time.Duration(rng.Int64N(int64(o.MaxDelay-o.MinDelay)+1))
	}
	fmt.Fprintf(out, "rocketdelay modes benchmark: %d alerts per run, delays %s–%s (seed %d), %d CPUs, %s\n",
		o.N, o.MinDelay, o.MaxDelay, o.Seed, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(out, "broker %v: levels %q, timer messages of at most %s; threshold %s, timer margin %s\n\n",
		cfg.RocketMQ.NameServers, cfg.Scheduler.Levels.String(), sup.Max, cfg.Scheduler.Threshold, cfg.Scheduler.TimerMargin)

	var runs []modeRun
	for _, mode := range []string{config.ModeLevels, config.ModeTimer} {
		r, err := runMode(ctx, out, cfg, mode, delays, sup.Max, suffix)
		if err != nil {
			return err
		}
		runs = append(runs, r)
	}
	anchor, err := runBrokerTimer(ctx, out, cfg, p, anchorTopic, delays, sup.Max, suffix)
	if err != nil {
		return err
	}
	runs = append(runs, anchor)

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintf(tw, "run\tbroker msgs/alert\tmax\twithin %s: msgs/alert\tmax\tp50 late\tp99 late\tmax late\tearly\t\n", sup.Max)
	for _, r := range runs {
		fmt.Fprintf(tw, "%s\t%.2f\t%d\t%.2f\t%d\t%s\t%s\t%s\t%d\t\n", r.name, mean(r.messages), slices.Max(r.messages),
			mean(r.within), maxOr0(r.within), ms(r.p50), ms(r.p99), ms(r.worst), r.early)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	tm := runs[1]
	fmt.Fprintf(out, "\ntimer mode within one timer maximum: at most %d broker messages per alert, p99 lateness %s, %d early\n",
		maxOr0(tm.within), ms(tm.p99), tm.early)
	early := 0
	for _, r := range runs[:2] {
		early += r.early
	}
	fmt.Fprintf(out, "targets: within one timer maximum at most 2 broker messages per alert in timer mode (%d: %s); 0 early in either mode (%d: %s)\n",
		maxOr0(tm.within), verdict(maxOr0(tm.within) <= 2), early, verdict(early == 0))
	return plannedProduction(out, o.N, o.Seed)
}

// plannedProduction prints the broker messages per alert of a production delay mix (1m
// to 48h) under production settings (RocketMQ's default levels, the default 72h timer
// maximum), by scheduler.Plan: the consumer takes exactly these hops when each arrives
// on time. The test profile cannot show it measured: its levels reach 30s, beyond its
// 20s timer maximum, where production's levels stop at 2h, far below 72h.
func plannedProduction(out io.Writer, n int, seed uint64) error {
	levels := config.MustParseDelayLevels(config.DefaultLevels)
	routes := []struct {
		name  string
		route scheduler.Route
	}{
		{"levels", scheduler.Route{Levels: levels, Threshold: config.DefaultThreshold}},
		{"timer", scheduler.Route{Levels: levels, Threshold: config.DefaultThreshold,
			Timer: &scheduler.Timer{Margin: config.DefaultTimerMargin, Max: 72*time.Hour - 72*time.Hour/50}}},
	}
	rng := rand.New(rand.NewPCG(seed, 1))
	msgs := make([][]int, len(routes))
	for range n {
		d := time.Minute + time.Duration(rng.Int64N(int64(48*time.Hour-time.Minute)+1))
		for i, r := range routes {
			hops, _ := scheduler.Plan(d, r.route)
			msgs[i] = append(msgs[i], 1+len(hops))
		}
	}
	fmt.Fprintf(out, "\nplanned for production settings (levels %q, timers up to 72h, threshold %s), %d delays 1m–48h:\n",
		config.DefaultLevels, config.DefaultThreshold, n)
	for i, r := range routes {
		fmt.Fprintf(out, "  %-6s  %.2f broker messages per alert, at most %d\n", r.name, mean(msgs[i]), slices.Max(msgs[i]))
	}
	_, err := fmt.Fprintf(out, "  timer vs levels: %.1fx fewer broker messages\n", mean(msgs[0])/mean(msgs[1]))
	return err
}

// runMode delivers the delay mix through an in-process scheduler in mode, on a topic of
// its own, and measures what every alert cost and how late it came.
func runMode(ctx context.Context, out io.Writer, cfg config.Config, mode string, delays []time.Duration, timerMax time.Duration, suffix string) (modeRun, error) {
	topic, group := "rd_bench_"+mode+"_"+suffix, "rd_bench_"+mode+"_"+suffix
	if err := createTopic(ctx, cfg, topic); err != nil {
		return modeRun{}, err
	}
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	if err != nil {
		return modeRun{}, err
	}
	defer rdb.Close()
	prefix := "rdbench" + suffix + mode
	defer func() { _, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix) }()
	opts := scheduler.OptionsFromConfig(cfg)
	opts.Topic, opts.Group, opts.Mode = topic, group, mode
	opts.KnownTarget = func(string) bool { return true }
	opts.InstanceName = "rd-bench-" + mode + "-" + suffix
	rec := &hopRecorder{hops: map[string]int{}, late: map[string]time.Duration{}}
	stop, err := startScheduler(ctx, opts, store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Liveness: config.DefaultLiveness}), rec, prometheus.NewRegistry())
	if err != nil {
		return modeRun{}, err
	}
	defer stop()
	pr, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: topic})
	if err != nil {
		return modeRun{}, err
	}
	defer pr.Close()
	start := time.Now()
	for i, d := range delays {
		if _, err := pr.Publish(ctx, wire.Publication{Target: "bench", ID: "a" + strconv.Itoa(i), In: d,
			Body: []byte("alert " + strconv.Itoa(i))}); err != nil {
			return modeRun{}, err
		}
	}
	wait := slices.Max(delays) + 2*time.Minute
	for rec.count() < len(delays) {
		if time.Since(start) > wait {
			return modeRun{}, fmt.Errorf("bench: %s mode handed off %d of %d alerts in %s", mode, rec.count(), len(delays), wait)
		}
		select {
		case <-ctx.Done():
			return modeRun{}, ctx.Err()
		case <-time.After(50 * time.Millisecond):
		}
	}
	fmt.Fprintf(out, "%s mode: %d alerts handed off in %s\n", mode, len(delays), time.Since(start).Round(time.Millisecond))
	r := modeRun{name: mode + " mode"}
	var late []time.Duration
	rec.mu.Lock()
	defer rec.mu.Unlock()
	for i, d := range delays {
		id := "a" + strconv.Itoa(i)
		msgs := 1 + rec.hops[id] // the producer's publish, then every hop
		r.messages = append(r.messages, msgs)
		if d <= timerMax {
			r.within = append(r.within, msgs)
		}
		late = append(late, rec.late[id])
	}
	r.p50, r.p99, r.worst, r.early = percentiles(late)
	return r, nil
}

// runBrokerTimer publishes the delay mix as plain timer messages (each delay capped at
// the broker's maximum) and consumes them with a bare client: the broker's own
// precision, one message per alert, no wheel stage.
func runBrokerTimer(ctx context.Context, out io.Writer, cfg config.Config, p rocketmq.Producer, topic string, delays []time.Duration, timerMax time.Duration, suffix string) (modeRun, error) {
	var mu sync.Mutex
	due := map[string]time.Time{}
	late := map[string]time.Duration{}
	done := make(chan struct{})
	c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver(cfg.RocketMQ.NameServers)),
		consumer.WithGroupName("rd_bench_timer_"+suffix), consumer.WithInstance("rd-bench-timer-"+suffix),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset))
	if err != nil {
		return modeRun{}, err
	}
	err = c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		now := time.Now()
		mu.Lock()
		defer mu.Unlock()
		for _, m := range msgs {
			id := string(m.Body)
			at, ok := due[id]
			if _, seen := late[id]; !ok || seen {
				continue // the probe, or a redelivery
			}
			late[id] = now.Sub(at)
			if len(late) == len(delays) {
				close(done)
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return modeRun{}, err
	}
	if err := c.Start(); err != nil {
		return modeRun{}, err
	}
	defer c.Shutdown()
	start := time.Now()
	for i, d := range delays {
		id := "t" + strconv.Itoa(i)
		at := time.Now().Add(min(d, timerMax-timerMax/50)).Truncate(time.Millisecond)
		m := primitive.NewMessage(topic, []byte(id))
		m.WithProperty(primitive.PropertyTimerDeliverMS, strconv.FormatInt(at.UnixMilli(), 10))
		mu.Lock()
		due[id] = at
		mu.Unlock()
		res, err := p.SendSync(ctx, m)
		if err == nil && res.Status != primitive.SendOK {
			err = fmt.Errorf("send status %d", res.Status)
		}
		if err != nil {
			return modeRun{}, fmt.Errorf("bench: publish timer message: %w", err)
		}
	}
	select {
	case <-done:
	case <-time.After(timerMax + 2*time.Minute):
		return modeRun{}, fmt.Errorf("bench: the broker delivered %d of %d timer messages", len(late), len(delays))
	case <-ctx.Done():
		return modeRun{}, ctx.Err()
	}
	fmt.Fprintf(out, "broker timer alone: %d messages consumed in %s (delays capped at the timer maximum)\n",
		len(delays), time.Since(start).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	r := modeRun{name: "broker timer alone"}
	var l []time.Duration
	for i, d := range delays {
		r.messages = append(r.messages, 1)
		if d <= timerMax {
			r.within = append(r.within, 1)
		}
		l = append(l, late["t"+strconv.Itoa(i)])
	}
	r.p50, r.p99, r.worst, r.early = percentiles(l)
	return r, nil
}

// hopRecorder is a scheduler.Delivery that records, per alert, its hops and lateness.
type hopRecorder struct {
	mu   sync.Mutex
	hops map[string]int
	late map[string]time.Duration
}

func (r *hopRecorder) Reject(context.Context, delivery.Rejected) error { return nil }

func (r *hopRecorder) Stop() {}

func (r *hopRecorder) Deliver(_ context.Context, a sender.Alert) (store.Receipt, error) {
	l := time.Since(a.Due)
	r.mu.Lock()
	defer r.mu.Unlock()
	if _, seen := r.late[a.ID]; !seen {
		r.late[a.ID], r.hops[a.ID] = l, a.Hops
	}
	return store.Receipt{Outcome: store.Delivered}, nil
}

func (r *hopRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.late)
}

// percentiles returns p50, p99 and the maximum of late, and how many are negative (early).
func percentiles(late []time.Duration) (p50, p99, worst time.Duration, early int) {
	q := quantile.Summarize(late)
	return q.P50, q.P99, q.Max, q.Early
}

func mean(xs []int) float64 {
	if len(xs) == 0 {
		return 0
	}
	var s int
	for _, x := range xs {
		s += x
	}
	return float64(s) / float64(len(xs))
}

func maxOr0(xs []int) int {
	if len(xs) == 0 {
		return 0
	}
	return slices.Max(xs)
}

func ms(d time.Duration) string { return fmt.Sprintf("%.1fms", float64(d)/float64(time.Millisecond)) }
