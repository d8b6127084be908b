package app

import (
	"fmt"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

func newInspectCmd(stdio IO) *cobra.Command {
	var path string
	cmd := &cobra.Command{
		Use: "inspect ID [-o table|json]",
		Example: `  rocketdelay inspect order-42-recheck
  rocketdelay inspect order-42-recheck -o json`,
		Short: "Where is an alert? Its state and history, from Redis and failed_sends",
		Long: `inspect answers "did it go out, when, and how?" for any RD_ID: hopping through the broker
(and when its hop comes back), waiting in the wheel stage, being handed off (by which
replica), delivered (when, by which robot, how late, merged with how many), failed (its
failed_sends row and next attempt), cancelled, rejected, or unknown (never seen, or older
than scheduler.doneTTL).`,
		Args: exactArgs(1),
	}
	out := outputFlag(cmd, outTable, outJSON)
	cmd.RunE = func(c *cobra.Command, args []string) error {
		if err := wire.CheckID(args[0]); err != nil {
			return fmt.Errorf("%w: %v", ErrUsage, err)
		}
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRedis, config.SectionPostgres, config.SectionScheduler)
		if err != nil {
			return err
		}
		return withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			return withPostgres(c, cfg, func(pg *pgxpool.Pool) error {
				stage, err := store.OpenWheelStage(c.Context(), rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
				if err != nil {
					return err
				}
				in := failed.Inspector{Wheel: stage,
					Rows: store.NewFailedSends(pg, store.FailedSendsOptions{}), Config: cfg, Now: time.Now,
					Owners: store.NewProducers(rdb, cfg.Redis.KeyPrefix, cfg.Redis.Shards).Beside(stage)}
				rep, err := in.Inspect(c.Context(), args[0])
				if err != nil {
					return err
				}
				if out.is(outJSON) {
					return writeJSON(c.OutOrStdout(), rep)
				}
				return failed.WriteReport(c.OutOrStdout(), rep)
			})
		})
	}
	configFlag(cmd, &path)
	return cmd
}
