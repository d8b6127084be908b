package sender

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

// plain is a platform of the tests: a message is its JSON, at most limit bytes.
type plain struct{ limit int }

func (plain) Kind() string { return "plain" }
func (plain) Parse(b []byte) (Message, error) {
	return Message{Format: FormatText, Text: string(b)}, nil
}
func (plain) Body(m Message) ([]byte, error)                        { return EncodeJSON(m) }
func (plain) KeywordRoom(keyword string) int                        { return JSONStringLen(keyword) }
func (plain) SplitMax() int                                         { return 1 << 20 }
func (plain) Post(context.Context, *Client, Robot, Message) Outcome { return Outcome{OK: true} }
func (p plain) Room(m Message) int {
	b, _ := EncodeJSON(m)
	return p.limit - len(b)
}
func (plain) Style() MergeStyle {
	return MergeStyle{Heading: CountHeading, Separator: "\n\n---\n\n", SectionTitle: func(t string) string { return "#### " + t },
		Hint: func(text string, m Mentions) string { return strings.Join(m.Mobiles, " ") }}
}

func queued(style MergeStyle, m Message, due time.Time, seq uint64) *waiter {
	w := &waiter{ctx: context.Background(), m: m, due: due, seq: seq, solo: !m.Mergeable()}
	if !w.solo {
		w.section, w.size = section(style, m)
	}
	return w
}

func textMsg(s string) Message { return Message{Format: FormatText, Text: s} }

func TestMergedMessageRespectsSizeAndCount(t *testing.T) {
	p := plain{limit: 20000}
	style := p.Style()
	base := time.Now()
	// Sections that are heavy to encode: quotes, backslashes, control characters.
	var ws []*waiter
	for i := range 200 {
		content := fmt.Sprintf("alert-%03d ", i) + strings.Repeat("\"\\\x01\n磁", 40+i%17)
		ws = append(ws, queued(style, Message{Format: FormatText, Text: content,
			Mentions: Mentions{Mobiles: []string{fmt.Sprintf("1380000%04d", i)}}}, base.Add(time.Duration(i)), uint64(i)))
	}
	heading := p.Room(Message{Format: FormatMarkdown, Title: "200 alerts: " + strings.Repeat("字", maxTitleRunes), Text: CountHeading(200)})
	for _, reserve := range []int{0, p.KeywordRoom("告警关键词")} {
		batch := pickSections(ws, 1000, heading-reserve)
		require.Greater(t, len(batch), 10)
		require.Less(t, len(batch), 200, "the size limit cuts the message")
		require.GreaterOrEqual(t, p.Room(mergeMessage(style, batch)), reserve)
		// The bound is not far from tight: one more section would not fit.
		require.Less(t, p.Room(mergeMessage(style, ws[:len(batch)+1])), reserve+600)
		for i, w := range batch {
			require.Same(t, ws[i], w, "sections keep due order")
		}
	}

	// The count limit.
	var small []*waiter
	for i := range 120 {
		small = append(small, queued(style, textMsg(fmt.Sprintf("a%d", i)), base, uint64(i)))
	}
	require.Len(t, pickSections(small, 50, heading), 50)
	require.Len(t, pickSections(small, 2, heading), 2)

	// An alert too large to share a message goes alone (as itself, not merged).
	big := queued(style, textMsg(strings.Repeat("x", 20000-100)), base, 0)
	require.Len(t, pickSections(append([]*waiter{big}, small...), 50, heading), 1)
}

// A higher priority goes first; equal priorities keep due order; an alert that waited
// past the bound goes ahead of every priority.
func TestQueueOrdersByPriorityAndAgesTheLowest(t *testing.T) {
	style := plain{}.Style()
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	q := newAlertQueue(nil, nil)
	add := func(name string, priority int, due, enqueued time.Duration, seq uint64) {
		w := queued(style, textMsg(name), base.Add(due), seq)
		w.priority, w.enqueued = priority, base.Add(enqueued)
		q.insert(w)
	}
	add("low-early", -1, 0, 0, 1)
	add("normal-late", 0, 2*time.Second, 50*time.Second, 2)
	add("critical", 2, 3*time.Second, 55*time.Second, 3)
	add("normal-early", 0, time.Second, 50*time.Second, 4)
	order := func() []string {
		var out []string
		for _, w := range q.waiting {
			out = append(out, w.m.Text)
		}
		return out
	}
	require.Equal(t, []string{"critical", "normal-early", "normal-late", "low-early"}, order())

	q.age(base.Add(59*time.Second), time.Minute)
	require.Equal(t, []string{"critical", "normal-early", "normal-late", "low-early"}, order(), "nobody waited a minute yet")
	q.age(base.Add(time.Minute), time.Minute)
	require.Equal(t, []string{"low-early", "critical", "normal-early", "normal-late"}, order(), "the low alert waited its bound")
	q.age(base.Add(2*time.Minute), 0)
	require.Equal(t, "low-early", order()[0], "a zero bound changes nothing")
}

func TestRoomAfterIsAnUpperBound(t *testing.T) {
	pool := []store.PoolRobot{{Name: "a", Limit: 19}, {Name: "b", Limit: 19}, {Name: "c", Limit: 10}}
	require.Equal(t, 19+19+10-1, roomAfter(store.Pick{InWindow: 1}, pool))
	require.Equal(t, 10+10+1-1, roomAfter(store.Pick{InWindow: 10}, pool))
	require.Equal(t, 1, roomAfter(store.Pick{InWindow: 19}, pool), "another robot may have one left")
}
