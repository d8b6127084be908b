package sender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"regexp"
	"strings"
	"unicode/utf8"
)

// EncodeJSON encodes v as the JSON body of a request. Unlike json.Marshal it leaves <,
// > and & as they are, which keeps markdown small.
func EncodeJSON(v any) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(v); err != nil {
		return nil, fmt.Errorf("sender: encode message: %w", err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonLen is an upper bound of the bytes r takes in a JSON string as EncodeJSON writes
// it; it is never below r's UTF-8 size, so it bounds a platform's count of raw bytes
// too.
func jsonLen(r rune, size int) int {
	switch {
	case r == utf8.RuneError && size == 1:
		return 6 // \ufffd
	case r == '"' || r == '\\' || r == '\n' || r == '\r' || r == '\t':
		return 2
	case r < 0x20 || r == '\u2028' || r == '\u2029':
		return 6
	}
	return size
}

// JSONStringLen is an upper bound of the bytes s takes in a JSON string as EncodeJSON
// writes it.
func JSONStringLen(s string) int {
	n := 0
	for _, r := range s {
		n += jsonLen(r, utf8.RuneLen(r))
	}
	return n
}

// partLabel is the numbering of part i of n, e.g. "(1/3)".
func partLabel(i, n int) string { return fmt.Sprintf("(%d/%d)", i, n) }

// minSplitBudget is the least room for text one part must leave; a message whose other
// fields leave less is refused rather than cut into slivers.
const minSplitBudget = 256

// maxParts bounds the parts of one split alert.
const maxParts = 999

// Split returns the parts m is sent as through protocol p, in order: m itself when it
// fits with reserve bytes to spare (room for a keyword); otherwise, for text and
// markdown, numbered parts "(1/n)" … "(n/n)" that each fit, cut as cutContent cuts.
// The mentions go with one part: the first whose text names everyone they mention (as
// p's MergeStyle.Hint sees it), else the first part. DingTalk notifies a markdown
// mention only when the text names the person too, and a body rendered by p.Body names
// them at its end: that part, usually the last, is the one that must carry them. A
// native message over the limit is a Failure of ClassPermanent, as is a text over
// p.SplitMax.
func Split(p Protocol, m Message, reserve int) ([]Message, error) {
	room := p.Room(m)
	if room >= reserve {
		return []Message{m}, nil
	}
	if !m.Mergeable() {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf(
			"the %s message is %d bytes over %s's size limit and only text and markdown can be split",
			typeName(m), reserve-room, p.Kind())}
	}
	if len(m.Text) > p.SplitMax() {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf(
			"the %s message is %d bytes; at most %d are split into parts", typeName(m), len(m.Text), p.SplitMax())}
	}
	budget := p.Room(withContent(m, "", maxParts, maxParts, false)) - reserve - JSONStringLen(partLabel(maxParts, maxParts)+"\n")
	if budget < minSplitBudget {
		return nil, &Failure{Class: ClassPermanent, Reason: "the message's other fields leave no room to split its text"}
	}
	chunks := cutContent(m.Text, budget)
	if len(chunks) > maxParts {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("the %s message would need %d parts", typeName(m), len(chunks))}
	}
	parts := make([]Message, len(chunks))
	for i, c := range chunks {
		midLine := i > 0 && !strings.HasSuffix(chunks[i-1], "\n")
		parts[i] = withContent(m, c, i+1, len(chunks), midLine)
	}
	carrier := mentionCarrier(p.Style().Hint, m.Mentions, parts)
	for i := range parts {
		if i != carrier {
			parts[i].Mentions = Mentions{}
		}
		if p.Room(parts[i]) < reserve { // cannot happen: budget is an upper bound
			return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("part %d of the %s message does not fit", i+1, typeName(m))}
		}
	}
	return parts, nil
}

// mentionCarrier is the index of the part that carries mentions: the first whose text
// names them all (hint shows none of them), else 0.
func mentionCarrier(hint func(string, Mentions) string, mentions Mentions, parts []Message) int {
	if hint == nil || mentions.Empty() {
		return 0
	}
	for i, part := range parts {
		if hint(part.Text, mentions) == "" {
			return i
		}
	}
	return 0
}

// typeName names m's type for a person.
func typeName(m Message) string {
	if m.Type != "" {
		return m.Type
	}
	return string(m.Format)
}

// withContent returns a copy of the text or markdown message m with content as its text,
// numbered as part i of n. The label is a line of its own, unless content continues a
// line cut in the middle (midLine): then content follows the label on its line, so text
// that was in the middle of a line never starts one, where markdown would read "# x" as
// a heading, "- x" or "1. x" as a list, "> x" as a quote.
func withContent(m Message, content string, i, n int, midLine bool) Message {
	label := partLabel(i, n)
	sep := "\n"
	if midLine {
		sep = " " // no longer in JSON than "\n": the budget holds
	}
	out := m
	out.Text = label + sep + content
	if m.Format == FormatMarkdown {
		out.Title = m.Title + " " + label
	}
	return out
}

// cutContent cuts s into chunks whose JSON-encoded size is at most budget, at a line
// break when one falls in the second half of a chunk, else in the middle of a line
// (midLineCut).
func cutContent(s string, budget int) []string {
	var chunks []string
	for len(s) > 0 {
		size, end, lastBreak := 0, 0, -1
		for end < len(s) {
			r, n := utf8.DecodeRuneInString(s[end:])
			l := jsonLen(r, n)
			if size+l > budget {
				break
			}
			size += l
			end += n
			if r == '\n' {
				lastBreak = end
			}
		}
		switch {
		case end == len(s):
		case lastBreak > end/2:
			end = lastBreak
		default:
			end = midLineCut(s, end)
		}
		chunks = append(chunks, s[:end])
		s = s[end:]
	}
	return chunks
}

// The escapers of every platform (Platform.Escape, EscapeText) and the links and tags
// they write make sequences that mean something only whole.
var (
	// wholeMarkup is a markdown link or image, "[text](url)", "![alt](url)", or a tag:
	// Slack's <url|text> and <@U…>, WeCom's <@userid> and <font …>, Feishu's <at …>.
	wholeMarkup = regexp.MustCompile(`!?\[[^\[\]\n]*\]\([^()\s]*\)|<[^<>\n]*>`)
	// entity is an HTML entity: "&#91;", "&#x5B;", "&amp;".
	entity = regexp.MustCompile(`^&(?:#[0-9]{1,7}|#[xX][0-9a-fA-F]{1,6}|[A-Za-z][A-Za-z0-9]{1,31});`)
)

// maxEntity is the length in bytes of the longest entity that entity matches.
const maxEntity = 34

// maxWhole is the longest link or tag a cut moves back to keep whole.
const maxWhole = 2048

// midLineCut is where to cut s in the middle of a line, at or before end (the most one
// chunk can hold): never inside an entity (&#91;, which escapes a label's '[') nor between a
// backslash and the character it escapes, and not inside a link or a tag when it starts
// in the second half of s[:end], so it can go whole into the next part.
func midLineCut(s string, end int) int {
	lo := end / 2
	for _, loc := range wholeMarkup.FindAllStringIndex(s[lo:min(len(s), end+maxWhole)], -1) {
		if start, stop := lo+loc[0], lo+loc[1]; start < end && end < stop {
			if start > lo {
				end = start
			}
			break
		}
	}
	if a := strings.LastIndexByte(s[max(0, end-maxEntity):end], '&'); a >= 0 {
		a += max(0, end-maxEntity)
		if n := len(entity.FindString(s[a:])); a > 0 && a+n > end {
			end = a
		}
	}
	backslashes := end - len(strings.TrimRight(s[:end], "\\"))
	if backslashes%2 == 1 && end > 1 {
		end--
	}
	return end
}
