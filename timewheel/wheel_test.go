package timewheel_test

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

func TestConfigDefaults(t *testing.T) {
	c := timewheel.Config{}.WithDefaults()
	require.Equal(t, 10*time.Millisecond, c.Tick)
	require.Equal(t, 2, c.WakesPerTick)
	require.Equal(t, 8192, c.Slots)
	require.Equal(t, 8192, c.MaxBatch)
	require.Zero(t, c.MaxPending)
	require.NotNil(t, c.Clock)
	require.NoError(t, c.Validate())

	c = timewheel.Config{Tick: time.Millisecond}.WithDefaults()
	require.Equal(t, 65536, c.Slots, "60s of 1ms ticks round up to a power of two")
	require.Equal(t, 2, c.WakesPerTick)
	require.Equal(t, 1, timewheel.Config{Tick: 1}.WithDefaults().WakesPerTick, "at most one wake-up per ns")
}

func TestConfigValidate(t *testing.T) {
	for _, tc := range []struct {
		cfg   timewheel.Config
		field string
	}{
		{timewheel.Config{Tick: -time.Second}, "Tick"},
		{timewheel.Config{WakesPerTick: -1}, "WakesPerTick"},
		{timewheel.Config{Tick: 10, WakesPerTick: 11}, "WakesPerTick"},
		{timewheel.Config{Slots: 3}, "Slots"},
		{timewheel.Config{Slots: -8}, "Slots"},
		{timewheel.Config{Slots: 1 << 23}, "Slots"},
		{timewheel.Config{MaxPending: -1}, "MaxPending"},
		{timewheel.Config{Capacity: -1}, "Capacity"},
		{timewheel.Config{MaxBatch: -1}, "MaxBatch"},
	} {
		err := tc.cfg.WithDefaults().Validate()
		require.ErrorContains(t, err, tc.field, "%+v", tc.cfg)
		_, err = timewheel.New(tc.cfg)
		require.ErrorContains(t, err, tc.field, "%+v", tc.cfg)
	}
	require.ErrorContains(t, timewheel.Config{Tick: time.Second, WakesPerTick: 1, Slots: 8, MaxBatch: 1}.Validate(), "Clock")
}

// newWheel starts a wheel and its receiver in a synctest bubble and stops
// both when the test ends.
func newWheel(t *testing.T, cfg timewheel.Config) (*timewheel.Wheel, *receiver) {
	t.Helper()
	w, err := timewheel.New(cfg)
	require.NoError(t, err)
	r := receive(w)
	require.NoError(t, w.Start())
	t.Cleanup(func() {
		w.Stop()
		<-r.done
	})
	return w, r
}

func TestFiresOnFirstWakeAtOrAfterTime(t *testing.T) {
	for _, tc := range []struct {
		wakes int
		want  map[string]time.Duration
	}{
		{1, map[string]time.Duration{
			"a": 30 * time.Millisecond,
			"b": 30 * time.Millisecond,
			"c": 10 * time.Millisecond,
			"d": 90*time.Second + 10*time.Millisecond,
		}},
		{0, map[string]time.Duration{ // the default: 2, every 5ms
			"a": 25 * time.Millisecond,
			"b": 30 * time.Millisecond,
			"c": 5 * time.Millisecond,
			"d": 90*time.Second + 5*time.Millisecond,
		}},
		{4, map[string]time.Duration{ // every 2.5ms
			"a": 25 * time.Millisecond,
			"b": 30 * time.Millisecond,
			"c": 2500 * time.Microsecond,
			"d": 90*time.Second + 2500*time.Microsecond,
		}},
	} {
		t.Run(fmt.Sprint(tc.wakes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				origin := time.Now()
				w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, WakesPerTick: tc.wakes})
				require.NoError(t, w.Add("a", origin.Add(25*time.Millisecond)))
				require.NoError(t, w.Add("b", origin.Add(30*time.Millisecond))) // on a boundary: exactly on time
				require.NoError(t, w.Add("c", origin.Add(-time.Hour)))          // long past: next wake-up
				require.NoError(t, w.Add("d", origin.Add(90*time.Second+1)))    // beyond one revolution
				require.Equal(t, 4, w.Len())

				time.Sleep(time.Minute + 35*time.Second)
				synctest.Wait()
				got := map[string]time.Duration{}
				for _, f := range r.take() {
					got[f.key] = f.at.Sub(origin)
				}
				require.Equal(t, tc.want, got)
				require.Zero(t, w.Len())
			})
		})
	}
}

func TestPastKeyFiresOnNextWake(t *testing.T) {
	for wakes, want := range map[int]time.Duration{1: 50 * time.Millisecond, 2: 45 * time.Millisecond} {
		t.Run(fmt.Sprint(wakes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				origin := time.Now()
				w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, WakesPerTick: wakes})
				time.Sleep(43 * time.Millisecond)
				require.NoError(t, w.Add("late", origin)) // 43ms in the past
				time.Sleep(10 * time.Millisecond)
				synctest.Wait()
				got := r.take()
				require.Len(t, got, 1)
				require.Equal(t, want, got[0].at.Sub(origin))
			})
		})
	}
}

// TestIntermediateWakeFiresDueKeys checks the wake-ups between tick
// boundaries: each fires the keys of the next tick that are due by then, and
// nothing else, and wakes at ⌊j×Tick/WakesPerTick⌋ after the boundary.
func TestIntermediateWakeFiresDueKeys(t *testing.T) {
	ms := func(f float64) time.Duration { return time.Duration(f * float64(time.Millisecond)) }
	for _, tc := range []struct {
		wakes int
		keys  map[string]time.Duration // key: due after the origin
		want  map[string]time.Duration // key: fired after the origin
	}{
		{2, map[string]time.Duration{
			"early":     ms(12),     // tick 2
			"atWake":    ms(15),     // due at the intermediate wake-up itself
			"afterWake": ms(15) + 1, // 1ns after it: the boundary
			"boundary":  ms(20),
			"nextTick":  ms(21),
			"nextRound": ms(52), // tick 6, the slot of tick 2
		}, map[string]time.Duration{
			"early":     ms(15), // not at 20ms
			"atWake":    ms(15),
			"afterWake": ms(20),
			"boundary":  ms(20),
			"nextTick":  ms(25),
			"nextRound": ms(55),
		}},
		{3, map[string]time.Duration{
			"early":     ms(11),
			"atWake":    ms(10) + 3333333,
			"afterWake": ms(10) + 3333334,
			"second":    ms(16),
			"late":      ms(18),
			"nextRound": ms(51),
		}, map[string]time.Duration{
			"early":     ms(10) + 3333333, // 10ms + ⌊10ms/3⌋
			"atWake":    ms(10) + 3333333,
			"afterWake": ms(10) + 6666666, // 10ms + ⌊20ms/3⌋
			"second":    ms(10) + 6666666,
			"late":      ms(20),
			"nextRound": ms(50) + 3333333,
		}},
	} {
		t.Run(fmt.Sprint(tc.wakes), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				origin := time.Now()
				// 4 slots of 10ms: tick 2 shares its slot with tick 6.
				w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, Slots: 4, WakesPerTick: tc.wakes})
				time.Sleep(ms(10.5)) // past the wake-up at 10ms: the keys wait in their slots
				for k, d := range tc.keys {
					require.NoError(t, w.Add(k, origin.Add(d)))
				}
				time.Sleep(time.Second)
				synctest.Wait()
				got := map[string]time.Duration{}
				for _, f := range r.take() {
					got[f.key] = f.at.Sub(origin)
				}
				require.Equal(t, tc.want, got)
			})
		})
	}
}

func TestAddReschedules(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond})
		require.NoError(t, w.Add("k", origin.Add(time.Second)))
		require.NoError(t, w.Add("k", origin.Add(200*time.Millisecond))) // earlier
		require.Equal(t, 1, w.Len())
		require.NoError(t, w.Add("j", origin.Add(100*time.Millisecond)))
		require.NoError(t, w.Add("j", origin.Add(3*time.Second))) // later
		time.Sleep(5 * time.Second)
		synctest.Wait()
		got := r.take()
		require.Equal(t, []fired{
			{"k", origin.Add(200 * time.Millisecond)},
			{"j", origin.Add(3 * time.Second)},
		}, got)
	})
}

func TestCancel(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond})
		require.NoError(t, w.Add("gone", origin.Add(50*time.Millisecond)))
		require.NoError(t, w.Add("kept", origin.Add(50*time.Millisecond)))
		require.True(t, w.Cancel("gone"))
		require.False(t, w.Cancel("gone"), "a second Cancel finds nothing")
		require.False(t, w.Cancel("never added"))
		require.Equal(t, 1, w.Len())
		time.Sleep(100 * time.Millisecond)
		synctest.Wait()
		require.Equal(t, []fired{{"kept", origin.Add(50 * time.Millisecond)}}, r.take())
		require.False(t, w.Cancel("kept"), "a fired key cannot be cancelled")
	})
}

func TestCatchUpAfterStall(t *testing.T) {
	for _, wakes := range []int{1, 2} {
		t.Run(fmt.Sprint(wakes), func(t *testing.T) { testCatchUpAfterStall(t, wakes) })
	}
}

func testCatchUpAfterStall(t *testing.T, wakes int) {
	synctest.Test(t, func(t *testing.T) {
		clock := &stallClock{}
		origin := time.Now()
		// 64 slots of 10ms: the 5s stall spans almost eight revolutions.
		w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, WakesPerTick: wakes, Slots: 64, Clock: clock})
		synctest.Wait()
		const n = 2000
		for i := range n {
			require.NoError(t, w.Add(fmt.Sprint(i), origin.Add(time.Duration(i)*5*time.Millisecond+time.Millisecond)))
		}
		// The first wake-up, at 10ms/wakes, arms the next one 5s late.
		clock.Stall(5 * time.Second)
		wake := origin.Add(5*time.Second + 2*10*time.Millisecond/time.Duration(wakes))
		time.Sleep(wake.Sub(origin) + 1*time.Millisecond) // before the wake-up after it
		synctest.Wait()
		got := r.take()
		var keys []string
		for _, f := range got {
			keys = append(keys, f.key)
			if f.key != "0" && f.key != "1" {
				require.Equal(t, wake, f.at, "key %s", f.key)
			}
		}
		var want []string
		for i := range n {
			if origin.Add(time.Duration(i)*5*time.Millisecond+time.Millisecond).Compare(wake) <= 0 {
				want = append(want, fmt.Sprint(i))
			}
		}
		slices.Sort(keys)
		slices.Sort(want)
		require.Equal(t, want, keys, "every key due during the stall fires at the first wake-up after it")
		require.Equal(t, n-len(want), w.Len())
	})
}

func TestSlowReceiverGetsEverythingInLargerBatches(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		w, err := timewheel.New(timewheel.Config{Tick: 10 * time.Millisecond, MaxBatch: 50})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		defer w.Stop()
		const n = 300
		for i := range n {
			require.NoError(t, w.Add(fmt.Sprint(i), origin.Add(time.Duration(i+1)*time.Millisecond)))
		}
		time.Sleep(time.Second) // nobody receives: 30 ticks' worth of keys wait
		synctest.Wait()
		require.Zero(t, w.Len())
		var sizes []int
		var keys []string
		for len(keys) < n {
			batch := <-w.C()
			sizes = append(sizes, len(batch))
			keys = append(keys, batch...)
		}
		require.Len(t, keys, n)
		// The 5 keys of the first wake-up, at 5ms, were taken by the delivery
		// goroutine at once; the 295 that fired while it waited come as full
		// batches of MaxBatch.
		require.Equal(t, []int{5, 50, 50, 50, 50, 50, 45}, sizes)
		wake := 0 // key i fires on the wake-up at 5×((i+5)/5) ms
		for _, k := range keys {
			var i int
			_, err := fmt.Sscan(k, &i)
			require.NoError(t, err)
			require.GreaterOrEqual(t, (i+5)/5, wake, "keys come out in the order they fired")
			wake = (i + 5) / 5
		}
	})
}

func TestMaxPendingCountsUnreceivedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		w, err := timewheel.New(timewheel.Config{Tick: 10 * time.Millisecond, MaxPending: 3})
		require.NoError(t, err)
		require.NoError(t, w.Start())
		defer w.Stop()
		for _, k := range []string{"a", "b", "c"} {
			require.NoError(t, w.Add(k, origin.Add(15*time.Millisecond)))
		}
		require.ErrorIs(t, w.Add("d", origin), timewheel.ErrFull)
		require.NoError(t, w.Add("a", origin.Add(5*time.Millisecond)), "rescheduling is not a new key")

		time.Sleep(50 * time.Millisecond)
		synctest.Wait()
		require.Zero(t, w.Len())
		require.ErrorIs(t, w.Add("d", origin), timewheel.ErrFull, "fired but not received keys still count")

		var got []string
		for len(got) < 3 {
			got = append(got, <-w.C()...)
		}
		synctest.Wait()
		require.ElementsMatch(t, []string{"a", "b", "c"}, got)
		require.NoError(t, w.Add("d", origin), "received keys free their place")
		require.True(t, w.Cancel("d"))
		for _, k := range []string{"x", "y", "z"} {
			require.NoError(t, w.Add(k, origin.Add(time.Hour)))
		}
		require.ErrorIs(t, w.Add("w", origin), timewheel.ErrFull)
	})
}

func TestStopReturnsPendingAndUnreceivedKeys(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		origin := time.Now()
		w, err := timewheel.New(timewheel.Config{Tick: 10 * time.Millisecond})
		require.NoError(t, err)
		require.NoError(t, w.Add("early", origin.Add(5*time.Millisecond)), "Add works before Start")
		require.NoError(t, w.Start())
		require.NoError(t, w.Start(), "Start is idempotent")
		require.NoError(t, w.Add("later", origin.Add(time.Hour)))
		require.NoError(t, w.Add("soon", origin.Add(20*time.Millisecond)))
		time.Sleep(time.Second)
		synctest.Wait() // early and soon fired; nobody received them

		left := w.Stop()
		require.Equal(t, []string{"early", "soon", "later"}, left, "unreceived keys first, in firing order")
		_, open := <-w.C()
		require.False(t, open, "Stop closes C")
		require.Nil(t, w.Stop(), "Stop is idempotent")
		require.ErrorIs(t, w.Add("x", origin), timewheel.ErrStopped)
		require.ErrorIs(t, w.Start(), timewheel.ErrStopped)
		require.False(t, w.Cancel("later"))
		require.Zero(t, w.Len())
	})
}

func TestStopBeforeStart(t *testing.T) {
	w, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	require.NoError(t, w.Add("a", time.Now().Add(time.Minute)))
	require.Equal(t, []string{"a"}, w.Stop())
}

// TestConcurrentAddCancel hammers one wheel from many goroutines, with large
// bursts firing while keys of the same slot are cancelled and rescheduled,
// and checks that every key is either delivered once or cancelled once.
func TestConcurrentAddCancel(t *testing.T) {
	w, err := timewheel.New(timewheel.Config{Tick: time.Millisecond, Slots: 64})
	require.NoError(t, err)
	r := receive(w)
	require.NoError(t, w.Start())
	const workers, perWorker = 8, 5000
	cancelled := make([][]string, workers)
	var wg sync.WaitGroup
	for g := range workers {
		wg.Go(func() {
			at := time.Now().Add(20 * time.Millisecond) // one instant: big slots
			for i := range perWorker {
				k := fmt.Sprintf("%d-%d", g, i)
				if err := w.Add(k, at); err != nil {
					panic(err)
				}
				switch i % 4 {
				case 1:
					if w.Cancel(k) {
						cancelled[g] = append(cancelled[g], k)
					}
				case 2: // cancel an earlier key, maybe while its slot fires
					if w.Cancel(fmt.Sprintf("%d-%d", g, i/2)) {
						cancelled[g] = append(cancelled[g], fmt.Sprintf("%d-%d", g, i/2))
					}
				case 3: // move it, maybe while its slot fires; if it has fired
					// already, adding it again would schedule it a second time
					if w.Cancel(k) {
						if err := w.Add(k, at.Add(time.Duration(i%7)*time.Millisecond)); err != nil {
							panic(err)
						}
					}
				}
			}
		})
	}
	wg.Wait()
	require.Eventually(t, func() bool {
		return w.Len() == 0
	}, 10*time.Second, time.Millisecond)
	left := w.Stop()
	<-r.done

	seen := map[string]int{}
	for _, f := range r.take() {
		seen[f.key]++
	}
	for _, k := range left {
		seen[k]++
	}
	for _, ks := range cancelled {
		for _, k := range ks {
			seen[k]++
		}
	}
	require.Len(t, seen, workers*perWorker)
	for k, n := range seen {
		require.Equal(t, 1, n, "key %s delivered or cancelled %d times", k, n)
	}
}

func TestAddCancelDoNotAllocate(t *testing.T) {
	w, err := timewheel.New(timewheel.Config{})
	require.NoError(t, err)
	defer w.Stop()
	keys := make([]string, 10000)
	for i := range keys {
		keys[i] = fmt.Sprintf("alert-%d", i)
	}
	at := time.Now().Add(time.Minute)
	for _, k := range keys { // warm up: grow the slab and the index
		require.NoError(t, w.Add(k, at))
	}
	for _, k := range keys {
		w.Cancel(k)
	}
	i := 0
	allocs := testing.AllocsPerRun(1000, func() {
		k := keys[i%len(keys)]
		i++
		if err := w.Add(k, at.Add(time.Duration(i)*time.Millisecond)); err != nil {
			panic(err)
		}
		if err := w.Add(k, at); err != nil { // reschedule
			panic(err)
		}
		if !w.Cancel(k) {
			panic("not cancelled")
		}
	})
	require.Zero(t, allocs)
}

// TestDueKeysOfNextTickFireAtLateWakeUp holds the tick goroutine's wake-up
// for the 20ms boundary up to 23ms: the keys of the next tick (20ms, 30ms]
// that are due by 23ms fire then, not a tick later, and the others wait.
// It wakes at tick boundaries only, so that no intermediate wake-up comes
// between.
func TestDueKeysOfNextTickFireAtLateWakeUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clock := &stallClock{}
		origin := time.Now()
		// 4 slots of 10ms: tick 3 shares its slot with ticks 7, 11...
		w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, WakesPerTick: 1, Slots: 4, Clock: clock})
		synctest.Wait() // the first wake-up, at 10ms, is armed
		at := func(d time.Duration) time.Time { return origin.Add(d) }
		for k, d := range map[string]time.Duration{
			"boundary":      20 * time.Millisecond,   // tick 2
			"after":         20*time.Millisecond + 1, // tick 3, due before the wake-up
			"mid":           22 * time.Millisecond,   // tick 3
			"atWake":        23 * time.Millisecond,   // tick 3, due at the wake-up itself
			"afterWake":     23*time.Millisecond + 1, // tick 3, 1ns after the wake-up
			"nextRound":     60*time.Millisecond + 1, // tick 7, same slot as tick 3
			"boundaryRound": 60 * time.Millisecond,   // tick 6, same slot as tick 2
		} {
			require.NoError(t, w.Add(k, at(d)))
		}
		time.Sleep(5 * time.Millisecond)
		clock.Stall(3 * time.Millisecond) // the wake-up at 10ms arms the next one for 23ms
		time.Sleep(20 * time.Millisecond)
		synctest.Wait()
		got := map[string]time.Duration{}
		for _, f := range r.take() {
			got[f.key] = f.at.Sub(origin)
		}
		require.Equal(t, map[string]time.Duration{
			"boundary": 23 * time.Millisecond,
			"after":    23 * time.Millisecond, // not at 30ms
			"mid":      23 * time.Millisecond,
			"atWake":   23 * time.Millisecond,
		}, got, "the wake-up at 23ms fires every key due by 23ms and nothing else")
		require.Equal(t, 3, w.Len())

		time.Sleep(time.Second)
		synctest.Wait()
		got = map[string]time.Duration{}
		for _, f := range r.take() {
			got[f.key] = f.at.Sub(origin)
		}
		require.Equal(t, map[string]time.Duration{
			"afterWake":     30 * time.Millisecond,
			"boundaryRound": 60 * time.Millisecond,
			"nextRound":     70 * time.Millisecond,
		}, got)
	})
}

// steppingClock is a wall clock without a monotonic reading (fake time inside a synctest
// bubble) that the test can step back, as an NTP correction or an operator does.
type steppingClock struct{ offset atomic.Int64 }

func (c *steppingClock) Now() time.Time {
	return time.Now().Round(0).Add(time.Duration(c.offset.Load()))
}

func (c *steppingClock) NewTimer(d time.Duration) timewheel.Timer {
	return systemTimer{time.NewTimer(d)}
}

type systemTimer struct{ t *time.Timer }

func (s systemTimer) C() <-chan time.Time        { return s.t.C }
func (s systemTimer) Reset(d time.Duration) bool { return s.t.Reset(d) }
func (s systemTimer) Stop() bool                 { return s.t.Stop() }

// A key's deadline is fixed when it is added, on the clock as it reads then: a clock
// stepped back before or after the Add never makes a key fire before the delay it had
// at its Add has passed.
func TestClockSteppingBackNeverFiresEarly(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		clk := &steppingClock{}
		w, r := newWheel(t, timewheel.Config{Tick: 10 * time.Millisecond, Clock: clk})
		start := time.Now()
		time.Sleep(time.Second)
		earliest := map[string]time.Duration{} // bubble time since start
		add := func(key string, in time.Duration) {
			require.NoError(t, w.Add(key, clk.Now().Add(in)))
			earliest[key] = time.Since(start) + in
		}
		add("before-step", 300*time.Millisecond)
		time.Sleep(100 * time.Millisecond)
		clk.offset.Store(int64(-10 * time.Second)) // the clock jumps 10s back
		add("after-step", 100*time.Millisecond)
		time.Sleep(30 * time.Second)
		synctest.Wait()
		got := r.take()
		require.Len(t, got, 2, "every key fires, late rather than early")
		for _, f := range got {
			require.GreaterOrEqual(t, f.at.Sub(start), earliest[f.key], "%s fired early", f.key)
		}
	})
}
