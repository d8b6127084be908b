package chatsim_test

import (
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type answer struct {
	status  int
	errcode int
	body    string
}

func post(t *testing.T, c *http.Client, base, token, secret string, ts time.Time, body string) answer {
	t.Helper()
	q := url.Values{"access_token": {token}}
	if secret != "" {
		ms := ts.UnixMilli()
		mac := hmac.New(sha256.New, []byte(secret))
		mac.Write([]byte(strconv.FormatInt(ms, 10) + "\n" + secret))
		q.Set("timestamp", strconv.FormatInt(ms, 10))
		q.Set("sign", base64.StdEncoding.EncodeToString(mac.Sum(nil)))
	}
	resp, err := c.Post(base+"?"+q.Encode(), "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	a := answer{status: resp.StatusCode, body: string(b)}
	var v struct{ Errcode int }
	if json.Unmarshal(b, &v) == nil {
		a.errcode = v.Errcode
	}
	return a
}

func noRedirects() *http.Client {
	return &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
}

func TestSimulator(t *testing.T) {
	sim, base := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{{Token: "t1", Secret: "SEC1"}, {Name: "kw", Token: "t2", Keyword: "alert"}},
		Limit:  3, Window: time.Minute, Throttle: time.Minute,
	})
	c := noRedirects()
	defer c.CloseIdleConnections()
	msg := `{"msgtype":"text","text":{"content":"an alert"}}`
	now := time.Now()

	require.Equal(t, 300001, post(t, c, base, "nope", "", now, msg).errcode)
	require.Equal(t, 310000, post(t, c, base, "t1", "", now, msg).errcode, "unsigned")
	require.Equal(t, 310000, post(t, c, base, "t1", "SECwrong", now, msg).errcode, "bad signature")
	require.Equal(t, 310000, post(t, c, base, "t1", "SEC1", now.Add(-2*time.Hour), msg).errcode, "stale timestamp")
	require.Equal(t, 310000, post(t, c, base, "t2", "", now, `{"msgtype":"text","text":{"content":"no keyword"}}`).errcode)
	require.Equal(t, 460101, post(t, c, base, "t2", "", now, `{"msgtype":"text","text":{"content":"alert `+strings.Repeat("x", 20000)+`"}}`).errcode)

	for range 3 {
		require.Equal(t, 0, post(t, c, base, "t1", "SEC1", now, msg).errcode)
	}
	require.Equal(t, 130101, post(t, c, base, "t1", "SEC1", now, msg).errcode, "over the limit")
	a := post(t, c, base, "t1", "SEC1", now, msg)
	require.Equal(t, http.StatusFound, a.status, "throttled")
	require.Equal(t, 2, sim.Stats().OverLimit)

	require.NoError(t, sim.Inject("t2", chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: -1, Count: 1}))
	require.NoError(t, sim.Inject("t2", chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503, RetryAfter: 2 * time.Second, Count: 1}))
	require.NoError(t, sim.Inject("t2", chatsim.Fault{Kind: chatsim.FaultMalformed, Count: 1}))
	require.NoError(t, sim.Inject("t2", chatsim.Fault{Kind: chatsim.FaultDrop, Count: 1}))
	require.Equal(t, -1, post(t, c, base, "t2", "", now, msg).errcode)
	require.Equal(t, 503, post(t, c, base, "t2", "", now, msg).status)
	require.Contains(t, post(t, c, base, "t2", "", now, msg).body, `"errmsg": `)
	resp, err := c.Post(base+"?access_token=t2", "application/json", strings.NewReader(msg))
	if err == nil {
		resp.Body.Close()
	}
	require.Error(t, err, "dropped connection")
	require.Equal(t, 0, post(t, c, base, "t2", "", now, msg).errcode)

	// An injected throttle redirects too, but that is the test's doing, not the sender's:
	// a fault, never over the limit.
	faults := sim.Stats().Faults
	require.NoError(t, sim.Inject("t2", chatsim.Fault{Kind: chatsim.FaultThrottle}))
	require.Equal(t, http.StatusFound, post(t, c, base, "t2", "", now, msg).status)
	require.Equal(t, 2, sim.Stats().OverLimit)
	require.Equal(t, faults+1, sim.Stats().Faults)
	sim.ClearFaults("t2")

	// The control API: messages and faults over HTTP.
	root := strings.TrimSuffix(base, dingtalk.SimPath)
	resp, err = c.Get(root + "/_sim/messages")
	require.NoError(t, err)
	var msgs []chatsim.Message
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&msgs))
	resp.Body.Close()
	require.Len(t, msgs, 4)
	require.Equal(t, "robot1", msgs[0].Robot)
	require.Equal(t, "kw", msgs[3].Robot)
	require.Equal(t, "an alert", msgs[3].Text)
	require.Len(t, sim.Accepted(), 4)

	resp, err = c.Post(root+"/_sim/faults?token=t2", "application/json", strings.NewReader(`{"kind":"errcode","errcode":310000,"count":1}`))
	require.NoError(t, err)
	resp.Body.Close()
	require.Equal(t, http.StatusNoContent, resp.StatusCode)
	require.Equal(t, 310000, post(t, c, base, "t2", "", now, msg).errcode)
}

// The limit's window slides over the whole Window, by the server's clock: the sends of
// a robot at its limit still count 40s into a minute's window (a simulator that forgot
// them after half the window accepted the third), and no longer once the window passed.
func TestWindowSlidesOverTheWholeWindow(t *testing.T) {
	var mu sync.Mutex
	now := time.Date(2026, 12, 5, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { mu.Lock(); defer mu.Unlock(); return now }
	advance := func(d time.Duration) { mu.Lock(); defer mu.Unlock(); now = now.Add(d) }
	_, base := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Token: "w1"}},
		Limit: 2, Window: time.Minute, Throttle: time.Second, Now: clock})
	c := noRedirects()
	defer c.CloseIdleConnections()
	msg := `{"msgtype":"text","text":{"content":"an alert"}}`
	for range 2 {
		require.Equal(t, 0, post(t, c, base, "w1", "", clock(), msg).errcode)
	}
	advance(40 * time.Second)
	require.Equal(t, 130101, post(t, c, base, "w1", "", clock(), msg).errcode, "the first two still count 40s later")
	advance(21 * time.Second) // 61s after them; the 1s throttle is over too
	require.Equal(t, 0, post(t, c, base, "w1", "", clock(), msg).errcode, "a window later they no longer count")
}

// A slow answer counts at its request's arrival, as a platform's gateway counts: with a
// limit of 1, a slowed request that arrived first is accepted, and one that arrived
// during its wait is over the limit (judged when the wait ended, the first was counted
// after the second, against a send later than itself, and refused). A slowed request
// whose client gives up leaves nothing accepted and its slot free.
func TestSlowAnswersCountAtArrival(t *testing.T) {
	var clock atomic.Int64
	t0 := time.Date(2026, 12, 5, 3, 0, 0, 0, time.UTC)
	clock.Store(t0.UnixNano())
	sim, base := testenv.DingTalkSim(t, chatsim.Options{
		Robots: []chatsim.Robot{{Token: "t1"}}, Limit: 1, Window: time.Minute, Throttle: time.Nanosecond,
		Now: func() time.Time { return time.Unix(0, clock.Load()) },
	})
	c := noRedirects()
	defer c.CloseIdleConnections()
	msg := `{"msgtype":"text","text":{"content":"an alert"}}`

	require.NoError(t, sim.Inject("t1", chatsim.Fault{Kind: chatsim.FaultSlow, Delay: time.Second, Count: 1}))
	first := make(chan answer)
	go func() { first <- post(t, c, base, "t1", "", t0, msg) }()
	// The first request is in (counted a few microseconds after this count): the second
	// arrives a second later by the simulator's clock.
	require.Eventually(t, func() bool { return sim.Stats().Requests == 1 }, 10*time.Second, time.Millisecond)
	clock.Store(t0.Add(time.Second).UnixNano())
	require.Equal(t, 130101, post(t, c, base, "t1", "", t0, msg).errcode, "the second is over the limit")
	require.Equal(t, 0, (<-first).errcode, "the first, slow, is accepted")
	require.Len(t, sim.Accepted(), 1)
	require.True(t, sim.Accepted()[0].At.Equal(t0), "accepted at its arrival")
	require.Equal(t, 1, sim.Stats().OverLimit)

	// A minute later the window is empty; a slowed request whose client gives up takes
	// nothing.
	clock.Store(t0.Add(2 * time.Minute).UnixNano())
	require.NoError(t, sim.Inject("t1", chatsim.Fault{Kind: chatsim.FaultSlow, Delay: time.Minute, Count: 1}))
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, base+"?access_token=t1", strings.NewReader(msg))
	require.NoError(t, err)
	_, err = c.Do(req)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	// Until the simulator sees the client gone, a request is over the limit and locks the
	// robot out for a nanosecond: each try comes a millisecond later by its clock.
	require.Eventually(t, func() bool {
		clock.Add(int64(time.Millisecond))
		a := post(t, c, base, "t1", "", t0, msg)
		return a.status == http.StatusOK && a.errcode == 0
	}, 10*time.Second, 10*time.Millisecond, "the given-up request left its slot free")
	require.Len(t, sim.Accepted(), 2)
}
