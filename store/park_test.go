package store_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// TestParkAndAdopt: only the claim that holds an entry parks it; a parked entry belongs
// to no claim (its former claim cannot confirm it) until Adopt claims it, earliest due
// first, with a fresh lease.
func TestParkAndAdopt(t *testing.T) {
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Lease: 5 * time.Second})
	now := redisNow(t, rdb)
	var parked []store.Parked
	for i, id := range []string{"c", "a", "b"} {
		due := now.Add(-time.Duration(3-i) * time.Second) // c earliest
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
		c, err := ws.Claim(ctx, []string{id}, "claim-"+id)
		require.NoError(t, err)
		require.Len(t, c.Entries, 1)
		parked = append(parked, store.Parked{Claim: c.Entries[0].Claim(), DueAt: due})
	}
	// A stranger's token parks nothing.
	got, err := ws.Park(ctx, "ops", time.Minute, store.Parked{Claim: store.Claim{ID: "a", Token: "stranger"}, DueAt: now})
	require.NoError(t, err)
	require.Empty(t, got)

	got, err = ws.Park(ctx, "ops", time.Minute, parked...)
	require.NoError(t, err)
	require.ElementsMatch(t, []string{"a", "b", "c"}, got)
	require.ErrorIs(t, ws.Confirm(ctx, parked[0].Claim, 0), store.ErrNotHeld, "a parked entry's former claim no longer holds it")

	c, left, err := ws.Adopt(ctx, "ops", 2, "adopter")
	require.NoError(t, err)
	require.Equal(t, 1, left)
	require.Equal(t, []string{"c", "a"}, ids(c.Entries), "earliest due first")
	require.Equal(t, "body of c", string(c.Entries[0].Body))
	require.NoError(t, ws.Confirm(ctx, c.Entries[0].Claim(), 0), "the adopter holds what it adopted")

	c, left, err = ws.Adopt(ctx, "other", 10, "adopter-2")
	require.NoError(t, err)
	require.Empty(t, c.Entries, "each target has its own park")
	require.Zero(t, left)

	c, left, err = ws.Adopt(ctx, "ops", 10, "adopter-2")
	require.NoError(t, err)
	require.Equal(t, []string{"b"}, ids(c.Entries))
	require.Zero(t, left)
}

// TestParkNobodyAdoptsIsSwept: a parked entry whose adopters all died comes back through
// the sweeper once the park's lease runs out (by Redis's clock, waited for), and an adopt
// after that leaves it alone.
func TestParkNobodyAdoptsIsSwept(t *testing.T) {
	ctx := context.Background()
	rdb, prefix, ws := newWheelStage(t, store.WheelStageOptions{Lease: 5 * time.Second})
	due := redisNow(t, rdb).Add(-time.Second)
	_, err := ws.Put(ctx, entryAt("x", due))
	require.NoError(t, err)
	c, err := ws.Claim(ctx, []string{"x"}, "claim")
	require.NoError(t, err)
	got, err := ws.Park(ctx, "ops", 2*time.Second, store.Parked{Claim: c.Entries[0].Claim(), DueAt: due})
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, got)

	expiry := leaseExpiry(t, rdb, prefix, "x")
	swept, err := ws.ClaimOverdue(ctx, time.Hour, 10, "sweeper-early")
	require.NoError(t, err)
	require.Empty(t, swept.Entries, "within the park's lease the sweeper leaves it parked (or the machine stalled past the 2s lease)")
	waitRedisPast(t, rdb, expiry)
	swept, err = ws.ClaimOverdue(ctx, time.Hour, 10, "sweeper")
	require.NoError(t, err)
	require.Equal(t, []string{"x"}, ids(swept.Entries))

	adopted, left, err := ws.Adopt(ctx, "ops", 10, "late-adopter")
	require.NoError(t, err)
	require.Empty(t, adopted.Entries, "the sweeper's claim holds it now")
	require.Zero(t, left)
	require.NoError(t, ws.Confirm(ctx, swept.Entries[0].Claim(), 0))
}

// TestParkTakesSharesInTurns: the park takes its shares (the alerts' principals) in
// turns: a flood of one share, due first and parked first, cannot keep another share's
// alert waiting behind it; each share's alerts go in the order they were parked; a share
// that comes while the park is being drained joins at the turn being served, not behind
// the turns the flood took; an empty park starts the turns again.
func TestParkTakesSharesInTurns(t *testing.T) {
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Lease: 10 * time.Second})
	due := redisNow(t, rdb).Add(-time.Minute) // each alert parked is due a millisecond after the one before
	park := func(share string, ids ...string) {
		t.Helper()
		var parked []store.Parked
		for _, id := range ids {
			due = due.Add(time.Millisecond)
			at := due
			_, err := ws.Put(ctx, entryAt(id, at))
			require.NoError(t, err)
			c, err := ws.Claim(ctx, []string{id}, "claim-"+id)
			require.NoError(t, err)
			require.Len(t, c.Entries, 1)
			parked = append(parked, store.Parked{Claim: c.Entries[0].Claim(), DueAt: at, Share: share})
		}
		got, err := ws.Park(ctx, "ops", time.Minute, parked...)
		require.NoError(t, err)
		require.Equal(t, ids, got)
	}
	adopt := func(limit int, token string) []string {
		t.Helper()
		c, _, err := ws.Adopt(ctx, "ops", limit, token)
		require.NoError(t, err)
		return ids(c.Entries)
	}
	park("flood", idRange("f", 10)...)
	park("other", "o0", "o1")
	require.ElementsMatch(t, []string{"f0", "o0"}, adopt(2, "adopter/1"), "each share's first, not the flood's first two")
	require.ElementsMatch(t, []string{"f1", "o1"}, adopt(2, "adopter/2"))
	require.Equal(t, []string{"f2", "f3"}, adopt(2, "adopter/3"), "then the flood, in the order it was parked")

	park("late", "l0", "l1", "l2")
	require.ElementsMatch(t, []string{"f4", "l0"}, adopt(2, "adopter/4"), "a share that comes later joins the turn being served…")
	require.ElementsMatch(t, []string{"f5", "l1"}, adopt(2, "adopter/5"), "…and does not go ahead of the others' turns")
	require.ElementsMatch(t, []string{"f6", "f7", "f8", "f9", "l2"}, adopt(10, "adopter/6"))

	park("flood", "f10", "f11")
	park("other", "o2", "o3")
	require.ElementsMatch(t, []string{"f10", "o2"}, adopt(2, "adopter/7"), "an empty park starts the turns again")
}

// TestAdoptRaceTakesEachOnce: replicas adopting the same park at once never share an
// entry.
func TestAdoptRaceTakesEachOnce(t *testing.T) {
	ctx := context.Background()
	rdb, _, ws := newWheelStage(t, store.WheelStageOptions{Lease: 10 * time.Second})
	due := redisNow(t, rdb).Add(-time.Second)
	all := idRange("p", 200)
	var parked []store.Parked
	for _, id := range all {
		_, err := ws.Put(ctx, entryAt(id, due))
		require.NoError(t, err)
	}
	c, err := ws.Claim(ctx, all, "claim")
	require.NoError(t, err)
	for _, e := range c.Entries {
		parked = append(parked, store.Parked{Claim: e.Claim(), DueAt: e.DueAt})
	}
	got, err := ws.Park(ctx, "ops", time.Minute, parked...)
	require.NoError(t, err)
	require.Len(t, got, len(all))

	var mu sync.Mutex
	seen := map[string]int{}
	var wg sync.WaitGroup
	for r := range 4 {
		wg.Go(func() {
			for n := 0; ; n++ { // a token per adopt, as a replica's claims have
				c, left, err := ws.Adopt(ctx, "ops", 7, fmt.Sprintf("adopter-%c/%d", 'a'+r, n))
				if err != nil {
					t.Error(err)
					return
				}
				mu.Lock()
				for _, e := range c.Entries {
					seen[e.ID]++
				}
				mu.Unlock()
				if left == 0 && len(c.Entries) == 0 {
					return
				}
			}
		})
	}
	wg.Wait()
	require.Len(t, seen, len(all))
	for id, n := range seen {
		require.Equal(t, 1, n, id)
	}
}

// TestAdoptAfterALostReply: an adopt whose reply is lost (the connection cut after the
// script ran) is repeated with the same token, as a claim is, and returns what the
// first run took, still held by that token: nothing is left stranded in flight under a
// claim nobody knows of until the lease runs out, and nothing more is taken.
func TestAdoptAfterALostReply(t *testing.T) {
	ctx := context.Background()
	// The proxy reaches the single node, whatever topology the other tests run on: this
	// test's entries live there too.
	opts, err := redis.ParseURL(testenv.RedisURL(t))
	require.NoError(t, err)
	rdb := redis.NewClient(opts)
	prefix := testenv.Unique("rdtest")
	t.Cleanup(func() {
		_, _ = store.DeleteKeys(context.Background(), rdb, prefix)
		rdb.Close()
	})
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{Lease: time.Minute})
	due := redisNow(t, rdb).Add(-time.Second)
	var parked []store.Parked
	for _, id := range []string{"a", "b", "c"} {
		_, err := ws.Put(ctx, entryAt(id, due.Add(time.Duration(len(parked))*time.Millisecond)))
		require.NoError(t, err)
		c, err := ws.Claim(ctx, []string{id}, "claim-"+id)
		require.NoError(t, err)
		require.Len(t, c.Entries, 1)
		parked = append(parked, store.Parked{Claim: c.Entries[0].Claim(), DueAt: c.Entries[0].DueAt})
	}
	_, err = ws.Park(ctx, "ops", time.Minute, parked...)
	require.NoError(t, err)

	// The adopter reaches Redis through a proxy that loses the reply of its adopt; its
	// client does not retry by itself, so the caller sees the loss.
	proxy := testenv.StartProxy(t, opts.Addr)
	opts.Addr, opts.MaxRetries = proxy.Addr(), -1
	cut := redis.NewClient(opts)
	t.Cleanup(func() { cut.Close() })
	adopter := store.NewWheelStage(cut, prefix, store.WheelStageOptions{Lease: time.Minute})
	_, _, err = adopter.Adopt(ctx, "nobody", 1, "warm-up") // the script is cached: the lost reply is the script's own
	require.NoError(t, err)

	const token = "adopter-lost-reply"
	proxy.DropReply(func(req []byte) bool { return strings.Contains(string(req), token) })
	_, _, err = adopter.Adopt(ctx, "ops", 2, token)
	require.ErrorIs(t, err, store.ErrUnavailable, "the reply was lost")

	c, left, err := adopter.Adopt(ctx, "ops", 2, token)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ids(c.Entries), "the repeat returns what the lost run adopted")
	require.Equal(t, 1, left)
	for _, e := range c.Entries {
		require.Equal(t, token, e.Token)
		require.NoError(t, ws.Confirm(ctx, e.Claim(), 0), "the token holds %s", e.ID)
	}
	again, left, err := adopter.Adopt(ctx, "ops", 2, token)
	require.NoError(t, err)
	require.Equal(t, []string{"a", "b"}, ids(again.Entries), "a repeat takes nothing more")
	require.Equal(t, 1, left)

	rest, left, err := ws.Adopt(ctx, "ops", 10, "adopter-next")
	require.NoError(t, err)
	require.Equal(t, []string{"c"}, ids(rest.Entries))
	require.Zero(t, left)
}
