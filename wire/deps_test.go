package wire_test

import (
	"os/exec"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/wire"
)

// The priorities the configuration maps severities to are the wire's.
func TestPrioritiesAgreeWithTheConfiguration(t *testing.T) {
	require.Len(t, wire.Priorities, len(config.PriorityNames))
	for i, name := range config.PriorityNames {
		p, err := wire.ParsePriority(name)
		require.NoError(t, err, name)
		if i > 0 {
			prev, _ := wire.ParsePriority(config.PriorityNames[i-1])
			require.Greater(t, prev, p, "PriorityNames go from the highest down")
		}
	}
}

// A producer compiles against package wire alone: it links the RocketMQ client and the
// standard library, and nothing of rocketdelay's service.
func TestWireLinksOnlyTheRocketMQClient(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", "github.com/rocketdelay/rocketdelay/wire").CombinedOutput()
	require.NoError(t, err, "%s", out)
	var rocketdelay []string
	for _, pkg := range strings.Fields(string(out)) {
		if strings.HasPrefix(pkg, "github.com/rocketdelay/") && pkg != "github.com/rocketdelay/rocketdelay/wire" {
			rocketdelay = append(rocketdelay, pkg)
		}
		for _, heavy := range []string{"github.com/jackc/pgx", "github.com/redis/go-redis", "github.com/sony/gobreaker",
			"github.com/prometheus/client_golang", "go.yaml.in/yaml"} {
			require.False(t, strings.HasPrefix(pkg, heavy), "wire links %s", pkg)
		}
	}
	require.Empty(t, rocketdelay, "wire links other packages of rocketdelay")
	require.Contains(t, string(out), "github.com/apache/rocketmq-client-go/v2\n")
}
