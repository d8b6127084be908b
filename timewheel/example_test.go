package timewheel_test

import (
	"fmt"
	"time"

	"github.com/rocketdelay/rocketdelay/timewheel"
)

func Example() {
	w, err := timewheel.New(timewheel.Config{Tick: 10 * time.Millisecond})
	if err != nil {
		panic(err)
	}
	if err := w.Start(); err != nil {
		panic(err)
	}

	now := time.Now()
	_ = w.Add("alert-2", now.Add(40*time.Millisecond))
	_ = w.Add("alert-1", now.Add(20*time.Millisecond))
	_ = w.Add("alert-3", now.Add(time.Hour))
	_ = w.Add("alert-3", now.Add(60*time.Millisecond)) // reschedules alert-3
	_ = w.Add("alert-4", now.Add(time.Second))
	w.Cancel("alert-4")

	for n := 0; n < 3; {
		batch := <-w.C() // the receiver owns the batch
		for _, key := range batch {
			fmt.Println("due:", key)
			n++
		}
	}
	fmt.Println("left:", w.Stop())
	// Output:
	// due: alert-1
	// due: alert-2
	// due: alert-3
	// left: []
}
