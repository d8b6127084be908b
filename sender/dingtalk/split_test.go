package dingtalk

import (
	"encoding/json"
	"fmt"
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
	require.True(t, strings.HasPrefix(parts[0].Markdown.Text, "(1/2)\nxxx"))
	require.True(t, strings.HasPrefix(parts[1].Markdown.Text, "(2/2) xxx"), "the second part continues the first's line")
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
				label := fmt.Sprintf("(%d/%d)", i+1, len(parts))
				sep := "\n" // a part starts a line where the content does, else continues its label's
				if i > 0 && !strings.HasSuffix(joined.String(), "\n") {
					sep = " "
				}
				var ok bool
				if c, ok = strings.CutPrefix(c, label+sep); !ok {
					rt.Fatalf("part %d does not start with %q: %.20q", i+1, label+sep, back.Text.Content)
				}
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

// firstPartRoom is how many bytes of a plain line of "x" the first part of a split
// markdown alert titled title holds.
func firstPartRoom(t *testing.T, title string) int {
	t.Helper()
	parts, err := split(t, Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: title, Text: strings.Repeat("x", 3*MaxBodyBytes)}}, "")
	require.NoError(t, err)
	require.Greater(t, len(parts), 1)
	return len(parts[0].Markdown.Text) - len("(1/4)\n")
}

// A part cut in the middle of a line keeps the continued text on its label's line: a
// label value holding "### heading" (or "- ", "> ", "1. ") that was mid-line in the alert
// is mid-line in every part, so splitting never makes it a heading or a list.
func TestSplitMidLineNeverStartsALine(t *testing.T) {
	room := firstPartRoom(t, "disk")
	text := strings.Repeat("x", room) + "### INJECTED HEADING " + strings.Repeat("y", 25000)
	parts, err := split(t, Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "disk", Text: text}}, "")
	require.NoError(t, err)
	require.Len(t, parts, 3)
	require.True(t, strings.HasSuffix(parts[0].Markdown.Text, "x"), "the cut falls right before the heading")
	var joined strings.Builder
	for i, p := range parts {
		lines := strings.Split(p.Markdown.Text, "\n")
		if i > 0 {
			for _, line := range lines {
				require.False(t, strings.HasPrefix(strings.TrimSpace(line), "#"), "part %d has a heading: %.40q", i+1, line)
			}
		}
		joined.WriteString(stripLabel(t, p.Markdown.Text, i+1, len(parts)))
	}
	require.Equal(t, text, joined.String())
}

// stripLabel is a part's text without its label: "(i/n)\n" before text that starts a
// line in the alert, "(i/n) " before text that continues one.
func stripLabel(t require.TestingT, text string, i, n int) string {
	label := fmt.Sprintf("(%d/%d)", i, n)
	c, ok := strings.CutPrefix(text, label)
	require.True(t, ok, "part %d starts with its label: %.20q", i, text)
	require.True(t, strings.HasPrefix(c, "\n") || (i > 1 && strings.HasPrefix(c, " ")), "part %d: %.20q", i, text)
	return c[1:]
}

// DingTalk highlights a markdown mention only when the text names the person too, and
// Body names them at the end of the text: the one part of a split alert that carries
// the mentions is the one that names them, so the person is notified, once.
func TestSplitMentionsGoWithThePartThatNamesThem(t *testing.T) {
	ch := New("")
	var b strings.Builder
	for i := 0; b.Len() < 45000; i++ {
		b.WriteString("disk full on host-" + strings.Repeat("a", 60) + "\n")
	}
	m := sender.Message{Format: sender.FormatMarkdown, Title: "disk", Text: b.String(),
		Mentions: sender.Mentions{Mobiles: []string{"13800000000"}}}
	body, err := ch.Body(m)
	require.NoError(t, err)
	require.Greater(t, len(body), MaxBodyBytes)
	back, err := ch.Parse(body)
	require.NoError(t, err)
	parts, err := sender.Split(ch, back, 0)
	require.NoError(t, err)
	require.Len(t, parts, 3)
	carriers, named := 0, 0
	for i, p := range parts {
		r := render(p)
		if strings.Contains(r.Markdown.Text, "@13800000000") {
			named++
		}
		if r.At != nil && len(r.At.AtMobiles) > 0 {
			carriers++
			require.Equal(t, []string{"13800000000"}, r.At.AtMobiles)
			require.True(t, strings.Contains(r.Markdown.Text, "@13800000000"), "part %d carries the mention without naming it", i+1)
		}
	}
	require.Equal(t, 1, carriers, "one part carries the mentions")
	require.Equal(t, 1, named, "the person is named once")
}
