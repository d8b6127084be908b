package timewheel_test

import (
	"flag"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The model runs are cheap on fake time; check more than rapid's default
	// 100 sequences unless -rapid.checks says otherwise.
	if f := flag.Lookup("rapid.checks"); f != nil && f.Value.String() == f.DefValue {
		if err := f.Value.Set("1000"); err != nil {
			panic(err)
		}
	}
	goleak.VerifyTestMain(m)
}

// stallClock is the system clock (fake inside a synctest bubble) that can
// hold up the wheel's tick goroutine: the next timer arming after Stall
// waits that much longer, as after a GC pause or a suspended process.
type stallClock struct{ extra atomic.Int64 }

func (c *stallClock) Stall(d time.Duration) { c.extra.Store(int64(d)) }

func (c *stallClock) take() time.Duration { return time.Duration(c.extra.Swap(0)) }

func (c *stallClock) Now() time.Time { return time.Now() }

func (c *stallClock) NewTimer(d time.Duration) timewheel.Timer {
	return &stallTimer{c: c, t: time.NewTimer(d + c.take())}
}

type stallTimer struct {
	c *stallClock
	t *time.Timer
}

func (s *stallTimer) C() <-chan time.Time        { return s.t.C }
func (s *stallTimer) Reset(d time.Duration) bool { return s.t.Reset(d + s.c.take()) }
func (s *stallTimer) Stop() bool                 { return s.t.Stop() }

// fired is one key as the receiver saw it.
type fired struct {
	key string
	at  time.Time
}

// receiver drains a wheel's C, recording every key with the time it was
// received and the size of every batch.
type receiver struct {
	mu      sync.Mutex
	got     []fired
	batches []int
	done    chan struct{}
}

func receive(w *timewheel.Wheel) *receiver {
	r := &receiver{done: make(chan struct{})}
	go func() {
		defer close(r.done)
		for batch := range w.C() {
			now := time.Now()
			r.mu.Lock()
			for _, k := range batch {
				r.got = append(r.got, fired{k, now})
			}
			r.batches = append(r.batches, len(batch))
			r.mu.Unlock()
		}
	}()
	return r
}

// take returns and forgets what was received so far.
func (r *receiver) take() []fired {
	r.mu.Lock()
	defer r.mu.Unlock()
	got := r.got
	r.got = nil
	return got
}

func (r *receiver) batchSizes() []int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]int(nil), r.batches...)
}
