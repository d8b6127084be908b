package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/localstack"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

type benchResult struct {
	raw, hop, wheel     float64 // messages per second
	produce             float64
	roundTrips          float64
	hopRoundTrips       float64
	p50, p99, worst     time.Duration
	handedOff, expected int
}

// Pipeline measures, in one run on the configured broker and Redis, on fresh topics, a
// bare client's consume+publish, the scheduler's hop and its wheel stage, with n messages
// per stage and concurrency consumer goroutines, and prints the table to out.
func Pipeline(ctx context.Context, cfg config.Config, n, concurrency int, out io.Writer) error {
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	scheduler.RouteClientLog(quiet)
	ns := cfg.RocketMQ.NameServers
	if len(cfg.RocketMQ.Brokers) == 0 {
		return fmt.Errorf("bench: set rocketmq.brokers (ROCKETDELAY_BROKERS) so the benchmark can create its topics")
	}
	if cfg.Scheduler.Threshold > 10*time.Minute || cfg.Scheduler.Threshold < 2*time.Second {
		return fmt.Errorf("bench: scheduler.threshold %s must be between 2s and 10m for a benchmark run", cfg.Scheduler.Threshold)
	}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	fmt.Fprintf(out, "rocketdelay pipeline benchmark: %d messages per stage, %d consumer goroutines, %d CPUs, %s\n",
		n, concurrency, runtime.NumCPU(), runtime.Version())
	fmt.Fprintf(out, "broker %v, levels %q, threshold %s\n\n", ns, cfg.Scheduler.Levels.String(), cfg.Scheduler.Threshold)

	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		producer.WithGroupName("rd-bench-p"), producer.WithInstanceName("rd-bench-p-"+suffix), producer.WithRetry(2))
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()

	var res benchResult
	// Stage 1: raw consume + re-publish with the bare client.
	rawIn, rawOut := "rd_bench_raw_"+suffix, "rd_bench_rawout_"+suffix
	for _, t := range []string{rawIn, rawOut} {
		if err := createTopic(ctx, cfg, t); err != nil {
			return err
		}
	}
	start := time.Now()
	if err := produceN(ctx, p, n, func(i int) *primitive.Message {
		return primitive.NewMessage(rawIn, []byte("raw "+strconv.Itoa(i)))
	}); err != nil {
		return err
	}
	res.produce = float64(n) / time.Since(start).Seconds()
	fmt.Fprintf(out, "produced %d messages at %.0f msg/s (SendSync, 64 goroutines)\n", n, res.produce)
	res.raw, err = rawRepublish(ctx, ns, p, rawIn, rawOut, n, concurrency, suffix)
	if err != nil {
		return err
	}

	// Stage 2: scheduler hops. Every message is due far enough ahead to hop once.
	hopTopic := "rd_bench_hop_" + suffix
	if err := createTopic(ctx, cfg, hopTopic); err != nil {
		return err
	}
	farAhead := time.Now().Add(cfg.Scheduler.Levels[len(cfg.Scheduler.Levels)-1] + cfg.Scheduler.Threshold + time.Hour)
	if err := produceN(ctx, p, n, func(i int) *primitive.Message {
		m := primitive.NewMessage(hopTopic, []byte("hop "+strconv.Itoa(i)))
		m.WithProperties(map[string]string{wire.PropTarget: "bench", wire.PropID: "hop-" + suffix + "-" + strconv.Itoa(i),
			wire.PropDeliverAt: strconv.FormatInt(farAhead.UnixMilli(), 10)})
		return m
	}); err != nil {
		return err
	}
	res.hop, res.hopRoundTrips, err = runScheduler(ctx, out, cfg, hopTopic, "hop", n, concurrency, suffix, nil)
	if err != nil {
		return err
	}

	// Stage 3: wheel stage. Every message is due soon after production, below the
	// threshold, so it goes straight to Redis and the wheel.
	wheelTopic := "rd_bench_wheel_" + suffix
	if err := createTopic(ctx, cfg, wheelTopic); err != nil {
		return err
	}
	// Due within half the threshold (plus up to 1s of spread), so that no message hops.
	due := time.Now().Add(cfg.Scheduler.Threshold / 2)
	if err := produceN(ctx, p, n, func(i int) *primitive.Message {
		m := primitive.NewMessage(wheelTopic, []byte("wheel "+strconv.Itoa(i)))
		at := due.Add(time.Duration(i%1000) * time.Millisecond * min(cfg.Scheduler.Threshold/2, time.Second) / time.Second)
		m.WithProperties(map[string]string{wire.PropTarget: "bench", wire.PropID: "wheel-" + suffix + "-" + strconv.Itoa(i),
			wire.PropDeliverAt: strconv.FormatInt(at.UnixMilli(), 10)})
		return m
	}); err != nil {
		return err
	}
	rec := &latencyRecorder{}
	var cmds atomic.Int64
	wheel := &wheelRun{rec: rec, cmds: &cmds}
	res.wheel, res.roundTrips, err = runScheduler(ctx, out, cfg, wheelTopic, "wheel", n, concurrency, suffix, wheel)
	if err != nil {
		return err
	}
	res.p50, res.p99, res.worst, res.handedOff = rec.percentiles()
	res.expected = n

	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "stage\tmsg/s\tvs raw\ttarget\t\t")
	fmt.Fprintf(tw, "raw consume+publish (bare client)\t%.0f\t1.00\t\t\t\n", res.raw)
	fmt.Fprintf(tw, "scheduler hop\t%.0f\t%.2f\t≥ 0.70\t%s\t\n", res.hop, res.hop/res.raw, verdict(res.hop/res.raw >= 0.70))
	fmt.Fprintf(tw, "scheduler wheel stage (consume+store)\t%.0f\t%.2f\t\t\t\n", res.wheel, res.wheel/res.raw)
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nRedis round trips per wheel-stage message: %.2f (target ≤ 3: %s)\n", res.roundTrips, verdict(res.roundTrips <= 3))
	fmt.Fprintf(out, "Redis round trips per hop: %.2f (its trace for operators, one write; the rest is the sweeper's background share)\n", res.hopRoundTrips)
	fmt.Fprintf(out, "Redis round trips per replica-second of liveness: %.2f (its beats, whatever it holds; counted in the figures above)\n", wheel.beatsPerSecond)
	fmt.Fprintf(out, "lateness due → hand-off over %d/%d alerts: p50 %s, p99 %s, max %s (target p99 ≤ 50ms: %s)\n",
		res.handedOff, res.expected, res.p50.Round(10*time.Microsecond), res.p99.Round(10*time.Microsecond), res.worst.Round(10*time.Microsecond),
		verdict(res.p99 <= 50*time.Millisecond && res.handedOff == res.expected))
	return durabilityStages(ctx, out, cfg, p, n, concurrency, suffix, res.wheel)
}

// durabilityStages runs the wheel stage once per redis.durability mode, each on a Redis
// of its own started for the run (Debian's redis-server, AOF on): write (appendfsync
// everysec), fsync (appendfsync always), replicas=1 (a primary and one replica, WAIT 1
// after every write); and prints their cost side by side, against the shared Redis's
// wheel stage measured above (baseline).
func durabilityStages(ctx context.Context, out io.Writer, cfg config.Config, p rocketmq.Producer, n, concurrency int, suffix string, baseline float64) error {
	type mode struct {
		name     string
		args     []string
		replicas int
	}
	modes := []mode{
		{"write (appendfsync everysec)", []string{"--appendfsync", "everysec"}, 0},
		{"fsync (appendfsync always)", []string{"--appendfsync", "always"}, 0},
		{"replicas=1 (WAIT 1 after each write)", []string{"--appendfsync", "everysec"}, 1},
	}
	fmt.Fprintf(out, "\nredis.durability, wheel stage on a Redis of its own per mode (%d messages each):\n", n)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "durability\tmsg/s\tvs write\tlateness p50\tp99\t")
	var write float64
	for i, m := range modes {
		url, stop, err := startRedis(ctx, m.replicas, m.args...)
		if err != nil {
			return err
		}
		topic := fmt.Sprintf("rd_bench_dur%d_%s", i, suffix)
		if err := createTopic(ctx, cfg, topic); err != nil {
			stop()
			return err
		}
		due := time.Now().Add(cfg.Scheduler.Threshold / 2)
		if err := produceN(ctx, p, n, func(j int) *primitive.Message {
			msg := primitive.NewMessage(topic, []byte("dur "+strconv.Itoa(j)))
			at := due.Add(time.Duration(j%1000) * time.Millisecond * min(cfg.Scheduler.Threshold/2, time.Second) / time.Second)
			msg.WithProperties(map[string]string{wire.PropTarget: "bench", wire.PropID: fmt.Sprintf("dur%d-%s-%d", i, suffix, j),
				wire.PropDeliverAt: strconv.FormatInt(at.UnixMilli(), 10)})
			return msg
		}); err != nil {
			stop()
			return err
		}
		rec := &latencyRecorder{}
		var cmds atomic.Int64
		rate, _, err := runScheduler(ctx, io.Discard, cfg, topic, fmt.Sprintf("dur%d", i), n, concurrency, suffix,
			&wheelRun{rec: rec, cmds: &cmds, redisURL: url, replicas: m.replicas})
		stop()
		if err != nil {
			return fmt.Errorf("bench: durability %s: %w", m.name, err)
		}
		if i == 0 {
			write = rate
		}
		p50, p99, _, _ := rec.percentiles()
		fmt.Fprintf(tw, "%s\t%.0f\t%.2f\t%s\t%s\t\n", m.name, rate, rate/write, p50.Round(10*time.Microsecond), p99.Round(10*time.Microsecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "(the shared Redis's wheel stage above: %.0f msg/s)\n", baseline)
	return nil
}

// startRedis starts a redis-server of the benchmark's own on a free loopback port (AOF
// on, args added), and, when replicas is 1, one replica of it; it returns the primary's
// URL and a function that stops both.
func startRedis(ctx context.Context, replicas int, args ...string) (string, func(), error) {
	var servers []*localstack.RedisServer
	stop := func() {
		for _, srv := range servers {
			srv.Stop()
		}
	}
	start := func(extra ...string) (string, error) {
		srv, err := localstack.StartRedis(ctx, append([]string{"--appendonly", "yes"}, extra...)...)
		if err != nil {
			return "", fmt.Errorf("bench: %w", err)
		}
		servers = append(servers, srv)
		return srv.Addr, nil
	}
	primary, err := start(args...)
	if err != nil {
		stop()
		return "", nil, err
	}
	if replicas > 0 {
		host, port, _ := net.SplitHostPort(primary)
		if _, err := start("--replicaof", host, port); err != nil {
			stop()
			return "", nil, err
		}
		rdb := redis.NewClient(&redis.Options{Addr: primary})
		defer rdb.Close()
		// Connected is not enough: until its first sync is done the replica acknowledges
		// late. Wait until writes are acknowledged within a few milliseconds.
		for deadline, ok := time.Now().Add(30*time.Second), 0; ok < 5; time.Sleep(20 * time.Millisecond) {
			rdb.Set(ctx, "bench-warm-up", "x", time.Minute)
			if n, err := rdb.Do(ctx, "WAIT", replicas, 20).Int(); err == nil && n >= replicas {
				ok++
			} else {
				ok = 0
			}
			if time.Now().After(deadline) {
				stop()
				return "", nil, fmt.Errorf("bench: the replica did not connect to %s", primary)
			}
		}
	}
	return "redis://" + primary + "/0", stop, nil
}

func createTopic(ctx context.Context, cfg config.Config, topic string) error {
	return scheduler.EnsureTopic(ctx, cfg.RocketMQ.NameServers, scheduler.AccessFromConfig(cfg), topic, cfg.RocketMQ.Brokers, slog.New(slog.NewTextHandler(io.Discard, nil)))
}

func produceN(ctx context.Context, p rocketmq.Producer, n int, msg func(int) *primitive.Message) error {
	var next atomic.Int64
	var firstErr error
	var once sync.Once
	var wg sync.WaitGroup
	for range 64 {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= n {
					return
				}
				res, err := p.SendSync(ctx, msg(i))
				if err == nil && res.Status != primitive.SendOK {
					err = fmt.Errorf("send status %d", res.Status)
				}
				if err != nil {
					once.Do(func() { firstErr = fmt.Errorf("bench: produce: %w", err) })
					return
				}
			}
		})
	}
	wg.Wait()
	return firstErr
}

// rawRepublish consumes n messages from in and re-publishes each to out with the bare
// client, returning messages per second from the first to the last receipt.
func rawRepublish(ctx context.Context, ns []string, p rocketmq.Producer, in, out string, n, concurrency int, suffix string) (float64, error) {
	var count atomic.Int64
	var first atomic.Int64
	done := make(chan time.Time, 1)
	c, err := rocketmq.NewPushConsumer(consumer.WithNsResolver(primitive.NewPassthroughResolver(ns)),
		consumer.WithGroupName("rd_bench_raw_"+suffix), consumer.WithInstance("rd-bench-raw-"+suffix),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset), consumer.WithConsumeGoroutineNums(concurrency))
	if err != nil {
		return 0, err
	}
	err = c.Subscribe(in, consumer.MessageSelector{}, func(ctx context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		for _, m := range msgs {
			first.CompareAndSwap(0, time.Now().UnixNano())
			res, err := p.SendSync(ctx, primitive.NewMessage(out, m.Body))
			if err != nil || res.Status != primitive.SendOK {
				return consumer.ConsumeRetryLater, nil
			}
			if count.Add(1) == int64(n) {
				done <- time.Now()
			}
		}
		return consumer.ConsumeSuccess, nil
	})
	if err != nil {
		return 0, err
	}
	if err := c.Start(); err != nil {
		return 0, err
	}
	defer c.Shutdown()
	select {
	case end := <-done:
		return float64(n) / end.Sub(time.Unix(0, first.Load())).Seconds(), nil
	case <-time.After(5 * time.Minute):
		return 0, fmt.Errorf("bench: raw stage saw %d of %d messages in 5 minutes", count.Load(), n)
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// wheelRun is what a wheel-stage run records, and where it stores: a Redis URL (default
// the config's) and the wheel stage's replicas to WAIT for (durability replicas=N).
type wheelRun struct {
	rec      *latencyRecorder
	cmds     *atomic.Int64
	redisURL string
	replicas int
	// beatsPerSecond is the replica's liveness beats a second over the run, filled by
	// runScheduler: one round trip each, whatever the replica holds.
	beatsPerSecond float64
}

// runScheduler runs an in-process scheduler on topic until n messages went through the
// stage, and returns messages per second (first receipt to last stage completion) and
// Redis round trips per message (the hop stage's are its traces: one per hop).
func runScheduler(ctx context.Context, out io.Writer, cfg config.Config, topic, stage string, n, concurrency int, suffix string, wr *wheelRun) (float64, float64, error) {
	url := cfg.Redis.URL.Reveal()
	stageOpts := store.WheelStageOptions{Liveness: config.DefaultLiveness}
	if wr != nil && wr.redisURL != "" {
		url = wr.redisURL
	}
	if wr != nil {
		stageOpts.Replicas = wr.replicas
	}
	rdb, err := store.OpenRedis(ctx, url)
	if err != nil {
		return 0, 0, err
	}
	defer rdb.Close()
	prefix := "rdbench" + suffix + stage
	defer func() { _, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix) }()
	cmds := new(atomic.Int64)
	if wr != nil {
		cmds = wr.cmds
	}
	rdb.AddHook(countingHook{n: cmds})
	ws := store.NewWheelStage(rdb, prefix, stageOpts)
	reg := prometheus.NewRegistry()
	m := scheduler.NewMetrics(reg)
	opts := scheduler.OptionsFromConfig(cfg)
	opts.Topic, opts.Group = topic, "rd_bench_"+stage+"_"+suffix
	opts.KnownTarget = func(string) bool { return true }
	opts.ConsumeGoroutines = concurrency
	opts.InstanceName = "rd-bench-" + stage + "-" + suffix
	opts.Liveness = ws.Liveness(nil)
	var handoff scheduler.Delivery = &latencyRecorder{}
	if wr != nil {
		handoff = wr.rec
	}
	s, err := scheduler.New(opts, ws, handoff, slog.New(slog.NewTextHandler(io.Discard, nil)), m, time.Now)
	if err != nil {
		return 0, 0, err
	}
	start := time.Now()
	if err := s.Start(ctx); err != nil {
		return 0, 0, err
	}
	started := time.Now()
	defer func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	}()
	metric := "rocketdelay_hops_published_total"
	if wr != nil { // a wheel-stage run
		metric = "rocketdelay_wheel_stage_puts_total"
	}
	var first, end time.Time
	for deadline := time.Now().Add(5 * time.Minute); ; {
		if first.IsZero() && sumMetric(reg, "rocketdelay_messages_received_total") > 0 {
			first = time.Now()
		}
		if sumMetric(reg, metric) >= float64(n) {
			end = time.Now()
			break
		}
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("bench: %s stage saw %.0f of %d messages in 5 minutes", stage, sumMetric(reg, metric), n)
		}
		select {
		case <-ctx.Done():
			return 0, 0, ctx.Err()
		case <-time.After(5 * time.Millisecond):
		}
	}
	rate := float64(n) / end.Sub(first).Seconds()
	fmt.Fprintf(out, "%s stage: started in %s, first message after %s, %d messages in %s\n", stage,
		started.Sub(start).Round(time.Millisecond), first.Sub(start).Round(time.Millisecond), n, end.Sub(first).Round(time.Millisecond))
	if wr == nil {
		return rate, float64(cmds.Load()) / float64(n), nil
	}
	for deadline := time.Now().Add(5 * time.Minute); wr.rec.count() < n; {
		if time.Now().After(deadline) {
			return 0, 0, fmt.Errorf("bench: %d of %d wheel-stage alerts handed off", wr.rec.count(), n)
		}
		time.Sleep(50 * time.Millisecond)
	}
	time.Sleep(200 * time.Millisecond) // let the last releases finish
	wr.beatsPerSecond = sumMetric(reg, "rocketdelay_liveness_beats_total") / time.Since(started).Seconds()
	return rate, float64(wr.cmds.Load()) / float64(n), nil
}

// sumMetric sums every series of counter name.
func sumMetric(g prometheus.Gatherer, name string) float64 { return sumMetricLabel(g, name, "", "") }

// countingHook counts the Redis commands sent (a pipeline counts as one round trip).
type countingHook struct{ n *atomic.Int64 }

func (h countingHook) DialHook(next redis.DialHook) redis.DialHook { return next }
func (h countingHook) ProcessHook(next redis.ProcessHook) redis.ProcessHook {
	return func(ctx context.Context, cmd redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmd)
	}
}
func (h countingHook) ProcessPipelineHook(next redis.ProcessPipelineHook) redis.ProcessPipelineHook {
	return func(ctx context.Context, cmds []redis.Cmder) error {
		h.n.Add(1)
		return next(ctx, cmds)
	}
}

// latencyRecorder is a scheduler.Delivery that records the lateness of every due alert.
type latencyRecorder struct {
	mu   sync.Mutex
	late []time.Duration
}

func (r *latencyRecorder) Reject(context.Context, delivery.Rejected) error { return nil }

func (r *latencyRecorder) Stop() {}

func (r *latencyRecorder) Deliver(_ context.Context, a sender.Alert) (store.Receipt, error) {
	l := time.Since(a.Due)
	r.mu.Lock()
	r.late = append(r.late, l)
	r.mu.Unlock()
	return store.Receipt{Outcome: store.Delivered}, nil
}

func (r *latencyRecorder) count() int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return len(r.late)
}

func (r *latencyRecorder) percentiles() (p50, p99, worst time.Duration, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.late) == 0 {
		return 0, 0, 0, 0
	}
	p50, p99, worst, _ = percentiles(r.late)
	return p50, p99, worst, len(r.late)
}

// verdict is PASS when a figure meets its target, else FAIL: a benchmark reports against
// its targets, it does not gate anything.
func verdict(met bool) string {
	if met {
		return "PASS"
	}
	return "FAIL"
}
