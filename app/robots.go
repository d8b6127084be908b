package app

import (
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
)

// newRobotsCmd is `rocketdelay robots`: every configured robot's state in the shared
// pool, as all replicas see it.
func newRobotsCmd(stdio IO) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use: "robots [-o table|json]",
		Example: `  rocketdelay robots -f deploy/local/rocketdelay.yaml
  rocketdelay robots -o json`,
		Short: "Show each robot's kind, sends in the window, learned limit, cool-down, disable and doubt",
		Args:  exactArgs(0),
	}
	out := outputFlag(cmd, outTable, outJSON)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRedis, config.SectionTargets, config.SectionSender)
		if err != nil {
			return err
		}
		return withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			opts, err := chatOptions(cfg)
			if err != nil {
				return err
			}
			rows, err := sender.RobotStatuses(c.Context(), store.RobotPoolFor(rdb, cfg.Redis.KeyPrefix, cfg.Sender),
				opts.Targets, cfg.Sender.Limit)
			if err != nil {
				return err
			}
			if out.is(outJSON) {
				return writeJSON(c.OutOrStdout(), rows)
			}
			return sender.WriteRobotStatuses(c.OutOrStdout(), rows)
		})
	}
	configFlag(cmd, &path)
	return cmd
}
