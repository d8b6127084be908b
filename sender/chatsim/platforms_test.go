package chatsim_test

import (
	"encoding/json"
	"io"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// reply is an answer of the simulator: status and the platform's code.
type reply struct {
	status int
	code   int
}

func postJSON(t *testing.T, url, body string) reply {
	t.Helper()
	resp, err := http.Post(url, "application/json", strings.NewReader(body))
	require.NoError(t, err)
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	require.NoError(t, err)
	var v struct {
		Errcode *int `json:"errcode"`
		Code    *int `json:"code"`
	}
	_ = json.Unmarshal(b, &v)
	r := reply{status: resp.StatusCode}
	switch {
	case v.Errcode != nil:
		r.code = *v.Errcode
	case v.Code != nil:
		r.code = *v.Code
	}
	return r
}

// WeCom's robots: the key in the query, 93000 for one it does not know, the content
// sizes, 20 per minute answered 45009 past it, and no lock-out.
func TestWeComRules(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 7, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sim, root := testenv.ChatSim(t, []sender.Platform{wecom.Platform},
		chatsim.Options{Robots: []chatsim.Robot{{Name: "w1", Token: "key-1"}}, Now: clock})
	base := sim.URL(root, "wecom")
	require.Equal(t, root+wecom.SimPath, base)
	text := func(s string) string { return `{"msgtype":"text","text":{"content":` + strconv.Quote(s) + `}}` }

	require.Equal(t, reply{200, 93000}, postJSON(t, base+"?key=nope", text("x")))
	require.Equal(t, reply{200, 40058}, postJSON(t, base+"?key=key-1", text(strings.Repeat("x", wecom.MaxTextBytes+1))))
	require.Equal(t, reply{200, 40058}, postJSON(t, base+"?key=key-1",
		`{"msgtype":"markdown","markdown":{"content":"`+strings.Repeat("x", wecom.MaxMarkdownBytes+1)+`"}}`))
	require.Equal(t, reply{200, 0}, postJSON(t, base+"?key=key-1",
		`{"msgtype":"markdown","markdown":{"content":"`+strings.Repeat("x", wecom.MaxMarkdownBytes)+`"}}`), "4096 bytes fit")
	require.Equal(t, reply{200, 40008}, postJSON(t, base+"?key=key-1", `{"msgtype":"audio"}`))
	for range 19 {
		require.Equal(t, reply{200, 0}, postJSON(t, base+"?key=key-1", text("x")))
	}
	require.Equal(t, reply{200, 45009}, postJSON(t, base+"?key=key-1", text("one too many")))
	now = now.Add(time.Minute)
	require.Equal(t, reply{200, 0}, postJSON(t, base+"?key=key-1", text("a minute later")), "no lock-out")
	st := sim.Stats()
	require.Equal(t, 1, st.OverLimit)
	require.Equal(t, 21, st.Accepted)
	require.Equal(t, "wecom", sim.Accepted()[0].Kind)
}

// Feishu's bots: the token in the path, the signature in the body, the keyword, 100 per
// minute and 5 per second answered 9499 with HTTP 400, and 11232 past 3 per second in
// the ten seconds after :00 and :30.
func TestFeishuRules(t *testing.T) {
	now := time.Date(2026, 12, 4, 10, 7, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	sim, root := testenv.ChatSim(t, []sender.Platform{feishu.Platform}, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "f1", Token: "hook-1", Secret: "fs-secret"}, {Name: "f2", Token: "hook-2", Keyword: "告警"}}, Now: clock})
	base := sim.URL(root, "feishu")
	signed := func(ts int64, text string) string {
		return `{"timestamp":"` + strconv.FormatInt(ts, 10) + `","sign":"` + feishu.Sign("fs-secret", ts) +
			`","msg_type":"text","content":{"text":` + strconv.Quote(text) + `}}`
	}
	plain := func(text string) string { return `{"msg_type":"text","content":{"text":` + strconv.Quote(text) + `}}` }

	require.Equal(t, reply{200, 19001}, postJSON(t, base+"/nope", plain("x")))
	require.Equal(t, reply{200, 19021}, postJSON(t, base+"/hook-1", plain("unsigned")))
	require.Equal(t, reply{200, 19021}, postJSON(t, base+"/hook-1", signed(now.Add(-2*time.Hour).Unix(), "stale")))
	require.Equal(t, reply{200, 19024}, postJSON(t, base+"/hook-2", plain("no keyword")))
	require.Equal(t, reply{200, 19001}, postJSON(t, base+"/hook-2", plain("告警 "+strings.Repeat("x", feishu.MaxBodyBytes))))

	for i := range 5 {
		require.Equal(t, reply{200, 0}, postJSON(t, base+"/hook-1", signed(now.Unix(), "ok "+strconv.Itoa(i))))
	}
	require.Equal(t, reply{400, 9499}, postJSON(t, base+"/hook-1", signed(now.Unix(), "sixth in a second")))
	now = now.Add(time.Second)
	require.Equal(t, reply{200, 0}, postJSON(t, base+"/hook-1", signed(now.Unix(), "the next second")), "no lock-out")

	// The top of the hour: 3 per second, then 11232, which the bot's own limits did not cause.
	now = time.Date(2026, 12, 4, 11, 0, 3, 0, time.UTC)
	for range feishu.SimHotPerSecond {
		require.Equal(t, reply{200, 0}, postJSON(t, base+"/hook-2", plain("告警 at the top of the hour")))
	}
	require.Equal(t, reply{200, 11232}, postJSON(t, base+"/hook-2", plain("告警 busy")))
	st := sim.Stats()
	require.Equal(t, 1, st.OverLimit)
	require.Equal(t, 1, st.Busy)
	require.Equal(t, "feishu", sim.Accepted()[0].Kind)
	require.Equal(t, "ok 0", sim.Accepted()[0].Text)
}

// One server serves the three platforms at once, each robot at its platform's path.
func TestOneServerForEveryPlatform(t *testing.T) {
	sim, root := testenv.ChatSim(t, platforms.All,
		chatsim.Options{Robots: []chatsim.Robot{{Token: "t"}, {Kind: "wecom", Token: "t"}, {Kind: "feishu", Token: "t"}}})
	require.Equal(t, reply{200, 0}, postJSON(t, sim.URL(root, "dingtalk")+"?access_token=t", `{"msgtype":"text","text":{"content":"d"}}`))
	require.Equal(t, reply{200, 0}, postJSON(t, sim.URL(root, "wecom")+"?key=t", `{"msgtype":"text","text":{"content":"w"}}`))
	require.Equal(t, reply{200, 0}, postJSON(t, sim.URL(root, "feishu")+"/t", `{"msg_type":"text","content":{"text":"f"}}`))
	var kinds []string
	for _, m := range sim.Accepted() {
		kinds = append(kinds, m.Kind+":"+m.Text)
	}
	require.Equal(t, []string{"dingtalk:d", "wecom:w", "feishu:f"}, kinds)
}
