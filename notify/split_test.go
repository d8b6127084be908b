package notify

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"
)

func TestSplitSmallMessageIsWhole(t *testing.T) {
	m := Message{MsgType: TypeText, Text: &Text{Content: "hello"}}
	parts, err := splitMessage(m, 0)
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
	parts, err := splitMessage(m, keywordReserve("alert"))
	require.NoError(t, err)
	require.Len(t, parts, 3)
	var joined strings.Builder
	for i, p := range parts {
		body, err := encodeBody(addKeyword(p, "alert"))
		require.NoError(t, err)
		require.LessOrEqual(t, len(body), MaxBodyBytes, "part %d", i+1)
		label := partLabel(i+1, 3) + "\n"
		require.True(t, strings.HasPrefix(p.Text.Content, label))
		joined.WriteString(strings.TrimPrefix(p.Text.Content, label))
		require.Equal(t, i == 0, p.At != nil, "mentions go with the first part")
	}
	require.Equal(t, content, joined.String())
}

func TestSplitMarkdownNumbersTitleAndText(t *testing.T) {
	m := Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "disk", Text: strings.Repeat("x", 30000)}}
	parts, err := splitMessage(m, 0)
	require.NoError(t, err)
	require.Len(t, parts, 2)
	require.Equal(t, "disk (2/2)", parts[1].Markdown.Title)
	require.True(t, strings.HasPrefix(parts[1].Markdown.Text, "(2/2)\n"))
}

func TestSplitRefusesOtherTypes(t *testing.T) {
	m := Message{MsgType: TypeLink, Link: &Link{Title: "t", Text: strings.Repeat("x", MaxBodyBytes), MessageURL: "https://x"}}
	_, err := splitMessage(m, 0)
	var f *Failure
	require.ErrorAs(t, err, &f)
	require.Equal(t, ClassPermanent, f.Class)
}

func TestSplitProperty(t *testing.T) {
	rapid.Check(t, func(t *rapid.T) {
		unit := rapid.StringMatching(`[a-z\n"\\<\x01é告]{1,40}`).Draw(t, "unit")
		content := strings.Repeat(unit, rapid.IntRange(1, 3000).Draw(t, "repeat"))
		if len(content) > MaxSplitBytes {
			content = strings.ToValidUTF8(content[:MaxSplitBytes/2], "")
		}
		m := Message{MsgType: TypeText, Text: &Text{Content: content}}
		parts, err := splitMessage(m, 0)
		if err != nil {
			t.Fatal(err)
		}
		var joined strings.Builder
		for i, p := range parts {
			body, err := encodeBody(p)
			if err != nil || len(body) > MaxBodyBytes {
				t.Fatalf("part %d: %d bytes, %v", i, len(body), err)
			}
			var back Message
			if err := json.Unmarshal(body, &back); err != nil {
				t.Fatal(err)
			}
			c := back.Text.Content
			if len(parts) > 1 {
				c = strings.TrimPrefix(c, partLabel(i+1, len(parts))+"\n")
			}
			joined.WriteString(c)
		}
		if joined.String() != content {
			t.Fatalf("parts do not join back to the content")
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
