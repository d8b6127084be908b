package platforms_test

import (
	"net/http/httptest"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// markupPieces are what a hostile label is drawn from: every platform's mention, link,
// image and heading syntax, entities, and line breaks.
var markupPieces = []string{"<", ">", "&", "[", "]", "(", ")", "!", "#", "@", "|", "\n", " ", "\r",
	"at id=all", "<at user_id=\"all\">", "</at>", "<@", "<!here>", "<!channel", "http://x.example/",
	"javascript:alert(1)", "&lt;", "&#91;", "a", "é"}

// accepted is what p's simulator makes of a markdown message of title and text: its
// markup (sender.SimReceived.Markup).
func accepted(t *rapid.T, p sender.Platform, title, text string) []string {
	body, err := p.New("").Body(sender.Message{Format: sender.FormatMarkdown, Title: title, Text: text})
	require.NoError(t, err)
	r := httptest.NewRequest("POST", "/", strings.NewReader(string(body)))
	got, refused := p.Sim.Check(sender.SimRequest{Request: r, Body: body, Now: time.Now(), Skew: time.Hour})
	require.Nil(t, refused, "the platform takes %s", body)
	return got.Markup
}

// Whatever a label says, escaped it shows as no markup on any platform: no mention,
// link, image or heading, by the simulator's reading of the platform's documented
// syntax. An annotation escaped keeps exactly its markdown links to http(s) pages.
func TestEscapedTextOpensNoMarkup(t *testing.T) {
	pieces := rapid.SliceOfN(rapid.SampledFrom(markupPieces), 1, 12)
	for _, p := range platforms.All {
		t.Run(p.Kind(), func(t *testing.T) {
			rapid.Check(t, func(t *rapid.T) {
				label := strings.Join(pieces.Draw(t, "label"), "")
				require.Empty(t, accepted(t, p, "T", "x "+p.EscapeLabel(label)), "label %q", label)
				require.Empty(t, accepted(t, p, "T", "x "+p.LinkTo(label, "javascript:alert(1)")))
				require.Equal(t, []string{"link:https://g.example/graph?e=rate%28x%5B5m%5D%29%3E0"},
					accepted(t, p, "T", "x "+p.LinkTo(label, "https://g.example/graph?e=rate(x[5m])>0")),
					"a URL's parentheses and brackets end no link early")
				annotation := label + " [runbook](https://runbook.example/db?q=1) " + label
				shown := slices.DeleteFunc(accepted(t, p, "T", "x "+p.EscapeText(annotation)),
					func(m string) bool { return strings.HasPrefix(m, "heading:") }) // a rule's author may write headings
				require.Equal(t, []string{"link:https://runbook.example/db?q=1"}, shown, "annotation %q", annotation)
			})
		})
	}
}
