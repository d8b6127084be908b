package bench

import (
	"cmp"
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// ScaleOptions configure Scale. A zero field takes its default.
type ScaleOptions struct {
	// Replicas are the scheduler counts to measure, in one consumer group. Default 1, 2, 4.
	Replicas []int
	// Topologies name the Redis of each run: "config" (the config's), or any of
	// Redis that Topology resolves. Default "config".
	Topologies []string
	// Topology returns the Redis configuration of a topology name other than "config".
	Topology func(name string) (config.Redis, error)
	// Shards are the wheel stage's shard counts (redis.shards) to measure. Default 1.
	Shards []int
	// N is the number of alerts per run. Default 4000.
	N int
	// Goal, when set, is the max lateness each run is judged by: its row says PASS or FAIL.
	Goal time.Duration
	// Repeat is how many times each row is measured. Default 1. With more, the row is
	// the run whose max lateness is the median (its other figures with it), the goal
	// judges that run, and a column gives the spread of max lateness over the runs: on a
	// shared machine one run's lateness moves by tens of percent.
	Repeat int
	// Profile, when set, is a directory where each run writes the CPU profile of its
	// hand-off (from the due instant to the last release), the allocation profiles at
	// the due instant and at the end (compare with go tool pprof -base), and the Redis
	// commands of its publishing and of its hand-off, by command.
	Profile string
}

type scaleRun struct {
	topology        string
	replicas        int
	shards          int
	rate            float64 // alerts handed off per second, first due to last hand-off
	putCmds         float64 // Redis commands per alert from the start to the due instant (the publishing)
	handoffCmds     float64 // Redis commands per alert from the due instant to the last release
	p50, p99, worst time.Duration
	lostPerMsg      float64 // claims lost to another replica, per alert
	recoveredPerMsg float64 // alerts the sweepers took, per alert
	primaries       []primaryLoad
	spread          [2]time.Duration // the least and the most max lateness over the row's runs
	runs            int              // how many runs the row took
}

// Scale runs N alerts, falling due at one instant, through 1, 2, 4… in-process
// schedulers in one consumer group on a topic of 8 queues, for each Redis topology and
// each shard count of the wheel stage, and prints hand-off throughput, lateness and the
// claims lost per alert: more replicas must not collapse into claim storms. All replicas
// share this machine's cores, so the table shows contention, not the growth separate
// machines would give. A second table shows, per primary of each run's Redis, the
// commands it served during the run and the memory the stage's keys hold on it at the
// end (the done markers and traces of the delivered alerts), and their shares: how
// evenly the shards spread the stage over a Redis Cluster's primaries.
func Scale(ctx context.Context, cfg config.Config, o ScaleOptions, out io.Writer) error {
	if len(o.Replicas) == 0 {
		o.Replicas = []int{1, 2, 4}
	}
	if len(o.Topologies) == 0 {
		o.Topologies = []string{"config"}
	}
	if len(o.Shards) == 0 {
		o.Shards = []int{1}
	}
	for _, s := range o.Shards {
		if s < 1 || s > config.MaxShards {
			return fmt.Errorf("bench: %d shards: want 1 to %d", s, config.MaxShards)
		}
	}
	config.Default(&o.N, 4000)
	config.Default(&o.Repeat, 1)
	if len(cfg.RocketMQ.Brokers) == 0 {
		return fmt.Errorf("bench: set rocketmq.brokers (ROCKETDELAY_BROKERS) so the benchmark can create its topics")
	}
	scheduler.RouteClientLog(slog.New(slog.DiscardHandler))
	store.RouteRedisLog(slog.New(slog.DiscardHandler)) // the failover client logs every sentinel it asks
	fmt.Fprintf(out, "rocketdelay scale benchmark: %d alerts per run due at one instant, replicas %v, shards %v, Redis %s, %d CPUs, %s\n\n",
		o.N, o.Replicas, o.Shards, strings.Join(o.Topologies, ", "), runtime.NumCPU(), runtime.Version())
	var runs []scaleRun
	for _, topo := range o.Topologies {
		rc := cfg.Redis
		if topo != "config" {
			var err error
			if rc, err = o.Topology(topo); err != nil {
				return err
			}
		}
		for _, k := range o.Replicas {
			for _, shards := range o.Shards {
				var row []scaleRun
				for range o.Repeat {
					r, err := scaleOnce(ctx, cfg, rc, topo, k, shards, o)
					if err != nil {
						return fmt.Errorf("bench: %s, %d replicas, %d shards: %w", topo, k, shards, err)
					}
					fmt.Fprintf(out, "%s, %d replicas, %d shards: %.0f alerts/s, max late %s\n", topo, k, shards, r.rate, ms(r.worst))
					row = append(row, r)
				}
				runs = append(runs, medianRun(row))
			}
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	goal := ""
	if o.Goal > 0 {
		goal = "max late < " + ms(o.Goal) + "\t"
	}
	fmt.Fprintln(tw, "redis\treplicas\tshards\talerts/s\tvs 1 replica\tp50 late\tp99 late\tmax late\tmax late, runs\t"+goal+
		"claims lost/alert\tsweeper/alert\tcmds/alert put\tcmds/alert hand-off\t")
	base := map[string]float64{} // the rate of the first replica count, per Redis and shard count
	for _, r := range runs {
		key := r.topology + "/" + strconv.Itoa(r.shards)
		if r.replicas == o.Replicas[0] {
			base[key] = r.rate
		}
		judged := ""
		if o.Goal > 0 {
			judged = verdict(r.worst < o.Goal) + "\t"
		}
		spread := "1 run"
		if r.runs > 1 {
			spread = fmt.Sprintf("%s-%s of %d", ms(r.spread[0]), ms(r.spread[1]), r.runs)
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.0f\t%.2f\t%s\t%s\t%s\t%s\t%s%.4f\t%.4f\t%.1f\t%.1f\t\n", r.topology, r.replicas, r.shards, r.rate, r.rate/base[key],
			ms(r.p50), ms(r.p99), ms(r.worst), spread, judged, r.lostPerMsg, r.recoveredPerMsg, r.putCmds, r.handoffCmds)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(out)
	tw = tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "redis\treplicas\tshards\tprimary\tshards on it\tcommands\t% of commands\tstage memory\t% of memory\t")
	for _, r := range runs {
		var commands, memory int64
		for _, p := range r.primaries {
			commands += p.commands
			memory += p.memory
		}
		for _, p := range r.primaries {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%d\t%d\t%s\t%s\t%s\t\n", r.topology, r.replicas, r.shards, p.addr,
				p.shards, p.commands, percent(p.commands, commands), kib(p.memory), percent(p.memory, memory))
		}
	}
	return tw.Flush()
}

// medianRun is the run of row (one configuration measured several times) whose max
// lateness is the median (the upper one of an even count), with the spread of max
// lateness over row.
func medianRun(row []scaleRun) scaleRun {
	slices.SortFunc(row, func(a, b scaleRun) int { return cmp.Compare(a.worst, b.worst) })
	r := row[len(row)/2]
	r.spread, r.runs = [2]time.Duration{row[0].worst, row[len(row)-1].worst}, len(row)
	return r
}

// percent is part's share of whole, or "-" when whole is 0.
func percent(part, whole int64) string {
	if whole == 0 {
		return "-"
	}
	return fmt.Sprintf("%.1f%%", 100*float64(part)/float64(whole))
}

// kib is a number of bytes in KiB.
func kib(b int64) string {
	return fmt.Sprintf("%.1f KiB", float64(b)/1024)
}

// scaleOnce runs one topology, replica count and shard count.
func scaleOnce(ctx context.Context, cfg config.Config, rc config.Redis, topo string, replicas, shards int, o ScaleOptions) (scaleRun, error) {
	n := o.N
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	topic := "rd_bench_scale_" + suffix
	if err := createTopic(ctx, cfg, topic); err != nil {
		return scaleRun{}, err
	}
	rdb, err := store.OpenRedisConfig(ctx, rc)
	if err != nil {
		return scaleRun{}, err
	}
	defer rdb.Close()
	prefix := "rdbench" + suffix
	defer func() { _, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix) }()
	rec := &latencyRecorder{}
	stageOpts := store.WheelStageOptionsFromConfig(cfg)
	stageOpts.Shards = shards
	stage := store.NewWheelStage(rdb, prefix, stageOpts) // for its counts; each replica has its own
	var regs []*prometheus.Registry
	for i := range replicas {
		reg := prometheus.NewRegistry()
		regs = append(regs, reg)
		opts := scheduler.OptionsFromConfig(cfg)
		opts.Topic, opts.Group = topic, "rd_bench_scale_"+suffix
		opts.KnownTarget = func(string) bool { return true }
		opts.InstanceName = fmt.Sprintf("rd-bench-scale-%s-%d", suffix, i)
		stop, err := startScheduler(ctx, opts, store.NewWheelStage(rdb, prefix, stageOpts), rec, reg)
		if err != nil {
			return scaleRun{}, err
		}
		defer stop()
	}
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: cfg.RocketMQ.NameServers, Topic: topic})
	if err != nil {
		return scaleRun{}, err
	}
	defer p.Close()
	// Every alert falls due at one instant, 5s from now, after all are published: the
	// rate from then to the last hand-off is what the replicas can hand off.
	firstDue := time.Now().Add(5 * time.Second).Truncate(time.Millisecond)
	cmdsBefore, err := commandCounts(ctx, rdb)
	if err != nil {
		return scaleRun{}, err
	}
	byNameBefore, err := commandsByName(ctx, rdb)
	if err != nil {
		return scaleRun{}, err
	}
	var next atomic.Int64
	var wg sync.WaitGroup
	var pubErr error
	var once sync.Once
	for range 16 {
		wg.Go(func() {
			for i := int(next.Add(1)) - 1; i < n; i = int(next.Add(1)) - 1 {
				if _, err := p.Publish(ctx, wire.Publication{Target: "bench", ID: "s" + suffix + "-" + strconv.Itoa(i), At: firstDue,
					Body: []byte("scale " + strconv.Itoa(i))}); err != nil {
					once.Do(func() { pubErr = err })
					return
				}
			}
		})
	}
	wg.Wait()
	if pubErr != nil {
		return scaleRun{}, pubErr
	}
	if time.Now().After(firstDue) {
		return scaleRun{}, fmt.Errorf("publishing %d alerts took longer than 5s; use fewer", n)
	}
	// The publishing's commands are counted up to a moment before the claims ahead of
	// the due instant begin, by which every alert is in the wheel stage (the consumers
	// write as the broker hands them over); the hand-off's from then on.
	counted := scheduler.DefaultClaimAhead + 100*time.Millisecond
	time.Sleep(time.Until(firstDue.Add(-counted)))
	if waiting, _, err := stage.Stats(ctx); err != nil || waiting < int64(n) {
		return scaleRun{}, fmt.Errorf("only %d of %d alerts in the wheel stage %s before they fall due (%v); use fewer", waiting, n, counted, err)
	}
	byNameAtDue, err := commandsByName(ctx, rdb)
	if err != nil {
		return scaleRun{}, err
	}
	name := fmt.Sprintf("%s-%dr-%ds", topo, replicas, shards)
	stopProfile, err := startProfile(o.Profile, name)
	if err != nil {
		return scaleRun{}, err
	}
	defer stopProfile()
	for deadline := time.Now().Add(3 * time.Minute); rec.count() < n; {
		if time.Now().After(deadline) {
			return scaleRun{}, fmt.Errorf("%d of %d alerts handed off in 3 minutes", rec.count(), n)
		}
		select {
		case <-ctx.Done():
			return scaleRun{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	// The commands and memory are taken once the stage is empty, every hand-off
	// confirmed: what is left are the delivered alerts' done markers and traces.
	for deadline := time.Now().Add(30 * time.Second); ; {
		waiting, inflight, err := stage.Stats(ctx)
		if err != nil {
			return scaleRun{}, err
		}
		if waiting+inflight == 0 {
			break
		}
		if time.Now().After(deadline) {
			return scaleRun{}, fmt.Errorf("%d waiting and %d in flight 30s after the last hand-off", waiting, inflight)
		}
		select {
		case <-ctx.Done():
			return scaleRun{}, ctx.Err()
		case <-time.After(20 * time.Millisecond):
		}
	}
	if err := stopProfile(); err != nil {
		return scaleRun{}, err
	}
	cmdsAfter, err := commandCounts(ctx, rdb)
	if err != nil {
		return scaleRun{}, err
	}
	byNameAfter, err := commandsByName(ctx, rdb)
	if err != nil {
		return scaleRun{}, err
	}
	put, handoff := commandGrowth(byNameBefore, byNameAtDue), commandGrowth(byNameAtDue, byNameAfter)
	if err := writeCommands(o.Profile, name, n, put, handoff); err != nil {
		return scaleRun{}, err
	}
	mem, err := stageMemory(ctx, rdb, prefix)
	if err != nil {
		return scaleRun{}, err
	}
	r := scaleRun{topology: topo, replicas: replicas, shards: shards,
		primaries: primaryLoads(cmdsBefore, cmdsAfter, mem),
		putCmds:   float64(sumCalls(put)) / float64(n), handoffCmds: float64(sumCalls(handoff)) / float64(n)}
	r.p50, r.p99, r.worst, _ = rec.percentiles()
	// All fall due at firstDue: the last is handed off its lateness after it (the poll
	// above sees it up to 20ms later).
	r.rate = float64(n) / max(r.worst, time.Millisecond).Seconds()
	var lost, recovered float64
	for _, reg := range regs {
		lost += sumMetricLabel(reg, "rocketdelay_claims_total", "result", "lost")
		recovered += sumMetric(reg, "rocketdelay_sweeper_recovered_total")
	}
	r.lostPerMsg, r.recoveredPerMsg = lost/float64(n), recovered/float64(n)
	return r, nil
}

// startScheduler starts an in-process scheduler with opts on ws, handing due alerts to
// d and registering its metrics with reg; stop stops it.
func startScheduler(ctx context.Context, opts scheduler.Options, ws *store.WheelStage, d scheduler.Delivery,
	reg prometheus.Registerer) (stop func(), err error) {
	opts.Liveness = ws.Liveness(nil)
	s, err := scheduler.New(opts, ws, d, slog.New(slog.DiscardHandler), scheduler.NewMetrics(reg), time.Now)
	if err != nil {
		return nil, err
	}
	if err := s.Start(ctx); err != nil {
		return nil, err
	}
	return func() {
		stopCtx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 20*time.Second)
		defer cancel()
		_ = s.Stop(stopCtx)
	}, nil
}

// LocalTopology resolves "sentinel" and "cluster" to the local stack's Sentinel
// deployment and Redis Cluster (deploy/local/up sentinel redis-cluster; getenv reads what
// deploy/local/env prints).
func LocalTopology(getenv func(string) string) func(string) (config.Redis, error) {
	return func(name string) (config.Redis, error) {
		switch name {
		case "sentinel":
			if addrs := getenv("ROCKETDELAY_LOCAL_SENTINEL"); addrs != "" {
				return config.Redis{Sentinel: &config.RedisSentinel{MasterName: getenv("ROCKETDELAY_LOCAL_SENTINEL_MASTER"),
					Addresses: strings.Split(addrs, ",")}}, nil
			}
		case "cluster":
			if addrs := getenv("ROCKETDELAY_LOCAL_REDIS_CLUSTER"); addrs != "" {
				return config.Redis{Cluster: &config.RedisCluster{Addresses: strings.Split(addrs, ",")}}, nil
			}
		default:
			return config.Redis{}, fmt.Errorf("bench: unknown Redis %q: use config, sentinel or cluster", name)
		}
		return config.Redis{}, fmt.Errorf("bench: no local %s: start it (deploy/local/up sentinel redis-cluster) and eval \"$(deploy/local/env)\"", name)
	}
}

// sumMetricLabel sums the series of counter name whose label has value; an empty
// label sums them all.
func sumMetricLabel(g prometheus.Gatherer, name, label, value string) float64 {
	mfs, err := g.Gather()
	if err != nil {
		return 0
	}
	var sum float64
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			match := label == ""
			for _, lp := range m.GetLabel() {
				match = match || lp.GetName() == label && lp.GetValue() == value
			}
			if match {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}
