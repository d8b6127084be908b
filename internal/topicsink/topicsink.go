// Package topicsink is a consumer of a business topic as an application runs one, for
// the tests, the benchmarks and the fault suite: it records every message it receives
// by its RD_ID. It links the RocketMQ client (whose package init starts goroutines), so
// it is a package of its own that only what consumes a topic imports; sinktest wraps it
// for a testing.TB.
package topicsink

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"fmt"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// Sink is a consumer of a business topic as an application runs one: a push
// consumer of a group of its own, from the topic's first offset, that records every
// message it receives by the message's RD_ID property.
type Sink struct {
	c    rocketmq.PushConsumer
	mu   sync.Mutex
	got  map[string][]Received
	wake chan struct{}
}

// Received is one message as the consumer received it.
type Received struct {
	Msg *primitive.MessageExt
	// At is when the consumer received it, by this process's clock.
	At time.Time
}

// CreateTopic creates topic on the broker of name server ns with a first send (the local
// broker creates topics on first use, autoCreateTopicEnable), so that consumers find its
// route.
func CreateTopic(ctx context.Context, ns, topic string) error {
	p, err := rocketmq.NewProducer(
		producer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		producer.WithGroupName("rd_biz_p_"+suffix()),
		producer.WithInstanceName("biz_"+suffix()),
	)
	if err != nil {
		return err
	}
	if err := p.Start(); err != nil {
		return err
	}
	defer p.Shutdown()
	res, err := p.SendSync(ctx, primitive.NewMessage(topic, []byte("warm-up")))
	if err != nil {
		return fmt.Errorf("topicsink: create topic %s: %w", topic, err)
	}
	if res.Status != primitive.SendOK {
		return fmt.Errorf("topicsink: create topic %s: send status %d", topic, res.Status)
	}
	return nil
}

// Start creates topic and consumes it, from its first offset, until Close.
func Start(ctx context.Context, ns, topic string) (*Sink, error) {
	if err := CreateTopic(ctx, ns, topic); err != nil {
		return nil, err
	}
	tc := &Sink{got: map[string][]Received{}, wake: make(chan struct{}, 1)}
	c, err := rocketmq.NewPushConsumer(
		consumer.WithNsResolver(primitive.NewPassthroughResolver([]string{ns})),
		consumer.WithGroupName("rd_biz_c_"+suffix()),
		consumer.WithInstance("biz_"+suffix()),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
	)
	if err != nil {
		return nil, err
	}
	if err := c.Subscribe(topic, consumer.MessageSelector{}, tc.consume); err != nil {
		return nil, err
	}
	if err := c.Start(); err != nil {
		return nil, err
	}
	tc.c = c
	return tc, nil
}

func (tc *Sink) consume(_ context.Context, msgs ...*primitive.MessageExt) (consumer.ConsumeResult, error) {
	now := time.Now()
	tc.mu.Lock()
	for _, m := range msgs {
		if id := m.GetProperty("RD_ID"); id != "" {
			tc.got[id] = append(tc.got[id], Received{Msg: m, At: now})
		}
	}
	tc.mu.Unlock()
	select {
	case tc.wake <- struct{}{}:
	default:
	}
	return consumer.ConsumeSuccess, nil
}

// Close stops the consumer.
func (tc *Sink) Close() {
	tc.c.Suspend()
	time.Sleep(200 * time.Millisecond)
	_ = tc.c.Shutdown()
}

// Wait waits until every id was received at least once, or ctx ends; it returns the ids
// still missing.
func (tc *Sink) Wait(ctx context.Context, ids []string) []string {
	for {
		var missing []string
		tc.mu.Lock()
		for _, id := range ids {
			if len(tc.got[id]) == 0 {
				missing = append(missing, id)
			}
		}
		tc.mu.Unlock()
		if len(missing) == 0 {
			return nil
		}
		select {
		case <-tc.wake:
		case <-time.After(200 * time.Millisecond):
		case <-ctx.Done():
			return missing
		}
	}
}

// Copies returns the distinct broker messages received for id, first received first: a
// consumer's own redelivery of one message keeps its message id, a second send does not.
func (tc *Sink) Copies(id string) []Received {
	tc.mu.Lock()
	defer tc.mu.Unlock()
	seen := map[string]bool{}
	var out []Received
	for _, r := range tc.got[id] {
		if !seen[r.Msg.MsgId] {
			seen[r.Msg.MsgId] = true
			out = append(out, r)
		}
	}
	return out
}

func suffix() string {
	b := make([]byte, 6)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
