package store_test

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// newRobotPool returns a robot pool on the local Redis under a prefix of its own; its keys
// are deleted when the test ends (testenv.Redis).
func newRobotPool(t testing.TB, window time.Duration) (redis.UniversalClient, string, *store.RobotPool) {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	return rdb, prefix, store.NewRobotPool(rdb, prefix, window)
}

func poolRobots(limit int, names ...string) []store.PoolRobot {
	out := make([]store.PoolRobot, len(names))
	for i, n := range names {
		out[i] = store.PoolRobot{Name: n, Limit: limit}
	}
	return out
}

func TestRobotPoolPicksLeastUsedThenWaits(t *testing.T) {
	ctx := context.Background()
	_, _, pool := newRobotPool(t, 2*time.Second)
	robots := poolRobots(2, "a", "b", "c")

	var picked []string
	var first time.Time
	for i := range 6 {
		p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
		require.NoError(t, err)
		require.NotEmpty(t, p.Robot, "pick %d", i)
		if i == 0 {
			first = p.At
		}
		picked = append(picked, p.Robot)
	}
	// Least used first, ties to the robot whose last send is oldest: a round robin.
	require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, picked)

	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	// Within the window of the first send (by Redis's clock) every robot is full; a
	// machine stalled past it finds a free at once, which is what the wait below is for.
	if p.At.Before(first.Add(2 * time.Second)) {
		require.Empty(t, p.Robot)
		// The first send leaves the window 2s after it was made.
		require.Equal(t, first.Add(2*time.Second).Sub(p.At), p.Wait)
		require.Greater(t, p.Wait, time.Duration(0))

		time.Sleep(p.Wait) // exactly as told, as the sender does with a timer
		p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
		require.NoError(t, err)
	}
	require.Equal(t, "a", p.Robot)

	st, err := pool.State(ctx, "ops", []string{"a", "b", "c"})
	require.NoError(t, err)
	require.GreaterOrEqual(t, st[0].InWindow, 1)
	require.LessOrEqual(t, st[0].InWindow, 2)
}

func TestRobotPoolCoolAndDisable(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, pool := newRobotPool(t, time.Minute)
	robots := poolRobots(5, "a", "b")

	// An hour: no pause of a loaded machine ends this cool-down during the checks below.
	cooling, err := pool.Cool(ctx, "ops", "a", time.Hour)
	require.NoError(t, err)
	require.False(t, cooling.IsZero())
	for range 3 {
		p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
		require.NoError(t, err)
		require.Equal(t, "b", p.Robot, "a is cooling down")
	}
	_, err = pool.Disable(ctx, "ops", "b", 0)
	require.NoError(t, err)
	st, err := pool.State(ctx, "ops", []string{"a", "b"})
	require.NoError(t, err)
	require.Equal(t, cooling, st[0].CoolingUntil)
	require.True(t, st[1].Disabled)
	require.True(t, st[1].DisabledUntil.IsZero(), "disabled until Enable")

	// Only a is left and it cools down: the pick says to wait for the end of its cool-down.
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Robot)
	require.Equal(t, cooling.Sub(p.At), p.Wait, "the wait ends with the cool-down, on Redis's clock")

	// A shorter cool-down does not shorten a longer one.
	long, err := pool.Cool(ctx, "ops", "a", time.Hour)
	require.NoError(t, err)
	short, err := pool.Cool(ctx, "ops", "a", time.Second)
	require.NoError(t, err)
	require.Equal(t, long, short)
	ttl, err := rdb.PTTL(ctx, "{"+prefix+":ops}:cool").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 59*time.Minute, "the cool key expires with its last deadline")

	// A cool-down ends by itself: a pick before its end waits exactly until then, and the
	// pick after that wait gets the robot. (On a machine so slow that the first pick
	// comes after the end, that pick gets the robot; either way not before the end.)
	until, err := pool.Cool(ctx, "solo", "a", time.Second)
	require.NoError(t, err)
	p, err = pool.Pick(ctx, "solo", robots[:1], store.PickOptions{})
	require.NoError(t, err)
	if p.At.Before(until) {
		require.Empty(t, p.Robot, "a is cooling down")
		require.Equal(t, until.Sub(p.At), p.Wait)
		time.Sleep(p.Wait)
		p, err = pool.Pick(ctx, "solo", robots[:1], store.PickOptions{})
		require.NoError(t, err)
	}
	require.Equal(t, "a", p.Robot, "the cool-down is over")
	require.False(t, p.At.Before(until), "picked before the end of its cool-down")

	// Everything disabled: no waiting helps.
	_, err = pool.Disable(ctx, "ops", "a", time.Hour)
	require.NoError(t, err)
	_, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.ErrorIs(t, err, store.ErrNoRobot)

	require.NoError(t, pool.Enable(ctx, "ops", "b"))
	p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, "b", p.Robot)

	// A timed disable ends by itself; until then the robot is not waited for. (As above,
	// a pick that comes after the end gets the robot.)
	until, err = pool.Disable(ctx, "ops", "b", time.Second)
	require.NoError(t, err)
	p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	if err != nil {
		require.ErrorIs(t, err, store.ErrNoRobot)
		waitRedisPast(t, rdb, until)
		p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	}
	require.NoError(t, err)
	require.Equal(t, "b", p.Robot)
	require.False(t, p.At.Before(until), "picked before the end of its disable")
}

func TestRobotPoolGroupsAreIndependent(t *testing.T) {
	ctx := context.Background()
	_, _, pool := newRobotPool(t, time.Minute)
	for range 2 {
		p, err := pool.Pick(ctx, "one", poolRobots(2, "a"), store.PickOptions{})
		require.NoError(t, err)
		require.Equal(t, "a", p.Robot)
	}
	p, err := pool.Pick(ctx, "two", poolRobots(2, "a"), store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot)
	_, err = pool.Pick(ctx, "two", nil, store.PickOptions{})
	require.ErrorIs(t, err, store.ErrNoRobot)
}

// TestRobotPoolConcurrentPicksNeverExceedTheLimit has many goroutines pick from three
// robots, limit 5 per 2s, waiting exactly as told, and checks every recorded pick: no
// window of 2s holds more than 5 picks of one robot.
func TestRobotPoolConcurrentPicksNeverExceedTheLimit(t *testing.T) {
	const (
		window  = 2 * time.Second
		limit   = 5
		workers = 24
		picks   = 45 // three windows' worth of the pool's capacity
	)
	ctx := context.Background()
	_, _, pool := newRobotPool(t, window)
	robots := poolRobots(limit, "a", "b", "c")

	var mu sync.Mutex
	got := map[string][]time.Time{}
	remaining := picks
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() {
			for {
				mu.Lock()
				if remaining == 0 {
					mu.Unlock()
					return
				}
				remaining--
				mu.Unlock()
				for {
					p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
					if err != nil {
						t.Error(err)
						return
					}
					if p.Robot != "" {
						mu.Lock()
						got[p.Robot] = append(got[p.Robot], p.At)
						mu.Unlock()
						break
					}
					time.Sleep(p.Wait) // exactly as told, as the sender does with a timer
				}
			}
		})
	}
	wg.Wait()

	total := 0
	for robot, ts := range got {
		total += len(ts)
		slices.SortFunc(ts, func(a, b time.Time) int { return a.Compare(b) })
		for i := range ts {
			// picks in [ts[i], ts[i]+window)
			n := 0
			for j := i; j < len(ts) && ts[j].Before(ts[i].Add(window)); j++ {
				n++
			}
			require.LessOrEqual(t, n, limit, "robot %s: %d picks in the window starting at %s", robot, n, ts[i].Format(time.StampMilli))
		}
	}
	require.Equal(t, picks, total)
	t.Logf("picks per robot: a=%d b=%d c=%d", len(got["a"]), len(got["b"]), len(got["c"]))
}

// A send is in flight from its pick until Settle says it ended: the platform counts it
// at some moment in between. So it holds its robot's slot past its window and guard
// until then (a pick meanwhile asks again after a poll, the guard, not when the hold
// ends), or until its hold ends if nobody ever says (its replica died mid-request);
// Settle moves it to the answer's time, from which it counts a window and the guard.
func TestRobotPoolHoldsASendInFlight(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	const window, guard, hold = 10 * time.Minute, time.Minute, time.Hour // long: no pause of the machine matters
	pool := store.NewRobotPool(rdb, prefix, window).WithGuard(guard)
	robots := poolRobots(1, "a")
	win := "{" + prefix + ":ops}:win:a"
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot)
	score, err := rdb.ZScore(ctx, win, p.Member).Result()
	require.NoError(t, err)
	require.EqualValues(t, p.At.Add(hold).UnixMilli(), score, "in flight until its hold ends")
	require.Greater(t, rdb.PTTL(ctx, win).Val(), hold+window+guard, "the window outlives the hold")

	// As if picked a window, the guard and a minute ago, its request not answered yet.
	aged := score - float64((window + guard + time.Minute).Milliseconds())
	require.NoError(t, rdb.ZAdd(ctx, win, redis.Z{Score: aged, Member: p.Member}).Err())
	again, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Empty(t, again.Robot, "the send in flight still holds the one slot")
	require.Equal(t, guard, again.Wait, "asked again after a poll: it may be answered any moment")

	// Answered: it counts from now, a window and the guard.
	_, err = pool.Settle(ctx, "ops", p, robots, store.Settlement{How: store.SettleAnswered, Open: true})
	require.NoError(t, err)
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	score, err = rdb.ZScore(ctx, win, p.Member).Result()
	require.NoError(t, err)
	require.LessOrEqual(t, score, float64(now.UnixMilli()), "moved back to the answer's time")
	again, err = pool.Pick(ctx, "ops", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Empty(t, again.Robot)
	require.InDelta(t, (window + guard).Milliseconds(), (again.Wait + again.At.Sub(time.UnixMilli(int64(score)))).Milliseconds(), 1,
		"the slot frees a window and the guard after the answer")
	require.Greater(t, rdb.PTTL(ctx, win).Val(), window, "the window lives as long as its send")

	// Never answered (its replica died): the slot frees a window and the guard after the
	// hold ends.
	p, err = pool.Pick(ctx, "dead", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot)
	again, err = pool.Pick(ctx, "dead", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Empty(t, again.Robot)
	deadWin := "{" + prefix + ":dead}:win:a"
	require.NoError(t, rdb.ZAdd(ctx, deadWin, redis.Z{Score: float64(now.Add(-window - guard - time.Second).UnixMilli()), Member: p.Member}).Err())
	again, err = pool.Pick(ctx, "dead", robots, store.PickOptions{Hold: hold})
	require.NoError(t, err)
	require.Equal(t, "a", again.Robot, "the hold, a window and the guard past: free")
}

// With a guard, a send holds its robot's slot for the window plus the guard: the pick
// records it at Redis now, and the platform counts it when the request arrives.
func TestRobotPoolGuardHoldsTheSlotLonger(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	const window, guard = 10 * time.Minute, 2 * time.Minute // long: no pause of the machine matters
	pool := store.NewRobotPool(rdb, prefix, window).WithGuard(guard)
	robots := poolRobots(1, "a")
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot)
	again, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Empty(t, again.Robot)
	// The wait counts from the first pick on Redis's clock.
	require.InDelta(t, (window + guard).Milliseconds(), (again.Wait + again.At.Sub(p.At)).Milliseconds(), 1,
		"the slot frees one window and the guard after the pick")

	unguarded := store.NewRobotPool(rdb, prefix, window)
	p, err = unguarded.Pick(ctx, "other", robots, store.PickOptions{})
	require.NoError(t, err)
	again, err = unguarded.Pick(ctx, "other", robots, store.PickOptions{})
	require.NoError(t, err)
	require.InDelta(t, window.Milliseconds(), (again.Wait + again.At.Sub(p.At)).Milliseconds(), 1, "no guard: one window")
}

// A send older than the window but within the guard still holds its robot's slot: the
// prune keeps it (a prune that forgot the guard freed the slot a guard early, and only
// the waits above were computed with it).
func TestRobotPoolGuardKeepsAnOldSendInTheWindow(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	const window, guard = 10 * time.Minute, 2 * time.Minute
	pool := store.NewRobotPool(rdb, prefix, window).WithGuard(guard)
	robots := poolRobots(1, "a")
	now, err := rdb.Time(ctx).Result()
	require.NoError(t, err)
	win := "{" + prefix + ":ops}:win:a"
	// A send recorded a window and half the guard ago, as an earlier pick would have.
	require.NoError(t, rdb.ZAdd(ctx, win, redis.Z{Score: float64(now.Add(-window - guard/2).UnixMilli()), Member: "earlier"}).Err())
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Empty(t, p.Robot, "the earlier send still holds the one slot")
	require.InDelta(t, (guard / 2).Milliseconds(), p.Wait.Milliseconds(), 1000, "until a window and the guard after it")

	// One older than the window and the guard is gone.
	require.NoError(t, rdb.ZAdd(ctx, win, redis.Z{Score: float64(now.Add(-window - guard - time.Second).UnixMilli()), Member: "earlier"}).Err())
	p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot)
}

// Paced picks spend a target's budget evenly: the bucket holds capacity/6 tokens and
// refills at the rest of the capacity per window, so after the bucket's burst a paced
// pick waits one token's time; a burst pick ignores the bucket.
func TestRobotPoolPacesPicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// A long window makes a token slow enough (a minute) that no pause of a loaded
	// machine refills the bucket between the picks; nothing here waits for one.
	_, _, pool := newRobotPool(t, 10*time.Minute)
	robots := poolRobots(12, "a") // capacity 12: a bucket of 2 tokens, 10 tokens per 10 minutes

	// Redis's clock at the first pick: the bucket refills from there.
	var first time.Time
	for i := range 2 {
		p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Paced})
		require.NoError(t, err)
		require.Equal(t, "a", p.Robot, "pick %d: the bucket's burst", i+1)
		if i == 0 {
			first = p.At
		}
	}
	// The waits count from the first pick on Redis's clock, so a slow test machine
	// shortens them by exactly the time it took between picks.
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Paced})
	require.NoError(t, err)
	require.Empty(t, p.Robot, "the bucket is empty")
	require.True(t, p.Reserved, "the next token is reserved for this caller")
	require.InDelta(t, 60_000, (p.Wait + p.At.Sub(first)).Milliseconds(), 1, "one token takes 10m/10")

	// A second waiter (another replica) queues behind the first: its token is the one after.
	p2, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Paced})
	require.NoError(t, err)
	require.True(t, p2.Reserved)
	require.InDelta(t, 120_000, (p2.Wait + p2.At.Sub(first)).Milliseconds(), 1, "the second reservation is one token later")

	p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot, "a burst pick (a reserved token come due) ignores the bucket")
}

// A pick for a full message (store.Full) takes a token while the bucket has one, like a
// paced pick; once it has none, it goes while a robot has room in its window, without
// reserving, and reserves the next token like a paced pick when no robot has (the target
// is busy: its alerts park). The bucket it leaves is what a paced pick finds.
func TestRobotPoolFullPicks(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, pool := newRobotPool(t, 10*time.Minute) // a token takes a minute: none refills here
	robots := poolRobots(12, "a")                 // a bucket of 2 tokens
	var first time.Time                           // Redis's clock at the first pick: the bucket refills from there
	for i := range 4 {
		p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Full})
		require.NoError(t, err)
		if i == 0 {
			first = p.At
		}
		require.Equal(t, "a", p.Robot, "full pick %d goes (2 with the bucket's tokens, 2 on the window)", i+1)
		require.False(t, p.Reserved)
	}
	p, err := pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Paced})
	require.NoError(t, err)
	require.Empty(t, p.Robot, "the full picks spent the bucket")
	require.True(t, p.Reserved)
	for range 12 - 4 {
		p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Full})
		require.NoError(t, err)
		require.Equal(t, "a", p.Robot)
	}
	p, err = pool.Pick(ctx, "ops", robots, store.PickOptions{Pacing: store.Full})
	require.NoError(t, err)
	require.Empty(t, p.Robot, "the robot's window is full: the limit holds")
	require.True(t, p.Reserved, "with no robot free, a full message reserves a token")
	require.InDelta(t, 2*60_000, (p.Wait + p.At.Sub(first)).Milliseconds(), 1, "the token after the one the paced pick reserved")
}

// A throttle that says how long to wait (Slack's 429 with Retry-After) rests the robot at
// least that long, learning or not, but no longer than the longest cool-down (CooldownMax,
// or Cooldown when there is none above it); a shorter one leaves the cool-down as it is.
func TestRobotPoolRestsAtLeastTheRetryAfter(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, _, pool := newRobotPool(t, time.Minute)
	robots := poolRobots(5, "a", "b")
	for _, c := range []struct {
		name string
		o    store.ThrottleOptions
		rest time.Duration
	}{
		{"retry-after", store.ThrottleOptions{Cooldown: 5 * time.Second, CooldownMax: 10 * time.Minute, RetryAfter: 40 * time.Second}, 40 * time.Second},
		{"retry-after-learning", store.ThrottleOptions{Cooldown: 5 * time.Second, CooldownMax: 10 * time.Minute, RetryAfter: 40 * time.Second, Learn: true}, 40 * time.Second},
		{"past-the-longest", store.ThrottleOptions{Cooldown: 5 * time.Second, CooldownMax: 2 * time.Minute, RetryAfter: time.Hour, Learn: true}, 2 * time.Minute},
		{"past-the-cooldown", store.ThrottleOptions{Cooldown: 10 * time.Second, RetryAfter: time.Hour}, 10 * time.Second},
		{"shorter", store.ThrottleOptions{Cooldown: 5 * time.Second, CooldownMax: 10 * time.Minute, RetryAfter: time.Second}, 5 * time.Second},
	} {
		target := "ops-" + c.name
		p, err := pool.Pick(ctx, target, robots, store.PickOptions{})
		require.NoError(t, err)
		require.Equal(t, "a", p.Robot)
		th, err := throttled(ctx, pool, target, p, robots, c.o)
		require.NoError(t, err)
		after := redisNow(t, rdb)
		require.False(t, th.CoolingUntil.Before(p.At.Add(c.rest)), "%s: cools until %s, before %s", c.name, th.CoolingUntil, p.At.Add(c.rest))
		require.False(t, th.CoolingUntil.After(after.Add(c.rest)), "%s: cools until %s, after %s", c.name, th.CoolingUntil, after.Add(c.rest))
		// No pick reaches the robot before then.
		again, err := pool.Pick(ctx, target, robots[:1], store.PickOptions{})
		require.NoError(t, err)
		require.Empty(t, again.Robot, c.name)
		require.True(t, again.At.Add(again.Wait).Equal(th.CoolingUntil), "%s: the wait ends with the cool-down", c.name)
	}
}

// A throttle while the robot's window held fewer sends than its configured limit teaches
// a lower limit (no more than the count that went through; its siblings take the count
// too), once per episode; a further throttle lowers it by a quarter; after the cool-down
// the robot is in doubt and takes one probe at a time until an answer opens it; the
// learned limit comes back up by one per clean window, to the count that went through.
func TestRobotPoolLearnsLimitsAndProbes(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	// The first four picks must share a window, and the pick after the probe must come
	// within the probe's timeout: a 2s window and a minute's timeout leave a loaded
	// machine room for its pauses.
	const window = 2 * time.Second
	rdb, _, pool := newRobotPool(t, window)
	robots := []store.PoolRobot{{Name: "a", Limit: 10}, {Name: "b", Limit: 10}, {Name: "c", Limit: 3}}
	learn := store.PickOptions{Learn: true, ProbeTimeout: time.Minute}
	var last store.Pick
	for range 4 {
		p, err := pool.Pick(ctx, "ops", robots[:1], learn)
		require.NoError(t, err)
		require.Equal(t, 10, p.Limit)
		last = p
	}
	th, err := throttled(ctx, pool, "ops", last, robots, store.ThrottleOptions{Cooldown: window, Learn: true})
	require.NoError(t, err)
	require.Equal(t, store.Throttle{Limit: 3, Started: true, CoolingUntil: th.CoolingUntil, InWindow: 3}, th,
		"3 went through, the 4th was refused")
	st, err := pool.State(ctx, "ops", []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Equal(t, 3, st[0].LearnedLimit)
	require.True(t, st[0].InDoubt)
	require.Equal(t, 3, st[1].LearnedLimit, "a sibling takes the count as its limit too")
	require.False(t, st[1].InDoubt)
	require.Zero(t, st[2].LearnedLimit, "a sibling configured at no more than the count is left alone")
	again, err := throttled(ctx, pool, "ops", last, robots, store.ThrottleOptions{Cooldown: window, Learn: true})
	require.NoError(t, err)
	require.False(t, again.Started, "the same episode is not announced twice")
	require.Equal(t, 2, again.Limit, "a further throttle: three quarters of 3")

	waitRedisPast(t, rdb, again.CoolingUntil) // the cool-down and the window are over
	probe, err := pool.Pick(ctx, "ops", robots[:1], learn)
	require.NoError(t, err)
	require.Equal(t, "a", probe.Robot)
	require.True(t, probe.Probe, "out of its cool-down the robot is in doubt: this is its probe")
	require.Equal(t, 3, probe.Limit, "one clean window: up by one, to the 3 that went through")
	p, err := pool.Pick(ctx, "ops", robots[:1], learn)
	require.NoError(t, err)
	require.Empty(t, p.Robot, "one probe at a time: nobody else goes into a robot in doubt")
	_, err = pool.Settle(ctx, "ops", probe, robots, store.Settlement{How: store.SettleAnswered, Open: true})
	require.NoError(t, err)
	p, err = pool.Pick(ctx, "ops", robots[:1], learn)
	require.NoError(t, err)
	require.Equal(t, "a", p.Robot, "the probe's answer opened the robot")
	require.False(t, p.Probe)

	waitRedisPast(t, rdb, p.At.Add(window)) // another clean window
	p, err = pool.Pick(ctx, "ops", robots[:1], learn)
	require.NoError(t, err)
	require.Equal(t, 3, p.Limit, "past what went through it rises only after ten clean windows")
	p, err = pool.Pick(ctx, "ops", robots[:1], store.PickOptions{})
	require.NoError(t, err)
	require.Equal(t, 10, p.Limit, "without learning the configured limit applies")
}

// TestRobotPoolScoutsUnknownRobots: with learning, robots whose real limit is unknown
// are approached one at a time (the scout takes every pick until it took its configured
// limit and is proven, then the next one scouts); a throttle below the configured limit
// is news about the whole target: the count that went through becomes the limit of the
// robots without a learned one, proven or not (a proof may be older than the sharing),
// so they are not throttled themselves.
func TestRobotPoolScoutsUnknownRobots(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const window = 10 * time.Second
	_, _, pool := newRobotPool(t, window)
	learn := store.PickOptions{Learn: true, ProbeTimeout: time.Minute}
	robots := poolRobots(3, "a", "b", "c")
	pick := func(target string) store.Pick {
		t.Helper()
		p, err := pool.Pick(ctx, target, robots, learn)
		require.NoError(t, err)
		return p
	}
	var order []string
	for range 7 {
		order = append(order, pick("fresh").Robot)
	}
	require.Equal(t, []string{"a", "a", "a", "b", "b", "b", "c"}, order, "one scout at a time, until it is proven")
	order = nil
	for range 2 {
		order = append(order, pick("fresh").Robot)
	}
	require.Equal(t, []string{"c", "c"}, order)

	// A robot shared with someone else: b is proven (it took its 3), c scouts and is
	// throttled after one send went through.
	robots = poolRobots(3, "a", "b", "c")
	for _, want := range []string{"a", "a", "a"} {
		require.Equal(t, want, pick("shared").Robot)
	}
	require.Equal(t, "b", pick("shared").Robot)
	th, err := throttled(ctx, pool, "shared", pick("shared"), robots, store.ThrottleOptions{Cooldown: window, Learn: true})
	require.NoError(t, err)
	require.True(t, th.Started)
	require.Equal(t, 1, th.Limit, "one went through before the scout's throttle")
	st, err := pool.State(ctx, "shared", []string{"a", "b", "c"})
	require.NoError(t, err)
	require.Equal(t, 1, st[0].LearnedLimit, "a proven robot takes the news too")
	require.False(t, st[0].Proven, "its proof is taken back")
	require.False(t, st[1].Proven, "the throttled scout is not proven")
	require.Equal(t, 1, st[1].LearnedLimit)
	require.Equal(t, 1, st[2].LearnedLimit, "an unknown robot learns from the scout before it is throttled itself")
	require.Equal(t, "c", pick("shared").Robot, "c, known now, takes its learned 1")
	require.Empty(t, pick("shared").Robot, "a is full, b cooling down, c at its learned limit")
	// The one send the scout made before the throttle is charged to the pacing bucket,
	// now sized by the limits in effect (1+1+1: one token): its first paced pick waits.
	p, err := pool.Pick(ctx, "shared", robots, store.PickOptions{Learn: true, Pacing: store.Paced, ProbeTimeout: time.Minute})
	require.NoError(t, err)
	require.True(t, p.Reserved, "the bucket's one token went to the scout's send: the pick reserves the next one")
}

// TestRobotPoolFillsKnownRobotsOneAtATime: with learning, picks among known robots go
// to the most used one that has room, so a robot whose real limit fell (someone else
// started sending through it) meets the platform's throttle after a few sends, before the
// target's other robots spent theirs; without learning, picks spread (least used first).
func TestRobotPoolFillsKnownRobotsOneAtATime(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, pool := newRobotPool(t, time.Second)
	robots := poolRobots(3, "a", "b", "c")
	order := func(target string, opts store.PickOptions, n int) []string {
		t.Helper()
		var out []string
		for range n {
			p, err := pool.Pick(ctx, target, robots, opts)
			require.NoError(t, err)
			out = append(out, p.Robot)
		}
		return out
	}
	learn := store.PickOptions{Learn: true, ProbeTimeout: time.Minute}
	// The scout proves a, b and c one after another.
	require.Equal(t, []string{"a", "a", "a", "b", "b", "b", "c", "c", "c"}, order("known", learn, 9))
	// Once their sends left the window (on Redis's clock), the proven robots fill up one
	// at a time, most used first.
	require.Eventually(t, func() bool {
		st, err := pool.State(ctx, "known", []string{"a", "b", "c"})
		require.NoError(t, err)
		for _, r := range st {
			if !r.Proven || r.InWindow > 0 {
				return false
			}
		}
		return true
	}, 30*time.Second, 20*time.Millisecond)
	require.Equal(t, []string{"a", "a", "a", "b"}, order("known", learn, 4))

	require.Equal(t, []string{"a", "b", "c", "a", "b", "c"}, order("spread", store.PickOptions{}, 6),
		"without learning: least used first")
}

// TestRobotPoolSpreadsSendsInBusyMoments: during the platform's busy moments a robot's
// per-second limit is the busy one; outside them its own.
func TestRobotPoolSpreadsSendsInBusyMoments(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	_, _, pool := newRobotPool(t, time.Minute) // the second window is a second
	robots := []store.PoolRobot{{Name: "f1", Limit: 95, LimitPerSecond: 4}}
	// allowed is how many of a burst of picks one second window takes: the picks within a
	// second of the first (by Redis's clock) that found the robot free. A burst the machine
	// stalled through (its picks spread over more than a second) says nothing and is made
	// again on a fresh target, at most five times: then the test fails, never passes
	// unchecked.
	allowed := func(target string, busy store.Busy) int {
		t.Helper()
		for attempt := range 5 {
			var first time.Time
			n, stalled := 0, false
			for i := range 6 {
				p, err := pool.Pick(ctx, fmt.Sprintf("%s-%d", target, attempt), robots, store.PickOptions{Busy: busy})
				require.NoError(t, err)
				if i == 0 {
					first = p.At
				}
				if p.At.Sub(first) >= time.Second {
					stalled = true
					break
				}
				if p.Robot != "" {
					n++
				}
			}
			if !stalled {
				return n
			}
			t.Logf("%s: the machine stalled past a second window in burst %d; again", target, attempt+1)
		}
		t.Fatalf("%s: the machine stalled past a second window in five bursts", target)
		return 0
	}
	// Every instant is busy when the moments recur every millisecond and last one.
	require.Equal(t, 2, allowed("busy", store.Busy{Every: time.Millisecond, For: time.Millisecond, PerSecond: 2}))
	require.Equal(t, 4, allowed("calm", store.Busy{Every: time.Hour, PerSecond: 2}), "outside them, its own 4")
	require.Equal(t, 4, allowed("none", store.Busy{}), "a platform without busy moments")
}

// throttled settles the send of pick as throttled and returns what the throttle learned.
func throttled(ctx context.Context, pool *store.RobotPool, target string, pick store.Pick, robots []store.PoolRobot, o store.ThrottleOptions) (store.Throttle, error) {
	done, err := pool.Settle(ctx, target, pick, robots, store.Settlement{How: store.SettleThrottled, Throttle: o})
	return done.Throttle, err
}
