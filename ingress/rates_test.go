package ingress

import (
	"context"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// countedRate is a rate for all replicas together that grants what is left of a fixed
// number of requests, and counts the round trips asked of it.
type countedRate struct {
	noOwners
	mu    sync.Mutex
	left  int
	trips int
	gate  chan struct{} // when set, each round trip waits for it to close
}

func (c *countedRate) Take(_ context.Context, _ string, _ float64, _, want int) (int, time.Duration, error) {
	c.mu.Lock()
	c.trips++
	gate := c.gate
	c.mu.Unlock()
	if gate != nil {
		<-gate
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	n := min(want, c.left)
	c.left -= n
	if n == 0 {
		return 0, time.Second, nil
	}
	return n, 0, nil
}

// A principal's rate is taken a lease at a time, sized by what the replica spent: a
// flood costs a round trip every leaseSize requests once the lease has grown, requests
// one at a time take one at a time and waste none, what a lease holds is spent within
// leaseLife and dropped after, a refusal is kept until Redis said a request is free, and
// nothing is let through that the rate did not grant.
func TestRatesAreTakenALeaseAtATime(t *testing.T) {
	now := time.Unix(1_800_000_000, 0)
	clock := func() time.Time { return now }
	big := config.Principal{Name: "big", RatePerSecond: 10_000, Burst: 10_000}
	require.Equal(t, 1000, leaseSize(big), "100 ms of the rate, within an eighth of the burst")
	require.Equal(t, 1, leaseSize(config.Principal{RatePerSecond: 5, Burst: 5}))
	require.Equal(t, 12, leaseSize(config.Principal{RatePerSecond: 1000, Burst: 100}), "an eighth of the burst")

	// A flood: the lease doubles up to leaseSize, and exactly what was granted goes.
	c := &countedRate{left: 2500}
	rs := newRates(clock)
	let := 0
	for range 3000 {
		wait, err := rs.take(t.Context(), c, big)
		require.NoError(t, err)
		if wait == 0 {
			let++
		}
	}
	require.Equal(t, 2500, let, "exactly what the rate granted")
	require.LessOrEqual(t, c.trips, 11+2+1, "1, 2, 4 … 512, then 1000s: and one refusal, kept")

	// Requests one at a time, each after the last lease lapsed: one request a round
	// trip, and none wasted (leases of leaseSize would leave all but one to lapse).
	c = &countedRate{left: 50}
	rs = newRates(clock)
	for i := range 50 {
		now = now.Add(leaseLife + time.Millisecond)
		wait, err := rs.take(t.Context(), c, big)
		require.NoError(t, err)
		require.Zero(t, wait, "request %d: the rate granted 50", i)
	}
	require.Equal(t, 50, c.trips)
	require.Zero(t, c.left)

	// What a lease holds is dropped once it lapses.
	c = &countedRate{left: 1000}
	rs = newRates(clock)
	for range 8 { // leases of 1, 2 and 4, and one spent of a lease of 8
		_, err := rs.take(t.Context(), c, big)
		require.NoError(t, err)
	}
	require.Equal(t, 4, c.trips)
	require.Equal(t, 1000-15, c.left)
	now = now.Add(leaseLife)
	_, err := rs.take(t.Context(), c, big)
	require.NoError(t, err)
	require.Equal(t, 5, c.trips, "the lease of 8 lapsed with 7 unspent: not spent later")

	// A refusal is kept until Redis said one is free, without asking again.
	c = &countedRate{}
	rs = newRates(clock)
	wait, err := rs.take(t.Context(), c, big)
	require.NoError(t, err)
	require.Equal(t, time.Second, wait)
	now = now.Add(400 * time.Millisecond)
	wait, err = rs.take(t.Context(), c, big)
	require.NoError(t, err)
	require.Equal(t, 600*time.Millisecond, wait)
	require.Equal(t, 1, c.trips, "refused here, not asked again")
	now = now.Add(600 * time.Millisecond)
	c.left = 1
	wait, err = rs.take(t.Context(), c, big)
	require.NoError(t, err)
	require.Zero(t, wait)
	require.Equal(t, 2, c.trips)

	// A rate changed on a reload starts afresh; no rate, no limit.
	c = &countedRate{left: 1}
	lowered := big
	lowered.RatePerSecond = 10
	wait, err = rs.take(t.Context(), c, lowered)
	require.NoError(t, err)
	require.Zero(t, wait, "the old rate's refusal is not the new one's")
	wait, err = rs.take(t.Context(), c, config.Principal{Name: "free"})
	require.NoError(t, err)
	require.Zero(t, wait)
	require.Equal(t, 1, c.trips)
}

// One refill of a principal's lease is asked at a time: the requests that find the
// lease empty meanwhile wait for it, and spend what it brought (here: eight requests at
// once, one round trip, all let through once it is answered); a refusal Redis answered
// is not kept past a later grant.
func TestALeaseIsRefilledOnceAtATime(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		big := config.Principal{Name: "big", RatePerSecond: 10_000, Burst: 10_000}
		rs := newRates(time.Now)
		c := &countedRate{left: 100}
		_, err := rs.take(t.Context(), c, big) // a lease of one, spent
		require.NoError(t, err)
		_, err = rs.take(t.Context(), c, big) // two, one left
		require.NoError(t, err)
		_, err = rs.take(t.Context(), c, big)
		require.NoError(t, err)
		require.Equal(t, 2, c.trips)

		c.gate = make(chan struct{})
		waits := make(chan time.Duration, 8)
		for range 8 {
			go func() {
				wait, err := rs.take(t.Context(), c, big)
				require.NoError(t, err)
				waits <- wait
			}()
		}
		synctest.Wait()
		require.Equal(t, 3, c.trips, "one refill under way; the other seven wait for it")
		close(c.gate)
		for range 8 {
			require.Zero(t, <-waits, "a lease of four, then one of eight: every request goes")
		}
		require.Equal(t, 4, c.trips)

		c.gate, c.left = nil, 0
		time.Sleep(leaseLife) // the lease of eight lapses (the bubble's clock)
		wait, err := rs.take(t.Context(), c, big)
		require.NoError(t, err)
		require.Equal(t, time.Second, wait, "refused: none left")
		time.Sleep(time.Second)
		c.left = 10
		wait, err = rs.take(t.Context(), c, big)
		require.NoError(t, err)
		require.Zero(t, wait)
		wait, err = rs.take(t.Context(), c, big)
		require.NoError(t, err)
		require.Zero(t, wait, "the grant ended the refusal")
	})
}
