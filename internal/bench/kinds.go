package bench

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"text/tabwriter"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/store"
)

// chatKind is one chat platform as the benchmarks drive it: its descriptor (simulator
// rules, channel) and the limits rocketdelay applies to its robots by default.
type chatKind struct {
	name      string
	platform  sender.Platform
	channel   func(base string) sender.Protocol
	limit     int  // config's default per window
	perSecond int  // config's default per second; 0: none
	signs     bool // its robots may sign
	// cooldown is the first rest of a robot the platform throttled, in a 60s window.
	cooldown time.Duration
}

// chatKinds are the chat platforms of the registry, by kind.
var chatKinds = func() map[string]chatKind {
	out := map[string]chatKind{}
	for _, p := range platforms.All {
		d := p.Config.Defaults
		out[p.Kind()] = chatKind{name: p.Kind(), platform: p, channel: p.New, limit: d.Limit, perSecond: d.LimitPerSecond,
			signs: p.Config.Signs, cooldown: d.Cooldown}
	}
	return out
}()

// ChatKinds lists the chat platforms the benchmarks run, in the registry's order.
var ChatKinds = platforms.Kinds()

// CheckKinds names the first of kinds that is not a chat platform.
func CheckKinds(kinds []string) error {
	if len(kinds) == 0 {
		return errors.New("no kind given")
	}
	for _, k := range kinds {
		if _, ok := chatKinds[k]; !ok {
			return fmt.Errorf("kind %q is not one of %s", k, strings.Join(ChatKinds, ", "))
		}
	}
	return nil
}

// scaled converts d, a duration in a window of length window, to a 60s window.
func scaled(d, window time.Duration) time.Duration {
	return time.Duration(float64(d) * float64(time.Minute) / float64(window))
}

// robots returns n robots of the platform, named r1…, with credentials made of tag and
// rocketdelay's default limits, and what the simulator is told of them.
func (k chatKind) robots(tag string, n int) ([]sender.Robot, []chatsim.Robot) {
	var robots []sender.Robot
	var sim []chatsim.Robot
	for i := range n {
		r := sender.Robot{Name: fmt.Sprintf("r%d", i+1), Token: config.Secret(fmt.Sprintf("bench-%s-%s-%d", k.name, tag, i+1)),
			Limit: k.limit, LimitPerSecond: k.perSecond}
		if k.signs && i%2 == 0 {
			r.SigningSecret = config.Secret(fmt.Sprintf("SECbench-%s-%d", tag, i+1))
		}
		robots = append(robots, r)
		sim = append(sim, chatsim.Robot{Name: r.Name, Kind: k.name, Token: r.Token.Reveal(), Secret: r.SigningSecret.Reveal()})
	}
	return robots, sim
}

// target is the platform's target of robots at base, its cool-downs the platform's (as
// config applies them) scaled to a window of length window.
func (k chatKind) target(base string, robots []sender.Robot, window time.Duration) sender.Target {
	t := sender.Target{Protocol: k.channel(base), Robots: robots,
		Cooldown: time.Duration(float64(k.cooldown) * float64(window) / float64(time.Minute))}
	if k.cooldown < config.DefaultSenderCooldown {
		t.CooldownMax = 10 * window // sender.cooldown, scaled
	}
	return t
}

// perMessage is how many alerts of ms, in order, the platform's merged message can carry
// at most, by its size rule (Protocol.Room of the merged message) and coalesceMax; 1 when
// they are not mergeable (the platform's own messages go alone).
func perMessage(p sender.Protocol, ms []sender.Message, coalesceMax int) int {
	if !ms[0].Mergeable() {
		return 1
	}
	n := 1
	for n < min(coalesceMax, len(ms)) && p.Room(sender.Merge(p.Style(), ms[:n+1])) >= 0 {
		n++
	}
	return n
}

// physicalLimit is the least time m messages take through robots robots of limit per
// window and perSecond per sixtieth of it (0: none), at the platform's sustained rate:
// each message one robot gap, window / (robots × limit), and no more than robots ×
// perSecond per second window.
func physicalLimit(m, robots, limit, perSecond int, window time.Duration) time.Duration {
	d := time.Duration(float64(m) * float64(window) / float64(robots*limit))
	if perSecond > 0 {
		d = max(d, time.Duration(float64(m)*float64(window/60)/float64(robots*perSecond)))
	}
	return d
}

// pacedLimit is the least time before the last of the m fewest messages of a burst may
// leave through a pool of capacity messages per window under sender.pacing auto: the
// first m-1 are full, and a full message does not wait for a token (it goes while a
// robot's window has room: capacity a window); the last may not be, and once the bucket
// of capacity/store.BucketShare tokens is spent it waits one token's time (the rest of
// the capacity refills per window).
func pacedLimit(m, capacity int, window time.Duration) time.Duration {
	size := max(float64(capacity)/store.BucketShare, 1)
	rate := max(float64(capacity)-size, float64(capacity)/store.BucketShare) / float64(window)
	if float64(m) <= size {
		return 0
	}
	return max(burstLimit(m-1, capacity, window), time.Duration(1/rate))
}

// burstLimit is when the last of m messages may leave one robot of the given capacity a
// window under sender.pacing burst: the capacity at once, then the capacity each window.
func burstLimit(m, capacity int, window time.Duration) time.Duration {
	return time.Duration((m-1)/capacity) * window
}

// KindsOptions are the settings of the per-kind sender benchmark.
type KindsOptions struct {
	// Kinds are the platforms to run, in order. Default all three.
	Kinds []string
	// Robots is how many robots each target has. Default 3.
	Robots int
	// Alerts is the burst. Default 1000.
	Alerts int
	// Window is the rate-limit window, standing for the platforms' minute. Default 10s.
	Window time.Duration
	// CoalesceMax is sender.coalesceMax. Default 50.
	CoalesceMax int
	// Callers is how many goroutines hand the burst to the sender. Default 200.
	Callers int
}

func (o KindsOptions) withDefaults() KindsOptions {
	if len(o.Kinds) == 0 {
		o.Kinds = ChatKinds
	}
	config.Default(&o.Robots, 3)
	config.Default(&o.Alerts, 1000)
	config.Default(&o.Window, 10*time.Second)
	config.Default(&o.CoalesceMax, config.DefaultSenderCoalesceMax)
	config.Default(&o.Callers, 200)
	return o
}

// kindsRun is the outcome of one platform's burst.
type kindsRun struct {
	kind                     chatKind
	delivered, dupes, errors int
	messages, minMessages    int
	perMessage               int
	peakWindow, peakSecond   int
	overLimit, busy          int
	p50, p99                 time.Duration
	physical, paced          time.Duration
	elapsed                  time.Duration
}

// kindsAlert is alert i of the per-kind burst: about 200 bytes of text, as a data check
// writes them.
func kindsAlert(i int) string {
	return fmt.Sprintf("%s DataCheck warning: row %d of table orders is dirty (amount does not match its items); "+
		"scenario full-history-scan, owner data-platform, runbook https://runbook.example/datacheck/orders", benchAlert(i), i)
}

// Kinds sends one burst of alerts, due at one instant, into one target of each kind, in
// turn, through the real Sender against the platform's simulator (its own limits: 20
// per window for DingTalk and WeCom, 100 per window and 5 per second window for Feishu,
// the second window being a sixtieth of the window), and prints one row per kind.
func Kinds(ctx context.Context, rdb *redis.Client, keyPrefix string, o KindsOptions, out io.Writer) error {
	o = o.withDefaults()
	if err := CheckKinds(o.Kinds); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nper channel: a burst of %d alerts (%d bytes of text each, all due at one instant) into one target of each kind, "+
		"%d robots, one Sender, coalesceMax %d\n", o.Alerts, len(kindsAlert(0)), o.Robots, o.CoalesceMax)
	fmt.Fprintf(out, "window %s standing for the platforms' minute (60s columns ×%.0f); the per-second window is window/60 = %s; "+
		"limits per robot: rocketdelay's defaults (the platform's)\n", o.Window, float64(time.Minute)/float64(o.Window),
		(o.Window / 60).Round(time.Millisecond))
	var runs []kindsRun
	for _, name := range o.Kinds {
		fmt.Fprintf(out, "running %s …\n", name)
		r, err := kindsOnce(ctx, rdb, keyPrefix, o, chatKinds[name])
		if err != nil {
			return fmt.Errorf("bench: %s: %w", name, err)
		}
		runs = append(runs, r)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\trobots×limit (platform)\talerts/msg\tmin msgs\tmessages\tdelivered\tpeak/window/robot\tpeak/s/robot\t"+
		"over-limit\tbusy\tp50 late\tp99 late\tphysical\tp99/physical\tpaced limit\tp99 (60s)\tphysical (60s)\t")
	for _, r := range runs {
		k, sim := r.kind, r.kind.platform.Sim.Limits()
		perSecond := "-"
		if k.perSecond > 0 {
			perSecond = fmt.Sprintf("%d/%d", r.peakSecond, sim.PerSecond)
		}
		delivered := fmt.Sprintf("%d/%d", r.delivered, o.Alerts)
		if r.dupes > 0 {
			delivered += fmt.Sprintf(" (%d dup)", r.dupes)
		}
		limits := fmt.Sprintf("%d×%d (%d)", o.Robots, k.limit, sim.PerWindow)
		if k.perSecond > 0 {
			limits = fmt.Sprintf("%d×%d, %d/s (%d, %d/s)", o.Robots, k.limit, k.perSecond, sim.PerWindow, sim.PerSecond)
		}
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%s\t%d/%d\t%s\t%d\t%d\t%s\t%s\t%s\t%.2f\t%s\t%s\t%s\t\n", k.name, limits, r.perMessage,
			r.minMessages, r.messages, delivered, r.peakWindow, sim.PerWindow, perSecond, r.overLimit, r.busy,
			r.p50.Round(time.Millisecond), r.p99.Round(time.Millisecond), r.physical.Round(time.Millisecond),
			ratio(r.p99, r.physical), r.paced.Round(time.Millisecond),
			scaled(r.p99, o.Window).Round(10*time.Millisecond), scaled(r.physical, o.Window).Round(10*time.Millisecond))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nalerts/msg: the most alerts one merged message carries, by the platform's size rule (DingTalk 20000 bytes of body, "+
		"WeCom 4096 bytes of markdown, Feishu 20 KB of body) and coalesceMax;\n"+
		"min msgs: ⌈alerts / alerts/msg⌉; physical: those messages at the platform's sustained rate, its own limits (in "+
		"brackets), each one robot gap, window / (robots × limit),\n"+
		"and no more than robots × per-second limit per second window: max(min msgs × window / (robots × limit), "+
		"min msgs × (window/60) / (robots × per-second));\n"+
		"(a fresh pool could send robots × limit at once: a burst that fits one window's budget has no floor but the "+
		"requests' own time)\n"+
		"paced limit: when the last of min msgs may leave under sender.pacing auto (full messages at once while the "+
		"robots' windows have room, the last one, not full, one token's time after the bucket of capacity/%d tokens is spent);\n"+
		"lateness: due → the simulator accepted the message carrying the alert; peak: the most messages one robot's "+
		"window (second window) accepted;\n"+
		"over-limit: answers over a robot's limits (DingTalk 130101 and redirects, WeCom 45009, Feishu 9499); "+
		"busy: Feishu's 11232 of its busy moments (not a robot's limit).\n", store.BucketShare)
	for _, r := range runs {
		fmt.Fprintf(out, "%s targets: every alert once (%d/%d, %d duplicates: %s), messages ≤ min msgs + 1 (%d ≤ %d: %s), 0 over-limit (%d: %s)\n",
			r.kind.name, r.delivered, o.Alerts, r.dupes, verdict(r.delivered == o.Alerts && r.dupes == 0), r.messages, r.minMessages+1,
			verdict(r.messages <= r.minMessages+1), r.overLimit, verdict(r.overLimit == 0))
	}
	for _, r := range runs {
		if r.overLimit > 0 || r.delivered != o.Alerts || r.dupes > 0 || r.errors > 0 {
			return fmt.Errorf("bench: %s: %d over-limit answers, %d/%d alerts delivered, %d duplicates, %d errors",
				r.kind.name, r.overLimit, r.delivered, o.Alerts, r.dupes, r.errors)
		}
	}
	return nil
}

// kindsOnce runs the burst into a target of kind k.
func kindsOnce(ctx context.Context, rdb *redis.Client, keyPrefix string, o KindsOptions, k chatKind) (kindsRun, error) {
	r := kindsRun{kind: k}
	tag := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	robots, simRobots := k.robots(tag, o.Robots)
	simOpts := chatsim.Options{Platforms: []sender.Platform{k.platform}, Robots: simRobots, Window: o.Window}
	if k.platform.Sim.Limits().Lockout > 0 {
		simOpts.Throttle = 10 * o.Window // DingTalk's ten minutes, scaled
	}
	sim := chatsim.New(simOpts)
	root, stopSim, err := serveChatSim(ctx, sim)
	if err != nil {
		return r, err
	}
	defer stopSim()
	target := k.target(sim.URL(root, k.name), robots, o.Window)

	ms := make([]sender.Message, min(o.Alerts, o.CoalesceMax))
	for i := range ms {
		if ms[i], err = target.Protocol.Parse([]byte(kindsAlert(i))); err != nil {
			return r, err
		}
	}
	r.perMessage = perMessage(target.Protocol, ms, o.CoalesceMax)
	r.minMessages = (o.Alerts + r.perMessage - 1) / r.perMessage
	limits := k.platform.Sim.Limits()
	r.physical = physicalLimit(r.minMessages, o.Robots, limits.PerWindow, limits.PerSecond, o.Window)
	r.paced = pacedLimit(r.minMessages, o.Robots*k.limit, o.Window)

	prefix := fmt.Sprintf("%s:bench-kinds-%s-%s", keyPrefix, k.name, tag)
	defer func() { _, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix) }()
	s, err := sender.NewChat(sender.Options{
		Targets:     map[string]sender.Target{"bench": target},
		HTTPTimeout: 2 * time.Second,
		Cooldown:    10 * o.Window,
		Attempts:    5,
		BackoffBase: 10 * time.Millisecond,
		BackoffMax:  200 * time.Millisecond,
		CoalesceMax: o.CoalesceMax,
	}, store.RobotPoolFor(rdb, prefix, config.Sender{Window: o.Window}), slog.New(slog.DiscardHandler), sender.NewMetrics(prometheus.NewRegistry()), time.Now)
	if err != nil {
		return r, err
	}
	defer s.Close()

	ctx, cancel := context.WithTimeout(ctx, 20*o.Window)
	defer cancel()
	due := time.Now()
	var next, failed atomic.Int64
	var wg sync.WaitGroup
	for range o.Callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= o.Alerts {
					return
				}
				if _, err := s.Send(ctx, sender.Alert{Target: "bench", Body: []byte(kindsAlert(i)), Due: due}); err != nil {
					failed.Add(1)
				}
			}
		})
	}
	wg.Wait()
	r.elapsed, r.errors = time.Since(due), int(failed.Load())
	if err := ctx.Err(); err != nil && !errors.Is(err, context.DeadlineExceeded) {
		return r, err
	}

	accepted := sim.Accepted()
	first := map[string]time.Time{}
	count := map[string]int{}
	byRobot := map[string][]time.Time{}
	for _, m := range accepted {
		byRobot[m.Robot] = append(byRobot[m.Robot], m.At)
		in := map[string]bool{} // a merged message's title names its first alert again
		for _, id := range benchAlertID.FindAllString(m.Text, -1) {
			in[id] = true
		}
		for id := range in {
			count[id]++
			if _, ok := first[id]; !ok {
				first[id] = m.At
			}
		}
	}
	var late []time.Duration
	for id, at := range first {
		late = append(late, at.Sub(due))
		if count[id] > 1 {
			r.dupes++
		}
	}
	q := quantile.Summarize(late)
	r.p50, r.p99 = q.P50, q.P99
	for _, times := range byRobot {
		r.peakWindow = max(r.peakWindow, peakWithin(times, o.Window))
		r.peakSecond = max(r.peakSecond, peakWithin(times, max(o.Window/60, time.Millisecond)))
	}
	st := sim.Stats()
	r.delivered, r.messages, r.overLimit, r.busy = len(first), len(accepted), st.OverLimit, st.Busy
	return r, nil
}

// peakWithin is the most of times (in the order accepted) within any window (t − window, t].
func peakWithin(times []time.Time, window time.Duration) int {
	sorted := slices.SortedFunc(slices.Values(times), time.Time.Compare)
	peak := 0
	for i, j := 0, 0; j < len(sorted); j++ {
		for !sorted[i].After(sorted[j].Add(-window)) {
			i++
		}
		peak = max(peak, j-i+1)
	}
	return peak
}

// ratio is a/b, or NaN when b is 0.
func ratio(a, b time.Duration) float64 {
	if b == 0 {
		return math.NaN()
	}
	return float64(a) / float64(b)
}
