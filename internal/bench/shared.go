package bench

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"sort"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// SharedOptions are the settings of the shared-robots benchmark.
type SharedOptions struct {
	// Window is the rate-limit window, standing for DingTalk's minute. Default 6s.
	Window time.Duration
	// Robots is how many robots the target has. Default 8.
	Robots int
	// Configured is sender.limit. Default 19.
	Configured int
	// Real is what each robot really accepts per window (the rest is someone else's).
	// Default 5.
	Real int
	// Alerts fall due over Over (Poisson). Defaults 300 over 4/3 of the window (80s of a
	// minute).
	Alerts int
	Over   time.Duration
	// Senders is how many Sender instances share the robots. Default 4.
	Senders int
	// Seed makes the arrivals reproducible. Default 1.
	Seed uint64
	// Kinds are the platforms the proven-then-shared scenario runs on too (DingTalk's is
	// the table's last row), each robot configured at the platform's default limit.
	// Default none.
	Kinds []string
}

func (o SharedOptions) withDefaults() SharedOptions {
	config.Default(&o.Window, 6*time.Second)
	config.Default(&o.Robots, 8)
	config.Default(&o.Configured, config.DefaultSenderLimit)
	config.Default(&o.Real, 5)
	config.Default(&o.Alerts, 300)
	config.Default(&o.Over, o.Window*4/3)
	config.Default(&o.Senders, 4)
	config.Default(&o.Seed, 1)
	return o
}

// Shared measures sender.robotLimits learn against fixed with robots shared with other
// senders: the target's robots are configured at Configured per window but the
// simulator's accept only Real, and throttle for half a window (DingTalk's 10 minutes
// scaled like the cool-down, 30s of a minute) past it. The reference is a sender told the
// real limit from the start. It prints, per policy, DingTalk's 130101 answers and
// redirects (total and the most for one robot), alerts delivered, messages and lateness.
func Shared(ctx context.Context, rdb *redis.Client, keyPrefix string, o SharedOptions, out io.Writer) error {
	o = o.withDefaults()
	scale := float64(time.Minute) / float64(o.Window)
	fmt.Fprintf(out, "\nshared robots: %d robots configured at %d per window but accepting %d (someone else uses the rest); "+
		"window %s standing for DingTalk's minute, cool-down and throttling %s; %d alerts over %s, %d senders\n",
		o.Robots, o.Configured, o.Real, o.Window, o.Window/2, o.Alerts, o.Over, o.Senders)
	rng := rand.New(rand.NewPCG(o.Seed, 17))
	dues := poisson(rng, float64(o.Alerts)/o.Over.Seconds(), o.Over)
	type policy struct {
		name, robotLimits string
		limit             int
		again             bool // the same pool as the run before: its learned limits kept, as after a restart
		proven            bool // the robots took their configured limit before they were shared
	}
	policies := []policy{
		{"learn (default), first run", config.RobotLimitsLearn, o.Configured, false, false},
		{"learn, run again on the learned limits", config.RobotLimitsLearn, o.Configured, true, false},
		{"fixed (before)", config.RobotLimitsFixed, o.Configured, false, false},
		{fmt.Sprintf("knows the real %d", o.Real), config.RobotLimitsFixed, o.Real, false, false},
		{fmt.Sprintf("learn, robots proven at %d, then shared", o.Configured), config.RobotLimitsLearn, o.Configured, false, true},
	}
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "robot limits\t130101\tmost 130101 one robot\tredirects\tmost redirects one robot\talerts delivered\tmessages\tp99 late\tp99 60s\t")
	var p99 []time.Duration
	var learnRepeat, firstThrottled, provenEpisodes int
	prefix := ""
	for i, p := range policies {
		if !p.again {
			prefix = fmt.Sprintf("%s:bench-shared-%s-%d", keyPrefix, suffix, i)
		} else {
			time.Sleep(o.Window) // the last run's sends leave the windows; the learned limits stay
		}
		if p.proven {
			if err := prove(ctx, rdb, prefix, o, config.KindDingTalk, o.Configured); err != nil {
				return err
			}
			time.Sleep(o.Window) // the proof's sends leave the windows; the proof stays
		}
		r, err := runOnSim(ctx, rdb, prefix, simRun{
			robots: o.Robots, limit: p.limit, simLimit: o.Real, window: o.Window, throttle: o.Window / 2,
			cooldown: o.Window / 2, senders: o.Senders, pacing: config.PacingAuto, robotLimits: p.robotLimits, dues: dues,
		})
		if i+1 == len(policies) || !policies[i+1].again {
			_, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix)
		}
		if err != nil {
			return err
		}
		var tooFast, redirects, mostTooFast, mostRedirects int
		names := make([]string, 0, len(r.byRobot))
		for name := range r.byRobot {
			names = append(names, name)
		}
		sort.Strings(names)
		for _, name := range names {
			c := r.byRobot[name]
			tooFast += c.TooFast
			redirects += c.Redirects
			mostTooFast, mostRedirects = max(mostTooFast, c.TooFast), max(mostRedirects, c.Redirects)
			if p.robotLimits == config.RobotLimitsLearn && !p.proven && c.TooFast > 1 {
				learnRepeat++
			}
			if i == 0 && c.TooFast+c.Redirects > 0 {
				firstThrottled++
			}
			if p.proven && c.TooFast > 0 {
				provenEpisodes++
			}
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d/%d\t%d\t%s\t%s\t\n", p.name, tooFast, mostTooFast, redirects, mostRedirects,
			r.delivered, r.alerts, r.messages, r.p99.Round(time.Millisecond), time.Duration(float64(r.p99)*scale).Round(10*time.Millisecond))
		p99 = append(p99, r.p99)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	knows := float64(max(p99[3], time.Millisecond))
	fmt.Fprintf(out, "learned limits: %d of %d robots throttled in the first run (the scout), %d throttled (130101) more than once; "+
		"p99 lateness %.2fx that of a sender knowing the real limit in the first run, %.2fx once learned; "+
		"robots proven before they were shared: %d throttle episodes, p99 %.2fx\n",
		firstThrottled, o.Robots, learnRepeat, float64(p99[0])/knows, float64(p99[1])/knows, provenEpisodes, float64(p99[4])/knows)
	fmt.Fprintf(out, "target: learned limits' p99 within 2x of a sender knowing the real limit (first run %.2fx: %s; once learned %.2fx: %s)\n",
		float64(p99[0])/knows, verdict(float64(p99[0])/knows <= 2), float64(p99[1])/knows, verdict(float64(p99[1])/knows <= 2))
	if len(o.Kinds) > 0 {
		return sharedKinds(ctx, rdb, keyPrefix, o, dues, out)
	}
	return nil
}

// sharedKinds runs, on each of o.Kinds, the robots proven at the platform's default
// limit and then shared (accepting o.Real), against a sender that knows the real limit.
func sharedKinds(ctx context.Context, rdb *redis.Client, keyPrefix string, o SharedOptions, dues []time.Duration, out io.Writer) error {
	fmt.Fprintf(out, "\nrobots proven, then shared, per platform: %d robots accepting %d per window\n", o.Robots, o.Real)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "kind\tconfigured\tthrottle episodes\talerts delivered\tover-limit\tp99 late\tp99 knowing the real limit\tratio\t")
	suffix := strconv.FormatInt(time.Now().UnixNano()%1e9, 36)
	for i, kind := range o.Kinds {
		if kind == config.KindDingTalk {
			continue // the table above
		}
		k := chatKinds[kind]
		var runs [2]simResult
		for j, proven := range []bool{false, true} {
			prefix := fmt.Sprintf("%s:bench-shared-%s-%s-%d", keyPrefix, kind, suffix, 2*i+j)
			limit := o.Real // the reference knows it
			if proven {
				limit = k.limit
				if err := prove(ctx, rdb, prefix, o, kind, k.limit); err != nil {
					return err
				}
				time.Sleep(o.Window) // the proof's sends leave the windows; the proof stays
			}
			r, err := runOnSim(ctx, rdb, prefix, simRun{kind: kind,
				robots: o.Robots, limit: limit, simLimit: o.Real, window: o.Window, throttle: o.Window / 2,
				cooldown: o.Window / 2, senders: o.Senders, pacing: config.PacingAuto, robotLimits: config.RobotLimitsLearn, dues: dues,
			})
			_, _ = store.DeleteKeys(context.WithoutCancel(ctx), rdb, prefix)
			if err != nil {
				return err
			}
			runs[j] = r
		}
		episodes := 0
		for _, c := range runs[1].byRobot {
			if c.TooFast > 0 {
				episodes++
			}
		}
		knows := max(runs[0].p99, time.Millisecond)
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d/%d\t%d\t%s\t%s\t%.2fx\t\n", kind, k.limit, episodes, runs[1].delivered, runs[1].alerts,
			runs[1].overLimit, runs[1].p99.Round(time.Millisecond), runs[0].p99.Round(time.Millisecond), float64(runs[1].p99)/float64(knows))
	}
	return tw.Flush()
}

// prove makes every robot of the pool at prefix take its configured limit in one
// window, as weeks of calm operation do before someone else starts sending through the
// robots: one alert at a time, spread over the window, with limits learned (so each
// robot is proven), on the robots of platform kind configured at configured.
func prove(ctx context.Context, rdb *redis.Client, prefix string, o SharedOptions, kind string, configured int) error {
	n := o.Robots * configured
	dues := make([]time.Duration, n)
	for i := range dues {
		dues[i] = time.Duration(i) * o.Window / time.Duration(n+1)
	}
	r, err := runOnSim(ctx, rdb, prefix, simRun{kind: kind,
		robots: o.Robots, limit: configured, simLimit: configured, window: o.Window, throttle: o.Window / 2,
		cooldown: o.Window / 2, senders: 1, pacing: config.PacingBurst, robotLimits: config.RobotLimitsLearn, dues: dues,
	})
	if err != nil {
		return err
	}
	if r.delivered != n || r.overLimit != 0 {
		return fmt.Errorf("bench: proving the robots: %d of %d delivered, %d over the limit", r.delivered, n, r.overLimit)
	}
	return nil
}
