package scheduler

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/sender/topic/relay"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// topicHarness is a harness whose schedulers hand off through a real Deliverer to a
// real relay (and record failures in a real failed_sends table).
type topicHarness struct {
	*harness
	deliverer *delivery.Deliverer
	fs        *store.FailedSends
}

func newTopicHarness(t *testing.T, threshold time.Duration, targets map[string]topic.Target) *topicHarness {
	t.Helper()
	h := newHarness(t, threshold)
	h.topics = targets
	_, fs := testenv.FailedSends(t)
	rdb, prefix := testenv.Redis(t)
	snd, err := relay.New(relay.Options{NameServers: []string{h.ns}}, targets, store.NewTopicRate(rdb, prefix),
		discardLogger(), relay.NewMetrics(nil))
	require.NoError(t, err)
	t.Cleanup(snd.Close)
	d := delivery.New(delivery.Channels{"orders": snd}, h.ws, fs, delivery.Options{}, discardLogger(), nil, time.Now)
	return &topicHarness{harness: h, deliverer: d, fs: fs}
}

func (h *topicHarness) start(name string) (*Scheduler, *Metrics) {
	h.t.Helper()
	return h.startWith(name, h.deliverer)
}

// Each of 500 messages for a topic target, due 0–50 s out (up to four hops), reaches a
// consumer of the business topic exactly once, never before its due time by the
// broker's clock, with its body (binary ones too), tag, keys and user properties as
// published, and RD_ID as a property and a key; no RD_* scheduling property leaks.
func TestTopicTargetDeliversEachMessageOnceNeverEarly(t *testing.T) {
	t.Parallel()
	bizTopic := testenv.Unique("rd_orders_")
	h := newTopicHarness(t, 5*time.Second, map[string]topic.Target{
		"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: bizTopic}},
	})
	biz := sinktest.Start(t, h.ns, bizTopic)
	_, ma := h.start("topic-a")
	_, mb := h.start("topic-b")

	const n = 500
	keys := ids("order", n)
	delays := randomDelays(n, 50*time.Second, 26)
	rng := rand.New(rand.NewPCG(26, 1))
	type sent struct {
		body  []byte
		tag   string
		props map[string]string
		key   string
		due   time.Time
	}
	want := map[string]sent{}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	for i, id := range keys {
		s := sent{body: []byte("order " + id + " timed out"), tag: []string{"close", "remind", ""}[i%3],
			props: map[string]string{"shop": fmt.Sprintf("eu-%d", i%4), "trace": id}, key: fmt.Sprintf("order-no-%d", i)}
		if i%5 == 0 {
			s.body = make([]byte, 64+rng.IntN(512))
			for j := range s.body {
				s.body[j] = byte(rng.IntN(256))
			}
		}
		pub, err := h.producer.Publish(ctx, wire.Publication{Target: "orders", ID: id, In: delays[i], Body: s.body, Tag: s.tag,
			Keys: []string{s.key}, Properties: s.props})
		require.NoError(t, err)
		s.due = pub.DeliverAt
		want[id] = s
	}

	// The last message is due at most 50 s after its publish; a wheel-stage hand-off takes
	// a tick plus a send, a dead replica's entries the sweeper's grace: 90 s more is room
	// for a loaded machine, not a latency bound.
	biz.WaitAll(t, keys, 50*time.Second+90*time.Second)
	h.settle(keys, ma, mb)

	hopped := 0
	for _, id := range keys {
		w := want[id]
		require.Equal(t, 1, biz.Copies(id), "message %s reached the business consumer as %d different broker messages", id, biz.Copies(id))
		m, at := biz.First(id)
		require.True(t, bytes.Equal(w.body, m.Body), "message %s: body changed on the way", id)
		require.Equal(t, w.tag, m.GetTags(), "message %s: tag", id)
		require.ElementsMatch(t, []string{w.key, id}, strings.Fields(m.GetKeys()), "message %s: keys", id)
		for k, v := range w.props {
			require.Equal(t, v, m.GetProperty(k), "message %s: property %s", id, k)
		}
		require.Equal(t, id, m.GetProperty(wire.PropID))
		for k := range m.GetProperties() {
			require.False(t, strings.HasPrefix(k, "RD_") && k != wire.PropID, "message %s carries the scheduling property %s", id, k)
		}
		// Never early by the broker's clock: it stored the message at or after its due time.
		require.GreaterOrEqual(t, m.StoreTimestamp, w.due.UnixMilli(), "message %s stored %d ms before its due time",
			id, w.due.UnixMilli()-m.StoreTimestamp)
		require.False(t, at.Before(w.due), "message %s received before its due time", id)
		if delays[slices.Index(keys, id)] >= h.threshold {
			hopped++
		}
	}
	require.Greater(t, hopped, n/2, "most messages took broker hops")
}

// A message for a topic target that asks for a topic outside the target's allowlist is
// rejected on arrival with a reason, and one for an allowed topic goes there; cancel
// stops a message both while it hops through the broker and while it waits in the wheel
// stage.
func TestTopicTargetAllowlistAndCancel(t *testing.T) {
	t.Parallel()
	main, other := testenv.Unique("rd_main_"), testenv.Unique("rd_other_")
	h := newTopicHarness(t, 10*time.Second, map[string]topic.Target{
		"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: main, AllowOverride: true, AllowTopics: []string{other}}},
		"strict": {Target: "strict", TopicTarget: config.TopicTarget{Name: main}},
	})
	onMain, onOther := sinktest.Start(t, h.ns, main), sinktest.Start(t, h.ns, other)
	_, m := h.start("allow")
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	publish := func(p wire.Publication) {
		t.Helper()
		_, err := h.producer.Publish(ctx, p)
		require.NoError(t, err)
	}
	publish(wire.Publication{Target: "orders", ID: "to-other", In: time.Second, Body: []byte("o"), Topic: other})
	publish(wire.Publication{Target: "orders", ID: "to-nowhere", In: time.Second, Body: []byte("x"), Topic: "payments"})
	publish(wire.Publication{Target: "strict", ID: "strict-override", In: time.Second, Body: []byte("x"), Topic: main})
	publish(wire.Publication{Target: "orders", ID: "cancel-hopping", In: 20 * time.Second, Body: []byte("c1")})
	publish(wire.Publication{Target: "orders", ID: "cancel-waiting", In: 9 * time.Second, Body: []byte("c2")})
	publish(wire.Publication{Target: "orders", ID: "after-all", In: 22 * time.Second, Body: []byte("last")})

	// cancel-waiting is in the wheel stage once stored (its delay is below the threshold);
	// cancel-hopping is still in the broker.
	require.Eventually(t, func() bool {
		e, err := h.ws.Peek(ctx, []string{"cancel-waiting"})
		return err == nil && len(e) == 1
	}, 9*time.Second, 10*time.Millisecond, "cancel-waiting never reached the wheel stage before its due time")
	res, err := h.ws.Cancel(ctx, "cancel-waiting")
	require.NoError(t, err)
	require.Equal(t, store.CancelRemoved, res, "cancelled while waiting in the wheel stage")
	res, err = h.ws.Cancel(ctx, "cancel-hopping")
	require.NoError(t, err)
	require.Equal(t, store.CancelTombstoned, res, "cancelled while hopping through the broker")

	onOther.WaitAll(t, []string{"to-other"}, 60*time.Second)
	onMain.WaitAll(t, []string{"after-all"}, 90*time.Second)
	h.settle([]string{"to-other", "after-all"}, m)
	require.Zero(t, onMain.Copies("to-other"), "the override went to the target's own topic too")
	for _, id := range []string{"cancel-hopping", "cancel-waiting", "to-nowhere", "strict-override"} {
		require.Zero(t, onMain.Copies(id)+onOther.Copies(id), "%s was delivered", id)
	}
	rows, _, err := h.fs.List(ctx, store.Filter{Status: store.StatusRejected, Limit: 10})
	require.NoError(t, err)
	reasons := map[string]string{}
	for _, r := range rows {
		require.Equal(t, "rejected_"+string(wire.RejectDestination), r.ErrorClass, "row %s", r.MessageID)
		reasons[r.MessageID] = r.LastError
	}
	require.Contains(t, reasons["to-nowhere"], `RD_TOPIC="payments" is not a topic target "orders" may deliver to`)
	require.Contains(t, reasons["strict-override"], `target "strict" does not let a message choose its destination`)
	require.Len(t, reasons, 2)
}

// Each hop is noted in the alert's trace for operators, off the consume path: an alert
// due beyond the threshold shows as hopping, with its hop and when it comes back; once
// delivered, the trace says so, with the replica that handed it off.
func TestHopsAreTraced(t *testing.T) {
	t.Parallel()
	h := newHarness(t, 5*time.Second)
	_, m := h.start("tracer")
	pub := h.publish("traced-1", 8*time.Second, "trace me")
	var s store.AlertState
	require.Eventually(t, func() bool {
		var err error
		s, err = h.ws.Inspect(context.Background(), "traced-1")
		return err == nil && s.Stage == "hopping"
	}, 10*time.Second, 20*time.Millisecond, "no hop traced")
	require.GreaterOrEqual(t, s.Hops, 1)
	require.Equal(t, pub.DeliverAt, s.DueAt)
	require.True(t, s.NextArrival.After(s.LastHopAt))
	require.Equal(t, "ops", s.Target)
	h.rec.waitAll(t, []string{"traced-1"}, 60*time.Second)
	h.settle([]string{"traced-1"}, m)
	s, err := h.ws.Inspect(context.Background(), "traced-1")
	require.NoError(t, err)
	require.Equal(t, "delivered", s.Stage)
	require.Contains(t, s.By, "tracer")
	require.Equal(t, float64(0), total(m.tracesDropped))
}
