package wire_test

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/wire"
)

// Check refuses what the consumer would refuse or the broker would not carry: a due
// time before 1970 or after 9999 (one far enough ahead overflowed into an early
// RD_DELIVER_AT_MS), a target holding the property encoding's separators (it wrote
// properties of its own), a property with no value (RocketMQ drops it).
func TestCheckRefusesWhatCannotArriveAsWritten(t *testing.T) {
	now := time.Now()
	for reason, pubs := range map[wire.RejectReason][]wire.Publication{
		wire.RejectBadDue: {
			{Target: "ops", At: time.Date(1969, 12, 31, 0, 0, 0, 0, time.UTC)},
			{Target: "ops", At: time.Date(10000, 1, 1, 0, 0, 0, 0, time.UTC)},
			{Target: "ops", At: time.Unix(2305843010980919552, 0)},
		},
		wire.RejectUnknownTarget: {{Target: "ops\x02RD_HOPS\x015", In: time.Minute}},
		wire.RejectDestination:   {{Target: "orders", In: time.Minute, Raw: true, Properties: map[string]string{"shop": ""}}},
	} {
		for _, pub := range pubs {
			rej := pub.Check(now, wire.DueLimits{})
			require.NotNil(t, rej, "%+v", pub)
			require.Equal(t, reason, rej.Reason, "%+v", pub)
		}
	}
	require.Nil(t, wire.Publication{Target: "ops", At: time.Date(9999, 12, 31, 0, 0, 0, 0, time.UTC)}.Check(now, wire.DueLimits{}))
	require.Nil(t, wire.Publication{Target: "orders", In: time.Minute, Raw: true, Properties: map[string]string{"shop": "eu-1"}}.Check(now, wire.DueLimits{}))
}
