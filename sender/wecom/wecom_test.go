package wecom

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
)

func TestParse(t *testing.T) {
	ch := New("")
	m, err := ch.Parse([]byte("disk full"))
	require.NoError(t, err)
	require.Equal(t, sender.Message{Format: sender.FormatText, Text: "disk full", Type: TypeText}, m)

	m, err = ch.Parse([]byte(`{"msgtype":"text","text":{"content":"cpu","mentioned_list":["wang","@all"],"mentioned_mobile_list":["138"]}}`))
	require.NoError(t, err)
	require.Equal(t, sender.Mentions{All: true, Users: []string{"wang"}, Mobiles: []string{"138"}}, m.Mentions)

	m, err = ch.Parse([]byte(`{"msgtype":"markdown","markdown":{"content":"**cpu** <@wang>"}}`))
	require.NoError(t, err)
	require.Equal(t, sender.FormatMarkdown, m.Format)
	require.Equal(t, "**cpu** <@wang>", m.Text)

	m, err = ch.Parse([]byte(`{"msgtype":"news","news":{"articles":[{"title":"t","url":"https://e"}]}}`))
	require.NoError(t, err)
	require.Equal(t, sender.FormatNative, m.Format)

	for body, why := range map[string]string{
		``:                                     "empty",
		`{"msgtype":"text"}`:                   "text.content",
		`{"msgtype":"markdown","markdown":{}}`: "markdown.content",
		`{"msgtype":"audio"}`:                  "not one of",
		`{"msgtype":"text", "text"`:            "not valid JSON",
		`{"msgtype":"text","text":{"content":"` + strings.Repeat("x", MaxSplitBytes+1) + `"}}`: "at most",
	} {
		_, err := ch.Parse([]byte(body))
		require.ErrorIs(t, err, sender.ErrInvalidBody, body)
		require.ErrorContains(t, err, why)
	}
}

// Markdown mentions users with <@userid>; a markdown message that mentions everyone or a
// mobile number goes as text with mention lists (WeCom's markdown cannot), under text's
// smaller size rule.
func TestRenderMentions(t *testing.T) {
	md := render(sender.Message{Format: sender.FormatMarkdown, Text: "**cpu** <@wang>", Mentions: sender.Mentions{Users: []string{"wang", "li"}}}).(Message)
	require.Equal(t, TypeMarkdown, md.MsgType)
	require.Equal(t, "**cpu** <@wang>\n<@li>", md.Markdown.Content)

	text := render(sender.Message{Format: sender.FormatMarkdown, Text: "**cpu**", Mentions: sender.Mentions{All: true, Mobiles: []string{"138"}}}).(Message)
	require.Equal(t, TypeText, text.MsgType)
	require.Equal(t, []string{"@all"}, text.Text.MentionedList)
	require.Equal(t, []string{"138"}, text.Text.MentionedMobileList)

	ch := New("")
	require.Equal(t, MaxMarkdownBytes-len("x"), ch.Room(sender.Message{Format: sender.FormatMarkdown, Text: "x"}))
	require.Equal(t, MaxTextBytes-len("x"), ch.Room(sender.Message{Format: sender.FormatMarkdown, Text: "x", Mentions: sender.Mentions{All: true}}))
}

// Splitting follows WeCom's rules: markdown content at most 4096 bytes, text 2048.
func TestSplitAtEachSizeRule(t *testing.T) {
	ch := New("")
	long := strings.Repeat("磁盘已满 disk full\n", 600) // about 13 KB
	for _, tc := range []struct {
		m     sender.Message
		limit int
	}{
		{sender.Message{Format: sender.FormatMarkdown, Text: long}, MaxMarkdownBytes},
		{sender.Message{Format: sender.FormatText, Text: long}, MaxTextBytes},
	} {
		parts, err := sender.Split(ch, tc.m, 0)
		require.NoError(t, err)
		require.GreaterOrEqual(t, len(parts), 13000/tc.limit)
		var joined strings.Builder
		for i, p := range parts {
			r := render(p).(Message)
			content := ""
			if r.Markdown != nil {
				content = r.Markdown.Content
			} else {
				content = r.Text.Content
			}
			require.LessOrEqual(t, len(content), tc.limit, "part %d", i+1)
			_, c, _ := strings.Cut(content, "\n")
			joined.WriteString(c)
		}
		require.Equal(t, long, joined.String())
	}
}

func TestClassify(t *testing.T) {
	now := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	answer := func(code int) sender.Answer {
		return sender.Answer{Status: 200, Header: http.Header{}, Body: fmt.Appendf(nil, `{"errcode":%d,"errmsg":"m"}`, code)}
	}
	for code, class := range map[int]sender.Class{
		45009: sender.ClassThrottled, 93000: sender.ClassRobotBroken, -1: sender.ClassTransient,
		40008: sender.ClassPermanent, 44004: sender.ClassPermanent, 40058: sender.ClassPermanent, 777: sender.ClassTransient,
	} {
		o := failures.Classify(answer(code), now)
		require.False(t, o.OK)
		require.Equal(t, class, o.Class, "errcode %d", code)
		require.Equal(t, code, o.Code)
	}
	require.True(t, failures.Classify(answer(0), now).OK)
	require.Equal(t, sender.ClassTransient, failures.Classify(sender.Answer{Status: 502, Header: http.Header{}}, now).Class)
	require.Equal(t, sender.ClassTransient, failures.Classify(sender.Answer{Status: 200, Header: http.Header{}, Body: []byte("<html>")}, now).Class)
}

// A text alert shows "<@all>" and "[x](url)" as written; merged with others into one
// markdown message it still does: merging never makes a mention or a link the
// configuration did not ask for. Its configured users are still mentioned.
func TestAMergedTextAlertMentionsNobodyByItsText(t *testing.T) {
	m := sender.Merge(New("").Style(), []sender.Message{
		{Format: sender.FormatText, Text: "disk full <@all> see [runbook](https://evil.example)", Mentions: sender.Mentions{Users: []string{"ana"}}},
		{Format: sender.FormatText, Text: "cpu high"},
	})
	require.Equal(t, sender.FormatMarkdown, m.Format)
	require.NotContains(t, m.Text, "<@all>")
	require.NotContains(t, m.Text, "[runbook](")
	require.Contains(t, m.Text, "&lt;@all&gt;", "shown as written")
	require.Contains(t, m.Text, "<@ana>", "the configured mention stays")
	body, err := New("").Body(m)
	require.NoError(t, err)
	require.NotContains(t, string(body), `"mentioned_list":["@all"]`)
}
