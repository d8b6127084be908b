package failed_test

import (
	"bytes"
	"context"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

// golden compares got with testdata/name.golden, or rewrites it under -update.
func golden(t *testing.T, name string, got []byte) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, got, 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run `go test ./failed/ -run %s -update` to create it", t.Name())
	require.Equal(t, string(want), string(got))
}

var renderNow = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// testTargets are the configured targets the rows are described by: two robot groups
// and a topic target that lets messages choose another allowed topic.
var testTargets = failed.Targets{
	"ops":         {Robots: []config.Robot{{Name: "ops-2"}, {Name: "ops-1"}}},
	"data-checks": {Robots: []config.Robot{{Name: "dc-1"}}},
	"orders": {Topic: &config.TopicTarget{Name: "order-events", Tag: "delayed", AllowOverride: true,
		AllowTopics: []string{"order-audit"}}},
}

func sampleRows() []store.FailedSend {
	at := func(d time.Duration) *time.Time { t := renderNow.Add(d); return &t }
	return []store.FailedSend{
		{
			ID: 1043, MessageID: "order-4711-timeout", Target: "orders", Status: store.StatusPending,
			Payload:    []byte{0x0a, 0x04, 0x34, 0x37, 0x31, 0x31, 0xff},
			Properties: map[string]string{"TAGS": "close", "KEYS": "order-4711 order-4711-timeout", "RD_TOPIC": "order-audit", "shop": "eu-1"},
			DueAt:      at(-time.Minute), ErrorClass: "transient",
			LastError: "send to topic order-audit failed: the topic=order-audit route info not found",
			Attempts:  1, NextAttemptAt: at(30 * time.Second),
			CreatedAt: renderNow.Add(-time.Minute), UpdatedAt: renderNow.Add(-time.Minute),
		},
		{
			ID: 1042, MessageID: "order-7781-recheck", Target: "ops", Status: store.StatusPending,
			Payload:    []byte(`{"msgtype":"text","text":{"content":"order 7781 still dirty"}}`),
			Properties: map[string]string{"RD_ID": "order-7781-recheck", "RD_TARGET": "ops", "RD_DELIVER_AT_MS": "1772366400000"},
			DueAt:      at(-3 * time.Hour), ErrorClass: "transient",
			LastError:  "HTTP 503 Service Unavailable from DingTalk after 5 attempts; the gateway said: upstream connect error or disconnect/reset before headers",
			HTTPStatus: ptr(503), Attempts: 3, NextAttemptAt: at(4 * time.Minute),
			CreatedAt: renderNow.Add(-2*time.Hour - 30*time.Minute), UpdatedAt: renderNow.Add(-4 * time.Minute),
		},
		{
			ID: 1041, MessageID: "a-very-long-message-id-from-a-batch-job-0001", Target: "data-checks", Status: store.StatusDead,
			Payload: []byte("plain\ttext alert\nsecond line"), Properties: map[string]string{},
			ErrorClass: "payload_permanent", LastError: "errcode 430101: content rejected\nby DingTalk",
			Errcode: ptr(430101), Attempts: 1,
			CreatedAt: renderNow.Add(-26 * time.Hour), UpdatedAt: renderNow.Add(-26 * time.Hour),
		},
		{
			ID: 1040, MessageID: "bad-input-1", Status: store.StatusRejected, Payload: []byte{0xff, 0x00, 0xfe},
			ErrorClass: "rejected", LastError: "unknown target \"opz\"", Properties: map[string]string{"RD_TARGET": "opz"},
			CreatedAt: renderNow.Add(-9 * 24 * time.Hour), UpdatedAt: renderNow.Add(-8 * 24 * time.Hour),
		},
		{
			ID: 1039, MessageID: "m-1039", Target: "ops", Status: store.StatusDiscarded, Payload: []byte("x"),
			ErrorClass: "throttled", DiscardReason: ptr("storm from the test cluster"),
			CreatedAt: renderNow.Add(-45 * time.Second), UpdatedAt: renderNow.Add(-5 * time.Second),
		},
	}
}

func TestRenderListTable(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, failed.WriteTable(&b, sampleRows(), 1039, renderNow, testTargets))
	golden(t, "list.table", b.Bytes())

	b.Reset()
	require.NoError(t, failed.WriteTable(&b, nil, 0, renderNow, testTargets))
	require.Equal(t, "no failed sends match\n", b.String())
}

func TestRenderListJSON(t *testing.T) {
	var b bytes.Buffer
	require.NoError(t, failed.WriteJSON(&b, failed.NewPage(sampleRows(), 1039, testTargets)))
	golden(t, "list.json", b.Bytes())
}

func TestRenderShow(t *testing.T) {
	for i, name := range []string{"show.topic", "show.pending", "show.dead", "show.rejected", "show.discarded"} {
		var b bytes.Buffer
		require.NoError(t, failed.WriteDetail(&b, sampleRows()[i], renderNow, testTargets))
		golden(t, name, b.Bytes())
	}
	var b bytes.Buffer
	require.NoError(t, failed.WriteJSON(&b, failed.NewView(sampleRows()[3], testTargets)))
	golden(t, "show.rejected.json", b.Bytes())
	b.Reset()
	require.NoError(t, failed.WriteJSON(&b, failed.NewView(sampleRows()[0], testTargets)))
	golden(t, "show.topic.json", b.Bytes())
}

// A topic target's row names the destination its message would go to now, and says so
// when the configuration no longer lets it go there.
func TestDescribeTopicTarget(t *testing.T) {
	row := sampleRows()[0]
	d := testTargets.Describe(row)
	require.Equal(t, failed.Destination{Kind: "topic", Where: "topic order-audit, tag close"}, d)
	delete(row.Properties, "RD_TOPIC")
	delete(row.Properties, "TAGS")
	require.Equal(t, "topic order-events, tag delayed", testTargets.Describe(row).Where)
	row.Properties["RD_TOPIC"] = "payments"
	d = testTargets.Describe(row)
	require.Equal(t, "topic", d.Kind)
	require.Contains(t, d.Where, `RD_TOPIC="payments" is not a topic target "orders" may deliver to`)
	require.Equal(t, failed.Destination{Kind: "unknown", Where: "-"}, testTargets.Describe(store.FailedSend{Target: "opz"}))
	require.Equal(t, failed.Destination{Kind: "dingtalk", Where: "robots ops-1, ops-2"}, testTargets.Describe(store.FailedSend{Target: "ops"}))
	require.Equal(t, failed.Destination{}, failed.Targets(nil).Describe(row))
}

func TestRenderStats(t *testing.T) {
	oldest := renderNow.Add(-26 * time.Hour)
	st := store.FailedStats{
		ByStatus:      map[store.FailedStatus]int64{store.StatusPending: 12, store.StatusDead: 3, store.StatusDelivered: 240, store.StatusRejected: 1},
		ByTarget:      map[string]int64{"ops": 9, "data-checks": 6, "": 1},
		ByErrorClass:  map[string]int64{"transient": 10, "payload_permanent": 3, "throttled": 2, "rejected": 1},
		OldestPending: &oldest,
	}
	var b bytes.Buffer
	require.NoError(t, failed.WriteStats(&b, st, renderNow))
	golden(t, "stats", b.Bytes())
	b.Reset()
	require.NoError(t, failed.WriteJSON(&b, failed.NewStatsView(st, renderNow)))
	golden(t, "stats.json", b.Bytes())

	b.Reset()
	require.NoError(t, failed.WriteStats(&b, store.FailedStats{}, renderNow))
	golden(t, "stats.empty", b.Bytes())
}

func TestParseSince(t *testing.T) {
	for in, want := range map[string]time.Time{
		"90m":                  renderNow.Add(-90 * time.Minute),
		"6h":                   renderNow.Add(-6 * time.Hour),
		"3d":                   renderNow.Add(-72 * time.Hour),
		"2026-02-28T08:00:00Z": time.Date(2026, 2, 28, 8, 0, 0, 0, time.UTC),
	} {
		got, err := failed.ParseSince(in, renderNow)
		require.NoError(t, err, in)
		require.True(t, want.Equal(got), "%s: %s", in, got)
	}
	for _, in := range []string{"", "yesterday", "-3h", "0s", "3x", "' OR 1=1 --"} {
		_, err := failed.ParseSince(in, renderNow)
		require.Error(t, err, in)
	}
}

// The operator commands behind `rocketdelay failed retry|discard|list|stats`, against
// the real table.
func TestOperatorCommands(t *testing.T) {
	t.Parallel()
	pool, fs := testenv.FailedSends(t)
	seed(t, fs, 5)
	ctx := context.Background()
	testenv.MakeDead(t, pool, 1, 20, "transient", "HTTP 503")
	testenv.MakeDead(t, pool, 2, 20, "transient", "HTTP 503")
	require.NoError(t, fs.MarkDelivered(ctx, 3))
	var out bytes.Buffer
	op := failed.Operator{Store: fs, Out: &out, Now: time.Now}
	status := func(id int64) store.FailedStatus {
		r, err := fs.Get(ctx, id)
		require.NoError(t, err)
		return r.Status
	}

	require.ErrorIs(t, op.Retry(ctx, []int64{1, 3, 99}), store.ErrNotFound, "row 99 does not exist")
	require.Equal(t, "retried 1 row: 1\nunchanged (delivered or cancelled already): 3\n", out.String())
	require.Equal(t, []store.FailedStatus{"pending", "dead", "delivered", "pending", "pending"},
		[]store.FailedStatus{status(1), status(2), status(3), status(4), status(5)})

	out.Reset()
	require.NoError(t, op.Discard(ctx, []int64{4, 5}, "duplicates of an earlier alert"))
	require.Equal(t, "discarded 2 rows: 4, 5\n", out.String())
	require.Equal(t, []store.FailedStatus{"pending", "dead", "delivered", "discarded", "discarded"},
		[]store.FailedStatus{status(1), status(2), status(3), status(4), status(5)})

	out.Reset()
	require.NoError(t, op.RetryWhere(ctx, store.StatusDead, ""))
	require.Equal(t, "retried 1 row: 2\n", out.String())

	out.Reset()
	require.NoError(t, op.List(ctx, store.Filter{Status: store.StatusDiscarded}, failed.FormatTable))
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	require.Len(t, lines, 3)
	require.True(t, strings.HasPrefix(lines[1], "5 "), lines[1])
	require.True(t, strings.HasPrefix(lines[2], "4 "), lines[2])

	out.Reset()
	require.NoError(t, op.Show(ctx, 4, failed.FormatTable))
	require.Contains(t, out.String(), "duplicates of an earlier alert")
	require.ErrorIs(t, op.Show(ctx, 404, failed.FormatJSON), store.ErrNotFound)

	out.Reset()
	require.NoError(t, op.Stats(ctx, failed.FormatJSON))
	require.Contains(t, out.String(), `"pending": 2`)
}
