package bench

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strconv"
	"sync"
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

// PacingOptions are the settings of the pacing benchmark.
type PacingOptions struct {
	// Window is the rate-limit window, standing for DingTalk's minute; lateness is also
	// printed scaled to a 60s window. Default 5s.
	Window time.Duration
	// Windows is how many windows the arrivals last. Default 3.
	Windows int
	// Limit is sender.limit. Default 19.
	Limit int
	// Pools are the numbers of robots of the pools measured. Default 5 (the sender
	// benchmark's pool) and 3.
	Pools []int
	// Loads are the arrival rates, in multiples of the pool's capacity. Default 0.5, 2, 10.
	Loads []float64
	// Instances are the numbers of Sender instances sharing the pool, without sharing
	// their queues (Replicas measures that, through the whole due path). Default 1.
	Instances []int
	// Seed makes the arrivals reproducible. Default 1.
	Seed uint64
}

func (o PacingOptions) withDefaults() PacingOptions {
	config.Default(&o.Window, 5*time.Second)
	config.Default(&o.Windows, 3)
	config.Default(&o.Limit, config.DefaultSenderLimit)
	config.Default(&o.Seed, 1)
	if len(o.Pools) == 0 {
		o.Pools = []int{5, 3}
	}
	if len(o.Loads) == 0 {
		o.Loads = []float64{0.5, 2, 10}
	}
	if len(o.Instances) == 0 {
		o.Instances = []int{1}
	}
	return o
}

// pacingRun is the outcome of one policy at one load.
type pacingRun struct {
	robots, instances int
	load              float64
	policy            string
	simResult
}

// Pacing measures sender.pacing auto against burst: for each pool, load and number of
// Sender instances, alerts fall due at load × the pool's capacity (Poisson arrivals) for
// Windows windows, each handed to a Sender (round robin) the moment it is due, against an
// in-process DingTalk simulator whose robots accept 20 per window. It prints, per policy,
// the alerts delivered, the messages sent, DingTalk's over-limit answers and the lateness
// from due time to DingTalk's acceptance, p50/p99/max, also scaled to a 60s window.
func Pacing(ctx context.Context, rdb *redis.Client, keyPrefix string, o PacingOptions, out io.Writer) error {
	o = o.withDefaults()
	scale := float64(time.Minute) / float64(o.Window)
	fmt.Fprintf(out, "\npacing: window %s standing for DingTalk's minute (lateness ×%.0f in the \"60s\" columns), %d windows of arrivals, limit %d per robot\n",
		o.Window, scale, o.Windows, o.Limit)
	var runs []pacingRun
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	n := 0
	for _, robots := range o.Pools {
		for _, load := range o.Loads {
			for _, instances := range o.Instances {
				for _, policy := range []string{config.PacingAuto, config.PacingBurst} {
					n++
					prefix := fmt.Sprintf("%s:bench-pacing-%s-%d", keyPrefix, suffix, n)
					r, err := pacingOnce(ctx, rdb, prefix, o, robots, load, instances, policy)
					_, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix)
					if err != nil {
						return err
					}
					fmt.Fprintf(out, "  %d robots, %gx, %d sender(s), %s: %d/%d delivered in %d messages, p99 %s\n",
						robots, load, instances, policy, r.delivered, r.alerts, r.messages, r.p99.Round(time.Millisecond))
					runs = append(runs, r)
				}
			}
		}
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "robots\tload\tsenders\tpolicy\talerts delivered\tmessages\tover-limit\tp50\tp99\tmax\tp50 60s\tp99 60s\tmax 60s\t")
	sc := func(d time.Duration) string {
		return (time.Duration(float64(d) * scale)).Round(10 * time.Millisecond).String()
	}
	for _, r := range runs {
		fmt.Fprintf(tw, "%d\t%gx\t%d\t%s\t%d/%d\t%d\t%d\t%s\t%s\t%s\t%s\t%s\t%s\t\n", r.robots, r.load, r.instances, r.policy,
			r.delivered, r.alerts, r.messages, r.overLimit, r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond),
			r.worst.Round(time.Millisecond), sc(r.p50), sc(r.p99), sc(r.worst))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// The headline: auto at the highest load with 3 robots and one sender, scaled to
	// DingTalk's minute.
	for _, r := range runs {
		if r.robots == 3 && r.load == slices.Max(o.Loads) && r.policy == config.PacingAuto && r.instances == slices.Min(o.Instances) {
			fmt.Fprintf(out, "pacing: p99 lateness %s at %gx capacity, 3 robots, over-limit %d\n", sc(r.p99), r.load, r.overLimit)
		}
	}
	return nil
}

func pacingOnce(ctx context.Context, rdb *redis.Client, prefix string, o PacingOptions, nRobots int, load float64, instances int, policy string) (pacingRun, error) {
	// Poisson arrivals at load × capacity per window.
	rate := load * float64(nRobots*o.Limit) / o.Window.Seconds() // alerts per second
	rng := rand.New(rand.NewPCG(o.Seed, uint64(nRobots*1000+instances)+uint64(load*10)))
	res, err := runOnSim(ctx, rdb, prefix, simRun{
		robots: nRobots, limit: o.Limit, window: o.Window, throttle: 10 * o.Window, cooldown: 10 * o.Window,
		senders: instances, pacing: policy, robotLimits: config.RobotLimitsLearn,
		dues: poisson(rng, rate, time.Duration(o.Windows)*o.Window),
	})
	return pacingRun{robots: nRobots, instances: instances, load: load, policy: policy, simResult: res}, err
}

// poisson returns arrival times at rate per second over span.
func poisson(rng *rand.Rand, rate float64, span time.Duration) []time.Duration {
	var dues []time.Duration
	for at := time.Duration(0); ; {
		at += time.Duration(rng.ExpFloat64() / rate * float64(time.Second))
		if at >= span {
			return dues
		}
		dues = append(dues, at)
	}
}

// simRun is one run of Sender instances against a simulator of their own.
type simRun struct {
	robots, limit int // robots of the target, each configured with limit per window
	simLimit      int // what the simulator's robots accept per window (0: DingTalk's 20)
	window        time.Duration
	throttle      time.Duration // how long the simulator throttles a robot past its limit
	cooldown      time.Duration // sender.cooldown
	senders       int
	pacing        string
	robotLimits   string
	dues          []time.Duration // when each alert falls due, from the start
	kind          string          // the robots' platform; "": DingTalk
}

// simResult is what a simRun measured at the simulator.
type simResult struct {
	alerts, delivered int
	messages          int
	overLimit         int
	byRobot           map[string]chatsim.RobotStats
	p50, p99, worst   time.Duration
}

// runOnSim hands each alert to a Sender (round robin) the moment it falls due, waits for
// every send to end, and measures at the simulator.
func runOnSim(ctx context.Context, rdb *redis.Client, prefix string, run simRun) (simResult, error) {
	r := simResult{alerts: len(run.dues)}
	k := chatKinds[cmp.Or(run.kind, config.KindDingTalk)]
	var simRobots []chatsim.Robot
	var robots []sender.Robot
	for i := range run.robots {
		rb := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("bench-token-%d", i+1)),
			Limit: run.limit, LimitPerSecond: k.perSecond}
		robots = append(robots, rb)
		simRobots = append(simRobots, chatsim.Robot{Name: rb.Name, Kind: k.name, Token: rb.Token.Reveal(), Limit: run.simLimit})
	}
	sim := chatsim.New(chatsim.Options{Platforms: []sender.Platform{k.platform}, Robots: simRobots, Window: run.window, Throttle: run.throttle})
	root, stop, err := serveChatSim(ctx, sim)
	if err != nil {
		return r, err
	}
	defer stop()
	url := sim.URL(root, k.name)
	pool := store.RobotPoolFor(rdb, prefix, config.Sender{Window: run.window})
	quiet := slog.New(slog.DiscardHandler)
	var senders []*sender.Chat
	for range run.senders {
		s, err := sender.NewChat(sender.Options{
			Targets: map[string]sender.Target{"bench": {Protocol: k.channel(url), Robots: robots}}, Limit: run.limit,
			HTTPTimeout: 2 * time.Second, Cooldown: run.cooldown, Attempts: 5,
			BackoffBase: 10 * time.Millisecond, BackoffMax: 200 * time.Millisecond,
			Coalesce: config.CoalesceAuto, Pacing: run.pacing, RobotLimits: run.robotLimits, MaxInFlight: 32,
		}, pool, quiet, sender.NewMetrics(prometheus.NewRegistry()), time.Now)
		if err != nil {
			return r, err
		}
		defer s.Close()
		senders = append(senders, s)
	}
	span := run.window
	if len(run.dues) > 0 {
		span += run.dues[len(run.dues)-1]
	}
	sendCtx, cancel := context.WithTimeout(ctx, span+20*run.window)
	defer cancel()
	start := time.Now()
	due := make(map[string]time.Time, len(run.dues))
	var wg sync.WaitGroup
	for i, d := range run.dues {
		at := start.Add(d)
		id := benchAlert(i)
		due[id] = at
		time.Sleep(time.Until(at))
		wg.Go(func() {
			_, _ = senders[i%len(senders)].Send(sendCtx, sender.Alert{Target: "bench", Body: []byte(id), Due: at})
		})
	}
	wg.Wait()
	if err := ctx.Err(); err != nil {
		return r, err
	}
	first := map[string]time.Time{}
	for _, m := range sim.Accepted() {
		r.messages++
		for _, id := range benchAlertID.FindAllString(m.Text, -1) {
			if _, ok := first[id]; !ok {
				first[id] = m.At
			}
		}
	}
	var late []time.Duration
	for id, at := range first {
		if d, ok := due[id]; ok {
			late = append(late, max(at.Sub(d), 0))
		}
	}
	r.delivered = len(late)
	st := sim.Stats()
	r.overLimit, r.byRobot = st.OverLimit, st.ByRobot
	if len(late) > 0 {
		slices.Sort(late)
		r.p50, r.p99, r.worst, _ = percentiles(late)
	}
	return r, nil
}

// messageText is the text or markdown text of an accepted message.
func messageText(m chatsim.Message) string {
	var b struct {
		Text     *dingtalk.Text     `json:"text"`
		Markdown *dingtalk.Markdown `json:"markdown"`
	}
	if json.Unmarshal(m.Body, &b) != nil {
		return ""
	}
	if b.Text != nil {
		return b.Text.Content
	}
	if b.Markdown != nil {
		return b.Markdown.Text
	}
	return ""
}
