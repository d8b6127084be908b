package oncall

import (
	"errors"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// Rotation is an on-call rotation, parsed once: who is on duty when. Make one with
// NewRotation; the zero Rotation has nobody to put on duty.
type Rotation struct {
	members []config.Member
	loc     *time.Location
	// The date of the first hand-off in loc, the local time of every hand-off, and the
	// days between two.
	year         int
	month        time.Month
	day          int
	hour, minute int
	period       int
	overrides    []override
}

// override puts members[member] on duty in [from, to).
type override struct {
	from, to time.Time
	member   int
}

// NewRotation parses rotation name of the configuration, with its unset fields taking
// their defaults. Its errors name the key, e.g. "rotations.primary.timezone".
func NewRotation(name string, c config.Rotation) (Rotation, error) {
	c = c.WithDefaults()
	key := "rotations." + name
	if len(c.Members) == 0 {
		return Rotation{}, fmt.Errorf("oncall: %s.members: at least one member is required", key)
	}
	if c.PeriodDays < 1 {
		return Rotation{}, fmt.Errorf("oncall: %s.periodDays: must be at least 1, got %d", key, c.PeriodDays)
	}
	if c.Timezone == "Local" {
		return Rotation{}, fmt.Errorf("oncall: %s.timezone: name the zone: Local depends on the host", key)
	}
	loc, err := time.LoadLocation(c.Timezone)
	if err != nil {
		return Rotation{}, fmt.Errorf("oncall: %s.timezone: %w", key, err)
	}
	start, err := time.Parse(config.RotationStartLayout, c.Start)
	if err != nil {
		return Rotation{}, fmt.Errorf("oncall: %s.start: %q is not a date YYYY-MM-DD", key, c.Start)
	}
	handoff, err := time.Parse(config.RotationHandoffLayout, c.Handoff)
	if err != nil {
		return Rotation{}, fmt.Errorf("oncall: %s.handoff: %q is not a time of day HH:MM", key, c.Handoff)
	}
	r := Rotation{members: slices.Clone(c.Members), loc: loc, hour: handoff.Hour(), minute: handoff.Minute(), period: c.PeriodDays}
	r.year, r.month, r.day = start.Date()
	for i, o := range c.Overrides {
		okey := fmt.Sprintf("%s.overrides[%d]", key, i)
		m := slices.IndexFunc(c.Members, func(m config.Member) bool { return m.Name == o.Member })
		if m < 0 {
			return Rotation{}, fmt.Errorf("oncall: %s.member: no member named %q", okey, o.Member)
		}
		from, err := time.Parse(time.RFC3339, o.From)
		if err != nil {
			return Rotation{}, fmt.Errorf("oncall: %s.from: %q is not an RFC 3339 time", okey, o.From)
		}
		to, err := time.Parse(time.RFC3339, o.To)
		if err != nil || !to.After(from) {
			return Rotation{}, fmt.Errorf("oncall: %s.to: %q is not an RFC 3339 time after from", okey, o.To)
		}
		r.overrides = append(r.overrides, override{from: from, to: to, member: m})
	}
	return r, nil
}

// NewRotations parses every rotation of the configuration (rotations), by name.
func NewRotations(rotations map[string]config.Rotation) (map[string]Rotation, error) {
	out := make(map[string]Rotation, len(rotations))
	var errs []error
	for _, name := range slices.Sorted(maps.Keys(rotations)) {
		r, err := NewRotation(name, rotations[name])
		errs = append(errs, err)
		out[name] = r
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return out, nil
}

// OnDuty returns the member on duty at t. An override whose [from, to) holds t wins (the
// first listed, should several: Validate refuses overlapping ones).
// Otherwise, with the hand-offs numbered from 0 (the one on the start date), member
// h mod len(members) is on duty from hand-off h until the next, and the first member
// before hand-off 0. Hand-offs happen at the hand-off time, local to the rotation's zone,
// every period of calendar days from the start date, so a daylight-saving change moves
// no hand-off off its local hour.
func (r Rotation) OnDuty(t time.Time) config.Member {
	for _, o := range r.overrides {
		if !t.Before(o.from) && t.Before(o.to) {
			return r.members[o.member]
		}
	}
	return r.members[r.handoffs(t)%len(r.members)]
}

// handoffs returns the number of the last hand-off at or before t (the first is 0), or 0
// before the first.
func (r Rotation) handoffs(t time.Time) int {
	y, m, d := t.In(r.loc).Date()
	// Calendar days from the start date to t's local date, counted on UTC midnights so
	// that no day is 23 or 25 hours long.
	days := (time.Date(y, m, d, 0, 0, 0, 0, time.UTC).Unix() - time.Date(r.year, r.month, r.day, 0, 0, 0, 0, time.UTC).Unix()) / 86400
	if days < 0 {
		return 0
	}
	h := int(days) / r.period
	if t.Before(r.handoff(h)) {
		h--
	}
	return max(h, 0)
}

// handoff returns the moment of hand-off h (the first is 0).
func (r Rotation) handoff(h int) time.Time {
	return time.Date(r.year, r.month, r.day+h*r.period, r.hour, r.minute, 0, 0, r.loc)
}
