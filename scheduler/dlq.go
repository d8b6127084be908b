package scheduler

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/admin"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	rmqerrors "github.com/apache/rocketmq-client-go/v2/errors"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/wire"
)

// DLQTopic is the dead-letter topic of a consumer group: where RocketMQ moves a message
// that was handed back more than the group's maximum reconsume times.
func DLQTopic(group string) string { return "%DLQ%" + group }

// DLQDepth counts the messages in the dead-letter queue of group: 0 when the queue does
// not exist (nothing was ever dead-lettered). rocketdelay itself never dead-letters (its
// reconsumption is unbounded), so a non-zero depth means messages of an older version,
// or of another consumer of the same group, that nobody will deliver: look at them with
// `mqadmin queryMsgByOffset -t %DLQ%<group>` and republish them to the topic. instance
// is the instance name of the scheduler's consumer; with credentials in access it must
// be running, as its client signs the requests.
func DLQDepth(ctx context.Context, nameServers []string, access wire.Access, group, instance string) (int64, error) {
	topic := DLQTopic(group)
	resolver := primitive.NewPassthroughResolver(nameServers)
	adm, err := admin.NewAdmin(append(access.AdminOptions(), admin.WithResolver(resolver))...)
	if err != nil {
		return 0, fmt.Errorf("scheduler: admin client: %w", err)
	}
	defer adm.Close()
	queues, err := adm.FetchPublishMessageQueues(ctx, topic)
	if errors.Is(err, rmqerrors.ErrTopicNotExist) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("scheduler: find the queues of %s: %w", topic, err)
	}
	// The depth of a queue nobody consumes is its max offset minus its min offset: the
	// offsets of a time after the last message and of the epoch. Only the offset search is
	// used — no subscription, no start: the client's pull path races with itself.
	//
	// The pinned client signs a client's requests to brokers only once the client has
	// started (its start registers the signer), and a pull consumer cannot start without
	// a subscription. So with credentials it shares the client of instance, the
	// scheduler's running consumer (rocketmq-client-go keeps one client per instance
	// name), which signs; an unsigned request would be refused.
	name := instance + "-dlq"
	if access.Signed() {
		name = instance
	}
	pc, err := rocketmq.NewPullConsumer(append(access.ConsumerOptions(),
		consumer.WithNsResolver(resolver),
		consumer.WithGroupName(group+"-dlq-check"),
		consumer.WithInstance(name),
	)...)
	if err != nil {
		return 0, fmt.Errorf("scheduler: client for %s: %w", topic, err)
	}
	future := time.Now().Add(24 * time.Hour).UnixMilli()
	var depth int64
	for _, q := range queues {
		hi, err := pc.OffsetForTimestamp(q, future)
		if err != nil {
			return 0, fmt.Errorf("scheduler: the max offset of %s queue %d: %w", topic, q.QueueId, err)
		}
		lo, err := pc.OffsetForTimestamp(q, 0)
		if err != nil {
			return 0, fmt.Errorf("scheduler: the min offset of %s queue %d: %w", topic, q.QueueId, err)
		}
		depth += max(hi-lo, 0)
	}
	return depth, nil
}

// DefaultDLQCheckInterval is how often a scheduler measures its group's dead-letter
// queue.
const DefaultDLQCheckInterval = time.Minute

// dlqWatch measures the dead-letter queue at once (warning when it holds messages) and
// then every interval, into the rocketdelay_dlq_messages gauge, until ctx ends.
func (s *Scheduler) dlqWatch(ctx context.Context, interval time.Duration) {
	defer s.life.loops.Done()
	warned := false
	for {
		depth, err := DLQDepth(ctx, s.opts.NameServers, s.opts.Access, s.opts.Group, s.opts.InstanceName)
		switch {
		case err != nil:
			s.metrics.dlq.Set(-1)
			if ctx.Err() == nil {
				s.logger.Warn("cannot measure the dead-letter queue", "topic", DLQTopic(s.opts.Group), "err", err)
			}
		default:
			s.metrics.dlq.Set(float64(depth))
			if depth > 0 && !warned {
				warned = true
				s.logger.Warn("the consumer group's dead-letter queue holds messages that will never be delivered: "+
					"rocketdelay does not dead-letter, so they come from an older version or another consumer of the group; "+
					"inspect them with mqadmin and republish them to the topic",
					"topic", DLQTopic(s.opts.Group), "messages", depth)
			}
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(interval):
		}
	}
}
