package scheduler

import (
	"math/rand/v2"
	"strings"
	"sync"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// The consumer group's queues go to the consumers of live replicas. The broker lists a
// consumer until its connection closes: at once for a process that ended (the kernel
// closes it), but up to about two minutes for a paused process or a lost host, whose
// queues (hops coming back, new alerts) would wait that long. The wheel stage's
// liveness knows sooner: each beat reports the replicas that lapsed, are gone or
// departed a short while ago (store.BeatResult.Absent), the allocation leaves their
// consumers out, and each change of that set rebalances this consumer at once rather
// than at the client's next rebalance (every 20 s).

// allocateLive is the consumer group's allocation: the client's average allocation over
// the consumers whose replica absent does not name (no I/O: absent reads the last beat's
// report). This consumer always counts itself: a replica that finds itself absent beats
// again at once. What it allocates to this consumer is noted in mine.
func allocateLive(absent func() map[string]bool, mine *ownQueues) consumer.AllocateStrategy {
	return func(group, current string, mqAll []*primitive.MessageQueue, cidAll []string) []*primitive.MessageQueue {
		if out := absent(); len(out) > 0 {
			kept := make([]string, 0, len(cidAll))
			for _, cid := range cidAll {
				if cid == current || !out[replicaOfClient(cid)] {
					kept = append(kept, cid)
				}
			}
			cidAll = kept
		}
		got := consumer.AllocateByAveragely(group, current, mqAll, cidAll)
		if len(mqAll) > 0 {
			mine.note(mqAll[0].Topic, got)
		}
		return got
	}
}

// ownQueues are the queues of each topic this replica's consumer was last allocated. A
// message this replica sends on for another replica (an alert for a target only another
// replica has) goes to a queue that is not one of them (hopSelector), so that another
// replica consumes it next, not this one again.
type ownQueues struct {
	mu      sync.Mutex
	byTopic map[string]map[queueKey]bool
}

// queueKey names a queue of a topic.
type queueKey struct {
	broker string
	id     int
}

func (o *ownQueues) note(topic string, mqs []*primitive.MessageQueue) {
	set := make(map[queueKey]bool, len(mqs))
	for _, mq := range mqs {
		set[queueKey{mq.BrokerName, mq.QueueId}] = true
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	if o.byTopic == nil {
		o.byTopic = map[string]map[queueKey]bool{}
	}
	o.byTopic[topic] = set
}

// others are the queues of mqs that this replica was not last allocated (all of mqs when
// it was allocated none of their topic).
func (o *ownQueues) others(mqs []*primitive.MessageQueue) []*primitive.MessageQueue {
	if len(mqs) == 0 {
		return nil
	}
	o.mu.Lock()
	own := o.byTopic[mqs[0].Topic]
	o.mu.Unlock()
	out := make([]*primitive.MessageQueue, 0, len(mqs))
	for _, mq := range mqs {
		if !own[queueKey{mq.BrokerName, mq.QueueId}] {
			out = append(out, mq)
		}
	}
	return out
}

// sendOn marks a hop sent on for another replica: its Message.Queue is sendOn, and
// hopSelector puts it on a queue another replica consumes.
var sendOn = &primitive.MessageQueue{}

// hopSelector picks the queue of each hop the scheduler publishes: round robin, as the
// client does by default, but a message marked sendOn goes to a queue picked at random
// among those this replica's consumer was not allocated (round robin when it has them
// all: it is the only consumer).
type hopSelector struct {
	mine *ownQueues
	next producer.QueueSelector
}

func (h hopSelector) Select(msg *primitive.Message, mqs []*primitive.MessageQueue, lastBroker string) *primitive.MessageQueue {
	if msg.Queue == sendOn {
		if others := h.mine.others(mqs); len(others) > 0 {
			return others[rand.IntN(len(others))]
		}
	}
	return h.next.Select(msg, mqs, lastBroker)
}

// replicaOfClient is the replica of a RocketMQ client id, "ip@instance" or
// "ip@instance@unit": its instance name, which the scheduler sets to its replica id.
func replicaOfClient(cid string) string {
	_, rest, ok := strings.Cut(cid, "@")
	if !ok {
		return cid
	}
	instance, _, _ := strings.Cut(rest, "@")
	return instance
}
