package timewheel_test

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

// The model test runs random operation sequences against a real Wheel (its
// goroutines included) on synctest's fake time, and against a plain list of
// pending keys that predicts, wake-up by wake-up, which keys fire when. The
// model knows the instant of every wake-up of the tick goroutine (each tick
// boundary and each of the WakesPerTick-1 instants between two boundaries,
// or later after a stall), and a key fires at the first wake-up at or after
// its time, or at the next one if that time had passed when it was added.
// With fake time every instant is exact, so the test compares fire times
// exactly and also checks the promises directly: never early, no later than
// the first wake-up instant at or after its time (after its Add, if that was
// later), and so at most ⌈Tick/WakesPerTick⌉ late, unless the tick goroutine
// was held up, nothing lost after a stall.

const modelTick = 10 * time.Millisecond

type opKind int

const (
	opAdd opKind = iota
	opCancel
	opAdvance
	opStall
)

type op struct {
	kind opKind
	key  int
	d    time.Duration // add: at minus now; advance: how long; stall: extra delay
	snap int           // add: how at is chosen, one of the snap constants
	move bool          // add: Move instead (only a scheduled key moves)
}

// How an Add picks its time.
const (
	snapNone      = iota // now+d
	snapBoundary         // the tick boundary at or before now+d
	snapAfter            // one ns after that boundary
	snapWake             // the next wake-up instant, d ignored
	snapAfterWake        // one ns after the next wake-up
	snapWakeAfter        // the wake-up after the next one, late if a stall is pending
	snapGrid             // the wake-up instant (boundary or intermediate) at or before now+d
	snapAfterGrid        // one ns after that instant
	snapKinds
)

func (o op) String() string {
	switch o.kind {
	case opAdd:
		if o.move {
			return fmt.Sprintf("Move(k%d, now%+v, snap %d)", o.key, o.d, o.snap)
		}
		return fmt.Sprintf("Add(k%d, now%+v, snap %d)", o.key, o.d, o.snap)
	case opCancel:
		return fmt.Sprintf("Cancel(k%d)", o.key)
	case opAdvance:
		return fmt.Sprintf("Advance(%v)", o.d)
	default:
		return fmt.Sprintf("Stall(%v)", o.d)
	}
}

type modelConfig struct {
	slots, maxPending, maxBatch int
	wakes                       int // Config.WakesPerTick; 0 for the default
}

// modelDefaultWakes is the default of Config.WakesPerTick.
const modelDefaultWakes = 2

func drawModel(t *rapid.T) (modelConfig, []op) {
	cfg := modelConfig{
		slots:      rapid.SampledFrom([]int{1, 2, 4, 16, 64}).Draw(t, "slots"),
		maxPending: rapid.IntRange(0, 6).Draw(t, "maxPending"),
		maxBatch:   rapid.SampledFrom([]int{1, 2, 3, 8192}).Draw(t, "maxBatch"),
		wakes:      rapid.SampledFrom([]int{0, 1, 2, 3, 4, 7}).Draw(t, "wakes"),
	}
	rev := int64(cfg.slots) * int64(modelTick)
	gen := rapid.Custom(func(t *rapid.T) op {
		switch k := rapid.IntRange(0, 9).Draw(t, "kind"); {
		case k < 4:
			return op{
				kind: opAdd,
				key:  rapid.IntRange(0, 7).Draw(t, "key"),
				d:    time.Duration(rapid.Int64Range(-3*int64(modelTick), 2*rev+10*int64(modelTick)).Draw(t, "at")),
				snap: rapid.IntRange(0, snapKinds-1).Draw(t, "snap"),
				move: rapid.IntRange(0, 3).Draw(t, "move") == 0,
			}
		case k < 6:
			return op{kind: opCancel, key: rapid.IntRange(0, 7).Draw(t, "key")}
		case k < 9:
			return op{kind: opAdvance, d: time.Duration(rapid.Int64Range(1, 20*int64(modelTick)+rev).Draw(t, "advance"))}
		default:
			return op{kind: opStall, d: time.Duration(rapid.Int64Range(1, 2*rev+3*int64(modelTick)).Draw(t, "stall"))}
		}
	})
	ops := rapid.SliceOfN(gen, 1, 100).Draw(t, "ops")
	if rapid.Bool().Draw(t, "drain") {
		// Long enough for every key still pending, and any stall, to fire.
		ops = append(ops, op{kind: opAdvance, d: time.Duration(6*rev) + 30*modelTick})
	}
	return cfg, ops
}

// modelProp returns the property for rapid; each run gets its own bubble.
func modelProp(tt *testing.T) func(*rapid.T) {
	return func(t *rapid.T) {
		cfg, ops := drawModel(t)
		var err error
		synctest.Test(tt, func(*testing.T) { err = runModel(cfg, ops) })
		if err != nil {
			t.Fatal(err)
		}
	}
}

func TestModel(t *testing.T) {
	rapid.Check(t, modelProp(t))
}

// FuzzModel runs the model test on fuzzer-chosen draws: the wheel's
// settings (WakesPerTick among them) and the operations.
func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Add(bytes.Repeat([]byte{0xff, 0x7f, 0x3f, 0x1f, 0x0f, 0x07, 0x03, 0x01}, 32))
	f.Fuzz(func(t *testing.T, data []byte) {
		rapid.MakeFuzz(modelProp(t))(t, data)
	})
}

// pendingKey is what the model knows of a scheduled key.
type pendingKey struct {
	at, added time.Time
}

// model predicts the wheel: it replays the tick goroutine's wake-ups (every
// tick boundary and intermediate instant, or later after a stall) over a
// plain list of keys.
type model struct {
	origin      time.Time
	wakes       int64 // wake-ups per tick
	lastWake    time.Time
	nextWake    time.Time
	nextDelayed bool          // the next wake-up comes late because of a stall
	stall       time.Duration // stall the next re-arming will take
	pending     map[string]pendingKey
}

// tickOf returns the tick that t is in, rounding down before the origin too.
func (m *model) tickOf(t time.Time) int64 {
	d := t.Sub(m.origin)
	n := int64(d / modelTick)
	if d%modelTick < 0 {
		n--
	}
	return n
}

// gridAfter returns the first wake-up instant strictly after t: a tick
// boundary, or the j-th instant between two, ⌊j×tick/wakes⌋ after the first
// (j from 1 to wakes-1).
func (m *model) gridAfter(t time.Time) time.Time {
	start := m.origin.Add(time.Duration(m.tickOf(t)) * modelTick)
	for j := int64(1); ; j++ {
		g := start.Add(time.Duration(j * int64(modelTick) / m.wakes))
		if g.After(t) {
			return g
		}
	}
}

// gridAtOrAfter returns the first wake-up instant at or after t.
func (m *model) gridAtOrAfter(t time.Time) time.Time { return m.gridAfter(t.Add(-1)) }

// gridAtOrBefore returns the last wake-up instant at or before t.
func (m *model) gridAtOrBefore(t time.Time) time.Time {
	g := m.origin.Add(time.Duration(m.tickOf(t)) * modelTick)
	for next := m.gridAfter(g); !next.After(t); next = m.gridAfter(next) {
		g = next
	}
	return g
}

// wakeAfter returns the wake-up that follows one at w, given a pending stall.
func (m *model) wakeAfter(w time.Time, stall time.Duration) time.Time {
	return m.gridAfter(w).Add(stall)
}

// avoidWake moves t off any wake-up instant up to t, so that the test never
// acts at the same instant as the tick goroutine.
func (m *model) avoidWake(t time.Time) time.Time {
	for {
		w, stall, clash := m.nextWake, m.stall, false
		for !w.After(t) {
			if w.Equal(t) {
				clash = true
				break
			}
			w, stall = m.wakeAfter(w, stall), 0
		}
		if !clash {
			return t
		}
		t = t.Add(1)
	}
}

// wakeUntil replays the wake-ups up to t and returns the keys they fire
// and whether each came from a late wake-up. A wake-up at w fires every
// pending key whose time is at or before w: with the tick of w processed,
// that is every key of that tick or earlier, and the keys of the next tick
// that are already due. A key added after its time fires at the next wake-up.
func (m *model) wakeUntil(t time.Time) (map[string]time.Time, map[string]bool) {
	want, late := map[string]time.Time{}, map[string]bool{}
	for !m.nextWake.After(t) {
		w := m.nextWake
		for k, p := range m.pending {
			if !p.at.After(w) {
				want[k], late[k] = w, m.nextDelayed
				delete(m.pending, k)
			}
		}
		m.lastWake = w
		m.nextWake, m.nextDelayed = m.wakeAfter(w, m.stall), m.stall > 0
		m.stall = 0
	}
	return want, late
}

func runModel(cfg modelConfig, ops []op) (err error) {
	clock := &stallClock{}
	origin := time.Now()
	w, err := timewheel.New(timewheel.Config{
		Tick: modelTick, WakesPerTick: cfg.wakes, Slots: cfg.slots, MaxPending: cfg.maxPending, MaxBatch: cfg.maxBatch, Clock: clock,
	})
	if err != nil {
		return err
	}
	r := receive(w)
	if err := w.Start(); err != nil {
		return err
	}
	synctest.Wait() // the tick goroutine has armed its first timer
	stopped := false
	defer func() {
		if !stopped {
			w.Stop()
		}
		<-r.done
	}()

	m := &model{
		origin:   origin,
		wakes:    int64(cfg.wakes),
		lastWake: origin,
		pending:  map[string]pendingKey{},
	}
	if m.wakes == 0 {
		m.wakes = modelDefaultWakes
	}
	m.nextWake = m.gridAfter(origin)
	// The longest wait for a wake-up: ⌈tick/wakes⌉.
	maxWait := (modelTick + time.Duration(m.wakes) - 1) / time.Duration(m.wakes)
	// history keeps every key's last schedule, for the checks on fired keys.
	history := map[string]pendingKey{}
	for n, o := range ops {
		now := time.Now()
		fail := func(format string, args ...any) error {
			return fmt.Errorf("op %d %v at +%v: %s", n, o, now.Sub(origin), fmt.Sprintf(format, args...))
		}
		key := fmt.Sprintf("k%d", o.key)
		switch o.kind {
		case opAdd:
			at := now.Add(o.d)
			switch o.snap {
			case snapBoundary, snapAfter:
				at = origin.Add(at.Sub(origin).Truncate(modelTick)).Add(time.Duration(o.snap - snapBoundary))
			case snapWake, snapAfterWake:
				at = m.nextWake.Add(time.Duration(o.snap - snapWake))
			case snapWakeAfter:
				at = m.wakeAfter(m.nextWake, m.stall)
			case snapGrid, snapAfterGrid:
				at = m.gridAtOrBefore(at).Add(time.Duration(o.snap - snapGrid))
			}
			_, isPending := m.pending[key]
			if o.move {
				if got := w.Move(key, at); got != isPending {
					return fail("Move returned %v, want %v", got, isPending)
				}
				if isPending {
					p := pendingKey{at: at, added: now}
					m.pending[key], history[key] = p, p
				}
				break
			}
			wantErr := error(nil)
			if !isPending && cfg.maxPending > 0 && len(m.pending) >= cfg.maxPending {
				wantErr = timewheel.ErrFull
			}
			if got := w.Add(key, at); !errors.Is(got, wantErr) {
				return fail("Add returned %v, want %v", got, wantErr)
			}
			if wantErr == nil {
				p := pendingKey{at: at, added: now}
				m.pending[key], history[key] = p, p
			}
		case opCancel:
			_, isPending := m.pending[key]
			if got := w.Cancel(key); got != isPending {
				return fail("Cancel returned %v, want %v", got, isPending)
			}
			delete(m.pending, key)
		case opStall:
			clock.Stall(o.d)
			m.stall = o.d
		case opAdvance:
			until := m.avoidWake(now.Add(o.d))
			time.Sleep(until.Sub(now))
			synctest.Wait()
			want, late := m.wakeUntil(until)
			got := map[string]time.Time{}
			for _, f := range r.take() {
				if _, dup := got[f.key]; dup {
					return fail("key %s fired twice", f.key)
				}
				got[f.key] = f.at
				p, ok := history[f.key]
				if !ok {
					return fail("key %s fired but was never added", f.key)
				}
				if f.at.Before(p.at) {
					return fail("key %s fired early: at +%v, due +%v", f.key, f.at.Sub(origin), p.at.Sub(origin))
				}
				// No later than the first wake-up instant at or after its
				// time, or after its Add if that time was not later: at most
				// ⌈tick/wakes⌉ after the later of the two.
				if limit := m.gridAtOrAfter(later(p.at, p.added.Add(1))); !late[f.key] && f.at.After(limit) {
					return fail("key %s fired after the first wake-up instant at or after its time: at +%v, due +%v, added +%v",
						f.key, f.at.Sub(origin), p.at.Sub(origin), p.added.Sub(origin))
				}
				if !late[f.key] && f.at.Sub(later(p.at, p.added)) > maxWait {
					return fail("key %s fired more than %v late: at +%v, due +%v, added +%v",
						f.key, maxWait, f.at.Sub(origin), p.at.Sub(origin), p.added.Sub(origin))
				}
			}
			if !maps.Equal(got, want) {
				return fail("fired %v, want %v", relative(got, origin), relative(want, origin))
			}
		}
		if got := w.Len(); got != len(m.pending) {
			return fail("Len() = %d, want %d", got, len(m.pending))
		}
	}
	for _, size := range r.batchSizes() {
		if size < 1 || size > cfg.maxBatch {
			return fmt.Errorf("batch of %d keys, MaxBatch %d", size, cfg.maxBatch)
		}
	}
	left := w.Stop()
	stopped = true
	slices.Sort(left)
	if want := slices.Sorted(maps.Keys(m.pending)); !slices.Equal(left, want) {
		return fmt.Errorf("Stop returned %v, want %v", left, want)
	}
	if err := w.Add("k0", time.Now()); !errors.Is(err, timewheel.ErrStopped) {
		return fmt.Errorf("Add after Stop returned %v, want ErrStopped", err)
	}
	return nil
}

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

func relative(fires map[string]time.Time, origin time.Time) map[string]time.Duration {
	out := map[string]time.Duration{}
	for k, t := range fires {
		out[k] = t.Sub(origin)
	}
	return out
}
