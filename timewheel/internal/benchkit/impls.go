package benchkit

import (
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

// Wheel is the rocketdelay timewheel with its default configuration: a
// receiver goroutine calls fire for every key of every batch.
var Wheel = Impl{Name: "timewheel", New: func(_ int, fire func(string)) Timers {
	return newWheelTimers(timewheel.Config{}, fire)
}}

// WheelWith is the rocketdelay timewheel configured by cfg.
func WheelWith(name string, cfg timewheel.Config) Impl {
	return Impl{Name: name, New: func(_ int, fire func(string)) Timers {
		return newWheelTimers(cfg, fire)
	}}
}

type wheelTimers struct {
	w    *timewheel.Wheel
	done sync.WaitGroup
}

func newWheelTimers(cfg timewheel.Config, fire func(string)) *wheelTimers {
	w, err := timewheel.New(cfg)
	if err != nil {
		panic(err)
	}
	t := &wheelTimers{w: w}
	t.done.Add(1)
	go func() {
		defer t.done.Done()
		for batch := range w.C() {
			for _, k := range batch {
				fire(k)
			}
		}
	}()
	if err := w.Start(); err != nil {
		panic(err)
	}
	return t
}

func (t *wheelTimers) Add(key string, at time.Time) {
	if err := t.w.Add(key, at); err != nil {
		panic(err)
	}
}

func (t *wheelTimers) Cancel(key string) { t.w.Cancel(key) }

func (t *wheelTimers) Stop() {
	t.w.Stop()
	t.done.Wait()
}

// AfterFunc is time.AfterFunc with one closure per key; the *time.Timer
// handles are kept in a slice indexed by KeyIndex (8 bytes a key, the
// cheapest way to cancel by key).
var AfterFunc = Impl{Name: "time.AfterFunc", New: func(n int, fire func(string)) Timers {
	return &afterFuncTimers{timers: make([]*time.Timer, 0), fire: fire}
}}

type afterFuncTimers struct {
	timers []*time.Timer
	fire   func(string)
}

func (t *afterFuncTimers) Add(key string, at time.Time) {
	i := KeyIndex(key)
	if i >= len(t.timers) {
		t.timers = append(t.timers, make([]*time.Timer, i+1-len(t.timers))...)
	}
	if old := t.timers[i]; old != nil {
		old.Stop()
	}
	fire := t.fire
	t.timers[i] = time.AfterFunc(time.Until(at), func() { fire(key) })
}

func (t *afterFuncTimers) Cancel(key string) {
	i := KeyIndex(key)
	if tm := t.timers[i]; tm != nil {
		tm.Stop()
		t.timers[i] = nil
	}
}

func (t *afterFuncTimers) Stop() {
	for _, tm := range t.timers {
		if tm != nil {
			tm.Stop()
		}
	}
	t.timers = nil
}
