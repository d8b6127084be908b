package chatsim_test

import (
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/notify/chatsim"
	"github.com/rocketdelay/rocketdelay/notify/dingtalk"
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
