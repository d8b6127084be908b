// Package timewheel is a hashed timing wheel that fires string keys at
// chosen instants with tick precision.
//
// rocketdelay uses it for the final sub-minute remainder of every delayed
// alert: at peak it holds hundreds of thousands of keys, so a key costs no
// goroutine, no closure and, in steady state, no heap allocation. Keys live in
// a slab of fixed-size entries linked into per-slot lists, found through an
// open-addressing index; a cancelled or fired entry is unlinked at once, drops
// its key and is reused by the next Add.
//
// Timing: a key is never early. The tick goroutine wakes at fixed instants:
// every tick boundary and, between two boundaries, the instants
// ⌊j×Tick/WakesPerTick⌋ after the first, j = 1…WakesPerTick-1 (see
// [Config.WakesPerTick]; by default every 5ms at the default 10ms tick).
// Each wake-up fires every key whose own time is at or before the instant it
// woke, so a key fires at the first wake-up at or after its time, and a key
// whose time has already passed when it is added fires at the next wake-up.
// A wake-up comes at its instant plus the wake-up delay of the Go runtime's
// timers (on Linux an idle process sleeps in whole milliseconds, which adds
// up to about 1ms), so when the process is not overloaded a key fires no
// later than the wake-up for the first wake-up instant at or after its time
// (or after its Add): at most ⌈Tick/WakesPerTick⌉ plus that delay late, 5ms
// plus about 1ms at the defaults. A key due between an instant and the late
// wake-up for it fires at that wake-up, not at the next one. The receiver
// sees a key after the wake-up's walk over the due slots and the hand-over on
// C. A wake-up between boundaries looks only at the next tick's slot and,
// when none of its keys is due yet, skips it at once: each slot keeps a lower
// bound of its keys' times. If the tick goroutine is held up (GC pause,
// suspended process, long catch-up), its next wake-up processes every missed
// tick, so no key is skipped. Any horizon works: a key more than one
// revolution away stays in its slot until its round comes.
//
// Delivery: due keys are handed over as batches on the channel returned by
// [Wheel.C]. The tick goroutine never runs user code and never waits for the
// receiver; fired keys queue up inside the wheel (bounded by
// [Config.MaxPending]) and a delivery goroutine hands them over, merging them
// into larger batches while the receiver is slow. Nothing is dropped:
// [Wheel.Stop] returns every key that was not received.
//
// The package does no I/O and no logging: no Redis, no RocketMQ. The caller
// owns durability; the wheel only supplies precise timing.
package timewheel
