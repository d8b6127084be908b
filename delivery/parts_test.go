package delivery_test

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// splitWorld is the real DingTalk sender, its robot pool on a Redis reached through a
// proxy, and the DingTalk simulator, which cuts that proxy once, for cut, right after it
// accepted the first part of a split alert: the pick of the second part fails.
type splitWorld struct {
	snd      *sender.Chat
	sim      *chatsim.Server
	restored sync.WaitGroup
}

func newSplitWorld(t *testing.T, cut time.Duration) *splitWorld {
	t.Helper()
	rdb, proxy := testenv.ProxiedRedis(t)
	_, prefix := testenv.Redis(t)

	w := &splitWorld{sim: chatsim.New(chatsim.Options{Platforms: []sender.Platform{dingtalk.Platform}, Robots: []chatsim.Robot{{Name: "r1", Token: "tok-split"}},
		Limit: 19, Window: time.Minute})}
	var once sync.Once
	ts := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		w.sim.ServeHTTP(rw, r)
		if len(w.sim.Accepted()) == 1 {
			once.Do(func() {
				proxy.Down()
				w.restored.Go(func() { time.Sleep(cut); proxy.Up() })
			})
		}
	}))
	t.Cleanup(ts.Close)
	var err error
	w.snd, err = sender.NewChat(sender.Options{Targets: map[string]sender.Target{"ops": {Protocol: dingtalk.New(ts.URL + dingtalk.SimPath),
		Robots: []sender.Robot{{Name: "r1", Token: config.Secret("tok-split")}}}}, Limit: 19, HTTPTimeout: 2 * time.Second, Attempts: 3,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 50 * time.Millisecond},
		store.NewRobotPool(rdb, prefix, time.Minute), discardLogger(), nil, nil)
	require.NoError(t, err)
	t.Cleanup(w.snd.Close)
	return w
}

// bigAlert is a text alert of about 45 KB: three parts.
func bigAlert() []byte {
	var b strings.Builder
	for i := 0; b.Len() < 45_000; i++ {
		fmt.Fprintf(&b, "line %05d of a long report: %s\n", i, strings.Repeat("x", 60))
	}
	return []byte(b.String())
}

// parts lists the part labels of what DingTalk accepted, in order.
func (w *splitWorld) parts() []string {
	var out []string
	for _, m := range w.sim.Accepted() {
		out = append(out, strings.SplitN(m.Text, "\n", 2)[0])
	}
	return out
}

// A hand-off whose second part cannot be picked (Redis cut off after the first) is given
// back with the part it reached; the next hand-off sends from the second part, so the
// first is delivered once.
func TestSplitAlertResumesFromThePartReachedInTheHandOff(t *testing.T) {
	t.Parallel()
	w := newSplitWorld(t, 6*time.Second) // outlasts go-redis's own retries (about 3.5s)
	_, fs := testenv.FailedSends(t)
	ws := stageFor(t, fs)
	d := delivery.New(delivery.Channels{"ops": w.snd}, ws, fs, delivery.Options{}, discardLogger(), nil, time.Now)
	ctx := context.Background()

	_, err := ws.Put(ctx, store.Entry{ID: "big", Target: "ops", DueAt: time.Now().Add(-time.Second), Body: bigAlert()})
	require.NoError(t, err)
	a := claimed2(t, ws, "big")
	_, err = d.Deliver(ctx, a)
	require.ErrorIs(t, err, store.ErrUnavailable)
	require.Equal(t, 1, delivery.PartsSent(err), "part 1 was delivered before the pick of part 2 failed")
	w.restored.Wait()
	ok, err := ws.GiveBack(ctx, heldBy(a), time.Now().Add(-time.Second), delivery.PartsSent(err))
	require.NoError(t, err)
	require.True(t, ok)

	again := claimed2(t, ws, "big")
	require.Equal(t, 1, again.PartsSent)
	outcome, err := d.Deliver(ctx, again)
	require.NoError(t, err)
	require.Equal(t, store.Receipt{Outcome: store.Delivered, Robot: "r1", Merged: 1, Parts: 3}, outcome, "how it went: robot, alone, in three parts")
	require.Equal(t, []string{"(1/3)", "(2/3)", "(3/3)"}, w.parts(), "every part once, in order")
}

// The retry job's send of a split row whose second part cannot be picked keeps the part
// it reached: its next attempt sends from the second part.
func TestSplitAlertResumesFromThePartReachedInTheRetryJob(t *testing.T) {
	t.Parallel()
	w := newSplitWorld(t, 6*time.Second)
	_, fs := testenv.FailedSends(t)
	ctx := context.Background()
	_, err := fs.Record(ctx, store.NewFailedSend{MessageID: "big-row", Target: "ops", Payload: bigAlert(),
		ErrorClass: "transient", NextAttemptAt: time.Now()})
	require.NoError(t, err)
	job := delivery.NewRetryJob(delivery.New(delivery.Channels{"ops": w.snd}, stageFor(t, fs), fs, delivery.Options{}, discardLogger(), nil, time.Now),
		delivery.RetryOptions{})
	r, err := job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Retried: 1}, r)
	row, err := fs.Get(ctx, rowID(t, fs, "big-row"))
	require.NoError(t, err)
	require.Equal(t, 1, row.PartsSent)
	require.Zero(t, row.Attempts, "DingTalk was not asked: no attempt is counted")
	w.restored.Wait()

	r, err = job.RunOnce(ctx)
	require.NoError(t, err)
	require.Equal(t, delivery.Round{Delivered: 1}, r)
	require.Equal(t, []string{"(1/3)", "(2/3)", "(3/3)"}, w.parts(), "every part once, in order")
}
