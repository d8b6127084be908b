package feishu

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
)

// The expected values were computed apart from this package, from the documented
// algorithm, with Python:
//
//	base64.b64encode(hmac.new((ts + "\n" + secret).encode(), b"", sha256).digest())
func TestSignKnownVectors(t *testing.T) {
	require.Equal(t, "3/MaVZ8JLIy4TUG+7KSFJqvUkTKd+HWY8g+56DZWq8s=", Sign("demo-secret", 1599360473))
	require.Equal(t, "c7GgcKisunsiSPO7ZCsL00npUorLhh0AnimLTZ8nP6k=", Sign("fs-secret-1", 1700000000))
}

func TestParse(t *testing.T) {
	ch := New("")
	m, err := ch.Parse([]byte("disk full"))
	require.NoError(t, err)
	require.Equal(t, sender.Message{Format: sender.FormatText, Text: "disk full", Type: TypeText}, m)

	m, err = ch.Parse([]byte(`{"msg_type":"text","content":{"text":"cpu <at user_id=\"ou_1\"></at>"}}`))
	require.NoError(t, err)
	require.Equal(t, sender.FormatText, m.Format)
	require.Equal(t, `cpu <at user_id="ou_1"></at>`, m.Text)

	for _, native := range []string{
		`{"msg_type":"post","content":{"post":{"zh_cn":{"title":"t","content":[[{"tag":"text","text":"x"}]]}}}}`,
		`{"msg_type":"interactive","card":{"elements":[{"tag":"markdown","content":"**x**"}]}}`,
		`{"msg_type":"image","content":{"image_key":"img_1"}}`,
		`{"msg_type":"share_chat","content":{"share_chat_id":"oc_1"}}`,
	} {
		m, err := ch.Parse([]byte(native))
		require.NoError(t, err, native)
		require.Equal(t, sender.FormatNative, m.Format, native)
		require.False(t, m.Mergeable())
	}
	for body, why := range map[string]string{
		``:                              "empty",
		`{"msg_type":"text"}`:           "content.text",
		`{"msg_type":"interactive"}`:    "needs card",
		`{"msg_type":"audio"}`:          "not one of",
		`{"msg_type":"text", "content"`: "not valid JSON",
		"\xff":                          "UTF-8",
		`{"msg_type":"post","content":{"post":"` + strings.Repeat("x", MaxBodyBytes) + `"}}`: "at most",
	} {
		_, err := ch.Parse([]byte(body))
		require.ErrorIs(t, err, sender.ErrInvalidBody, body)
		require.ErrorContains(t, err, why)
	}
}

// Text stays text with its mentions as <at user_id>; markdown becomes a card with the
// title as its header and the mentions as <at id>; the body producers publish reads
// back as the same message.
func TestRenderAndBody(t *testing.T) {
	ch := New("")
	text := sender.Message{Format: sender.FormatText, Text: "disk full", Mentions: sender.Mentions{All: true, Users: []string{"ou_a"}}}
	e, err := render(text, "kw")
	require.NoError(t, err)
	require.Equal(t, TypeText, e.MsgType)
	require.JSONEq(t, `{"text":"disk full\n<at user_id=\"all\">所有人</at> <at user_id=\"ou_a\"></at>\nkw"}`, string(e.Content))

	md := sender.Message{Format: sender.FormatMarkdown, Title: "CPU", Text: "**high**", Mentions: sender.Mentions{Users: []string{"ou_b"}, Mobiles: []string{"138"}}}
	e, err = render(md, "")
	require.NoError(t, err)
	require.Equal(t, TypeInteractive, e.MsgType)
	var card struct {
		Header struct {
			Title struct{ Tag, Content string } `json:"title"`
		} `json:"header"`
		Elements []struct{ Tag, Content string } `json:"elements"`
	}
	require.NoError(t, json.Unmarshal(e.Card, &card))
	require.Equal(t, "CPU", card.Header.Title.Content)
	require.Equal(t, "**high**\n<at id=ou_b></at>", card.Elements[0].Content, "Feishu cannot mention a mobile number")

	body, err := ch.Body(text)
	require.NoError(t, err)
	back, err := ch.Parse(body)
	require.NoError(t, err)
	require.Equal(t, "disk full\n<at user_id=\"all\">所有人</at> <at user_id=\"ou_a\"></at>", back.Text)

	// A keyword reaches native cards and posts too.
	native, err := ch.Parse([]byte(`{"msg_type":"interactive","card":{"elements":[{"tag":"markdown","content":"x"}]}}`))
	require.NoError(t, err)
	e, err = render(native, "告警")
	require.NoError(t, err)
	require.Contains(t, string(e.Card), `"content":"告警"`)
}

// A message over 20 KB is split into parts that each fit with the signature's fields.
func TestSplitAtTheBodyLimit(t *testing.T) {
	ch := New("")
	long := strings.Repeat("磁盘已满 disk full\n", 3000)
	parts, err := sender.Split(ch, sender.Message{Format: sender.FormatMarkdown, Title: "disk", Text: long}, ch.KeywordRoom("kw"))
	require.NoError(t, err)
	require.Greater(t, len(parts), 2)
	for i, p := range parts {
		e, err := render(p, "kw")
		require.NoError(t, err)
		e.Timestamp, e.Sign = "1700000000", Sign("secret", 1700000000)
		body, err := sender.EncodeJSON(e)
		require.NoError(t, err)
		require.LessOrEqual(t, len(body), MaxBodyBytes, "part %d", i+1)
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	answer := func(status int, body string) sender.Answer {
		return sender.Answer{Status: status, Header: http.Header{"Content-Type": {"application/json"}}, Body: []byte(body)}
	}
	code := func(c int, msg string) string { return fmt.Sprintf(`{"code":%d,"msg":%q,"data":{}}`, c, msg) }
	cases := []struct {
		name  string
		a     sender.Answer
		ok    bool
		class sender.Class
		code  int
	}{
		{"ok", answer(200, code(0, "success")), true, "", 0},
		{"ok, the older answer", answer(200, `{"StatusCode":0,"StatusMessage":"success"}`), true, "", 0},
		{"9499 with HTTP 400", answer(400, code(9499, "too many request")), false, sender.ClassThrottled, 9499},
		{"11232 frequency limited", answer(200, code(11232, "frequency limited")), false, sender.ClassThrottled, 11232},
		{"19021 sign", answer(200, code(19021, "sign match fail")), false, sender.ClassRobotBroken, 19021},
		{"19024 keyword", answer(200, code(19024, "Key Words Not Found")), false, sender.ClassRobotBroken, 19024},
		{"19007 bot not enabled", answer(200, code(19007, "Bot Not Enabled")), false, sender.ClassRobotBroken, 19007},
		{"19001 token invalid", answer(200, code(19001, "param invalid: incoming webhook access token invalid")), false, sender.ClassRobotBroken, 19001},
		{"19001 param invalid", answer(400, code(19001, "param invalid: the message has no content")), false, sender.ClassPermanent, 19001},
		{"unknown code", answer(200, code(123, "new")), false, sender.ClassTransient, 123},
		{"503 page", sender.Answer{Status: 503, Header: http.Header{}, Body: []byte("<html>")}, false, sender.ClassTransient, 0},
		{"429", sender.Answer{Status: 429, Header: http.Header{}}, false, sender.ClassTransient, 0},
		{"404 page", sender.Answer{Status: 404, Header: http.Header{}, Body: []byte("nope")}, false, sender.ClassPermanent, 0},
		{"200 not JSON", sender.Answer{Status: 200, Header: http.Header{}, Body: []byte("<html>")}, false, sender.ClassTransient, 0},
		{"network error", sender.Answer{Err: fmt.Errorf("connection refused")}, false, sender.ClassTransient, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			o := failures.Classify(c.a, now)
			require.Equal(t, c.ok, o.OK, o.Reason)
			require.Equal(t, c.class, o.Class, o.Reason)
			require.Equal(t, c.code, o.Code)
			require.Equal(t, c.code == CodeFreqLimited, o.Busy, "only a busy moment is the platform's, not the bot's")
		})
	}
}

// The card Body renders for a markdown message (what the Alertmanager receiver and the
// publish API's markdown publish) reads back as that markdown message, so that the core
// may merge it with others; a card of any other shape stays the producer's own.
func TestMarkdownBodyReadsBackAsMarkdown(t *testing.T) {
	ch := New("")
	for _, md := range []sender.Message{
		{Format: sender.FormatMarkdown, Type: TypeInteractive, Title: "[FIRING:1] DataCheck", Text: "**group** g0001\n> row 1 is dirty"},
		{Format: sender.FormatMarkdown, Type: TypeInteractive, Text: "no title"},
	} {
		body, err := ch.Body(md)
		require.NoError(t, err)
		back, err := ch.Parse(body)
		require.NoError(t, err)
		require.True(t, back.Mergeable(), "%s", body)
		require.Equal(t, md, back)
		again, err := ch.Body(back)
		require.NoError(t, err)
		require.Equal(t, string(body), string(again))
	}
	// Over the body limit it is split like any markdown, not refused.
	long := sender.Message{Format: sender.FormatMarkdown, Type: TypeInteractive, Title: "many", Text: strings.Repeat("row is dirty\n", 3000)}
	body, err := ch.Body(long)
	require.NoError(t, err)
	back, err := ch.Parse(body)
	require.NoError(t, err)
	require.Equal(t, long, back)
	parts, err := sender.Split(ch, back, 0)
	require.NoError(t, err)
	require.Greater(t, len(parts), 1)

	for _, native := range []string{
		`{"msg_type":"interactive","card":{"config":{"wide_screen_mode":true},"elements":[{"tag":"markdown","content":"a"},{"tag":"hr"}]}}`,
		`{"msg_type":"interactive","card":{"config":{"wide_screen_mode":true},"elements":[{"tag":"markdown","content":"a"}],"header":{"template":"red","title":{"tag":"plain_text","content":"t"}}}}`,
		`{"msg_type":"interactive","card":{"config":{"wide_screen_mode":true,"enable_forward":false},"elements":[{"tag":"markdown","content":"a"}]}}`,
		`{"msg_type":"interactive","card":{"config":{"wide_screen_mode":true},"elements":[{"tag":"markdown","content":"a","text_align":"center"}]}}`,
	} {
		m, err := ch.Parse([]byte(native))
		require.NoError(t, err)
		require.Equal(t, sender.FormatNative, m.Format, native)
	}
}

// A text alert shows "[x](url)" and "![i](url)" as written; merged with others into one
// card's markdown it still does: merging never makes a link or an image. Its mentions
// (<at user_id>, which a text message makes) stay mentions, in the card's syntax, and its
// configured users are still mentioned.
func TestAMergedTextAlertMentionsNobodyByItsText(t *testing.T) {
	text := `see [x](https://evil.example) ![i](https://i.example/a.png) <b>&amp; <at user_id="ou_bo">Bo</at>`
	m := sender.Merge(New("").Style(), []sender.Message{
		{Format: sender.FormatText, Text: text, Mentions: sender.Mentions{Users: []string{"ou_ana"}}},
		{Format: sender.FormatText, Text: "cpu high"},
	})
	require.Equal(t, sender.FormatMarkdown, m.Format)
	body, err := New("").Body(m)
	require.NoError(t, err)
	got, refused := SimRules{}.Check(sender.SimRequest{Body: body})
	require.Nil(t, refused)
	require.Equal(t, TypeInteractive, got.MsgType)
	require.Equal(t, []string{"mention:ou_bo", "mention:ou_ana"}, got.Markup, "no link, no image: %s", got.Text)
	require.Contains(t, got.Text, "see &#91;x&#93;(https://evil.example) !&#91;i&#93;(https://i.example/a.png) &lt;b&gt;&amp;amp; <at id=ou_bo></at>",
		"shown as written")
}

// withKeyword adds the keyword to every language of a post: a post in three languages
// that the check accepts for a target whose bots have a keyword still fits Feishu's
// body limit once the keyword is in each language and the body is signed.
func TestAPostInThreeLanguagesFitsWithItsKeyword(t *testing.T) {
	const keyword = "生产环境告警关键词"
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{"ops": {Protocol: New(""),
		Robots: []sender.Robot{{Name: "f1", Token: "tok-1", SigningSecret: "fs-secret", Keyword: keyword}}}}},
		nil, slog.New(slog.DiscardHandler), nil, nil)
	require.NoError(t, err)
	post := func(pad int) []byte {
		lang := func(n int) string {
			return fmt.Sprintf(`{"title":"t","content":[[{"tag":"text","text":%q}]]}`, strings.Repeat("x", n))
		}
		third := pad / 3
		return fmt.Appendf(nil, `{"msg_type":"post","content":{"post":{"zh_cn":%s,"en_us":%s,"ja_jp":%s}}}`,
			lang(third), lang(third), lang(pad-2*third))
	}
	pad := MaxBodyBytes
	for chat.Check("ops", post(pad)) != nil { // the largest post the check accepts
		pad--
		require.Greater(t, pad, MaxBodyBytes-1000, "the check accepts posts near the limit")
	}
	m, err := New("").Parse(post(pad))
	require.NoError(t, err)
	e, err := render(m, keyword)
	require.NoError(t, err)
	require.Equal(t, 3, strings.Count(string(e.Content), keyword), "the keyword is in every language")
	e.Timestamp, e.Sign = "1700000000", Sign("fs-secret", 1700000000)
	sent, err := sender.EncodeJSON(e)
	require.NoError(t, err)
	require.LessOrEqual(t, len(sent), MaxBodyBytes, "a %d-byte post the check accepted", len(post(pad)))
}
