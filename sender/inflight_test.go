package sender_test

import (
	"bytes"
	"context"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/netproxy"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// A request slow to reach the platform keeps its robot's slot until it is answered. The
// platform counts a send when the request arrives; a slot freed one window after the
// pick (as the pool did before a send was held in flight) let the next send overtake
// the slow one and reach the platform first, and the slow one then went over the
// robot's limit. Staged with a proxy that holds the first request on its way for four
// windows, and judged at the simulator: both delivered, the slow one first, none over
// the limit.
func TestSlowRequestKeepsItsSlotUntilAnswered(t *testing.T) {
	t.Parallel()
	const window = 500 * time.Millisecond
	var ding sender.Platform
	for _, p := range platforms.All {
		if p.Kind() == dingtalk.Kind {
			ding = p
		}
	}
	w := newChatWorld(t, platform{kind: dingtalk.Kind, desc: ding, limit: 1}, window, chatsim.Options{Limit: 1},
		sender.Robot{Name: "r1", Token: config.Secret("tok-slow-arrival-51")})
	base, err := url.Parse(w.base)
	require.NoError(t, err)
	proxy, err := netproxy.Start(base.Host)
	require.NoError(t, err)
	release := make(chan struct{})
	t.Cleanup(func() {
		select {
		case <-release:
		default:
			close(release)
		}
		proxy.Close()
	})
	base.Host = proxy.Addr()
	w.base = base.String()

	o := fastOptions()
	o.HTTPTimeout, o.Cooldown, o.Coalesce = 10*time.Second, window, config.CoalesceOff
	s := w.sender(t, o, sender.Target{}, prometheus.NewRegistry())
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()

	held := proxy.HoldRequest(func(b []byte) bool { return bytes.Contains(b, []byte("slow to arrive")) }, release)
	slow := make(chan error, 1)
	go func() { slow <- sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("slow to arrive")}) }()
	select {
	case <-held:
	case err := <-slow:
		t.Fatalf("the first send ended before its request was held: %v", err)
	}
	next := make(chan error, 1)
	go func() { next <- sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("sent next")}) }()
	// The overtaking send went a window after the slow one's pick; give it four windows,
	// watching the simulator, before the slow request goes on.
	for deadline := time.Now().Add(4 * window); time.Now().Before(deadline) && len(w.sim.Accepted()) == 0; {
		time.Sleep(10 * time.Millisecond)
	}
	close(release)
	require.NoError(t, <-slow)
	require.NoError(t, <-next)

	got := w.sim.Accepted()
	require.Len(t, got, 2)
	require.Contains(t, content(t, got[0]), "slow to arrive", "the held request reached the robot first")
	require.Contains(t, content(t, got[1]), "sent next")
	require.GreaterOrEqual(t, got[1].At.Sub(got[0].At), window, "a window apart at the robot")
	require.Zero(t, w.sim.Stats().OverLimit, "no request over the robot's limit")
}
