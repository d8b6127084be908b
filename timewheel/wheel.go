package timewheel

import (
	"errors"
	"math"
	"math/bits"
	"sync"
	"sync/atomic"
	"time"
)

var (
	// ErrFull is returned by Add when the wheel already holds
	// Config.MaxPending keys.
	ErrFull = errors.New("timewheel: full: too many pending keys")
	// ErrStopped is returned by Add and Start after Stop.
	ErrStopped = errors.New("timewheel: stopped")
)

// fireChunk is how many entries the tick goroutine examines per hold of the
// lock, so that Add and Cancel get in during a large burst and the receiver
// gets the first keys early.
const fireChunk = 1024

// firstBatchCap is the capacity a new batch starts with; it grows by append
// up to Config.MaxBatch.
const firstBatchCap = 16

// Wheel is a hashed timing wheel of string keys. Its methods are safe for
// concurrent use. Create one with New, receive from C, call Start, and call
// Stop when done.
type Wheel struct {
	tick     time.Duration
	tickNs   int64 // tick in nanoseconds
	wakes    int64 // Config.WakesPerTick
	mask     int64
	clock    Clock
	origin   time.Time    // the start of tick 0
	elapsed  atomic.Int64 // the latest time seen since the origin, ns; never decreases
	maxBatch int
	limit    int // Config.MaxPending; 0 for none
	chunk    int // fireChunk, smaller in tests

	// betweenChunks, if set, runs while the firing walk has released the
	// lock between two chunks; tests use it to cancel and move entries there.
	betweenChunks func()

	out     chan []string
	readyCh chan struct{} // a batch was queued; capacity 1
	stopCh  chan struct{}
	wg      sync.WaitGroup

	mu      sync.Mutex
	started bool
	stopped bool
	current int64  // the last tick processed; entries are due after its start
	slots   []slot // one per tick of a revolution
	table   table
	cursor  int32      // next entry the firing walk will look at, or nilIdx
	ready   [][]string // fired batches waiting for the delivery goroutine
	backlog int        // fired keys not yet received from C
}

// slot is the list of entries of the ticks t with t&mask equal to its index.
type slot struct {
	// min is at most the time of every entry in the list (noEntry if it is
	// empty), so a wake-up skips a slot with min after now without walking
	// it. Link lowers it, a walk of the slot sets it to the earliest time
	// left, and emptying the slot resets it; cancelling or moving an entry
	// otherwise leaves it, still a lower bound, until the next walk.
	min  int64
	head int32 // first entry, or nilIdx
}

// noEntry is the min of an empty slot.
const noEntry = math.MaxInt64

// New returns a stopped wheel configured by cfg (defaults filled in, then
// validated). Tick 0 begins now, by cfg.Clock; keys may be added before Start.
func New(cfg Config) (*Wheel, error) {
	cfg = cfg.WithDefaults()
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	w := &Wheel{
		tick:     cfg.Tick,
		tickNs:   int64(cfg.Tick),
		wakes:    int64(cfg.WakesPerTick),
		mask:     int64(cfg.Slots - 1),
		clock:    cfg.Clock,
		maxBatch: cfg.MaxBatch,
		limit:    cfg.MaxPending,
		out:      make(chan []string),
		readyCh:  make(chan struct{}, 1),
		stopCh:   make(chan struct{}),
		slots:    make([]slot, cfg.Slots),
		table:    newTable(cfg.Capacity),
		cursor:   nilIdx,
		chunk:    fireChunk,
	}
	for i := range w.slots {
		w.slots[i] = slot{min: noEntry, head: nilIdx}
	}
	w.origin = w.clock.Now()
	return w, nil
}

// C returns the channel on which due keys arrive, in batches of at most
// Config.MaxBatch keys. The receiver owns each batch. A key arrives once, when
// it fires (see the package doc, Timing), or later if the receiver is slow:
// fired keys wait inside the wheel, merged into larger batches, and are never
// dropped. C is closed by Stop.
func (w *Wheel) C() <-chan []string { return w.out }

// Add schedules key to fire at time at. A time already past fires at the next
// wake-up of the tick goroutine. Adding a key that is already scheduled reschedules it to the new time
// (it fires once, at the new time); a key that has fired but has not been
// received yet is a new key. Add returns ErrFull if the key is new and the
// wheel holds Config.MaxPending keys, and ErrStopped after Stop. The wheel
// keeps a reference to key and does not copy it.
func (w *Wheel) Add(key string, at time.Time) error {
	ns, h := w.deadline(key, at)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	ns = w.clamp(ns)
	if w.move(key, h, ns) {
		return nil
	}
	if (w.limit > 0 && w.table.n+w.backlog >= w.limit) || w.table.full() {
		return ErrFull
	}
	i := w.table.insert(key, h)
	w.link(i, w.table.entry(i), ns)
	return nil
}

// Move reschedules key to fire at time at, as Add does, if the wheel holds it, and
// reports whether it did: a key that is not scheduled (never added, fired, cancelled)
// stays out of the wheel.
func (w *Wheel) Move(key string, at time.Time) bool {
	ns, h := w.deadline(key, at)
	w.mu.Lock()
	defer w.mu.Unlock()
	return !w.stopped && w.move(key, h, w.clamp(ns))
}

// deadline returns the deadline of a key added at time at, and the key's hash. The
// deadline is fixed now, on the clock's monotonic reading: at is read against the clock
// once, here, so a wall clock stepped back or forth later moves nothing, and a key is
// never due before the clock says so at the time of Add.
func (w *Wheel) deadline(key string, at time.Time) (ns int64, h uint32) {
	now := w.clock.Now()
	return satAdd(w.since(now), int64(at.Sub(now))), w.table.hash(key)
}

// clamp moves a deadline at or before the start of the last processed tick to just
// after it: the key then belongs to the next tick and fires at the next wake-up, which
// is later than both times. w.mu is held.
func (w *Wheel) clamp(ns int64) int64 {
	return max(ns, w.current*w.tickNs+1)
}

// move moves the scheduled key (hash h) to deadline ns (clamped), and reports whether
// it was scheduled. w.mu is held.
func (w *Wheel) move(key string, h uint32, ns int64) bool {
	i := w.table.find(key, h)
	if i == nilIdx {
		return false
	}
	e := w.table.entry(i)
	if w.tickAfter(ns) != w.tickAfter(e.at) {
		w.unlink(i, e)
		w.link(i, e, ns)
	} else {
		if s := &w.slots[w.tickAfter(ns)&w.mask]; ns < s.min {
			s.min = ns
		}
		e.at = ns // same slot, same round
	}
	return true
}

// Cancel removes key from the wheel and reports whether it was scheduled. A
// key that has already fired cannot be cancelled: Cancel returns false and
// the key is delivered on C.
func (w *Wheel) Cancel(key string) bool {
	h := w.table.hash(key)
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return false
	}
	i := w.table.find(key, h)
	if i == nilIdx {
		return false
	}
	w.unlink(i, w.table.entry(i))
	w.table.remove(i)
	return true
}

// Len returns the number of keys scheduled and not yet fired.
func (w *Wheel) Len() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.table.n
}

// Start starts the tick and delivery goroutines. Starting a started wheel
// does nothing; starting a stopped wheel returns ErrStopped.
func (w *Wheel) Start() error {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return ErrStopped
	}
	if w.started {
		return nil
	}
	w.started = true
	w.wg.Add(2)
	go w.run()
	go w.deliver()
	return nil
}

// Stop stops the wheel, closes C and returns every key that was not received
// from C: keys that fired but were not received come first, then keys still
// scheduled, roughly in the order they were due. It does not wait for the
// receiver. Later calls return nil. After Stop, Add returns ErrStopped, Cancel
// returns false and Len returns 0.
func (w *Wheel) Stop() []string {
	w.mu.Lock()
	if w.stopped {
		w.mu.Unlock()
		return nil
	}
	w.stopped = true
	w.mu.Unlock()
	close(w.stopCh)
	w.wg.Wait()

	w.mu.Lock()
	defer w.mu.Unlock()
	keys := make([]string, 0, w.backlog+w.table.n)
	for _, batch := range w.ready {
		keys = append(keys, batch...)
	}
	for t := w.current + 1; t <= w.current+int64(len(w.slots)); t++ {
		for i := w.slots[t&w.mask].head; i != nilIdx; {
			e := w.table.entry(i)
			keys = append(keys, e.key)
			i = e.next
		}
	}
	w.ready, w.backlog = nil, 0
	w.table.clear()
	w.slots = nil
	close(w.out)
	return keys
}

// tickAfter returns the first tick that starts at or after ns nanoseconds
// after the origin.
func (w *Wheel) tickAfter(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return (ns-1)/w.tickNs + 1 // no overflow for ns near math.MaxInt64
}

// since returns how long after the origin now is, in nanoseconds. It never goes back: a
// clock whose Now steps backwards (a fake clock; a system clock's monotonic reading never
// does) holds the wheel where it was until the clock catches up, so keys fire late, never
// early.
func (w *Wheel) since(now time.Time) int64 {
	d := int64(now.Sub(w.origin))
	for {
		seen := w.elapsed.Load()
		if d <= seen {
			return seen
		}
		if w.elapsed.CompareAndSwap(seen, d) {
			return d
		}
	}
}

// satAdd is a+b, saturating at the int64 limits (a key due in the far past or future).
func satAdd(a, b int64) int64 {
	c := a + b
	switch {
	case b > 0 && c < a:
		return math.MaxInt64
	case b < 0 && c > a:
		return math.MinInt64
	}
	return c
}

// tickOf returns the last tick that started at or before ns after the origin.
func (w *Wheel) tickOf(ns int64) int64 {
	if ns <= 0 {
		return 0
	}
	return ns / w.tickNs
}

// link puts entry i, not in any list, at the head of the slot of the tick
// of ns, and sets its time to ns.
func (w *Wheel) link(i int32, e *entry, ns int64) {
	s := &w.slots[w.tickAfter(ns)&w.mask]
	e.at = ns
	e.prev = nilIdx
	e.next = s.head
	if s.head != nilIdx {
		w.table.entry(s.head).prev = i
	}
	s.head = i
	s.min = min(s.min, ns)
}

// unlink takes entry i out of its slot list, moving the firing walk past it.
func (w *Wheel) unlink(i int32, e *entry) {
	if w.cursor == i {
		w.cursor = e.next
	}
	if e.prev == nilIdx {
		s := &w.slots[w.tickAfter(e.at)&w.mask]
		s.head = e.next
		if e.next == nilIdx {
			s.min = noEntry
		}
	} else {
		w.table.entry(e.prev).next = e.next
	}
	if e.next != nilIdx {
		w.table.entry(e.next).prev = e.prev
	}
}

// run is the tick goroutine: it wakes at every tick boundary and at
// WakesPerTick-1 instants in between, and fires every key due by the
// instant it woke. It never blocks on the receiver.
func (w *Wheel) run() {
	defer w.wg.Done()
	timer := w.clock.NewTimer(w.untilNextWake(w.clock.Now()))
	defer timer.Stop()
	for {
		select {
		case <-w.stopCh:
			return
		case <-timer.C():
		}
		now := w.since(w.clock.Now())
		w.advance(w.tickOf(now), now)
		timer.Reset(w.untilNextWake(w.clock.Now()))
	}
}

// untilNextWake returns how long after now the next wake-up instant is: the
// first tick boundary or intermediate instant strictly after now. The j-th
// wake-up of a tick, j from 0 to WakesPerTick-1, is wakeOffset(j) after its
// start.
func (w *Wheel) untilNextWake(now time.Time) time.Duration {
	d := w.since(now)
	if d < 0 {
		return time.Duration(-d)
	}
	r := d % w.tickNs
	// The last j with wakeOffset(j) = ⌊j×tick/wakes⌋ ≤ r is the largest j
	// with j×tick < (r+1)×wakes, that is ⌊((r+1)×wakes-1)/tick⌋ < wakes.
	hi, lo := bits.Mul64(uint64(r+1), uint64(w.wakes))
	lo, borrow := bits.Sub64(lo, 1, 0)
	last, _ := bits.Div64(hi-borrow, lo, uint64(w.tickNs))
	if next := int64(last) + 1; next < w.wakes {
		return time.Duration(w.wakeOffset(next) - r)
	}
	return time.Duration(w.tickNs - r)
}

// wakeOffset returns ⌊j×tick/wakes⌋ for j from 0 to wakes-1: when the j-th
// wake-up of a tick comes, in nanoseconds after its start.
func (w *Wheel) wakeOffset(j int64) int64 {
	hi, lo := bits.Mul64(uint64(j), uint64(w.tickNs))
	q, _ := bits.Div64(hi, lo, uint64(w.wakes))
	return int64(q)
}

// advance is one wake-up of the tick goroutine at now (nanoseconds since the
// origin), in tick target. It processes every tick after w.current up to and
// including target, and fires every key due by now: those of the ticks
// processed, and those of tick target+1 whose time is at or before now. An
// intermediate wake-up (target is w.current) processes no tick and only
// fires the due keys of tick target+1. Each key is checked against its own
// time, so none fires early, and only a key of the right round fires. After
// a stall it catches up on all missed ticks at once; one revolution of
// slots covers any number of missed ticks.
//
// Every key due by now is in the slots walked: it was added with a time
// after w.current's start, so its tick is from w.current+1 to target+1.
// A slot whose min is after now holds nothing due and is not walked, so a
// wake-up that finds nothing due costs a look at one or two slot headers.
// Otherwise every entry of the slot is looked at; one of tick target+1 that
// is not due yet is looked at again on the next wake-up that finds its slot
// due, at most WakesPerTick times in all before its own tick is processed.
func (w *Wheel) advance(target, now int64) {
	w.mu.Lock()
	if w.stopped || target < w.current {
		w.mu.Unlock()
		return
	}
	from := w.current + 1
	// Adds from now on land after target. One added while the lock is
	// released may land in tick target+1 and fire below if it is due by now,
	// which is never early.
	w.current = target
	if w.table.n == 0 {
		w.mu.Unlock()
		return
	}
	last := min(target+1, from+int64(len(w.slots))-1)
	fired := false
	budget := w.chunk
	for t := from; t <= last; t++ {
		s := &w.slots[t&w.mask]
		if s.min > now {
			continue // later in tick target+1, or a later round
		}
		// Recompute min from the entries left; entries linked while the
		// lock is released lower it themselves.
		s.min = noEntry
		w.cursor = s.head
		for w.cursor != nilIdx {
			if budget == 0 {
				// Let Add, Cancel and the delivery goroutine in.
				w.mu.Unlock()
				if fired {
					w.signal()
					fired = false
				}
				if w.betweenChunks != nil {
					w.betweenChunks()
				}
				budget = w.chunk
				w.mu.Lock()
				if w.stopped {
					w.cursor = nilIdx
					w.mu.Unlock()
					return
				}
				continue
			}
			budget--
			i := w.cursor
			e := w.table.entry(i)
			w.cursor = e.next
			if e.at > now {
				s.min = min(s.min, e.at)
				continue // later in tick target+1, or a later round
			}
			w.unlink(i, e)
			w.queue(w.table.remove(i))
			fired = true
		}
	}
	w.cursor = nilIdx
	w.mu.Unlock()
	if fired {
		w.signal()
	}
}

// queue appends a fired key to the last batch waiting for delivery.
func (w *Wheel) queue(key string) {
	n := len(w.ready)
	if n == 0 || len(w.ready[n-1]) >= w.maxBatch {
		w.ready = append(w.ready, make([]string, 0, min(firstBatchCap, w.maxBatch)))
		n++
	}
	w.ready[n-1] = append(w.ready[n-1], key)
	w.backlog++
}

// signal wakes the delivery goroutine.
func (w *Wheel) signal() {
	select {
	case w.readyCh <- struct{}{}:
	default:
	}
}

// deliver is the delivery goroutine: it hands queued batches to the receiver
// one at a time, oldest first. While it waits for the receiver, the tick
// goroutine keeps filling the next batch.
func (w *Wheel) deliver() {
	defer w.wg.Done()
	for {
		w.mu.Lock()
		var batch []string
		if len(w.ready) > 0 {
			batch = w.ready[0]
			w.ready[0] = nil
			w.ready = w.ready[1:]
			if len(w.ready) == 0 {
				w.ready = nil
			}
		}
		w.mu.Unlock()
		if batch == nil {
			select {
			case <-w.readyCh:
				continue
			case <-w.stopCh:
				return
			}
		}
		select {
		case w.out <- batch:
			w.mu.Lock()
			w.backlog -= len(batch)
			w.mu.Unlock()
		case <-w.stopCh:
			w.mu.Lock()
			w.ready = append([][]string{batch}, w.ready...)
			w.mu.Unlock()
			return
		}
	}
}
