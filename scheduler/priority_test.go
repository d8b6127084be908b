package scheduler

import (
	"strconv"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/wire"
)

// A chat alert keeps its RD_PRIORITY in the wheel stage (with its principal, the only
// properties it keeps), so the hand-off gives the channel its priority; a priority that is not one of the wire's
// is rejected on arrival with its reason.
func TestDecodeKeepsThePriority(t *testing.T) {
	now := time.Date(2026, 12, 3, 12, 0, 0, 0, time.UTC)
	rules := decodeRules{knownTarget: func(string) bool { return true }, horizon: time.Hour}
	msg := func(priority string) *primitive.MessageExt {
		m := &primitive.MessageExt{Message: primitive.Message{Body: []byte("disk full")}}
		m.WithProperties(map[string]string{wire.PropTarget: "ops", wire.PropID: "a", "shop": "eu-1",
			wire.PropDeliverAt: strconv.FormatInt(now.UnixMilli(), 10)})
		if priority != "" {
			m.WithProperty(wire.PropPriority, priority)
		}
		return m
	}
	a, rej := decode(msg("high"), rules, now)
	require.Nil(t, rej)
	require.Equal(t, map[string]string{wire.PropPriority: "high"}, a.Props)
	require.Equal(t, 1, wire.PriorityOf(a.Props))

	a, rej = decode(msg(""), rules, now)
	require.Nil(t, rej)
	require.Nil(t, a.Props, "a chat alert without a priority keeps no property")
	require.Zero(t, wire.PriorityOf(a.Props))

	m := msg("")
	m.WithProperty(wire.PropPrincipal, "team-a")
	m.WithProperty(wire.PropPrincipalSig, "sig")
	a, rej = decode(m, rules, now)
	require.Nil(t, rej)
	require.Equal(t, map[string]string{wire.PropPrincipal: "team-a", wire.PropPrincipalSig: "sig"}, a.Props,
		"its principal, and the signature the hand-off judges it by, ride with it")

	_, rej = decode(msg("urgent"), rules, now)
	require.NotNil(t, rej)
	require.Equal(t, wire.RejectBadPriority, rej.Reason)
	require.Contains(t, rej.Detail, "critical, high, normal, low")
}
