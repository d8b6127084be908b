package dingtalk

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
)

func TestParseBodyAccepts(t *testing.T) {
	cases := map[string]struct {
		body string
		typ  string
	}{
		"plain text":        {"disk full on db-3", TypeText},
		"json without type": {`{"alert":"x"}`, TypeText},
		"text":              {`{"msgtype":"text","text":{"content":"hi"},"at":{"atMobiles":["1380000"],"isAtAll":false}}`, TypeText},
		"markdown":          {`{"msgtype":"markdown","markdown":{"title":"T","text":"# hi"},"at":{"atUserIds":["u1"]}}`, TypeMarkdown},
		"link":              {`{"msgtype":"link","link":{"title":"T","text":"x","messageUrl":"https://e.x/1"}}`, TypeLink},
		"actionCard single": {`{"msgtype":"actionCard","actionCard":{"title":"T","text":"x","singleTitle":"open","singleURL":"https://e.x"}}`, TypeActionCard},
		"actionCard btns":   {`{"msgtype":"actionCard","actionCard":{"title":"T","text":"x","btns":[{"title":"a","actionURL":"https://e.x"}]}}`, TypeActionCard},
		"feedCard":          {`{"msgtype":"feedCard","feedCard":{"links":[{"title":"a","messageURL":"https://e.x","picURL":"https://e.x/p.png"}]}}`, TypeFeedCard},
		"long text (split)": {strings.Repeat("x", MaxBodyBytes+1), TypeText},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			m, err := ParseBody([]byte(c.body))
			require.NoError(t, err)
			require.Equal(t, c.typ, m.MsgType)
		})
	}
}

func TestParseBodyRejects(t *testing.T) {
	big := `{"msgtype":"link","link":{"title":"T","text":"` + strings.Repeat("x", MaxBodyBytes) + `","messageUrl":"https://e.x"}}`
	cases := map[string]struct{ body, reason string }{
		"empty":               {"", "empty"},
		"blank":               {"  \n", "empty"},
		"invalid utf-8":       {"\xff\xfe", "UTF-8"},
		"broken json":         {`{"msgtype":"text","text":{`, "not valid JSON"},
		"unknown type":        {`{"msgtype":"image"}`, `msgtype "image"`},
		"empty type":          {`{"msgtype":""}`, "msgtype is empty"},
		"text no content":     {`{"msgtype":"text","text":{}}`, "text.content"},
		"markdown no title":   {`{"msgtype":"markdown","markdown":{"text":"x"}}`, "markdown.title"},
		"link no url":         {`{"msgtype":"link","link":{"title":"T","text":"x"}}`, "messageUrl"},
		"actionCard no btn":   {`{"msgtype":"actionCard","actionCard":{"title":"T","text":"x"}}`, "singleTitle"},
		"actionCard bad btn":  {`{"msgtype":"actionCard","actionCard":{"title":"T","text":"x","btns":[{"title":"a"}]}}`, "btns[0]"},
		"feedCard empty":      {`{"msgtype":"feedCard","feedCard":{"links":[]}}`, "feedCard.links"},
		"feedCard no pic":     {`{"msgtype":"feedCard","feedCard":{"links":[{"title":"a","messageURL":"u"}]}}`, "links[0]"},
		"at on link":          {`{"msgtype":"link","link":{"title":"T","text":"x","messageUrl":"u"},"at":{"isAtAll":true}}`, "only honoured"},
		"wrong shape":         {`{"msgtype":"text","text":"hi"}`, "documented shape"},
		"link over the limit": {big, "at most 20000"},
		"text too long":       {strings.Repeat("y", MaxSplitBytes+1), "at most"},
	}
	for name, c := range cases {
		t.Run(name, func(t *testing.T) {
			_, err := ParseBody([]byte(c.body))
			require.ErrorIs(t, err, sender.ErrInvalidBody)
			require.Contains(t, err.Error(), c.reason)
		})
	}
}

func FuzzParseBody(f *testing.F) {
	for _, s := range []string{"hi", `{"msgtype":"text","text":{"content":"x"}}`, `{"msgtype":"feedCard"}`, "\xff", `{"msgtype":`} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := ParseBody(body)
		if err != nil {
			require.ErrorIs(t, err, sender.ErrInvalidBody)
			return
		}
		out, err := json.Marshal(m)
		require.NoError(t, err)
		back, err := ParseBody(out)
		require.NoError(t, err, "a parsed message must parse again: %s", out)
		require.Equal(t, m.MsgType, back.MsgType)
	})
}
