package timewheel

import (
	"fmt"
	"math/bits"
	"time"
)

// Config holds a Wheel's settings. The zero value is valid: every field has a
// default, filled in by WithDefaults.
type Config struct {
	// Tick is the wheel's resolution: the tick goroutine wakes at every tick
	// boundary and fires every key due by then, so a key fires no later than
	// the wake-up for the first boundary at or after its time (see the
	// package doc, Timing). Default 10ms. Below about 1ms the operating
	// system's timer precision, not the wheel, bounds lateness.
	Tick time.Duration

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
	defaultTick     = 10 * time.Millisecond
	defaultHorizon  = 60 * time.Second
	defaultMaxBatch = 8192
	maxSlots        = 1 << 22
	maxCapacity     = 1 << 30
)

// WithDefaults returns a copy of c with every unset field set to its default.
func (c Config) WithDefaults() Config {
	if c.Tick == 0 {
		c.Tick = defaultTick
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
