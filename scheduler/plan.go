package scheduler

import (
	"fmt"
	"io"
	"strconv"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// NextLevel is the decomposition step the consumer takes at every receipt: when the
// remaining delay is at least threshold, it returns the largest delay level (1-based, as
// RocketMQ's DELAY property counts) whose delay does not exceed remaining, and true;
// otherwise 0 and false: the remainder belongs to the wheel stage.
//
// A level is never longer than the remainder, so a hop never makes an alert early.
// threshold must be at least levels[0] (config.Validate checks this).
func NextLevel(remaining time.Duration, levels config.DelayLevels, threshold time.Duration) (int, bool) {
	if remaining < threshold || len(levels) == 0 || remaining < levels[0] {
		return 0, false
	}
	// Levels are few (18 by default) and increasing: scan from the top.
	for i := len(levels) - 1; i >= 0; i-- {
		if levels[i] <= remaining {
			return i + 1, true
		}
	}
	return 0, false
}

// Timer configures timer mode: a hop is one RocketMQ 5 timer message (TIMER_DELIVER_MS)
// instead of a delay level.
type Timer struct {
	// Margin is how long before the due time the last timer hop lands; it covers the
	// broker's timer precision and a hop's latency, and the wheel stage does the rest.
	Margin time.Duration
	// Max is the longest delay one timer message may carry: the broker's
	// timerMaxDelaySec.
	Max time.Duration
}

// Route is the decomposition rule the consumer applies at every receipt: while the
// remaining delay is at least Threshold, take a broker hop (a delay level, or a timer
// message when Timer is set); below it, the remainder belongs to the wheel stage.
type Route struct {
	Levels    config.DelayLevels
	Threshold time.Duration
	// Timer, when not nil, selects timer mode.
	Timer *Timer
}

// Next is the hop to take with remaining left, and true; or false when the remainder
// belongs to the wheel stage. A hop never ends after the due time: a level is never
// longer than the remainder, a timer hop lands Timer.Margin before it (or, beyond the
// broker's maximum, Timer.Max later and hops again).
func (r Route) Next(remaining time.Duration) (Hop, bool) {
	if r.Timer == nil {
		level, ok := NextLevel(remaining, r.Levels, r.Threshold)
		if !ok {
			return Hop{}, false
		}
		return Hop{Level: level, Delay: r.Levels[level-1]}, true
	}
	if remaining < r.Threshold {
		return Hop{}, false
	}
	d := min(remaining-r.Timer.Margin, r.Timer.Max)
	if d <= 0 {
		return Hop{}, false
	}
	return Hop{Delay: d}, true
}

// Hop is one broker hop of a plan.
type Hop struct {
	// Level is the RocketMQ delay level, 1-based; 0 for a timer hop.
	Level int
	// Delay is the level's delay, or the timer message's.
	Delay time.Duration
	// Reached is the total delay covered once this hop has been delivered.
	Reached time.Duration
}

// Plan decomposes delay into the hops the consumer will take by r, assuming each hop
// arrives exactly on time, and the remainder left for the wheel stage. It applies
// r.Next repeatedly, exactly as the consumer does; `rocketdelay plan` prints it.
func Plan(delay time.Duration, r Route) (hops []Hop, remainder time.Duration) {
	remaining := max(delay, 0)
	var reached time.Duration
	for {
		h, ok := r.Next(remaining)
		if !ok {
			return hops, remaining
		}
		reached += h.Delay
		remaining -= h.Delay
		h.Reached = reached
		hops = append(hops, h)
	}
}

// WritePlan prints delay's plan by r as `rocketdelay plan` shows it: the rule, a table of
// the hops (level or "timer", delay, time reached) and the wheel stage's remainder.
func WritePlan(out io.Writer, delay time.Duration, r Route) error {
	if r.Timer == nil {
		fmt.Fprintf(out, "delay %s, levels %q, threshold %s\n", delay, r.Levels.String(), r.Threshold)
	} else {
		fmt.Fprintf(out, "delay %s, timer messages of at most %s landing %s early, threshold %s\n",
			delay, r.Timer.Max, r.Timer.Margin, r.Threshold)
	}
	hops, rem := Plan(delay, r)
	tw := tabwriter.NewWriter(out, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "HOP\tLEVEL\tDELAY\tREACHED")
	for i, h := range hops {
		level, d := "timer", h.Delay.String()
		if h.Level > 0 {
			level, d = strconv.Itoa(h.Level), r.Levels[h.Level-1:h.Level].String()
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\n", i+1, level, d, h.Reached)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	_, err := fmt.Fprintf(out, "%d hops, then %s in the wheel stage\n", len(hops), rem)
	return err
}
