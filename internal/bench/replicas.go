package bench

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// ReplicasOptions are the settings of the replicas benchmark.
type ReplicasOptions struct {
	// Window is the rate-limit window, standing for DingTalk's minute; lateness is also
	// printed scaled to a 60s window. Default 10s.
	Window time.Duration
	// Windows is how many windows the arrivals last. Default 2.
	Windows int
	// Robots is how many robots the target has; Limit is sender.limit. Defaults 3, 19.
	Robots, Limit int
	// Loads are the arrival rates, in multiples of the robots' capacity. Default 0.5, 2, 10.
	Loads []float64
	// Replicas are the numbers of replicas measured. Default 1, 2, 4.
	Replicas []int
	// Seed makes the arrivals reproducible. Default 1.
	Seed uint64
}

func (o ReplicasOptions) withDefaults() ReplicasOptions {
	config.Default(&o.Window, 10*time.Second)
	config.Default(&o.Windows, 2)
	config.Default(&o.Robots, 3)
	config.Default(&o.Limit, config.DefaultSenderLimit)
	config.Default(&o.Seed, 1)
	if len(o.Loads) == 0 {
		o.Loads = []float64{0.5, 2, 10}
	}
	if len(o.Replicas) == 0 {
		o.Replicas = []int{1, 2, 4}
	}
	return o
}

// replicasRun is what one replica count at one load measured at the simulator.
type replicasRun struct {
	replicas            int
	share               bool
	load                float64
	redisOps            int64
	alerts, delivered   int
	messages, overLimit int
	dupes, early        int
	p50, p99, worst     time.Duration
	parked, adopted     float64
}

// Replicas measures the whole due path of a robot group shared by replicas: for each
// replica count and load, in-process schedulers in one consumer group on a topic of
// their own, each with its own sender (sharing busy targets through the wheel stage's
// park), hand off alerts that fall due (Poisson) at load × the robots' capacity for
// Windows windows, each published 2s before its due time, to an in-process DingTalk
// simulator. It prints, per run, lateness from due time to DingTalk's acceptance
// (p50/p99/max, also scaled to a 60s window), messages, alerts per message, over-limit
// answers and the physical limit: one send per robot gap, window / (robots × limit),
// the least an alert must wait for some robot once the load is over capacity.
func Replicas(ctx context.Context, cfg config.Config, o ReplicasOptions, out io.Writer) error {
	o = o.withDefaults()
	scheduler.RouteClientLog(slog.New(slog.DiscardHandler))
	scale := float64(time.Minute) / float64(o.Window)
	gap := o.Window / time.Duration(o.Robots*o.Limit)
	sc := func(d time.Duration) string {
		return time.Duration(float64(d) * scale).Round(10 * time.Millisecond).String()
	}
	fmt.Fprintf(out, "\nreplicas: %d robots at %d per window of %s standing for DingTalk's minute (\"60s\" columns ×%.0f), "+
		"%d windows of arrivals; the physical limit over capacity is one robot gap, %s (%s in a minute)\n",
		o.Robots, o.Limit, o.Window, scale, o.Windows, gap.Round(time.Millisecond), sc(gap))
	var runs []replicasRun
	run := func(load float64, n int, share bool) error {
		r, err := replicasOnce(ctx, cfg, o, n, load, share)
		if err != nil {
			return err
		}
		fmt.Fprintf(out, "  %gx, %d replica(s), sharing %s: %d/%d delivered in %d messages, p99 %s\n", load, n, onOff(share),
			r.delivered, r.alerts, r.messages, r.p99.Round(time.Millisecond))
		runs = append(runs, r)
		return nil
	}
	for _, load := range o.Loads {
		for _, n := range o.Replicas {
			if err := run(load, n, true); err != nil {
				return err
			}
		}
	}
	// The baselines, in the same run: the most replicas without sharing (each replica's
	// queue merges only its own alerts), at the lowest load (the calm path's round trips)
	// and at the highest.
	for _, load := range []float64{slices.Min(o.Loads), slices.Max(o.Loads)} {
		if err := run(load, slices.Max(o.Replicas), false); err != nil {
			return err
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "load\treplicas\tsharing\tRedis RT/alert\talerts delivered\tmessages\talerts/message\tover-limit\tduplicates\tearly\tparked\tadopted\tp50\tp99\tmax\tp50 60s\tp99 60s\tmax 60s\tlimit 60s\tp99/limit\t")
	for _, r := range runs {
		limit, ratio := "0", "-"
		if r.load > 1 {
			limit, ratio = sc(gap), fmt.Sprintf("%.2f", float64(r.p99)/float64(gap))
		}
		fmt.Fprintf(tw, "%gx\t%d\t%s\t%.1f\t%d/%d\t%d\t%.1f\t%d\t%d\t%d\t%.0f\t%.0f\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.load, r.replicas,
			onOff(r.share), float64(r.redisOps)/float64(max(r.alerts, 1)), r.delivered, r.alerts, r.messages, float64(r.delivered)/float64(max(r.messages, 1)), r.overLimit, r.dupes, r.early,
			r.parked, r.adopted, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.worst.Round(time.Millisecond),
			sc(r.p50), sc(r.p99), sc(r.worst), limit, ratio)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	find := func(load float64, share bool) replicasRun {
		for _, r := range runs {
			if r.load == load && r.replicas == slices.Max(o.Replicas) && r.share == share {
				return r
			}
		}
		return replicasRun{}
	}
	hi, calm := slices.Max(o.Loads), slices.Min(o.Loads)
	on, off := find(hi, true), find(hi, false)
	fmt.Fprintf(out, "replicas: p99 lateness %s at %gx capacity with %d replicas, %.2fx the physical limit %s (without sharing %s); over-limit %d\n",
		sc(on.p99), hi, on.replicas, float64(on.p99)/float64(gap), sc(gap), sc(off.p99), on.overLimit+off.overLimit)
	calmOn, calmOff := find(calm, true), find(calm, false)
	fmt.Fprintf(out, "calm path (%gx): %.2f Redis round trips per alert with sharing, %.2f without (%.2fx); parked %.0f\n", calm,
		perAlert(calmOn), perAlert(calmOff), perAlert(calmOn)/max(perAlert(calmOff), 0.001), calmOn.parked)
	return nil
}

func onOff(b bool) string {
	if b {
		return "on"
	}
	return "off"
}

// perAlert is a run's Redis round trips per alert.
func perAlert(r replicasRun) float64 { return float64(r.redisOps) / float64(max(r.alerts, 1)) }

// replicasOnce runs n replicas at load.
func replicasOnce(ctx context.Context, cfg config.Config, o ReplicasOptions, n int, load float64, share bool) (replicasRun, error) {
	r := replicasRun{replicas: n, load: load, share: share}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	topic := "rd_bench_replicas_" + suffix
	if err := createTopic(ctx, cfg, topic); err != nil {
		return r, err
	}
	rdb, err := store.OpenRedisConfig(ctx, cfg.Redis)
	if err != nil {
		return r, err
	}
	defer rdb.Close()
	var ops atomic.Int64
	rdb.AddHook(countingHook{n: &ops})
	prefix := "rdbench" + suffix
	defer func() { _, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix) }()
	pg, err := store.OpenPostgres(ctx, cfg.Postgres.URL.Reveal())
	if err != nil {
		return r, err
	}
	defer pg.Close()
	fs := store.NewFailedSends(pg, store.FailedSendsOptions{})

	var simRobots []chatsim.Robot
	var robots []sender.Robot
	for i := range o.Robots {
		rb := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("bench-token-%d", i+1))}
		robots = append(robots, rb)
		simRobots = append(simRobots, chatsim.Robot{Name: rb.Name, Token: rb.Token.Reveal()})
	}
	sim := chatsim.New(chatsim.Options{Platforms: []sender.Platform{dingtalk.Platform}, Robots: simRobots, Window: o.Window, Throttle: 10 * o.Window})
	url, stopSim, err := serveSim(ctx, sim)
	if err != nil {
		return r, err
	}
	defer stopSim()

	quiet := slog.New(slog.DiscardHandler)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptionsFromConfig(cfg))
	var regs []*prometheus.Registry
	for i := range n {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		snd, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{"bench": {Protocol: dingtalk.New(url), Robots: robots}}, Limit: o.Limit,
			HTTPTimeout: 2 * time.Second, Cooldown: 10 * o.Window},
			store.RobotPoolFor(rdb, prefix, config.Sender{Window: o.Window}), quiet, sender.NewMetrics(reg), time.Now)
		if err != nil {
			return r, err
		}
		defer snd.Close()
		d := delivery.New(delivery.Channels{"bench": snd}, ws, fs, delivery.Options{}, quiet, nil, time.Now)
		opts := scheduler.OptionsFromConfig(cfg)
		opts.Topic, opts.Group = topic, "rd_bench_replicas_"+suffix
		opts.KnownTarget = func(t string) bool { return t == "bench" }
		opts.InstanceName = fmt.Sprintf("rd-bench-replicas-%s-%d", suffix, i)
		opts.Liveness = ws.Liveness(nil)
		s, err := scheduler.New(opts, ws, d, quiet, scheduler.NewMetrics(reg), time.Now)
		if err != nil {
			return r, err
		}
		if share {
			snd.SetParking(s)
		}
		if err := s.Start(ctx); err != nil {
			return r, err
		}
		defer func() {
			stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
			defer cancel()
			_ = s.Stop(stopCtx)
		}()
	}
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: topic})
	if err != nil {
		return r, err
	}
	defer p.Close()

	r.redisOps = -ops.Load() // from here: the replicas' start-up left out
	rate := load * float64(o.Robots*o.Limit) / o.Window.Seconds()
	rng := rand.New(rand.NewPCG(o.Seed, uint64(n*1000)+uint64(load*10)))
	dues := poisson(rng, rate, time.Duration(o.Windows)*o.Window)
	r.alerts = len(dues)
	const lead = 2 * time.Second // each alert is published this long before it is due
	start := time.Now().Add(lead + time.Second)
	due := make(map[string]time.Time, len(dues))
	var mu sync.Mutex
	var wg sync.WaitGroup
	var pubErr error
	for i, d := range dues {
		at := start.Add(d)
		id := benchAlert(i)
		time.Sleep(time.Until(at.Add(-lead)))
		wg.Go(func() {
			pub, err := p.Publish(ctx, wire.Publication{Target: "bench", ID: id, At: at, Body: []byte(id)})
			mu.Lock()
			defer mu.Unlock()
			if err != nil {
				pubErr = err
				return
			}
			due[id] = pub.DeliverAt
		})
	}
	wg.Wait()
	if pubErr != nil {
		return r, pubErr
	}
	first := map[string]time.Time{}
	seen := map[string]int{}
	count := func() {
		msgs := sim.Accepted()
		r.messages = len(msgs)
		clear(first)
		clear(seen)
		for _, m := range msgs {
			inMessage := map[string]bool{}
			for _, id := range benchAlertID.FindAllString(messageText(m), -1) {
				inMessage[id] = true
			}
			for id := range inMessage {
				seen[id]++
				if _, ok := first[id]; !ok {
					first[id] = m.At
				}
			}
		}
	}
	for deadline := time.Now().Add(20 * o.Window); ; {
		count()
		if len(first) >= len(due) || time.Now().After(deadline) {
			break
		}
		if err := sleepCtx(ctx, 100*time.Millisecond); err != nil {
			return r, err
		}
	}
	r.redisOps += ops.Load()
	var late []time.Duration
	for id, at := range first {
		d, ok := due[id]
		if !ok {
			continue
		}
		if at.Before(d) {
			r.early++
		}
		late = append(late, max(at.Sub(d), 0))
		if seen[id] > 1 {
			r.dupes++
		}
	}
	r.delivered = len(late)
	r.overLimit = sim.Stats().OverLimit
	if len(late) > 0 {
		slices.Sort(late)
		r.p50, r.p99, r.worst, _ = percentiles(late)
	}
	for _, reg := range regs {
		r.parked += sumMetricLabel(reg, "rocketdelay_handoffs_total", "result", "parked")
		r.adopted += sumMetricLabel(reg, "rocketdelay_claims_total", "result", "adopted")
	}
	return r, nil
}
