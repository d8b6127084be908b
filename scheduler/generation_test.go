package scheduler

import (
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A copy's generation (RD_GEN) is read on arrival, absent is 0, a value that is not one
// is rejected, and it is not among the properties a topic target's message is delivered
// with.
func TestDecodeReadsTheGeneration(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	rules := decodeRules{knownTarget: func(string) bool { return true }, horizon: time.Hour,
		topics: map[string]topic.Target{"orders": {Target: "orders", TopicTarget: config.TopicTarget{Name: "order-events"}}}}
	msg := func(target, gen string) *primitive.MessageExt {
		m := &primitive.MessageExt{Message: primitive.Message{Body: []byte("x")}}
		m.WithProperties(map[string]string{wire.PropTarget: target, wire.PropID: "a", "shop": "eu-1",
			wire.PropDeliverAt: strconv.FormatInt(now.UnixMilli(), 10)})
		if gen != "" {
			m.WithProperty(wire.PropGen, gen)
		}
		return m
	}
	a, rej := decode(msg("ops", ""), rules, now)
	require.Nil(t, rej)
	require.Zero(t, a.Gen)

	a, rej = decode(msg("orders", "3"), rules, now)
	require.Nil(t, rej)
	require.Equal(t, int64(3), a.Gen)
	require.Equal(t, map[string]string{"shop": "eu-1"}, a.Props, "RD_GEN is rocketdelay's, not the business message's")

	for _, bad := range []string{"-1", "two"} {
		_, rej = decode(msg("ops", bad), rules, now)
		require.NotNil(t, rej, bad)
		require.Equal(t, wire.RejectBadDue, rej.Reason, bad)
		require.Contains(t, rej.Detail, "RD_GEN", bad)
	}
}
