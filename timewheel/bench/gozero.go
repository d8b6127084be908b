package main

import (
	"time"

	"github.com/zeromicro/go-zero/core/collection"

	"github.com/rocketdelay/rocketdelay/timewheel/internal/benchkit"
)

// goZero is go-zero's keyed timing wheel with the same tick and slot count
// as the rocketdelay wheel's defaults. It runs its callbacks one goroutine per
// tick, so fire is called directly.
var goZero = benchkit.Impl{Name: "go-zero TimingWheel", New: func(_ int, fire func(string)) benchkit.Timers {
	tw, err := collection.NewTimingWheel(10*time.Millisecond, 8192, func(key, _ any) { fire(key.(string)) })
	if err != nil {
		panic(err)
	}
	return goZeroTimers{tw}
}}

type goZeroTimers struct{ tw *collection.TimingWheel }

func (t goZeroTimers) Add(key string, at time.Time) {
	// SetTimer rejects delays ≤ 0; it rounds anything below the tick up.
	if err := t.tw.SetTimer(key, nil, max(time.Until(at), time.Nanosecond)); err != nil {
		panic(err)
	}
}

func (t goZeroTimers) Cancel(key string) {
	if err := t.tw.RemoveTimer(key); err != nil {
		panic(err)
	}
}

func (t goZeroTimers) Stop() { t.tw.Stop() }
