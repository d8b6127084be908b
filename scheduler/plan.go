package scheduler

import (
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

// Hop is one broker hop of a plan.
type Hop struct {
	// Level is the RocketMQ delay level, 1-based.
	Level int
	// Delay is the level's delay.
	Delay time.Duration
	// Reached is the total delay covered once this hop has been delivered.
	Reached time.Duration
}

// Plan decomposes delay into the hops the consumer will take, assuming each hop arrives
// exactly on time, and the remainder left for the wheel stage. It applies NextLevel
// repeatedly, exactly as the consumer does; `rocketdelay plan` prints it.
func Plan(delay time.Duration, levels config.DelayLevels, threshold time.Duration) (hops []Hop, remainder time.Duration) {
	remaining := max(delay, 0)
	var reached time.Duration
	for {
		level, ok := NextLevel(remaining, levels, threshold)
		if !ok {
			return hops, remaining
		}
		d := levels[level-1]
		reached += d
		remaining -= d
		hops = append(hops, Hop{Level: level, Delay: d, Reached: reached})
	}
}
