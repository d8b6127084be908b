package sender

import (
	"bytes"
	"encoding/json"
	"fmt"
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
// markdown, numbered parts "(1/n)" … "(n/n)" that each fit, cut preferably at a line
// break; mentions go with the first part. A native message over the limit is a Failure
// of ClassPermanent, as is a text over p.SplitMax.
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
	budget := p.Room(withContent(m, "", maxParts, maxParts)) - reserve - JSONStringLen(partLabel(maxParts, maxParts)+"\n")
	if budget < minSplitBudget {
		return nil, &Failure{Class: ClassPermanent, Reason: "the message's other fields leave no room to split its text"}
	}
	chunks := cutContent(m.Text, budget)
	if len(chunks) > maxParts {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("the %s message would need %d parts", typeName(m), len(chunks))}
	}
	parts := make([]Message, len(chunks))
	for i, c := range chunks {
		parts[i] = withContent(m, c, i+1, len(chunks))
		if i > 0 {
			parts[i].Mentions = Mentions{}
		}
		if p.Room(parts[i]) < reserve { // cannot happen: budget is an upper bound
			return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("part %d of the %s message does not fit", i+1, typeName(m))}
		}
	}
	return parts, nil
}

// typeName names m's type for a person.
func typeName(m Message) string {
	if m.Type != "" {
		return m.Type
	}
	return string(m.Format)
}

// withContent returns a copy of the text or markdown message m with content as its text,
// numbered as part i of n.
func withContent(m Message, content string, i, n int) Message {
	label := partLabel(i, n)
	out := m
	out.Text = label + "\n" + content
	if m.Format == FormatMarkdown {
		out.Title = m.Title + " " + label
	}
	return out
}

// cutContent cuts s into chunks whose JSON-encoded size is at most budget, at a line
// break when one falls in the second half of a chunk, else between runes.
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
		if end < len(s) && lastBreak > end/2 {
			end = lastBreak
		}
		chunks = append(chunks, s[:end])
		s = s[end:]
	}
	return chunks
}
