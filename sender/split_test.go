package sender_test

import (
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// splitContents splits text, one line of markdown, for WeCom (4096-byte parts) and
// returns each part's text without its label.
func splitContents(t *testing.T, text string) []string {
	t.Helper()
	parts, err := sender.Split(wecom.New(""), sender.Message{Format: sender.FormatMarkdown, Text: text}, 0)
	require.NoError(t, err)
	require.Greater(t, len(parts), 1)
	var out []string
	var joined strings.Builder
	for i, p := range parts {
		label := fmt.Sprintf("(%d/%d)", i+1, len(parts))
		c, ok := strings.CutPrefix(p.Text, label)
		require.True(t, ok, "part %d starts with its label", i+1)
		out = append(out, c[1:])
		joined.WriteString(c[1:])
	}
	require.Equal(t, text, joined.String(), "the parts join back to the text")
	return out
}

// A label's '[' is "&#91;" in WeCom's markdown: a cut never falls inside such an entity,
// which would show "&#" at the end of one part and "91;" at the start of the next.
func TestSplitNeverCutsAnEntity(t *testing.T) {
	for pad := range 5 { // one of the five offsets puts the byte limit inside an entity
		text := strings.Repeat("x", pad) + strings.Repeat(wecom.Escape("[")+wecom.Escape("&"), 1000)
		for i, c := range splitContents(t, text) {
			rest := strings.NewReplacer("&#91;", "", "&amp;", "").Replace(c)
			require.Empty(t, strings.Trim(rest, "x"), "pad %d, part %d holds a cut entity: %q … %q", pad, i+1, c[:min(len(c), 12)], c[max(0, len(c)-12):])
		}
	}
}

// A cut never falls between a backslash and the character it escapes: "\\*" cut after
// its backslash would leave a '*' that opens emphasis in the next part.
func TestSplitNeverCutsABackslashEscape(t *testing.T) {
	for pad := range 8 {
		text := strings.Repeat("y", pad) + strings.Repeat(`\*a\\b `, 1000)
		for i, c := range splitContents(t, text) {
			trailing := len(c) - len(strings.TrimRight(c, `\`))
			require.Zero(t, trailing%2, "pad %d, part %d ends with a lone backslash: %q", pad, i+1, c[max(0, len(c)-12):])
		}
	}
}

// A cut never falls inside a markdown link [text](url) that can go whole into the next
// part: both halves would show as text and neither would link.
func TestSplitKeepsALinkWhole(t *testing.T) {
	link := regexp.MustCompile(`\[[a-z ]*\]\(https://example\.com/[a-z]*\)`)
	for pad := range 50 {
		text := strings.Repeat("y", pad) + strings.Repeat("[see the runbook](https://example.com/runbook) ", 200)
		for i, c := range splitContents(t, text) {
			rest := link.ReplaceAllString(c, "")
			require.False(t, strings.ContainsAny(rest, "[]()"), "pad %d, part %d holds a cut link: %q … %q", pad, i+1, c[:min(len(c), 30)], c[max(0, len(c)-30):])
		}
	}
}
