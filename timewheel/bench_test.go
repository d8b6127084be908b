package timewheel_test

import (
	"testing"
	"time"

	"github.com/rocketdelay/rocketdelay/timewheel"
	"github.com/rocketdelay/rocketdelay/timewheel/internal/benchkit"
)

// The benchmarks measure the rocketdelay wheel next to time.AfterFunc with
// 1,000,000 timers pending; timewheel/bench adds go-zero's TimingWheel and
// prints one table. The heavy ones run a fixed workload per iteration, so run
// them with -benchtime=1x:
//
//	go test -run='^$' -bench=. -benchtime=1x ./timewheel/

const benchPending = 1_000_000

var benchImpls = []benchkit.Impl{benchkit.Wheel, benchkit.AfterFunc}

// BenchmarkAddCancel reports ns and allocations per Add+Cancel of a new key
// with benchPending keys scheduled, over 1,000,000 operations.
func BenchmarkAddCancel(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(impl.Name, func(b *testing.B) {
			for b.Loop() {
				r, err := benchkit.AddCancel(impl, benchPending, 1_000_000)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.NsPerOp, "ns/add+cancel")
				b.ReportMetric(r.AllocsPerOp, "allocs/add+cancel")
			}
		})
	}
}

// BenchmarkAddFire reports ns and allocations per key from Add until the
// receiver has it, for keys due at once, with benchPending keys scheduled.
func BenchmarkAddFire(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(impl.Name, func(b *testing.B) {
			for b.Loop() {
				r, err := benchkit.AddFire(impl, benchPending, 500_000)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(r.NsPerOp, "ns/add+fire")
				b.ReportMetric(r.AllocsPerOp, "allocs/add+fire")
			}
		})
	}
}

// BenchmarkMemory reports heap bytes per pending timer with benchPending
// timers scheduled.
func BenchmarkMemory(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(impl.Name, func(b *testing.B) {
			for b.Loop() {
				bytes, err := benchkit.BytesPerTimer(impl, benchPending)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(bytes, "B/timer")
			}
		})
	}
}

// BenchmarkBurst reports how long after their common due time the last of
// benchPending keys reached the receiver.
func BenchmarkBurst(b *testing.B) {
	for _, impl := range benchImpls {
		b.Run(impl.Name, func(b *testing.B) {
			for b.Loop() {
				d, err := benchkit.Burst(impl, benchPending, 3*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(d)/float64(time.Millisecond), "ms/last-delivered")
			}
		})
	}
}

// BenchmarkLateness reports lateness percentiles of benchPending keys spread
// over 10 s. Each iteration takes about 13 s.
func BenchmarkLateness(b *testing.B) {
	if testing.Short() {
		b.Skip("takes 13 s per implementation")
	}
	for _, impl := range benchImpls {
		b.Run(impl.Name, func(b *testing.B) {
			for b.Loop() {
				r, err := benchkit.Lateness(impl, benchPending, 3*time.Second, 10*time.Second)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric(float64(r.P50)/float64(time.Millisecond), "ms-late-p50")
				b.ReportMetric(float64(r.P99)/float64(time.Millisecond), "ms-late-p99")
				b.ReportMetric(float64(r.Max)/float64(time.Millisecond), "ms-late-max")
				b.ReportMetric(float64(r.Early), "early-keys")
			}
		})
	}
}

// BenchmarkAdd is the plain Go benchmark of one Add of a new key (and the
// Cancel that keeps the wheel's size steady) with 100,000 keys scheduled; it
// runs in the default benchmark mode and shows the allocations per op.
func BenchmarkAdd(b *testing.B) {
	w, keys := benchWheel(b, 100_000)
	at := time.Now().Add(30 * time.Second)
	b.ReportAllocs()
	i := 0
	for b.Loop() {
		k := keys[i%len(keys)]
		i++
		_ = w.Add(k, at.Add(time.Duration(i%5000)*time.Millisecond))
		w.Cancel(k)
	}
}

func benchWheel(b *testing.B, pending int) (*timewheel.Wheel, []string) {
	w, err := timewheel.New(timewheel.Config{})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { w.Stop() })
	far := time.Now().Add(50 * time.Second)
	for i, k := range benchkit.Keys(0, pending) {
		if err := w.Add(k, far.Add(time.Duration(i)*time.Microsecond)); err != nil {
			b.Fatal(err)
		}
	}
	keys := benchkit.Keys(pending, 100_000)
	for _, k := range keys { // warm up the free list
		_ = w.Add(k, far)
	}
	for _, k := range keys {
		w.Cancel(k)
	}
	return w, keys
}
