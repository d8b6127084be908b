package dingtalk_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
)

// DingTalk's at field (atMobiles, atUserIds, isAtAll) exists for text and markdown only:
// the simulator shows the mentions of those two, and none of a link, actionCard or
// feedCard that carries one.
func TestSimMentionsOnlyTextAndMarkdown(t *testing.T) {
	const at = `"at":{"isAtAll":true,"atMobiles":["13800000000"],"atUserIds":["u7"]}`
	mentions := []string{"mention:all", "mention:13800000000", "mention:u7"}
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"msgtype":"text","text":{"content":"disk full"},` + at + `}`, mentions},
		{`{"msgtype":"markdown","markdown":{"title":"disk","text":"full"},` + at + `}`, mentions},
		{`{"msgtype":"link","link":{"title":"disk","text":"full","messageUrl":"https://example.com/d"},` + at + `}`, nil},
		{`{"msgtype":"actionCard","actionCard":{"title":"disk","text":"full"},` + at + `}`, nil},
		{`{"msgtype":"feedCard","feedCard":{"links":[{"title":"disk"}]},` + at + `}`, nil},
	} {
		got, refused := dingtalk.SimRules{}.Check(sender.SimRequest{Request: httptest.NewRequest("POST", "/robot/send?access_token=t", strings.NewReader(c.body)),
			Body: []byte(c.body), Now: time.Now(), Skew: time.Hour})
		require.Nil(t, refused, c.body)
		require.Equal(t, c.want, got.Markup, "markup of a %s", got.MsgType)
	}
}
