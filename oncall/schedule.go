package oncall

import (
	"math"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// Schedule is the sequence of an escalation policy's entries: its steps, then the
// repeats of its last step.
type Schedule struct {
	steps  []config.EscalationStep
	repeat config.Repeat // Limit 0: no repeats
}

// NewSchedule returns the schedule of p, with p's unset fields taking their defaults.
func NewSchedule(p config.Policy) Schedule {
	p = p.WithDefaults()
	s := Schedule{steps: p.Steps}
	if p.Repeat != nil && len(p.Steps) > 0 {
		s.repeat = *p.Repeat
	}
	return s
}

// Len returns the number of entries in the schedule: the steps and the repeats.
func (s Schedule) Len() int { return len(s.steps) + max(s.repeat.Limit, 0) }

// At returns the k-th entry (from 0) of the schedule: its offset from the episode's start
// and the step it sends. An entry k below the number of steps is step k at its After;
// from there on, entry k is repeat n = k − len(steps) + 1 of the last step, at the last
// step's After + Every × (1 + Growth + … + Growth^(n−1)). ok is false for k past the last
// repeat (or below 0).
func (s Schedule) At(k int) (offset time.Duration, step config.EscalationStep, ok bool) {
	if k < 0 || k >= s.Len() {
		return 0, config.EscalationStep{}, false
	}
	if k < len(s.steps) {
		return s.steps[k].After, s.steps[k], true
	}
	last := s.steps[len(s.steps)-1]
	after := s.repeat.After(k - len(s.steps) + 1)
	if after > math.MaxInt64-last.After {
		after = math.MaxInt64 - last.After
	}
	return last.After + after, last, true
}
