package bench

import (
	"context"
	"encoding/json"
	"errors"
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

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

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

// SenderOptions are the settings of the sender benchmark (the flags of
// `rocketdelay bench sender`).
type SenderOptions struct {
	Senders, Robots, Limit, NaiveLimit, Alerts, Callers, CoalesceMax int
	Window, NaiveTimeout                                             time.Duration
}

// Validate names the flag of o that is out of range.
func (o SenderOptions) Validate() error {
	switch {
	case o.Senders < 1 || o.Robots < 1 || o.Alerts < 1 || o.Callers < 1:
		return errors.New("--senders, --robots, --alerts and --callers must be at least 1")
	case o.Limit < 1 || o.Limit > dingtalk.Platform.Config.MaxLimit || o.NaiveLimit < 1 || o.NaiveLimit > dingtalk.Platform.Config.MaxLimit:
		return fmt.Errorf("--limit and --naive-limit must be between 1 and %d", dingtalk.Platform.Config.MaxLimit)
	case o.Window < 100*time.Millisecond:
		return errors.New("--window must be at least 100ms")
	case o.CoalesceMax < 2 || o.CoalesceMax > config.MaxCoalesceMax:
		return fmt.Errorf("--coalesce-max must be between 2 and %d", config.MaxCoalesceMax)
	}
	return nil
}

// Sender sends one burst of alerts through the DingTalk sender (coalescing off and on)
// and through two naive rate limiters, against one in-process DingTalk simulator, and
// prints the table to out.
func Sender(ctx context.Context, rdb *redis.Client, keyPrefix string, o SenderOptions, out io.Writer) error {
	quiet := slog.New(slog.DiscardHandler)
	var simRobots []chatsim.Robot
	var robots []sender.Robot
	for i := range o.Robots {
		r := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("bench-token-%d", i+1))}
		if i%2 == 0 {
			r.SigningSecret = config.Secret(fmt.Sprintf("SECbench-%d", i+1))
		}
		robots = append(robots, r)
		simRobots = append(simRobots, chatsim.Robot{Name: r.Name, Token: r.Token.Reveal(), Secret: r.SigningSecret.Reveal()})
	}
	sim := chatsim.New(chatsim.Options{Platforms: []sender.Platform{dingtalk.Platform}, Robots: simRobots, Limit: dingtalk.Platform.Config.MaxLimit, Window: o.Window, Throttle: 10 * o.Window})
	baseURL, stopSim, err := serveSim(ctx, sim)
	if err != nil {
		return err
	}
	defer stopSim()

	capacity := o.Robots * o.Limit
	fmt.Fprintf(out, "rocketdelay sender benchmark: a burst of %d alerts to one target of %d robots\n", o.Alerts, o.Robots)
	fmt.Fprintf(out, "window %s (DingTalk's minute, scaled), pool limit %d per robot per window (simulator: %d, then throttled for %s)\n",
		o.Window, o.Limit, dingtalk.Platform.Config.MaxLimit, 10*o.Window)
	fmt.Fprintf(out, "pool capacity: %d robots × %d = %d messages per window\n", o.Robots, o.Limit, capacity)
	fmt.Fprintf(out, "rocketdelay: %d Sender instances sharing the Redis pool, %d calling goroutines, coalesceMax %d\n",
		o.Senders, o.Callers, o.CoalesceMax)
	fmt.Fprintf(out, "naive sleep: sleep(3s) per 60s window scaled to sleep(window/20) = %s after each send, %d workers (one per robot)\n",
		o.Window/20, o.Robots)
	fmt.Fprintf(out, "naive ZCOUNT+ZADD: 4 workers, limit %d per robot, polling every window/60 = %s when every robot looks full\n\n",
		o.NaiveLimit, o.Window/60)

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
		r.messages, r.peak, r.delivered, r.dupes = tally(sim.Accepted(), o.Window)
		_, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix)
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
		windows := max(r.elapsed, o.Window).Seconds() / o.Window.Seconds()
		sends, alerts := float64(r.messages)/windows, float64(r.delivered)/windows
		delivered := fmt.Sprintf("%d/%d", r.delivered, o.Alerts)
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
		"over-limit: answers 130101 and throttled redirects.\n", o.Window)
	for _, r := range runs[:2] {
		fmt.Fprintf(out, "%s targets: every alert once (%d/%d, %d duplicates: %s), 0 over-limit (%d: %s)\n", r.name,
			r.delivered, o.Alerts, r.dupes, verdict(r.delivered == o.Alerts && r.dupes == 0), r.overLimit, verdict(r.overLimit == 0))
	}
	for _, r := range runs[:2] {
		if r.overLimit > 0 || r.delivered != o.Alerts || r.dupes > 0 || r.errors > 0 {
			return fmt.Errorf("bench: %s: %d over-limit answers, %d/%d alerts delivered, %d duplicates, %d errors",
				r.name, r.overLimit, r.delivered, o.Alerts, r.dupes, r.errors)
		}
	}
	return nil
}

// tally counts accepted messages, the most accepted within one window, the distinct
// alerts they carry and the alerts carried more than once.
func tally(accepted []chatsim.Message, window time.Duration) (messages, peak, delivered, dupes int) {
	seen := map[string]int{}
	times := make([]time.Time, 0, len(accepted))
	for _, m := range accepted {
		times = append(times, m.At)
		var b struct {
			Text     *dingtalk.Text     `json:"text"`
			Markdown *dingtalk.Markdown `json:"markdown"`
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

// benchSenders runs the burst through o.Senders Senders sharing one pool.
func benchSenders(ctx context.Context, rdb *redis.Client, prefix string, robots []sender.Robot, baseURL, coalesce string,
	o SenderOptions, logger *slog.Logger) (int, bool) {
	pool := store.RobotPoolFor(rdb, prefix, config.Sender{Window: o.Window})
	var senders []*sender.Chat
	for range o.Senders {
		s, err := sender.NewChat(sender.Options{
			Targets:     map[string]sender.Target{"bench": {Protocol: dingtalk.New(baseURL), Robots: robots}},
			Limit:       o.Limit,
			HTTPTimeout: 2 * time.Second,
			Cooldown:    10 * o.Window,
			Attempts:    5,
			BackoffBase: 10 * time.Millisecond,
			BackoffMax:  200 * time.Millisecond,
			Coalesce:    coalesce,
			CoalesceMax: o.CoalesceMax,
		}, pool, logger, sender.NewMetrics(prometheus.NewRegistry()), time.Now)
		if err != nil {
			return o.Alerts, false
		}
		defer s.Close()
		senders = append(senders, s)
	}
	ctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	base := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for g := range o.Callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.Alerts {
					return
				}
				due := base.Add(time.Duration(i) * time.Millisecond)
				if _, err := senders[g%len(senders)].Send(ctx, sender.Alert{Target: "bench", Body: []byte(benchAlert(i)), Due: due}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	return int(failed.Load()), ctx.Err() == nil
}

// naiveClient posts to DingTalk robots, one request at a time, with nothing around it:
// the naive strategies' client.
type naiveClient struct {
	http    *sender.Client
	channel *dingtalk.Channel
}

func newNaiveClient(baseURL string) naiveClient {
	return naiveClient{http: sender.NewClient(2*time.Second, time.Now), channel: dingtalk.New(baseURL)}
}

// benchPost sends one text alert through robot, signed when it has a secret, and says
// whether DingTalk accepted it.
func benchPost(ctx context.Context, client naiveClient, robot sender.Robot, alert string) bool {
	return client.channel.Post(ctx, client.http, robot, sender.Message{Format: sender.FormatText, Text: alert}).OK
}

// benchNaiveSleep is the fixed-sleep strategy: one worker per robot, window/20 after
// every send (sleep(3s) against DingTalk's 20 per minute). A refused alert is sent again.
func benchNaiveSleep(ctx context.Context, robots []sender.Robot, baseURL string, o SenderOptions) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, o.NaiveTimeout)
	defer cancel()
	client := newNaiveClient(baseURL)
	defer client.http.Close()
	work := newNaiveWork(o.Alerts)
	var wg sync.WaitGroup
	for _, r := range robots {
		wg.Go(func() {
			for {
				i, ok := work.next(ctx, o.Window/20)
				if !ok {
					return
				}
				work.done(i, benchPost(ctx, client, r, benchAlert(i)))
				if sleepCtx(ctx, o.Window/20) != nil {
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
func benchNaiveZcount(ctx context.Context, rdb *redis.Client, prefix string, robots []sender.Robot, baseURL string, o SenderOptions) (int, bool) {
	ctx, cancel := context.WithTimeout(ctx, o.NaiveTimeout)
	defer cancel()
	client := newNaiveClient(baseURL)
	defer client.http.Close()
	work := newNaiveWork(o.Alerts)
	key := func(r sender.Robot) string { return "{" + prefix + ":naive}:win:" + r.Name }
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			var seq int
			for {
				i, ok := work.next(ctx, o.Window/60)
				if !ok {
					return
				}
				sent := false
				for k := range robots {
					r := robots[(w+k)%len(robots)]
					now := time.Now()
					n, err := rdb.ZCount(ctx, key(r), strconv.FormatInt(now.Add(-o.Window).UnixMicro(), 10), "+inf").Result()
					if err != nil || n >= int64(o.NaiveLimit) {
						continue
					}
					seq++
					rdb.ZAdd(ctx, key(r), redis.Z{Score: float64(now.UnixMicro()), Member: fmt.Sprintf("%d-%d-%d", w, seq, now.UnixNano())})
					rdb.PExpire(ctx, key(r), 2*o.Window)
					work.done(i, benchPost(ctx, client, r, benchAlert(i)))
					sent = true
					break
				}
				if !sent {
					work.done(i, false)
					if sleepCtx(ctx, o.Window/60) != nil {
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

// serveSim serves sim, a DingTalk simulator, on a free loopback port until stop is
// called, and returns its webhook URL.
func serveSim(ctx context.Context, sim *chatsim.Server) (url string, stop func(), err error) {
	root, stop, err := serveChatSim(ctx, sim)
	return root + dingtalk.SimPath, stop, err
}

// serveChatSim serves sim on a free loopback port until stop is called, and returns its
// root URL (Server.URL gives each platform's webhook base).
func serveChatSim(ctx context.Context, sim *chatsim.Server) (root string, stop func(), err error) {
	simCtx, cancel := context.WithCancel(ctx)
	addrc := make(chan net.Addr, 1)
	done := make(chan error, 1)
	go func() { done <- sim.ListenAndServe(simCtx, "127.0.0.1:0", func(a net.Addr) { addrc <- a }) }()
	select {
	case a := <-addrc:
		return "http://" + a.String(), func() { cancel(); <-done }, nil
	case err := <-done:
		cancel()
		return "", nil, err
	}
}
