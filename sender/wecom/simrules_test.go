package wecom_test

import (
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// WeCom's "@all" in mentioned_list (or mentioned_mobile_list) notifies everyone: the
// simulator shows it as "mention:all", as every platform's simulator shows everyone
// (sender.SimReceived.Markup), and as it shows markdown's <@all>.
func TestSimMentionOfEveryoneIsAll(t *testing.T) {
	for _, c := range []struct {
		body string
		want []string
	}{
		{`{"msgtype":"text","text":{"content":"disk full","mentioned_list":["@all","u7"]}}`, []string{"mention:all", "mention:u7"}},
		{`{"msgtype":"text","text":{"content":"disk full","mentioned_mobile_list":["@all","13800000000"]}}`, []string{"mention:all", "mention:13800000000"}},
		{`{"msgtype":"markdown","markdown":{"content":"disk full <@all>"}}`, []string{"mention:all"}},
	} {
		got, refused := wecom.SimRules{}.Check(sender.SimRequest{Request: httptest.NewRequest("POST", "/cgi-bin/webhook/send?key=k", strings.NewReader(c.body)),
			Body: []byte(c.body), Now: time.Now(), Skew: time.Hour})
		require.Nil(t, refused, c.body)
		require.Equal(t, c.want, got.Markup, c.body)
	}
}
