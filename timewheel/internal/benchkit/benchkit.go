// Package benchkit measures timer implementations side by side for the
// timewheel benchmarks: the Go benchmarks of package timewheel and the
// comparison program in timewheel/bench use the same code, so their numbers
// mean the same thing. It is test tooling, not part of the service.
package benchkit

import (
	"fmt"
	"math/rand/v2"
	"runtime"
	"sync/atomic"
	"time"

	"github.com/rocketdelay/rocketdelay/internal/quantile"
)

// Timers is one timer implementation driven by key. Add schedules key to
// fire at at (rescheduling it if present), Cancel unschedules it, Stop tears
// the implementation down. When a key fires, the implementation calls the
// fire function it was made with, from any goroutine.
type Timers interface {
	Add(key string, at time.Time)
	Cancel(key string)
	Stop()
}

// Impl names an implementation and makes instances of it. New is given the
// number of keys the measurement will use (keys are Key(0)…Key(n-1)).
type Impl struct {
	Name string
	New  func(n int, fire func(key string)) Timers
}

// Key returns the i-th benchmark key: a fixed-width alert id.
func Key(i int) string { return fmt.Sprintf("alert-%010d", i) }

// KeyIndex returns i for Key(i).
func KeyIndex(key string) int {
	n := 0
	for _, c := range key[len(key)-10:] {
		n = n*10 + int(c-'0')
	}
	return n
}

// Keys returns Key(from)…Key(from+n-1).
func Keys(from, n int) []string {
	keys := make([]string, n)
	for i := range keys {
		keys[i] = Key(from + i)
	}
	return keys
}

// counter calls done once fire has been called n times.
type counter struct {
	n     int64
	fired atomic.Int64
	done  chan struct{}
	last  atomic.Int64 // unix nanos of the n-th fire
}

func newCounter(n int) *counter { return &counter{n: int64(n), done: make(chan struct{})} }

func (c *counter) fire(string) {
	if c.fired.Add(1) == c.n {
		c.last.Store(time.Now().UnixNano())
		close(c.done)
	}
}

// wait waits for the n-th fire, at most limit.
func (c *counter) wait(limit time.Duration) error {
	select {
	case <-c.done:
		return nil
	case <-time.After(limit):
		return fmt.Errorf("only %d of %d keys fired within %v", c.fired.Load(), c.n, limit)
	}
}

// OpResult is the cost of one operation.
type OpResult struct {
	NsPerOp     float64
	AllocsPerOp float64
}

// pendingKeys are scheduled between far and far+spread from now, so that
// none of them fires during a measurement.
const (
	far    = 50 * time.Second
	spread = 5 * time.Second
)

// fill adds keys to t, due between far and far+spread from now.
func fill(t Timers, keys []string) {
	now := time.Now()
	for i, k := range keys {
		t.Add(k, now.Add(far+time.Duration(i)*spread/time.Duration(len(keys))))
	}
}

func mallocs() uint64 {
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.Mallocs
}

// AddCancel measures Add immediately followed by Cancel of a new key, with
// pending other keys scheduled, after ops/4 operations of warm-up. The new
// keys are due 0–10 s from now, spread over the slots.
func AddCancel(impl Impl, pending, ops int) (OpResult, error) {
	t := impl.New(pending+ops, func(string) {})
	defer t.Stop()
	fill(t, Keys(0, pending))
	keys := Keys(pending, ops)
	dues := make([]time.Duration, ops)
	for i := range dues {
		dues[i] = time.Duration(rand.Int64N(int64(10 * time.Second)))
	}
	now := time.Now()
	for i := range ops / 4 {
		t.Add(keys[i], now.Add(dues[i]))
		t.Cancel(keys[i])
	}
	runtime.GC()
	m0 := mallocs()
	start := time.Now()
	for i, k := range keys {
		t.Add(k, start.Add(dues[i]))
		t.Cancel(k)
	}
	elapsed := time.Since(start)
	m1 := mallocs()
	return OpResult{
		NsPerOp:     float64(elapsed.Nanoseconds()) / float64(ops),
		AllocsPerOp: float64(m1-m0) / float64(ops),
	}, nil
}

// AddFire measures Add of a key due now until it has fired, with pending
// other keys scheduled: the time from the first Add until the last of ops
// keys fired, per key.
func AddFire(impl Impl, pending, ops int) (OpResult, error) {
	c := newCounter(ops)
	t := impl.New(pending+ops, c.fire)
	defer t.Stop()
	fill(t, Keys(0, pending))
	keys := Keys(pending, ops)
	runtime.GC()
	m0 := mallocs()
	start := time.Now()
	for _, k := range keys {
		t.Add(k, time.Now())
	}
	if err := c.wait(30 * time.Second); err != nil {
		return OpResult{}, err
	}
	elapsed := time.Unix(0, c.last.Load()).Sub(start)
	m1 := mallocs()
	return OpResult{
		NsPerOp:     float64(elapsed.Nanoseconds()) / float64(ops),
		AllocsPerOp: float64(m1-m0) / float64(ops),
	}, nil
}

// BytesPerTimer measures the heap growth per pending key with n keys
// scheduled: the implementation is created after the baseline, so its
// indexes, slices and slot arrays count; the keys themselves do not.
func BytesPerTimer(impl Impl, n int) (float64, error) {
	keys := Keys(0, n)
	runtime.GC()
	var m0, m1 runtime.MemStats
	runtime.ReadMemStats(&m0)
	t := impl.New(n, func(string) {})
	fill(t, keys)
	runtime.GC()
	runtime.ReadMemStats(&m1)
	runtime.KeepAlive(keys)
	t.Stop()
	return (float64(m1.HeapAlloc) - float64(m0.HeapAlloc)) / float64(n), nil
}

// Burst schedules n keys due at the same instant, lead from now, and returns
// how long after that instant the last one fired.
func Burst(impl Impl, n int, lead time.Duration) (time.Duration, error) {
	c := newCounter(n)
	t := impl.New(n, c.fire)
	defer t.Stop()
	keys := Keys(0, n)
	runtime.GC()
	at := time.Now().Add(lead)
	for _, k := range keys {
		t.Add(k, at)
	}
	if time.Now().After(at) {
		return 0, fmt.Errorf("adding %d keys took longer than the lead of %v", n, lead)
	}
	if err := c.wait(lead + 60*time.Second); err != nil {
		return 0, err
	}
	return time.Unix(0, c.last.Load()).Sub(at), nil
}

// LatenessResult summarises how late keys fired.
type LatenessResult struct {
	P50, P99, Max time.Duration
	Early         int // keys that fired before their time
}

// Lateness schedules n keys spread evenly over window, starting lead from
// now, added in random order, and measures how late each one fired: the time
// at which the fire function saw it minus its due time.
func Lateness(impl Impl, n int, lead, window time.Duration) (LatenessResult, error) {
	late := make([]int64, n)
	dues := make([]int64, n)
	var fired atomic.Int64
	done := make(chan struct{})
	fire := func(key string) {
		i := KeyIndex(key)
		late[i] = time.Now().UnixNano() - dues[i]
		if fired.Add(1) == int64(n) {
			close(done)
		}
	}
	t := impl.New(n, fire)
	defer t.Stop()
	keys := Keys(0, n)
	start := time.Now().Add(lead)
	ats := make([]time.Time, n)
	for i := range ats {
		ats[i] = start.Add(time.Duration(i) * window / time.Duration(n))
		dues[i] = ats[i].UnixNano()
	}
	order := rand.Perm(n)
	runtime.GC()
	for _, i := range order {
		t.Add(keys[i], ats[i])
	}
	if time.Now().After(start) {
		return LatenessResult{}, fmt.Errorf("adding %d keys took longer than the lead of %v", n, lead)
	}
	select {
	case <-done:
	case <-time.After(lead + window + 60*time.Second):
		return LatenessResult{}, fmt.Errorf("only %d of %d keys fired", fired.Load(), n)
	}
	durations := make([]time.Duration, n)
	for i, l := range late {
		durations[i] = time.Duration(l)
	}
	q := quantile.Summarize(durations)
	r := LatenessResult{P50: q.P50, P99: q.P99, Max: q.Max, Early: q.Early}
	return r, nil
}

// IdleCPU returns the CPU time the process spends per second of wall time
// while an implementation holds n keys, none of them due within d, for d.
func IdleCPU(impl Impl, n int, d time.Duration) (float64, error) {
	t := impl.New(n, func(string) {})
	defer t.Stop()
	fill(t, Keys(0, n))
	runtime.GC()
	time.Sleep(100 * time.Millisecond)
	c0, err := cpuTime()
	if err != nil {
		return 0, err
	}
	start := time.Now()
	time.Sleep(d)
	c1, err := cpuTime()
	if err != nil {
		return 0, err
	}
	return float64(c1-c0) / float64(time.Since(start)), nil
}
