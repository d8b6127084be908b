package sender

import (
	"bytes"
	"encoding/json"
	"fmt"
	"strings"
	"unicode/utf8"
)

// encodeBody encodes m as the JSON body of a request. Unlike MarshalMessage it leaves
// <, > and & as they are, which keeps markdown small.
func encodeBody(m Message) ([]byte, error) {
	var buf bytes.Buffer
	enc := json.NewEncoder(&buf)
	enc.SetEscapeHTML(false)
	if err := enc.Encode(m); err != nil {
		return nil, fmt.Errorf("sender: encode %s message: %w", m.MsgType, err)
	}
	return bytes.TrimSuffix(buf.Bytes(), []byte("\n")), nil
}

// jsonLen is an upper bound of the bytes r takes in a JSON string as encodeBody writes it.
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

func jsonStringLen(s string) int {
	n := 0
	for _, r := range s {
		n += jsonLen(r, utf8.RuneLen(r))
	}
	return n
}

// partLabel is the numbering of part i of n, e.g. "(1/3)".
func partLabel(i, n int) string { return fmt.Sprintf("(%d/%d)", i, n) }

// splitMessage returns the parts m is sent as, in order: m itself when its body, plus
// reserve bytes (room for a keyword), fits in MaxBodyBytes; otherwise, for text and
// markdown, numbered parts "(1/n)" … "(n/n)" that each fit, cut preferably at a line
// break; mentions (at) go with the first part. Other types over the limit are an error
// of ClassPermanent.
func splitMessage(m Message, reserve int) ([]Message, error) {
	body, err := encodeBody(m)
	if err != nil {
		return nil, &Failure{Class: ClassPermanent, Reason: err.Error(), Err: err}
	}
	limit := MaxBodyBytes - reserve
	if len(body) <= limit {
		return []Message{m}, nil
	}
	var content string
	switch m.MsgType {
	case TypeText:
		content = m.Text.Content
	case TypeMarkdown:
		content = m.Markdown.Text
	default:
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf(
			"the %s message is %d bytes as JSON; DingTalk accepts at most %d and only text and markdown can be split",
			m.MsgType, len(body), limit)}
	}
	if len(content) > MaxSplitBytes {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf(
			"the %s message is %d bytes; at most %d are split into parts", m.MsgType, len(content), MaxSplitBytes)}
	}
	const widest = 999
	skeleton := withContent(m, "", widest, widest)
	sk, err := encodeBody(skeleton)
	if err != nil {
		return nil, &Failure{Class: ClassPermanent, Reason: err.Error(), Err: err}
	}
	budget := limit - len(sk) - jsonStringLen(partLabel(widest, widest)+"\n")
	if budget < 1000 {
		return nil, &Failure{Class: ClassPermanent, Reason: "the message's other fields leave no room to split its text"}
	}
	chunks := cutContent(content, budget)
	if len(chunks) > widest {
		return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("the %s message would need %d parts", m.MsgType, len(chunks))}
	}
	parts := make([]Message, len(chunks))
	for i, c := range chunks {
		parts[i] = withContent(m, c, i+1, len(chunks))
		if i > 0 {
			parts[i].At = nil
		}
		b, err := encodeBody(parts[i])
		if err != nil || len(b) > limit { // cannot happen: budget is an upper bound
			return nil, &Failure{Class: ClassPermanent, Reason: fmt.Sprintf("part %d of the %s message does not fit", i+1, m.MsgType)}
		}
	}
	return parts, nil
}

// withContent returns a copy of the text or markdown message m with content as its text,
// numbered as part i of n.
func withContent(m Message, content string, i, n int) Message {
	label := partLabel(i, n)
	out := Message{MsgType: m.MsgType, At: m.At}
	switch m.MsgType {
	case TypeText:
		out.Text = &Text{Content: label + "\n" + content}
	case TypeMarkdown:
		out.Markdown = &Markdown{Title: m.Markdown.Title + " " + label, Text: label + "\n" + content}
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

// keywordReserve is the room addKeyword may need for keyword.
func keywordReserve(keyword string) int {
	if keyword == "" {
		return 0
	}
	return jsonStringLen("\n\n" + keyword)
}

// addKeyword returns m with keyword added to its text when it does not contain it
// already: DingTalk refuses (310000) a message of a keyword robot without its keyword.
// m's own content is not modified.
func addKeyword(m Message, keyword string) Message {
	if keyword == "" {
		return m
	}
	switch m.MsgType {
	case TypeText:
		if m.Text != nil && !strings.Contains(m.Text.Content, keyword) {
			m.Text = &Text{Content: m.Text.Content + "\n" + keyword}
		}
	case TypeMarkdown:
		if md := m.Markdown; md != nil && !strings.Contains(md.Title, keyword) && !strings.Contains(md.Text, keyword) {
			m.Markdown = &Markdown{Title: md.Title, Text: md.Text + "\n\n" + keyword}
		}
	case TypeLink:
		if l := m.Link; l != nil && !strings.Contains(l.Title, keyword) && !strings.Contains(l.Text, keyword) {
			c := *l
			c.Text += " " + keyword
			m.Link = &c
		}
	case TypeActionCard:
		if a := m.ActionCard; a != nil && !strings.Contains(a.Title, keyword) && !strings.Contains(a.Text, keyword) {
			c := *a
			c.Text += "\n\n" + keyword
			m.ActionCard = &c
		}
	case TypeFeedCard:
		if f := m.FeedCard; f != nil && len(f.Links) > 0 {
			for _, l := range f.Links {
				if strings.Contains(l.Title, keyword) {
					return m
				}
			}
			links := append([]FeedLink(nil), f.Links...)
			links[0].Title += " " + keyword
			m.FeedCard = &FeedCard{Links: links}
		}
	}
	return m
}
