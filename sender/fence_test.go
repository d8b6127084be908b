package sender_test

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// robotServer is a DingTalk robot that accepts every request: it counts the requests it
// received and the connections opened to it.
type robotServer struct {
	url             string
	requests, conns atomic.Int32
}

func newRobotServer(t *testing.T) *robotServer {
	t.Helper()
	rs := &robotServer{}
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		rs.requests.Add(1)
		_, _ = io.Copy(io.Discard, r.Body)
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"errcode":0,"errmsg":"ok"}`)
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			rs.conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	rs.url = srv.URL
	return rs
}

// TestStaleConfirmSendsNothing: a request must start within the fence of its claim's
// confirm (the wheel stage's guard). The sender's clock is aged past the fence by the
// confirm itself, as if this replica were paused right after it: the request is stopped
// on its connection, before any of it is written, so the robot receives nothing, and
// the claim is confirmed again for the next attempt. Paused after every confirm, the
// send ends, after its attempts, with a transient failure wrapping ErrStaleConfirm;
// paused once, the next confirm is fresh and its request goes, once.
func TestStaleConfirmSendsNothing(t *testing.T) {
	t.Parallel()
	for _, coalesce := range []string{config.CoalesceAuto, config.CoalesceOff} {
		t.Run(coalesce, func(t *testing.T) {
			t.Parallel()
			robot := newRobotServer(t)
			rdb, prefix := testenv.Redis(t)
			const fence = time.Second
			var skew atomic.Int64 // how far the sender's clock is ahead
			now := func() time.Time { return time.Now().Add(time.Duration(skew.Load())) }
			pause := func() { skew.Add(int64(fence + time.Second)) }
			reg := prometheus.NewRegistry()
			opts := sender.Options{
				Targets: map[string]sender.Target{"ops": {Protocol: dingtalk.New(robot.url),
					Robots: []sender.Robot{{Name: "r1", Token: config.Secret("tok-fence-c0ffee")}}}},
				Limit: 19, HTTPTimeout: 2 * time.Second, Attempts: 3, BackoffBase: 10 * time.Millisecond,
				BackoffMax: 100 * time.Millisecond, Coalesce: coalesce, Fence: fence,
			}
			s, err := sender.NewChat(opts, store.NewRobotPool(rdb, prefix, time.Minute), testenv.Logger(), sender.NewMetrics(reg), now)
			require.NoError(t, err)
			t.Cleanup(s.Close)
			ctx := context.Background()

			var confirms atomic.Int32
			err = sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("paused after every confirm"),
				Claim: sender.ConfirmFunc(func(context.Context, int) error { confirms.Add(1); pause(); return nil })})
			require.ErrorIs(t, err, sender.ErrStaleConfirm)
			require.Equal(t, sender.ClassTransient, failure(t, err).Class)
			require.EqualValues(t, 3, confirms.Load(), "each attempt confirmed the claim again")
			require.Zero(t, robot.requests.Load(), "the robot received no request")
			require.Positive(t, robot.conns.Load(), "the requests had their connections: the fence stopped them there")
			require.EqualValues(t, 3, metric(t, reg, "rocketdelay_sender_requests_total"), "three stale_confirm, nothing else")

			confirms.Store(0)
			require.NoError(t, sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("paused once"),
				Claim: sender.ConfirmFunc(func(context.Context, int) error {
					if confirms.Add(1) == 1 {
						pause()
					}
					return nil
				})}))
			require.EqualValues(t, 2, confirms.Load())
			require.EqualValues(t, 1, robot.requests.Load(), "the request after the fresh confirm, and only it")
		})
	}
}
