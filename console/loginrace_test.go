package console_test

import (
	"context"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/console"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// together holds each login's look at the throttle until n logins are at it, so that
// they ask at once.
type together struct {
	console.Sessions
	mu      sync.Mutex
	n       int
	arrived chan struct{}
}

func (g *together) LoginAttempt(ctx context.Context, client string, l store.LoginLimits) (time.Duration, error) {
	g.mu.Lock()
	g.n--
	if g.n == 0 {
		close(g.arrived)
	}
	g.mu.Unlock()
	select {
	case <-g.arrived:
	case <-time.After(5 * time.Second):
	}
	return g.Sessions.LoginAttempt(ctx, client, l)
}

// Ten wrong logins from one client at once: five are tried and refused (401), the other
// five wait out the window (429). On the code before, the throttle read the count, the
// token was compared, and only then the failure counted: all ten were tried.
func TestConsoleLoginsAtOnceAreThrottled(t *testing.T) {
	const n = 10
	rdb, prefix := testenv.Redis(t)
	g := &together{Sessions: store.NewConsoleAccess(rdb, prefix), n: n, arrived: make(chan struct{})}
	s := newSiteWith(t, console.Access{Token: token, Sessions: g})
	codes := make(chan int, n)
	var wg sync.WaitGroup
	for range n {
		wg.Go(func() { codes <- s.another().loginFrom("", "wrong", false).StatusCode })
	}
	wg.Wait()
	close(codes)
	tried := 0
	for c := range codes {
		if c == http.StatusUnauthorized {
			tried++
		} else {
			require.Equal(t, http.StatusTooManyRequests, c)
		}
	}
	require.Equal(t, 5, tried, "five guesses tried, no more")
}
