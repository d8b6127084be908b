package testenv

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"
)

// TopicConsumer is a consumer of a business topic as an application runs one: a push
// consumer of a group of its own that records every message it receives, by the
// message's RD_ID property.
type TopicConsumer struct {
	mu   sync.Mutex
	got  map[string][]*primitive.MessageExt
	at   map[string][]time.Time
	wake chan struct{}
}

// ConsumeTopic creates topic on the local broker (CreateTopic) and consumes it from its
// first offset until the test ends.
func ConsumeTopic(t testing.TB, ns, topic string) *TopicConsumer {
	t.Helper()
	CreateTopic(t, ns, topic)
	tc := &TopicConsumer{got: map[string][]*primitive.MessageExt{}, at: map[string][]time.Time{}, wake: make(chan struct{}, 1)}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName(Unique("rd_biz_c_")),
		consumer.WithInstance(Unique("biz")),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	require.NoError(t, err)
	require.NoError(t, c.Subscribe(topic, consumer.MessageSelector{}, func(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
		now := time.Now()
		tc.mu.Lock()
		for _, m := range msgs {
			if id := m.GetProperty("RD_ID"); id != "" {
				tc.got[id] = append(tc.got[id], m)
				tc.at[id] = append(tc.at[id], now)
			}
		}
		tc.mu.Unlock()
		select {
		case tc.wake <- struct{}{}:
		default:
		}
		return consumer.ConsumeSuccess, nil
	}))
	require.NoError(t, c.Start())
	t.Cleanup(func() {
		c.Suspend()
		time.Sleep(200 * time.Millisecond)
		_ = c.Shutdown()
	})
	return tc
}

// WaitAll waits until every id was received at least once, or fails the test after
// timeout.
func (tc *TopicConsumer) WaitAll(t testing.TB, ids []string, timeout time.Duration) {
	t.Helper()
	deadline := time.After(timeout)
	for {
		tc.mu.Lock()
		missing := slices.DeleteFunc(slices.Clone(ids), func(id string) bool { return len(tc.got[id]) > 0 })
		tc.mu.Unlock()
		if len(missing) == 0 {
			return
		}
		select {
		case <-tc.wake:
		case <-time.After(200 * time.Millisecond):
		case <-deadline:
			t.Fatalf("%d of %d messages never reached the business consumer within %s (first: %s)", len(missing), len(ids), timeout, missing[0])
		}
	}
}

// Copies counts the distinct broker messages received for id: a consumer's own
// redelivery of one message keeps its message id; a second send does not.
func (tc *TopicConsumer) Copies(id string) int {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	seen := map[string]bool{}
	for _, m := range tc.got[id] {
		seen[m.MsgId] = true
	}
	return len(seen)
}

// First returns the first message received for id and when it was received; nil when
// none was.
func (tc *TopicConsumer) First(id string) (*primitive.MessageExt, time.Time) {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	if len(tc.got[id]) == 0 {
		return nil, time.Time{}
	}
	return tc.got[id][0], tc.at[id][0]
}

// CreateTopic creates topic on the local broker with a first send (the local broker
// creates topics on first use, autoCreateTopicEnable), so that consumers find its route.
func CreateTopic(t testing.TB, ns, topic string) {
	t.Helper()
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName(Unique("rd_biz_p_")),
		producer.WithInstanceName(Unique("biz")),
	)
	require.NoError(t, err)
	require.NoError(t, p.Start())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("warm-up")))
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, res.Status)
	_ = p.Shutdown()
}
