package timewheel_test

import (
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
// boundary, or later after a stall), and a key fires at the first wake-up at
// or after its time, or at the next one if that time had passed when it was
// added. With fake time every instant is exact, so the test compares fire
// times exactly and also checks the promises directly: never early, no later
// than the first tick boundary at or after its time (after its Add, if that
// was later) unless the tick goroutine was held up, nothing lost after a
// stall.

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
}

// How an Add picks its time.
const (
	snapNone      = iota // now+d
	snapBoundary         // the tick boundary at or before now+d
	snapAfter            // one ns after that boundary
	snapWake             // the next wake-up instant, d ignored
	snapAfterWake        // one ns after the next wake-up
	snapWakeAfter        // the wake-up after the next one, late if a stall is pending
	snapKinds
)

func (o op) String() string {
	switch o.kind {
	case opAdd:
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
}

func drawModel(t *rapid.T) (modelConfig, []op) {
	cfg := modelConfig{
		slots:      rapid.SampledFrom([]int{1, 2, 4, 16, 64}).Draw(t, "slots"),
		maxPending: rapid.IntRange(0, 6).Draw(t, "maxPending"),
		maxBatch:   rapid.SampledFrom([]int{1, 2, 3, 8192}).Draw(t, "maxBatch"),
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

func FuzzModel(f *testing.F) {
	f.Add([]byte{})
	f.Add([]byte{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20})
	f.Fuzz(func(t *testing.T, data []byte) {
		rapid.MakeFuzz(modelProp(t))(t, data)
	})
}

// pendingKey is what the model knows of a scheduled key.
type pendingKey struct {
	at, added time.Time
}

// model predicts the wheel: it replays the tick goroutine's wake-ups
// (every tick boundary, or later after a stall) over a plain list of keys.
type model struct {
	origin      time.Time
	lastWake    time.Time
	nextWake    time.Time
	nextDelayed bool          // the next wake-up comes late because of a stall
	stall       time.Duration // stall the next re-arming will take
	pending     map[string]pendingKey
}

func (m *model) tickOf(t time.Time) int64 { return int64(t.Sub(m.origin) / modelTick) }

// boundaryAtOrAfter returns the first tick boundary at or after t.
func (m *model) boundaryAtOrAfter(t time.Time) time.Time {
	b := m.origin.Add(t.Sub(m.origin).Truncate(modelTick))
	if b.Before(t) {
		b = b.Add(modelTick)
	}
	return b
}

// wakeAfter returns the wake-up that follows one at w, given a pending stall.
func (m *model) wakeAfter(w time.Time, stall time.Duration) time.Time {
	return m.origin.Add(time.Duration(m.tickOf(w)+1) * modelTick).Add(stall)
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
		Tick: modelTick, Slots: cfg.slots, MaxPending: cfg.maxPending, MaxBatch: cfg.maxBatch, Clock: clock,
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
		lastWake: origin,
		nextWake: origin.Add(modelTick),
		pending:  map[string]pendingKey{},
	}
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
			}
			_, isPending := m.pending[key]
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
				// No later than the first tick boundary at or after its time,
				// or after its Add if that time was not later.
				if limit := m.boundaryAtOrAfter(later(p.at, p.added.Add(1))); !late[f.key] && f.at.After(limit) {
					return fail("key %s fired after the first tick boundary at or after its time: at +%v, due +%v, added +%v",
						f.key, f.at.Sub(origin), p.at.Sub(origin), p.added.Sub(origin))
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
