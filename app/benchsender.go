package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"regexp"
	"slices"
	"strconv"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalksim"
	"github.com/rocketdelay/rocketdelay/store"
)

// benchSenderOptions are the flags of `rocketdelay bench sender`.
type benchSenderOptions struct {
	senders, robots, limit, naiveLimit, alerts, callers, coalesceMax int
	window, naiveTimeout                                             time.Duration
}

// newBenchSenderCmd is `rocketdelay bench sender`; newBenchCmd adds it to the bench
// group.
func newBenchSenderCmd(stdio IO) *cobra.Command {
	var path string
	o := benchSenderOptions{}
	cmd := &cobra.Command{
		Use:   "sender",
		Short: "Compare the DingTalk sender (coalescing off and auto) with naive rate limiting, on a simulator",
		Long: `sender sends one burst of alerts, in turn, through four ways of respecting DingTalk's
per-robot limit, against one in-process DingTalk simulator (reset between runs) whose
robots accept 20 messages per --window and are throttled for 10 windows past that:

  rocketdelay, coalesce off   --senders Sender instances sharing the Redis robot pool
  rocketdelay, coalesce auto  the same, merging waiting alerts into markdown messages
  naive sleep                 one worker per robot, a fixed sleep after each send: sleep(3s)
                              against a 60s window, i.e. window/20, scaled to --window
  naive ZCOUNT+ZADD           four workers, each checking a robot's Redis sorted-set window
                              with ZCOUNT and then recording its send with ZADD, with
                              DingTalk's documented 20 per window (--naive-limit)

and prints, side by side, the pool's capacity per window (robots × limit), the messages
sent per window, the simulator's over-limit answers, and the alerts delivered per window.
Redis comes from the config (-f) or ROCKETDELAY_REDIS_URL.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if o.senders < 1 || o.robots < 1 || o.alerts < 1 || o.callers < 1 {
				return fmt.Errorf("%w: --senders, --robots, --alerts and --callers must be at least 1", ErrUsage)
			}
			if o.limit < 1 || o.limit > config.MaxRobotLimit || o.naiveLimit < 1 || o.naiveLimit > config.MaxRobotLimit {
				return fmt.Errorf("%w: --limit and --naive-limit must be between 1 and %d", ErrUsage, config.MaxRobotLimit)
			}
			if o.window < 100*time.Millisecond {
				return fmt.Errorf("%w: --window must be at least 100ms", ErrUsage)
			}
			if o.coalesceMax < 2 || o.coalesceMax > config.MaxCoalesceMax {
				return fmt.Errorf("%w: --coalesce-max must be between 2 and %d", ErrUsage, config.MaxCoalesceMax)
			}
			redisURL, prefix := stdio.Getenv("ROCKETDELAY_REDIS_URL"), config.DefaultKeyPrefix
			if path != "" {
				cfg, err := loadConfig(path, stdio)
				if err != nil {
					return err
				}
				redisURL, prefix = cfg.Redis.URL.Reveal(), cfg.Redis.KeyPrefix
			}
			if redisURL == "" {
				return fmt.Errorf("%w: give a config file (-f) or set ROCKETDELAY_REDIS_URL", ErrUsage)
			}
			rdb, err := store.OpenRedis(c.Context(), redisURL)
			if err != nil {
				return err
			}
			defer rdb.Close()
			return benchSender(c.Context(), rdb, prefix, o, c.OutOrStdout())
		},
	}
	configFlag(cmd, &path)
	f := cmd.Flags()
	f.IntVar(&o.senders, "senders", 4, "Sender instances (replicas) sharing the robot pool")
	f.IntVar(&o.robots, "robots", 5, "robots of the target group")
	f.IntVar(&o.limit, "limit", 19, "sends per robot per window the pool allows (the simulator allows 20)")
	f.IntVar(&o.naiveLimit, "naive-limit", config.MaxRobotLimit, "sends per robot per window the naive ZCOUNT+ZADD check allows (DingTalk's documented 20)")
	f.DurationVar(&o.window, "window", 2*time.Second, "rate-limit window, standing for DingTalk's minute")
	f.IntVarP(&o.alerts, "alerts", "n", 1000, "alerts in the burst")
	f.IntVar(&o.callers, "callers", 200, "goroutines handing alerts to the senders")
	f.IntVar(&o.coalesceMax, "coalesce-max", config.DefaultSenderCoalesceMax, "most alerts per merged message")
	f.DurationVar(&o.naiveTimeout, "naive-timeout", 30*time.Second, "time limit of each naive run")
	return cmd
}

// benchRun is the outcome of one strategy.
type benchRun struct {
	name      string
	elapsed   time.Duration
	messages  int // accepted by the simulator
	peak      int // most messages accepted within any one window
	overLimit int
	delivered int // distinct alerts accepted
	dupes     int // alerts accepted more than once
	errors    int // alerts the strategy gave up on
	finished  bool
}

var benchAlertID = regexp.MustCompile(`bench-alert-\d{6}`)

func benchSender(ctx context.Context, rdb *redis.Client, keyPrefix string, o benchSenderOptions, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	var simRobots []dingtalksim.Robot
	var robots []sender.Robot
	for i := range o.robots {
		r := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("bench-token-%d", i+1))}
		if i%2 == 0 {
			r.SigningSecret = config.Secret(fmt.Sprintf("SECbench-%d", i+1))
		}
		robots = append(robots, r)
		simRobots = append(simRobots, dingtalksim.Robot{Name: r.Name, Token: r.Token.Reveal(), Secret: r.SigningSecret.Reveal()})
	}
	sim := dingtalksim.New(dingtalksim.Options{Robots: simRobots, Limit: config.MaxRobotLimit, Window: o.window, Throttle: 10 * o.window})
	simCtx, stopSim := context.WithCancel(ctx)
	defer stopSim()
	addrc := make(chan net.Addr, 1)
	simDone := make(chan error, 1)
	go func() { simDone <- sim.ListenAndServe(simCtx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	var baseURL string
	select {
	case a := <-addrc:
		baseURL = "http://" + a.String() + dingtalksim.Path
	case err := <-simDone:
		return err
	}
	defer func() { stopSim(); <-simDone }()

	capacity := o.robots * o.limit
	fmt.Fprintf(out, "rocketdelay sender benchmark: a burst of %d alerts to one target of %d robots\n", o.alerts, o.robots)
	fmt.Fprintf(out, "window %s (DingTalk's minute, scaled), pool limit %d per robot per window (simulator: %d, then throttled for %s)\n",
		o.window, o.limit, config.MaxRobotLimit, 10*o.window)
	fmt.Fprintf(out, "pool capacity: %d robots × %d = %d messages per window\n", o.robots, o.limit, capacity)
	fmt.Fprintf(out, "rocketdelay: %d Sender instances sharing the Redis pool, %d calling goroutines, coalesceMax %d\n",
		o.senders, o.callers, o.coalesceMax)
	fmt.Fprintf(out, "naive sleep: sleep(3s) per 60s window scaled to sleep(window/20) = %s after each send, %d workers (one per robot)\n",
		o.window/20, o.robots)
	fmt.Fprintf(out, "naive ZCOUNT+ZADD: 4 workers, limit %d per robot, polling every window/60 = %s when every robot looks full\n\n",
		o.naiveLimit, o.window/60)

	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	type strategy struct {
		name string
		run  func(ctx context.Context, prefix string) (errors int, finished bool)
	}
	senderRun := func(coalesce string) func(context.Context, string) (int, bool) {
		return func(ctx context.Context, prefix string) (int, bool) {
			return benchSenders(ctx, rdb, prefix, robots, baseURL, coalesce, o, quiet)
		}
	}
	strategies := []strategy{
		{"rocketdelay, coalesce off", senderRun(config.CoalesceOff)},
		{"rocketdelay, coalesce auto", senderRun(config.CoalesceAuto)},
		{"naive sleep(window/20)", func(ctx context.Context, _ string) (int, bool) {
			return benchNaiveSleep(ctx, robots, baseURL, o)
		}},
		{"naive ZCOUNT+ZADD", func(ctx context.Context, prefix string) (int, bool) {
			return benchNaiveZcount(ctx, rdb, prefix, robots, baseURL, o)
		}},
	}
	var runs []benchRun
	for i, s := range strategies {
		sim.Reset()
		prefix := fmt.Sprintf("%s:bench-sender-%s-%d", keyPrefix, suffix, i)
		fmt.Fprintf(out, "running %s …\n", s.name)
		start := time.Now()
		errs, finished := s.run(ctx, prefix)
		r := benchRun{name: s.name, elapsed: time.Since(start), errors: errs, finished: finished, overLimit: sim.Stats().OverLimit}
		r.messages, r.peak, r.delivered, r.dupes = tally(sim.Accepted(), o.window)
		cleanupRobotPool(context.WithoutCancel(ctx), rdb, prefix)
		if ctx.Err() != nil {
			return ctx.Err()
		}
		runs = append(runs, r)
	}

	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "strategy\tcapacity/window\ttime\twindows\tmessages\tpeak msgs/window\tvs capacity\tmean msgs/window\tover-limit\talerts delivered\talerts/window\tvs capacity\t")
	for _, r := range runs {
		// A burst that ends within one window still used one window of the pool.
		windows := max(r.elapsed, o.window).Seconds() / o.window.Seconds()
		sends, alerts := float64(r.messages)/windows, float64(r.delivered)/windows
		delivered := fmt.Sprintf("%d/%d", r.delivered, o.alerts)
		if r.dupes > 0 {
			delivered += fmt.Sprintf(" (%d dup)", r.dupes)
		}
		if !r.finished {
			delivered += " (time limit)"
		}
		fmt.Fprintf(tw, "%s\t%d\t%s\t%.1f\t%d\t%d\t%.2f\t%.1f\t%d\t%s\t%.1f\t%.2f\t\n",
			r.name, capacity, r.elapsed.Round(10*time.Millisecond), windows, r.messages, r.peak, float64(r.peak)/float64(capacity),
			sends, r.overLimit, delivered, alerts, alerts/float64(capacity))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\npeak msgs/window: the most messages the simulator accepted within any %s (achieved sends per window);\n"+
		"mean msgs/window and alerts/window: over the elapsed time, counted as at least one window (a burst also\n"+
		"uses the pool's first window at once, so the mean can exceed capacity by up to one window's worth);\n"+
		"over-limit: answers 130101 and throttled redirects.\n", o.window)
	for _, r := range runs[:2] {
		if r.overLimit > 0 || r.delivered != o.alerts || r.dupes > 0 || r.errors > 0 {
			return fmt.Errorf("bench: %s: %d over-limit answers, %d/%d alerts delivered, %d duplicates, %d errors",
				r.name, r.overLimit, r.delivered, o.alerts, r.dupes, r.errors)
		}
	}
	return nil
}

// tally counts accepted messages, the most accepted within one window, the distinct
// alerts they carry and the alerts carried more than once.
func tally(accepted []dingtalksim.Message, window time.Duration) (messages, peak, delivered, dupes int) {
	seen := map[string]int{}
	times := make([]time.Time, 0, len(accepted))
	for _, m := range accepted {
		times = append(times, m.At)
		var b struct {
			Text     *sender.Text     `json:"text"`
			Markdown *sender.Markdown `json:"markdown"`
		}
		if json.Unmarshal(m.Body, &b) != nil {
			continue
		}
		var s string
		if b.Text != nil {
			s = b.Text.Content
		} else if b.Markdown != nil {
			s = b.Markdown.Text
		}
		for _, id := range benchAlertID.FindAllString(s, -1) {
			seen[id]++
		}
	}
	slices.SortFunc(times, time.Time.Compare)
	for i, j := 0, 0; j < len(times); j++ {
		for !times[i].After(times[j].Add(-window)) {
			i++
		}
		peak = max(peak, j-i+1)
	}
	for _, n := range seen {
		if n > 1 {
			dupes++
		}
	}
	return len(accepted), peak, len(seen), dupes
}

func benchAlert(i int) string { return fmt.Sprintf("bench-alert-%06d", i) }

// benchSenders runs the burst through o.senders Senders sharing one pool.
func benchSenders(ctx context.Context, rdb *redis.Client, prefix string, robots []sender.Robot, baseURL, coalesce string,
	o benchSenderOptions, logger *slog.Logger) (int, bool) {
	pool := store.NewRobotPool(rdb, prefix, o.window)
	var senders []*sender.Sender
	for range o.senders {
		s, err := sender.New(sender.Options{
			Targets:     map[string][]sender.Robot{"bench": robots},
			Limit:       o.limit,
			BaseURL:     baseURL,
			HTTPTimeout: 2 * time.Second,
			Cooldown:    10 * o.window,
			Attempts:    5,
			BackoffBase: 10 * time.Millisecond,
			BackoffMax:  200 * time.Millisecond,
			Coalesce:    coalesce,
			CoalesceMax: o.coalesceMax,
		}, pool, logger, sender.NewMetrics(prometheus.NewRegistry()), time.Now)
		if err != nil {
			return o.alerts, false
		}
		defer s.Close()
		senders = append(senders, s)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	base := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range o.callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.alerts {
					return
				}
				due := base.Add(time.Duration(i) * time.Millisecond)
				if err := senders[g%len(senders)].SendAlert(ctx, "bench", []byte(benchAlert(i)), due); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load()), ctx.Err() == nil
}

// benchPost sends one text alert through robot, signed when it has a secret, and says
// whether DingTalk accepted it.
func benchPost(ctx context.Context, client *sender.Client, robot sender.Robot, alert string) bool {
	body, _ := sender.MarshalMessage(sender.Message{MsgType: sender.TypeText, Text: &sender.Text{Content: alert}})
	return client.Post(ctx, robot, body).OK
}

// benchNaiveSleep is the fixed-sleep strategy: one worker per robot, window/20 after
// every send (sleep(3s) against DingTalk's 20 per minute). A refused alert is sent again.
func benchNaiveSleep(ctx context.Context, robots []sender.Robot, baseURL string, o benchSenderOptions) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, o.naiveTimeout)
	defer cancel()
	client := sender.NewClient(baseURL, 2*time.Second, time.Now)
	defer client.Close()
	work := newNaiveWork(o.alerts)
	var wg sync.WaitGroup
	for _, r := range robots {
		wg.Go(func() {
			for {
				i, ok := work.next(ctx, o.window/20)
				if !ok {
					return
				}
				work.done(i, benchPost(ctx, client, r, benchAlert(i)))
				if sleepCtx(ctx, o.window/20) != nil {
					return
				}
			}
		})
	}
	wg.Wait()
	return work.result()
}

// benchNaiveZcount is the racy Redis window: four workers; for each alert a worker
// counts a robot's sends in the window with ZCOUNT and, when under the limit, records
// its send with ZADD — two round trips, nothing atomic — then posts. When every robot
// looks full it polls again after window/60. A refused alert is sent again.
func benchNaiveZcount(ctx context.Context, rdb *redis.Client, prefix string, robots []sender.Robot, baseURL string, o benchSenderOptions) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, o.naiveTimeout)
	defer cancel()
	client := sender.NewClient(baseURL, 2*time.Second, time.Now)
	defer client.Close()
	work := newNaiveWork(o.alerts)
	key := func(r sender.Robot) string { return "{" + prefix + ":naive}:win:" + r.Name }
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var seq int
			for {
				i, ok := work.next(ctx, o.window/60)
				if !ok {
					return
				}
				sent := false
				for k := range robots {
					r := robots[(w+k)%len(robots)]
					now := time.Now()
					n, err := rdb.ZCount(ctx, key(r), strconv.FormatInt(now.Add(-o.window).UnixMicro(), 10), "+inf").Result()
					if err != nil || n >= int64(o.naiveLimit) {
						continue
					}
					seq++
					rdb.ZAdd(ctx, key(r), redis.Z{Score: float64(now.UnixMicro()), Member: fmt.Sprintf("%d-%d-%d", w, seq, now.UnixNano())})
					rdb.PExpire(ctx, key(r), 2*o.window)
					work.done(i, benchPost(ctx, client, r, benchAlert(i)))
					sent = true
					break
				}
				if !sent {
					work.done(i, false)
					if sleepCtx(ctx, o.window/60) != nil {
						return
					}
				}
			}
		})
	}
	wg.Wait()
	return work.result()
}

// naiveWork is the queue of alerts the naive strategies still have to deliver; a
// refused alert goes back into it.
type naiveWork struct {
	queue chan int
	left  atomic.Int64
}

func newNaiveWork(n int) *naiveWork {
	w := &naiveWork{queue: make(chan int, n)}
	for i := range n {
		w.queue <- i
	}
	w.left.Store(int64(n))
	return w
}

// next returns an alert to send, waiting idle between looks while the queue is empty
// but alerts are still out; false when all are delivered or ctx ended.
func (w *naiveWork) next(ctx context.Context, idle time.Duration) (int, bool) {
	for w.left.Load() > 0 && ctx.Err() == nil {
		select {
		case i := <-w.queue:
			return i, true
		default:
		}
		if sleepCtx(ctx, idle) != nil {
			break
		}
	}
	return 0, false
}

// done records alert i as delivered, or puts it back.
func (w *naiveWork) done(i int, delivered bool) {
	if delivered {
		w.left.Add(-1)
	} else {
		w.queue <- i
	}
}

// result is how many alerts were not delivered, and whether all were.
func (w *naiveWork) result() (int, bool) {
	left := int(w.left.Load())
	return left, left == 0
}

func sleepCtx(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// cleanupRobotPool deletes the robot-pool keys under prefix.
func cleanupRobotPool(ctx context.Context, rdb *redis.Client, prefix string) {
	iter := rdb.Scan(ctx, 0, "{"+prefix+":*", 1000).Iterator()
	for iter.Next(ctx) {
		rdb.Del(ctx, iter.Val())
	}
}
