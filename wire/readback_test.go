package wire_test

import (
	"context"
	"net"
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/wire"
)

// TestReaderReadsAScheduledMessageBack: a message waiting in the broker's delay queue (a
// delay level) or its timer wheel is read back by the offset id its send answered, body
// and properties whole, from the real broker; an offset the broker does not hold is
// ErrMessageGone, an unreachable broker is not.
func TestReaderReadsAScheduledMessageBack(t *testing.T) {
	p, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver([]string{testenv.NameServer(t)})),
		producer.WithGroupName(testenv.Unique("rd-readback")), producer.WithRetry(2))
	require.NoError(t, err)
	require.NoError(t, p.Start())
	t.Cleanup(func() { _ = p.Shutdown() })
	topic := testenv.Unique("rd_readback_")
	ctx := context.Background()
	var r wire.Reader

	body := []byte(`{"msgtype":"text","text":{"content":"read me back"}}`)
	for _, kind := range []string{"level", "timer"} {
		m := primitive.NewMessage(topic, body)
		m.WithProperty(wire.PropID, "rb-"+kind)
		m.WithProperty(wire.PropTarget, "ops")
		m.WithProperty(wire.PropPriority, "high")
		m.WithTag("tag-" + kind)
		if kind == "level" {
			m.WithDelayTimeLevel(13) // the longest of the test profile's levels
		} else {
			m.WithProperty(primitive.PropertyTimerDeliverMS, strconv.FormatInt(time.Now().Add(15*time.Second).UnixMilli(), 10))
		}
		var res *primitive.SendResult
		require.Eventually(t, func() bool { // the first send creates the topic
			res, err = p.SendSync(ctx, m)
			return err == nil && res.Status == primitive.SendOK
		}, 30*time.Second, 100*time.Millisecond, "send: %v", err)
		got, err := r.Read(ctx, res.OffsetMsgID)
		require.NoError(t, err, kind)
		require.Equal(t, body, got.Body, kind)
		require.Equal(t, "rb-"+kind, got.GetProperty(wire.PropID), kind)
		require.Equal(t, topic, got.GetProperty(primitive.PropertyRealTopic), kind)
		require.Equal(t, map[string]string{wire.PropPriority: "high", primitive.PropertyTags: "tag-" + kind},
			wire.CopyProps(got), "%s: a copy keeps the producer's properties and none of the scheduling or the broker's", kind)
	}

	// An offset past the end of the commit log.
	id, err := primitive.UnmarshalMsgID([]byte(mustSend(t, p, topic).OffsetMsgID))
	require.NoError(t, err)
	_, err = r.Read(ctx, primitive.CreateMessageId([]byte{127, 0, 0, 1}, int32(id.Port), id.Offset+1<<40))
	require.ErrorIs(t, err, wire.ErrMessageGone)

	// A broker that is not there: not "gone", an error that may pass.
	_, port, err := net.SplitHostPort(testenv.ClosedAddr(t))
	require.NoError(t, err)
	n, err := strconv.Atoi(port)
	require.NoError(t, err)
	_, err = r.Read(ctx, primitive.CreateMessageId([]byte{127, 0, 0, 1}, int32(n), 0))
	require.Error(t, err)
	require.NotErrorIs(t, err, wire.ErrMessageGone)

	_, err = r.Read(ctx, "not-an-id")
	require.ErrorIs(t, err, wire.ErrMessageGone, "an id that names no message cannot name one later")
	require.ErrorContains(t, err, "not an offset message id")
}

func mustSend(t *testing.T, p rocketmq.Producer, topic string) *primitive.SendResult {
	t.Helper()
	res, err := p.SendSync(context.Background(), primitive.NewMessage(topic, []byte("x")))
	require.NoError(t, err)
	return res
}
