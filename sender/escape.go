package sender

import (
	"net/url"
	"regexp"
	"strings"
)

// What a notification's text may do in a chat message depends on who wrote it. A label
// value comes from whatever was scraped or sent: it is shown, never read as markup
// (EscapeLabel). An annotation is written by a rule's author: it may link to an http(s)
// page (a runbook), never mention anyone or show an image (EscapeText). A URL is linked
// only when it leads to an http(s) page (LinkTo). Mentions come only from the
// configuration. The templates call these as escape, escapeText and link.

// EscapeLabel makes label text safe in p's markup, on one line: it opens no mention,
// link, image, tag or heading.
func (p Platform) EscapeLabel(s string) string { return p.Escape(oneLine.Replace(s)) }

// oneLine puts text on one line: a line break would let a value start a heading.
var oneLine = strings.NewReplacer("\r\n", " ", "\n", " ", "\r", " ")

// markdownLink is a markdown link or image: "[text](target)", "![alt](target)".
var markdownLink = regexp.MustCompile(`(!?)\[([^\[\]\n]*)\]\(([^()\s]*)\)`)

// EscapeText makes annotation text safe in p's markup: its markdown links to http(s)
// pages stay links (in p's syntax); everything else is escaped as a label is, lines
// kept, so it opens no mention, image, tag or other link.
func (p Platform) EscapeText(s string) string {
	var b strings.Builder
	last := 0
	for _, m := range markdownLink.FindAllStringSubmatchIndex(s, -1) {
		b.WriteString(p.Escape(s[last:m[0]]))
		last = m[1]
		image, text, target := s[m[2]:m[3]], s[m[4]:m[5]], s[m[6]:m[7]]
		if u, ok := SafeURL(target); ok && image == "" {
			b.WriteString(p.Link(p.Escape(text), u))
			continue
		}
		b.WriteString(p.Escape(s[m[0]:m[1]]))
	}
	b.WriteString(p.Escape(s[last:]))
	return b.String()
}

// LinkTo is text linked to target in p's markup when target is an http(s) URL, and
// text alone otherwise (a javascript: or data: URL is never linked); text is escaped as
// a label is.
func (p Platform) LinkTo(text, target string) string {
	if u, ok := SafeURL(target); ok {
		return p.Link(p.EscapeLabel(text), u)
	}
	return p.EscapeLabel(text)
}

// SafeURL returns s as a link target that no markup reads past, and whether it is
// one: an absolute http(s) URL with a host. The characters that close a markdown link
// or a Slack link (parentheses, brackets, angle brackets, the pipe, quotes, spaces) are
// percent-encoded, which leaves the URL's meaning as it was.
func SafeURL(s string) (string, bool) {
	u, err := url.Parse(strings.TrimSpace(s))
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", false
	}
	return urlBreakers.Replace(u.String()), true
}

var urlBreakers = strings.NewReplacer("(", "%28", ")", "%29", "[", "%5B", "]", "%5D", "<", "%3C", ">", "%3E",
	"|", "%7C", `"`, "%22", "'", "%27", " ", "%20", "\\", "%5C", "`", "%60")

// MarkdownLink is a link in markdown: [text](target). target is a SafeURL.
func MarkdownLink(text, target string) string { return "[" + text + "](" + target + ")" }
