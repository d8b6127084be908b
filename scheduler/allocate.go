package scheduler

import (
	"strings"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
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
// again at once.
func allocateLive(absent func() map[string]bool) consumer.AllocateStrategy {
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
		return consumer.AllocateByAveragely(group, current, mqAll, cidAll)
	}
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
