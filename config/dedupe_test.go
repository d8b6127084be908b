package config_test

import (
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// The dedupe window must cover the broker's retention: a copy the broker can still
// redeliver after its done marker expired would be sent again. Validation says so, and
// names both keys.
func TestDoneTTLMustCoverTheBrokersRetention(t *testing.T) {
	// with adds YAML lines below the scheduler and rocketmq keys of validYAML.
	with := func(scheduler, rocketmq string) string {
		y := strings.Replace(validYAML, "  threshold: 3s\n", "  threshold: 3s\n"+scheduler, 1)
		return strings.Replace(y, "  nameServers: [\"127.0.0.1:9876\"]\n", "  nameServers: [\"127.0.0.1:9876\"]\n"+rocketmq, 1)
	}
	c, err := Load(writeFile(t, validYAML), noEnv)
	require.NoError(t, err)
	require.Equal(t, 72*time.Hour, c.RocketMQ.Retention)
	require.Equal(t, 7*24*time.Hour, c.Scheduler.DoneTTL)

	_, err = Load(writeFile(t, with("  doneTTL: 48h\n", "")), noEnv)
	require.ErrorContains(t, err, "scheduler.doneTTL: 48h0m0s is shorter than rocketmq.retention 72h0m0s")
	require.ErrorContains(t, err, "would be sent again")

	c, err = Load(writeFile(t, with("  doneTTL: 48h\n", "  retention: 24h\n")), noEnv)
	require.NoError(t, err, "a broker keeping messages 24h is covered by a 48h window")
	require.Equal(t, 24*time.Hour, c.RocketMQ.Retention)

	_, err = Load(writeFile(t, with("", "  retention: -1h\n")), noEnv)
	require.ErrorContains(t, err, "rocketmq.retention: must be positive")
}
