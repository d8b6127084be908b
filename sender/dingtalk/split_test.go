package dingtalk

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/sender"
)

// split splits m as the core does for a DingTalk robot with keyword, and returns the
// parts as DingTalk messages.
func split(t *testing.T, m Message, keyword string) ([]Message, error) {
	t.Helper()
	ch := New("")
	parts, err := sender.Split(ch, neutral(m), ch.KeywordRoom(keyword))
	out := make([]Message, len(parts))
	for i, p := range parts {
		out[i] = render(p)
	}
	return out, err
}

func TestSplitSmallMessageIsWhole(t *testing.T) {
	m := Message{MsgType: TypeText, Text: &Text{Content: "hello"}}
	parts, err := split(t, m, "")
	require.NoError(t, err)
	require.Equal(t, []Message{m}, parts)
}

func TestSplitText(t *testing.T) {
	var b strings.Builder
	for i := 0; b.Len() < 45000; i++ {
		b.WriteString(strings.Repeat("告警 <x> & \"q\" ", 3))
		b.WriteString("line\n")
	}
	content := b.String()
	m := Message{MsgType: TypeText, Text: &Text{Content: content}, At: &At{IsAtAll: true}}
	parts, err := split(t, m, "alert")
	require.NoError(t, err)
	require.Len(t, parts, 3)
	var joined strings.Builder
	for i, p := range parts {
		body, err := encodeBody(addKeyword(p, "alert"))
		require.NoError(t, err)
		require.LessOrEqual(t, len(body), MaxBodyBytes, "part %d", i+1)
		label := "(" + string(rune('1'+i)) + "/3)\n"
		require.True(t, strings.HasPrefix(p.Text.Content, label))
		joined.WriteString(strings.TrimPrefix(p.Text.Content, label))
		require.Equal(t, i == 0, p.At != nil, "mentions go with the first part")
	}
	require.Equal(t, content, joined.String())
}

func TestSplitMarkdownNumbersTitleAndText(t *testing.T) {
	m := Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "disk", Text: strings.Repeat("x", 30000)}}
	parts, err := split(t, m, "")
	require.NoError(t, err)
	require.Len(t, parts, 2)
	require.Equal(t, "disk (2/2)", parts[1].Markdown.Title)
	require.True(t, strings.HasPrefix(parts[1].Markdown.Text, "(2/2)\n"))
}

func TestSplitRefusesOtherTypes(t *testing.T) {
	m := Message{MsgType: TypeLink, Link: &Link{Title: "t", Text: strings.Repeat("x", MaxBodyBytes), MessageURL: "https://x"}}
	_, err := split(t, m, "")
	var f *sender.Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, sender.ClassPermanent, f.Class)
}

func TestSplitProperty(t *testing.T) {
	rapid.Check(t, func(rt *rapid.T) {
		unit := rapid.StringMatching(`[a-z\n"\\<\x01é告]{1,40}`).Draw(rt, "unit")
		content := strings.Repeat(unit, rapid.IntRange(1, 3000).Draw(rt, "repeat"))
		if len(content) > MaxSplitBytes {
			content = strings.ToValidUTF8(content[:MaxSplitBytes/2], "")
		}
		m := Message{MsgType: TypeText, Text: &Text{Content: content}}
		parts, err := split(t, m, "")
		if err != nil {
			rt.Fatal(err)
		}
		var joined strings.Builder
		for i, p := range parts {
			body, err := encodeBody(p)
			if err != nil || len(body) > MaxBodyBytes {
				rt.Fatalf("part %d: %d bytes, %v", i, len(body), err)
			}
			var back Message
			if err := json.Unmarshal(body, &back); err != nil {
				rt.Fatal(err)
			}
			c := back.Text.Content
			if len(parts) > 1 {
				_, c, _ = strings.Cut(c, "\n") // the part's label
			}
			joined.WriteString(c)
		}
		if joined.String() != content {
			rt.Fatalf("parts do not join back to the content")
		}
	})
}

func TestAddKeyword(t *testing.T) {
	text := Message{MsgType: TypeText, Text: &Text{Content: "disk full"}}
	got := addKeyword(text, "alert")
	require.Equal(t, "disk full\nalert", got.Text.Content)
	require.Equal(t, "disk full", text.Text.Content, "the original is not modified")
	require.Equal(t, "an alert", addKeyword(Message{MsgType: TypeText, Text: &Text{Content: "an alert"}}, "alert").Text.Content)

	md := addKeyword(Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "t", Text: "x"}}, "kw")
	require.Equal(t, "x\n\nkw", md.Markdown.Text)
	link := addKeyword(Message{MsgType: TypeLink, Link: &Link{Title: "t", Text: "x", MessageURL: "u"}}, "kw")
	require.Equal(t, "x kw", link.Link.Text)
	card := addKeyword(Message{MsgType: TypeActionCard, ActionCard: &ActionCard{Title: "t", Text: "x"}}, "kw")
	require.Equal(t, "x\n\nkw", card.ActionCard.Text)
	feed := Message{MsgType: TypeFeedCard, FeedCard: &FeedCard{Links: []FeedLink{{Title: "a"}, {Title: "b"}}}}
	got = addKeyword(feed, "kw")
	require.Equal(t, "a kw", got.FeedCard.Links[0].Title)
	require.Equal(t, "a", feed.FeedCard.Links[0].Title)
}

func TestMergedMarkdownFormat(t *testing.T) {
	ch := New("")
	// Due order is the core's; here the alerts come in it, the link left out (it goes alone).
	ms := []Message{
		{MsgType: TypeText, Text: &Text{Content: "disk full on host-a\nsecond line"}},
		{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "CPU high", Text: "host **b** at 97%"},
			At: &At{AtMobiles: []string{"13800000001"}, AtUserIDs: []string{"u7"}}},
		{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "Mem", Text: "## Mem\nswap @13800000002 in use"},
			At: &At{AtMobiles: []string{"13800000002", "13800000001"}, IsAtAll: true}},
	}
	var neutrals []sender.Message
	for _, m := range ms {
		neutrals = append(neutrals, neutral(m))
	}
	m := render(sender.Merge(ch.Style(), neutrals))
	require.Equal(t, TypeMarkdown, m.MsgType)
	require.Equal(t, "3 alerts: disk full on host-a", m.Markdown.Title)
	require.Equal(t, "#### 3 alerts"+
		"\n\n---\n\ndisk full on host-a\nsecond line"+
		"\n\n---\n\n#### CPU high\n\nhost **b** at 97%\n\n@13800000001 @u7"+
		"\n\n---\n\n## Mem\nswap @13800000002 in use\n\n@13800000001",
		m.Markdown.Text)
	require.Equal(t, &At{AtMobiles: []string{"13800000001", "13800000002"}, AtUserIDs: []string{"u7"}, IsAtAll: true}, m.At)
	body, err := encodeBody(m)
	require.NoError(t, err)
	require.Contains(t, string(body), `"at":{"atMobiles":["13800000001","13800000002"],"atUserIds":["u7"],"isAtAll":true}`)
	require.False(t, neutral(Message{MsgType: TypeLink, Link: &Link{Title: "l", Text: "x", MessageURL: "https://e"}}).Mergeable(),
		"a link goes alone")

	// A long first title is cut.
	long := strings.Repeat("告警", 40)
	first := sender.Merge(ch.Style(), []sender.Message{{Format: sender.FormatText, Text: "\n  " + long + "\nrest"}, {Format: sender.FormatText, Text: "b"}})
	require.Equal(t, "2 alerts: "+string([]rune(long)[:47])+"…", first.Title)
}
