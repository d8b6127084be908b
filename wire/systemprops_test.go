package wire_test

import (
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/wire"
)

// brokerProperties are RocketMQ 5.3.3's own property names (MessageConst's, read with
// javap from rocketmq-common-5.3.3.jar) that the broker or the client act on: none may be
// copied onto a message rocketdelay publishes, nor set by a producer as its own.
// (TIMER_DEL_UNIQKEY, copied onto a timer hop, made it a delete request the broker never
// delivers.) The broker's other names (TTL, BUYER_ID, CORRELATION_ID, …) a producer may
// use for its own.
const brokerProperties = `WAIT DELAY RETRY_TOPIC REAL_TOPIC REAL_QID TRAN_MSG PGROUP MIN_OFFSET MAX_OFFSET
ORIGIN_MESSAGE_ID TRANSFER_FLAG CORRECTION_FLAG MQ2_FLAG RECONSUME_TIME MSG_REGION TRACE_ON UNIQ_KEY
EXTEND_UNIQ_INFO MAX_RECONSUME_TIMES CONSUME_START_TIME INNER_NUM INNER_BASE CHECK_IMMUNITY_TIME_IN_SECONDS
TRAN_PREPARED_QUEUE_OFFSET __transactionId__ TRANSACTION_CHECK_TIMES REPLY_TO_CLIENT CLUSTER MSG_TYPE POP_CK
POP_CK_OFFSET 1ST_POP_TIME PROPERTY_FORWARD_QUEUE_ID REDIRECT INNER_MULTI_DISPATCH INNER_MULTI_QUEUE_OFFSET
TRACE_CONTEXT TIMER_DELAY_SEC TIMER_DELIVER_MS __RMQ.TRANSIENT.TOPIC_SYS_FLAG __RMQ.TRANSIENT.GROUP_SYS_FLAG
TIMER_ENQUEUE_MS TIMER_DEQUEUE_MS TIMER_ROLL_TIMES TIMER_OUT_MS TIMER_DEL_UNIQKEY TIMER_DELAY_LEVEL
TIMER_DELAY_MS __CRC32#`

func TestEveryBrokerPropertyIsTheBrokers(t *testing.T) {
	for _, name := range strings.Fields(brokerProperties) {
		require.True(t, wire.SystemProperty(name), name)
	}
	for _, name := range []string{"order", "TTL", "BUYER_ID", "CORRELATION_ID", "INSTANCE_ID"} {
		require.False(t, wire.SystemProperty(name), "%s: a producer's own", name)
	}
}
