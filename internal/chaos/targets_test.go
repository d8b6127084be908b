package chaos

import (
	"context"
	"fmt"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// A replica's configuration loads as rocketdelay serve loads it: a chat target of each
// kind with the robots the simulator knows, each kind's base URL at the replica's own
// address of the simulator, and the limits the simulator holds the robots to.
func TestReplicaConfigLoads(t *testing.T) {
	e := &env{r: &runner{work: t.TempDir(), stack: &Stack{Env: map[string]string{"ROCKETDELAY_LEVELS": "1s 2s 3s 4s 5s 6s"}}},
		name: killOneOf(feishu.Kind), idPrefix: "abc123-" + killOneOf(feishu.Kind), topic: "rd_chaos_x", tuning: tuningOf(killOneOf(feishu.Kind))}
	e.sim = startSimulator(e.simRobots(), 0, regexp.MustCompile(scenarioIDPattern))
	const root = "http://127.0.0.1:1"
	path, err := e.writeConfig("kill-one-feishu-r0-1", root, 0)
	require.NoError(t, err)
	env := map[string]string{"ROCKETDELAY_NAMESRV": "127.0.0.1:9876", "ROCKETDELAY_REDIS_URL": "redis://127.0.0.1:6379/0",
		"ROCKETDELAY_POSTGRES_URL": "postgres://u:p@127.0.0.1:5432/db"}
	c, err := config.Load(path, func(k string) string { return env[k] })
	require.NoError(t, err)

	require.Equal(t, root+"/robot/send", c.Sender.BaseURL)
	require.Equal(t, senderWindow, c.Sender.Window)
	require.Equal(t, senderLimits[config.KindDingTalk], c.Sender.Limit)
	for _, p := range platforms.All {
		settings := c.Sender.Settings(p.Config)
		require.Equal(t, root+strings.TrimSuffix(p.Sim.Path(), "/"), settings.BaseURL, p.Kind())
		require.Equal(t, senderLimits[p.Kind()], settings.Limit, p.Kind())
		if p.Config.Section != "" {
			require.Equal(t, p.Config.Defaults.LimitPerSecond, settings.LimitPerSecond, p.Kind())
		}
	}
	for _, kind := range chatKinds {
		target, ok := c.Targets[chatTargets[kind]]
		require.True(t, ok, kind)
		require.Equal(t, kind, target.Channel())
		robots := chatRobots(e.tokenPrefix(), kind)
		require.Len(t, target.Robots, len(robots))
		for i, rb := range robots {
			require.Equal(t, rb.Name, target.Robots[i].Name)
			require.Equal(t, rb.Token, target.Robots[i].Token.Reveal())
			require.Equal(t, rb.Secret, target.Robots[i].SigningSecret.Reveal())
			require.Equal(t, rb.Keyword, target.Robots[i].Keyword)
		}
	}
	require.Equal(t, otherRobot(e.tokenPrefix()).Token, c.Targets["other"].Robots[0].Token.Reveal())
	require.Equal(t, config.KindTopic, c.Targets["orders"].Channel())
	require.Equal(t, feishu.Kind, kindOf("storm-feishu"))
	require.Equal(t, wecom.Kind, kindOf("kill-one-wecom"))
	require.Equal(t, config.KindDingTalk, kindOf(ScenarioKillOne))
}

// rolling-config's two revisions load, and differ as the scenario says: revision 0 has
// "oldt" and not "newt", revision 1 the other way round and a fifth robot in "ops"; the
// simulator knows every robot of both.
func TestRollingConfigRevisionsLoad(t *testing.T) {
	e := &env{r: &runner{work: t.TempDir(), stack: &Stack{Env: map[string]string{"ROCKETDELAY_LEVELS": "1s 2s 3s 4s 5s 6s"}}},
		name: ScenarioRollingConfig, idPrefix: "abc123-" + ScenarioRollingConfig, topic: "rd_chaos_x", tuning: tuningOf(ScenarioRollingConfig)}
	require.NoError(t, setupRollingConfig(context.Background(), e))
	e.sim = startSimulator(e.simRobots(), 0, regexp.MustCompile(scenarioIDPattern))
	env := map[string]string{"ROCKETDELAY_NAMESRV": "127.0.0.1:9876", "ROCKETDELAY_REDIS_URL": "redis://127.0.0.1:6379/0",
		"ROCKETDELAY_POSTGRES_URL": "postgres://u:p@127.0.0.1:5432/db"}
	known := map[string]bool{}
	for _, rb := range e.simRobots() {
		known[rb.Token] = true
	}
	for revision, want := range []struct {
		has, hasNot string
		ops         int
	}{{removedTarget, addedTarget, 4}, {addedTarget, removedTarget, 5}} {
		path, err := e.writeConfig(fmt.Sprintf("rolling-config-r0-%d", revision), "http://127.0.0.1:1", revision)
		require.NoError(t, err)
		c, err := config.Load(path, func(k string) string { return env[k] })
		require.NoError(t, err, "revision %d", revision)
		require.Contains(t, c.Targets, want.has, "revision %d", revision)
		require.NotContains(t, c.Targets, want.hasNot, "revision %d", revision)
		require.Len(t, c.Targets["ops"].Robots, want.ops, "revision %d", revision)
		for name, target := range c.Targets {
			for _, rb := range target.Robots {
				require.True(t, known[rb.Token.Reveal()], "revision %d: robot %s of %s unknown to the simulator", revision, rb.Name, name)
			}
		}
	}
}
