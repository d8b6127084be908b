package timewheel

import "time"

// Clock tells a Wheel the time and wakes its tick goroutine. The default,
// used when Config.Clock is nil, is the system clock; tests may inject a fake
// one or run the wheel inside a testing/synctest bubble.
type Clock interface {
	// Now returns the current time.
	Now() time.Time
	// NewTimer returns a started timer that sends on its channel once d has
	// elapsed.
	NewTimer(d time.Duration) Timer
}

// Timer is the part of *time.Timer that a Wheel uses. Reset and Stop must
// behave as they do for *time.Timer since Go 1.23: after either returns, no
// value from the previous arming is received.
type Timer interface {
	// C returns the channel the timer sends on when it fires.
	C() <-chan time.Time
	// Reset re-arms the timer to fire after d.
	Reset(d time.Duration) bool
	// Stop prevents the timer from firing.
	Stop() bool
}

// systemClock is the Clock backed by package time.
type systemClock struct{}

func (systemClock) Now() time.Time { return time.Now() }

func (systemClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }

// ShiftedClock returns the system clock shifted by offset: a replica made to run as if its
// clock were off (the fault suite's fast-clock scenario). Its timers are the system's.
func ShiftedClock(offset time.Duration) Clock { return shiftedClock(offset) }

type shiftedClock time.Duration

func (c shiftedClock) Now() time.Time { return time.Now().Add(time.Duration(c)) }

func (shiftedClock) NewTimer(d time.Duration) Timer { return systemTimer{time.NewTimer(d)} }
