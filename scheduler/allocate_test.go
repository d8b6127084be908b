package scheduler

import (
	"testing"

	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
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
	allocate := allocateLive(func() map[string]bool { return absent })
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
