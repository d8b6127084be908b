package config

import (
	"testing"

	"github.com/stretchr/testify/require"
)

func TestSectionOf(t *testing.T) {
	for key, want := range map[string]Section{
		"redis": "redis", "redis.url": "redis", "targets.ops.robots[0].token": "targets",
		"rocketmq.nameServers[1]": "rocketmq", "shutdownTimeout": "shutdownTimeout",
	} {
		require.Equal(t, want, sectionOf(key), key)
	}
}
