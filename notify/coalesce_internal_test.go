package notify

import (
	"context"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/store"
)

func queued(m Message, due time.Time, seq uint64) *waiter {
	w := &waiter{ctx: context.Background(), m: m, due: due, seq: seq, solo: !mergeable(m)}
	if !w.solo {
		w.section, w.size = section(m)
	}
	return w
}

func textMsg(s string) Message { return Message{MsgType: TypeText, Text: &Text{Content: s}} }

func TestMergedMarkdownFormat(t *testing.T) {
	base := time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC)
	q := newAlertQueue()
	// Arrival order differs from due order; equal due times keep arrival order.
	q.insert(queued(Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "CPU high", Text: "host **b** at 97%"},
		At: &At{AtMobiles: []string{"13800000001"}, AtUserIDs: []string{"u7"}}}, base.Add(2*time.Second), 1))
	q.insert(queued(textMsg("disk full on host-a\nsecond line"), base, 2))
	q.insert(queued(Message{MsgType: TypeLink, Link: &Link{Title: "l", Text: "x", MessageURL: "https://e"}}, base.Add(time.Second), 3))
	q.insert(queued(Message{MsgType: TypeMarkdown, Markdown: &Markdown{Title: "Mem", Text: "## Mem\nswap @13800000002 in use"},
		At: &At{AtMobiles: []string{"13800000002", "13800000001"}, IsAtAll: true}}, base.Add(2*time.Second), 4))

	batch := pickSections(q.waiting, 50, MaxBodyBytes)
	require.Len(t, batch, 3, "the link goes alone")
	m := mergeMessage(batch)
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

	// A long first title is cut.
	long := strings.Repeat("告警", 40)
	require.Equal(t, maxTitleRunes, len([]rune(alertTitle(textMsg("\n  "+long+"\nrest")))))
}

func TestMergedMessageRespectsSizeAndCount(t *testing.T) {
	base := time.Now()
	// Sections that are heavy to encode: quotes, backslashes, control characters.
	var ws []*waiter
	for i := range 200 {
		content := fmt.Sprintf("alert-%03d ", i) + strings.Repeat("\"\\\x01\n磁", 40+i%17)
		ws = append(ws, queued(Message{MsgType: TypeText, Text: &Text{Content: content},
			At: &At{AtMobiles: []string{fmt.Sprintf("1380000%04d", i)}}}, base.Add(time.Duration(i)), uint64(i)))
	}
	for _, reserve := range []int{0, keywordReserve("告警关键词")} {
		batch := pickSections(ws, 1000, MaxBodyBytes-reserve)
		require.Greater(t, len(batch), 10)
		require.Less(t, len(batch), 200, "the size limit cuts the message")
		body, err := encodeBody(addKeyword(mergeMessage(batch), "告警关键词"))
		require.NoError(t, err)
		require.LessOrEqual(t, len(body), MaxBodyBytes)
		// The bound is not far from tight: one more section would not fit.
		more, err := encodeBody(mergeMessage(ws[:len(batch)+1]))
		require.NoError(t, err)
		require.Greater(t, len(more)+mergeOverhead, MaxBodyBytes-reserve)
		for i, w := range batch {
			require.Same(t, ws[i], w, "sections keep due order")
		}
	}

	// The count limit.
	var small []*waiter
	for i := range 120 {
		small = append(small, queued(textMsg(fmt.Sprintf("a%d", i)), base, uint64(i)))
	}
	require.Len(t, pickSections(small, 50, MaxBodyBytes), 50)
	require.Len(t, pickSections(small, 2, MaxBodyBytes), 2)

	// An alert too large to share a message goes alone (as itself, not merged).
	big := queued(textMsg(strings.Repeat("x", MaxBodyBytes-100)), base, 0)
	require.Len(t, pickSections(append([]*waiter{big}, small...), 50, MaxBodyBytes), 1)
}

func TestRoomAfterIsAnUpperBound(t *testing.T) {
	pool := []store.PoolRobot{{Name: "a", Limit: 19}, {Name: "b", Limit: 19}, {Name: "c", Limit: 10}}
	require.Equal(t, 19+19+10-1, roomAfter(store.Pick{InWindow: 1}, pool))
	require.Equal(t, 10+10+1-1, roomAfter(store.Pick{InWindow: 10}, pool))
	require.Equal(t, 1, roomAfter(store.Pick{InWindow: 19}, pool), "another robot may have one left")
}
