package scheduler

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"
)

// TestAllocateSkipsLapsedConsumers: the allocation leaves out the consumers of replicas
// the last beat reported absent, so that the live ones split every queue between them,
// each queue once; with nobody absent it is the client's average allocation; a consumer
// always counts itself; a client id with a unit name is read too.
func TestAllocateSkipsLapsedConsumers(t *testing.T) {
	t.Parallel()
	var mqAll []*primitive.MessageQueue
	for i := range 8 {
		mqAll = append(mqAll, &primitive.MessageQueue{Topic: "guava", BrokerName: "b", QueueId: i})
	}
	cidAll := []string{"10.0.0.1@ra", "10.0.0.2@rb", "10.0.0.3@rc@unit"}
	absent := map[string]bool{}
	allocate := allocateLive(func() map[string]bool { return absent }, &ownQueues{})
	split := func() map[string][]int {
		out := map[string][]int{}
		for _, cid := range cidAll {
			for _, q := range allocate("g", cid, mqAll, cidAll) {
				out[cid] = append(out[cid], q.QueueId)
			}
		}
		return out
	}

	for _, cid := range cidAll {
		require.Equal(t, consumer.AllocateByAveragely("g", cid, mqAll, cidAll), allocate("g", cid, mqAll, cidAll),
			"nobody absent: the client's allocation")
	}

	absent = map[string]bool{"ra": true}
	got := split()
	require.Equal(t, []int{0, 1, 2, 3}, got["10.0.0.2@rb"])
	require.Equal(t, []int{4, 5, 6, 7}, got["10.0.0.3@rc@unit"])
	require.Equal(t, []int{0, 1, 2}, got["10.0.0.1@ra"], "ra, if it runs at all, counts itself: it beats again at once")

	absent = map[string]bool{"ra": true, "rc": true}
	got = split()
	require.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, got["10.0.0.2@rb"], "the one live consumer takes every queue")
	require.Equal(t, []int{0, 1, 2, 3}, got["10.0.0.1@ra"])

	require.Equal(t, "ra", replicaOfClient("10.0.0.1@ra"))
	require.Equal(t, "rc", replicaOfClient("10.0.0.3@rc@unit"))
	require.Equal(t, "pid-only", replicaOfClient("pid-only"))
}

// TestSentOnHopsGoToAnotherReplicasQueue: the allocation notes this replica's queues,
// and a hop marked sendOn (an alert for a target only another replica has) goes to a
// queue of another replica, every time; an ordinary hop goes round robin over all of
// them; a replica that has every queue (the only consumer) sends on round robin too.
func TestSentOnHopsGoToAnotherReplicasQueue(t *testing.T) {
	t.Parallel()
	var mqAll []*primitive.MessageQueue
	for i := range 8 {
		mqAll = append(mqAll, &primitive.MessageQueue{Topic: "guava", BrokerName: "b", QueueId: i})
	}
	var mine ownQueues
	allocate := allocateLive(func() map[string]bool { return nil }, &mine)
	own := allocate("g", "10.0.0.1@ra", mqAll, []string{"10.0.0.1@ra", "10.0.0.2@rb"})
	require.Len(t, own, 4)
	owned := map[int]bool{}
	for _, q := range own {
		owned[q.QueueId] = true
	}
	sel := hopSelector{mine: &mine, next: producer.NewRoundRobinQueueSelector()}
	seen := map[int]int{}
	for range 200 {
		q := sel.Select(&primitive.Message{Topic: "guava", Queue: sendOn}, mqAll, "")
		require.False(t, owned[q.QueueId], "sent on to queue %d, this replica's own", q.QueueId)
		seen[q.QueueId]++
	}
	require.Len(t, seen, 4, "spread over every queue of the other replica: %v", seen)
	plain := map[int]bool{}
	for range 8 {
		plain[sel.Select(&primitive.Message{Topic: "guava"}, mqAll, "").QueueId] = true
	}
	require.Len(t, plain, 8, "an ordinary hop goes round robin over every queue")

	allocate("g", "10.0.0.1@ra", mqAll, []string{"10.0.0.1@ra"}) // the only consumer
	alone := map[int]bool{}
	for range 8 {
		alone[sel.Select(&primitive.Message{Topic: "guava", Queue: sendOn}, mqAll, "").QueueId] = true
	}
	require.Len(t, alone, 8)
}
