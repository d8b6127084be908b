package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/bench"
	"github.com/rocketdelay/rocketdelay/store"
)

// The `rocketdelay bench …` commands; the engines live in internal/bench.

func newBenchCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks against the configured broker and Redis"}
	var path string
	var n, concurrency int
	pipeline := &cobra.Command{
		Use:   "pipeline",
		Short: "Measure raw RocketMQ consume+publish, the scheduler's hop and wheel-stage throughput, Redis round trips and lateness",
		Long: `pipeline measures, in one run on the configured broker and Redis, on fresh topics:
  raw    a bare rocketmq-client-go consumer that re-publishes every message (the cost of a hop)
  hop    the scheduler taking one hop per message (decode, cancel check, re-publish)
  wheel  the scheduler storing each message in the Redis wheel stage, then claiming and
         handing it off at its due time
and prints throughput, the hop/raw ratio, Redis round trips per wheel-stage message and
the lateness from due time to hand-off.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, stdio)
			if err != nil {
				return err
			}
			if n < 100 {
				return fmt.Errorf("%w: -n must be at least 100", ErrUsage)
			}
			return bench.Pipeline(c.Context(), cfg, n, concurrency, c.OutOrStdout())
		},
	}
	configFlag(pipeline, &path)
	pipeline.Flags().IntVarP(&n, "messages", "n", 10000, "messages per stage")
	pipeline.Flags().IntVar(&concurrency, "concurrency", 20, "consumer goroutines, the same for every stage")
	cmd.AddCommand(pipeline, newBenchSenderCmd(stdio), newBenchModesCmd(stdio))
	return cmd
}

// newBenchModesCmd is `rocketdelay bench modes`; newBenchCmd adds it to the bench group.
func newBenchModesCmd(stdio IO) *cobra.Command {
	var path string
	var o bench.ModesOptions
	cmd := &cobra.Command{
		Use:   "modes",
		Short: "Compare scheduler.mode levels and timer, and the broker's timer alone: broker messages per alert and lateness",
		Long: `modes delivers one delay mix, in one run on the configured broker and Redis, through an
in-process scheduler in levels mode, then in timer mode, then as plain timer messages
consumed directly (the broker's own precision, no wheel stage), and prints broker
messages per alert (the publish and every hop, overall and for delays within one timer
maximum) and lateness p50/p99/max with early deliveries. The broker must accept timer
messages (RocketMQ 5, timerWheelEnable=true).`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			cfg, err := loadConfig(path, stdio)
			if err != nil {
				return err
			}
			if o.N < 10 || o.MinDelay <= 0 || o.MaxDelay < o.MinDelay {
				return fmt.Errorf("%w: -n must be at least 10 and 0 < --min-delay <= --max-delay", ErrUsage)
			}
			return bench.Modes(c.Context(), cfg, o, c.OutOrStdout())
		},
	}
	configFlag(cmd, &path)
	cmd.Flags().IntVarP(&o.N, "alerts", "n", 200, "alerts per run")
	cmd.Flags().DurationVar(&o.MinDelay, "min-delay", 6*time.Second, "shortest delay of the mix")
	cmd.Flags().DurationVar(&o.MaxDelay, "max-delay", 50*time.Second, "longest delay of the mix")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "seed of the delay mix")
	return cmd
}

// newBenchSenderCmd is `rocketdelay bench sender`; newBenchCmd adds it to the bench
// group.
func newBenchSenderCmd(stdio IO) *cobra.Command {
	var path string
	o := bench.SenderOptions{}
	var p bench.PacingOptions
	var withPacing, pacingOnly, withShared, sharedOnly bool
	cmd := &cobra.Command{
		Use:   "sender",
		Short: "Compare the DingTalk sender (coalescing off and auto) with naive rate limiting, on a simulator",
		Long: `sender sends one burst of alerts, in turn, through four ways of respecting DingTalk's
per-robot limit, against one in-process DingTalk simulator (reset between runs) whose
robots accept 20 messages per --window and are throttled for 10 windows past that:

  rocketdelay, coalesce off   --senders Sender instances sharing the Redis robot pool
  rocketdelay, coalesce auto  the same, merging waiting alerts into markdown messages
  naive sleep                 one worker per robot, a fixed sleep after each send: sleep(3s)
                              against a 60s window, i.e. window/20, scaled to --window
  naive ZCOUNT+ZADD           four workers, each checking a robot's Redis sorted-set window
                              with ZCOUNT and then recording its send with ZADD, with
                              DingTalk's documented 20 per window (--naive-limit)

and prints, side by side, the pool's capacity per window (robots × limit), the messages
sent per window, the simulator's over-limit answers, and the alerts delivered per window.

Then (unless --shared=false) it compares sender.robotLimits learn and fixed on 8 robots
configured at 19 per window that really accept 5 (shared with someone else), against a
sender told the real limit, printing 130101 answers and redirects, alerts delivered,
messages and p99 lateness.

Then (unless --pacing=false) it compares sender.pacing auto and burst: for pools of 5 and
3 robots, alerts falling due (Poisson) at 0.5x, 2x and 10x the pool's capacity for
--pacing-windows windows, handed to 1 and to 4 Sender instances, it prints alerts
delivered, messages, over-limit answers and lateness (due → DingTalk accepted) p50, p99
and max, also scaled to a 60s window, and last the line
"pacing: p99 lateness … at 10x capacity, 3 robots, over-limit …".
Redis comes from the config (-f) or ROCKETDELAY_REDIS_URL.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return fmt.Errorf("%w: %v", ErrUsage, err)
			}
			redisURL, prefix := stdio.Getenv("ROCKETDELAY_REDIS_URL"), config.DefaultKeyPrefix
			if path != "" {
				cfg, err := loadConfig(path, stdio)
				if err != nil {
					return err
				}
				redisURL, prefix = cfg.Redis.URL.Reveal(), cfg.Redis.KeyPrefix
			}
			if redisURL == "" {
				return fmt.Errorf("%w: give a config file (-f) or set ROCKETDELAY_REDIS_URL", ErrUsage)
			}
			rdb, err := store.OpenRedis(c.Context(), redisURL)
			if err != nil {
				return err
			}
			defer rdb.Close()
			if sharedOnly {
				withPacing = false
			}
			if pacingOnly {
				withShared = false
			}
			if !pacingOnly && !sharedOnly {
				if err := bench.Sender(c.Context(), rdb, prefix, o, c.OutOrStdout()); err != nil {
					return err
				}
			}
			if withShared {
				if err := bench.Shared(c.Context(), rdb, prefix, bench.SharedOptions{}, c.OutOrStdout()); err != nil {
					return err
				}
			}
			if !withPacing {
				return nil
			}
			return bench.Pacing(c.Context(), rdb, prefix, p, c.OutOrStdout())
		},
	}
	configFlag(cmd, &path)
	f := cmd.Flags()
	f.IntVar(&o.Senders, "senders", 4, "Sender instances (replicas) sharing the robot pool")
	f.IntVar(&o.Robots, "robots", 5, "robots of the target group")
	f.IntVar(&o.Limit, "limit", 19, "sends per robot per window the pool allows (the simulator allows 20)")
	f.IntVar(&o.NaiveLimit, "naive-limit", config.MaxRobotLimit, "sends per robot per window the naive ZCOUNT+ZADD check allows (DingTalk's documented 20)")
	f.DurationVar(&o.Window, "window", 2*time.Second, "rate-limit window, standing for DingTalk's minute")
	f.IntVarP(&o.Alerts, "alerts", "n", 1000, "alerts in the burst")
	f.IntVar(&o.Callers, "callers", 200, "goroutines handing alerts to the senders")
	f.IntVar(&o.CoalesceMax, "coalesce-max", config.DefaultSenderCoalesceMax, "most alerts per merged message")
	f.DurationVar(&o.NaiveTimeout, "naive-timeout", 30*time.Second, "time limit of each naive run")
	f.BoolVar(&withPacing, "pacing", true, "then compare sender.pacing auto and burst at 0.5x, 2x and 10x the pool's capacity")
	f.BoolVar(&pacingOnly, "pacing-only", false, "only the pacing comparison")
	f.BoolVar(&withShared, "shared", true, "then compare sender.robotLimits learn and fixed on robots shared with other senders")
	f.BoolVar(&sharedOnly, "shared-only", false, "only the shared-robots comparison")
	f.DurationVar(&p.Window, "pacing-window", 5*time.Second, "window of the pacing comparison, standing for DingTalk's minute")
	f.IntVar(&p.Windows, "pacing-windows", 3, "how many windows the arrivals of the pacing comparison last")
	return cmd
}
