package timewheel

import (
	"fmt"
	"math/bits"
	"time"
)

// Config holds a Wheel's settings. The zero value is valid: every field has a
// default, filled in by WithDefaults.
type Config struct {
	// Tick is the wheel's slot width: each slot holds the keys due within
	// one tick, and the tick goroutine wakes at every tick boundary (and
	// WakesPerTick-1 times in between) to fire every key due by then (see
	// the package doc, Timing). Default 10ms. Below about 1ms the operating
	// system's timer precision, not the wheel, bounds lateness.
	Tick time.Duration

	// WakesPerTick is how many times per tick the tick goroutine wakes: at
	// each tick boundary and at WakesPerTick-1 evenly spaced instants in
	// between (the j-th at j×Tick/WakesPerTick after the boundary, rounded
	// down to the nanosecond). Every wake-up fires every key due by then, so
	// a key waits at most Tick/WakesPerTick (rounded up) for a wake-up. An
	// intermediate wake-up looks only at the next tick's slot and skips it
	// at once when none of its keys is due yet. 1 wakes at tick boundaries
	// only; at most Tick in nanoseconds. Default 2 (1 for a 1ns tick): at
	// the default tick, with a million keys due over 10s, the benchmark
	// measured p99 lateness 11.1ms with 1, 5.8ms with 2 and 3.4ms with 4, and
	// idle CPU 0.6%, 1.0% and 1.9% of a core (each wake-up costs the Go
	// runtime tens of microseconds); 2 is the fewest that keeps p99 well
	// under one tick.
	WakesPerTick int

	// Slots is the number of slots in one revolution; a power of two between
	// 1 and 1<<22. Keys further away than Slots×Tick wait for their round in
	// their slot, which costs a look at them on every revolution. Default: the
	// smallest power of two with Slots×Tick ≥ 60s (8192 at the default tick),
	// so every sub-minute key is found on its own tick without rounds.
	Slots int

	// MaxPending caps the keys the wheel holds: keys scheduled plus keys that
	// have fired but have not been received from C yet. Add of a new key past
	// the cap returns ErrFull. Default 0: no cap.
	MaxPending int

	// Capacity pre-sizes the wheel for this many pending keys, so that it does
	// not grow (and pause Add for the rehash) while filling up. Default 0:
	// grow on demand. Memory, once grown, is kept for reuse.
	Capacity int

	// MaxBatch caps the keys in one batch sent on C. Default 8192.
	MaxBatch int

	// Clock is the source of time. Default: the system clock.
	Clock Clock
}

const (
	defaultTick         = 10 * time.Millisecond
	defaultWakesPerTick = 2
	defaultHorizon      = 60 * time.Second
	defaultMaxBatch     = 8192
	maxSlots            = 1 << 22
	maxCapacity         = 1 << 30
)

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Tick == 0 {
		c.Tick = defaultTick
	}
	if c.WakesPerTick == 0 {
		c.WakesPerTick = defaultWakesPerTick
		if c.Tick > 0 && int64(c.Tick) < defaultWakesPerTick {
			c.WakesPerTick = int(c.Tick) // a tick of 1ns wakes once
		}
	}
	if c.Slots == 0 && c.Tick > 0 {
		n := (defaultHorizon + c.Tick - 1) / c.Tick
		c.Slots = min(maxSlots, 1<<bits.Len64(uint64(n-1)))
	}
	if c.MaxBatch == 0 {
		c.MaxBatch = defaultMaxBatch
	}
	if c.Clock == nil {
		c.Clock = systemClock{}
	}
	return c
}

// Validate reports the first invalid field of c, naming it. Run it on a
// Config with defaults filled in; New does both.
func (c Config) Validate() error {
	switch {
	case c.Tick <= 0:
		return fmt.Errorf("timewheel: config: Tick must be positive, got %v", c.Tick)
	case c.WakesPerTick < 1 || int64(c.WakesPerTick) > int64(c.Tick):
		return fmt.Errorf("timewheel: config: WakesPerTick must be between 1 and Tick in nanoseconds (%d), got %d", int64(c.Tick), c.WakesPerTick)
	case c.Slots <= 0 || c.Slots > maxSlots || c.Slots&(c.Slots-1) != 0:
		return fmt.Errorf("timewheel: config: Slots must be a power of two between 1 and %d, got %d", maxSlots, c.Slots)
	case c.MaxPending < 0:
		return fmt.Errorf("timewheel: config: MaxPending must not be negative, got %d", c.MaxPending)
	case c.Capacity < 0 || c.Capacity > maxCapacity:
		return fmt.Errorf("timewheel: config: Capacity must be between 0 and %d, got %d", maxCapacity, c.Capacity)
	case c.MaxBatch <= 0:
		return fmt.Errorf("timewheel: config: MaxBatch must be positive, got %d", c.MaxBatch)
	case c.Clock == nil:
		return fmt.Errorf("timewheel: config: Clock must not be nil")
	}
	return nil
}
