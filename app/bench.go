package app

import (
	"fmt"
	"time"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/bench"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// The `rocketdelay bench …` commands; the engines live in internal/bench.

func newBenchCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{Use: "bench", Short: "Benchmarks against the configured broker and Redis",
		Example: `  rocketdelay bench pipeline -f deploy/local/rocketdelay.yaml -n 10000
  rocketdelay bench sender -n 1000`}
	var path string
	var n, concurrency int
	pipeline := &cobra.Command{Use: "pipeline", Short: "Measure raw RocketMQ consume+publish, the scheduler's hop and wheel-stage throughput, Redis round trips and lateness",
		Long: bench.PipelineDoc, Args: exactArgs(0),
		Example: `  rocketdelay bench pipeline -f deploy/local/rocketdelay.yaml
  rocketdelay bench pipeline -n 1000 --concurrency 4`,
		RunE: withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
			if n < 100 {
				return fmt.Errorf("%w: -n must be at least 100", ErrUsage)
			}
			return bench.Pipeline(c.Context(), cfg, n, concurrency, c.OutOrStdout())
		}),
	}
	configFlag(pipeline, &path)
	pipeline.Flags().IntVarP(&n, "messages", "n", 10000, "messages per stage")
	pipeline.Flags().IntVar(&concurrency, "concurrency", 20, "consumer goroutines, the same for every stage")
	cmd.AddCommand(pipeline, newBenchSenderCmd(stdio), newBenchModesCmd(stdio), newBenchScaleCmd(stdio), newBenchTopicCmd(stdio),
		newBenchAlertmanagerCmd(stdio))
	return cmd
}

// newBenchAlertmanagerCmd is `rocketdelay bench alertmanager`; newBenchCmd adds it to
// the bench group.
func newBenchAlertmanagerCmd(stdio IO) *cobra.Command {
	var path string
	var o bench.AlertmanagerOptions
	cmd := &cobra.Command{Use: "alertmanager", Short: "An Alertmanager flood through rocketdelay into a robot of each platform, and through a naive forwarder into DingTalk",
		Long: bench.AlertmanagerDoc, Args: exactArgs(0),
		Example: `  rocketdelay bench alertmanager -f deploy/local/rocketdelay.yaml
  rocketdelay bench alertmanager --groups 50 --budget 60s --robots 1,3 --kinds wecom`,
		RunE: withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
			if o.Groups < 1 || o.Groups > 9999 || o.Budget < 10*time.Second {
				return fmt.Errorf("%w: --groups must be between 1 and 9999 and --budget at least 10s", ErrUsage)
			}
			if len(o.Kinds) > 0 {
				if err := bench.CheckKinds(o.Kinds); err != nil {
					return fmt.Errorf("%w: --kinds: %v", ErrUsage, err)
				}
			}
			return bench.Alertmanager(c.Context(), cfg, o, c.OutOrStdout())
		}),
	}
	configFlag(cmd, &path)
	cmd.Flags().IntVar(&o.Groups, "groups", 200, "alert groups fired at once, one notification each")
	durationVar(cmd.Flags(), &o.Budget, "budget", 90*time.Second, "longest a run lasts")
	cmd.Flags().StringSliceVar(&o.Kinds, "kinds", bench.ChatKinds, "platforms of the per-channel flood, a target of one robot each; empty: none")
	cmd.Flags().StringVar(&o.Pacing, "pacing", config.PacingAuto, "serve's sender.pacing in the per-channel flood: auto or burst")
	cmd.Flags().BoolVar(&o.Naive, "naive", true, "run the DingTalk comparison of a naive forwarder and rocketdelay")
	cmd.Flags().IntSliceVar(&o.Robots, "robots", []int{1, 3}, "robot counts of the DingTalk comparison")
	return cmd
}

// newBenchTopicCmd is `rocketdelay bench topic`; newBenchCmd adds it to the bench group.
func newBenchTopicCmd(stdio IO) *cobra.Command {
	var path string
	var o bench.TopicOptions
	cmd := &cobra.Command{Use: "topic", Short: "A topic target as its business consumer sees it: lateness next to the broker's timer, and throughput",
		Long: bench.TopicDoc, Args: exactArgs(0),
		Example: `  rocketdelay bench topic -f deploy/local/rocketdelay.yaml
  rocketdelay bench topic -n 100 --spread 10s --burst 1000`,
		RunE: withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
			if o.N < 10 || o.Spread < 2*time.Second || o.Burst < 100 {
				return fmt.Errorf("%w: -n must be at least 10, --spread at least 2s, --burst at least 100", ErrUsage)
			}
			return bench.Topic(c.Context(), cfg, o, c.OutOrStdout())
		}),
	}
	configFlag(cmd, &path)
	cmd.Flags().IntVarP(&o.N, "messages", "n", 300, "messages of the precision run")
	durationVar(cmd.Flags(), &o.Spread, "spread", 18*time.Second, "the precision run's due times are spread over [1s, spread]")
	cmd.Flags().IntVar(&o.Burst, "burst", 5000, "messages of the throughput run, due at one moment")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "seed of the due times")
	return cmd
}

// newBenchModesCmd is `rocketdelay bench modes`; newBenchCmd adds it to the bench group.
func newBenchModesCmd(stdio IO) *cobra.Command {
	var path string
	var o bench.ModesOptions
	cmd := &cobra.Command{Use: "modes", Short: "Compare scheduler.mode levels and timer, and the broker's timer alone: broker messages per alert and lateness",
		Long: bench.ModesDoc, Args: exactArgs(0),
		Example: `  rocketdelay bench modes -f deploy/local/rocketdelay.yaml
  rocketdelay bench modes -n 50 --min-delay 6s --max-delay 30s`,
		RunE: withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
			if o.N < 10 || o.MinDelay <= 0 || o.MaxDelay < o.MinDelay {
				return fmt.Errorf("%w: -n must be at least 10 and 0 < --min-delay <= --max-delay", ErrUsage)
			}
			return bench.Modes(c.Context(), cfg, o, c.OutOrStdout())
		}),
	}
	configFlag(cmd, &path)
	cmd.Flags().IntVarP(&o.N, "alerts", "n", 200, "alerts per run")
	durationVar(cmd.Flags(), &o.MinDelay, "min-delay", 6*time.Second, "shortest delay of the mix")
	durationVar(cmd.Flags(), &o.MaxDelay, "max-delay", 50*time.Second, "longest delay of the mix")
	cmd.Flags().Uint64Var(&o.Seed, "seed", 1, "seed of the delay mix")
	return cmd
}

// newBenchSenderCmd is `rocketdelay bench sender`; newBenchCmd adds it to the bench
// group.
func newBenchSenderCmd(stdio IO) *cobra.Command {
	var path, only string
	o := bench.SenderOptions{}
	var p bench.PacingOptions
	var rp bench.ReplicasOptions
	var ko bench.KindsOptions
	var withPacing, withShared, withReplicas bool
	cmd := &cobra.Command{
		Use: "sender",
		Example: `  rocketdelay bench sender
  rocketdelay bench sender --only pacing --pacing-window 5s`,
		Short: "The DingTalk sender against a simulator: vs naive rate limiting, shared robots, pacing, replicas sharing a target",
		Long:  bench.SenderDoc,
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return fmt.Errorf("%w: %v", ErrUsage, err)
			}
			if len(ko.Kinds) > 0 || only == "kinds" {
				if err := bench.CheckKinds(ko.Kinds); err != nil {
					return fmt.Errorf("%w: --kinds: %v", ErrUsage, err)
				}
				if ko.Robots < 1 || ko.Window < time.Second {
					return fmt.Errorf("%w: --kinds-robots must be at least 1 and --kinds-window at least 1s", ErrUsage)
				}
			}
			parts := map[string]bool{"burst": true, "kinds": len(ko.Kinds) > 0, "shared": withShared, "pacing": withPacing, "replicas": withReplicas}
			if only != "" {
				if _, ok := parts[only]; !ok {
					return fmt.Errorf("%w: --only must be burst, kinds, shared, pacing or replicas, got %q", ErrUsage, only)
				}
				parts = map[string]bool{only: true}
			}
			cfg, err := loadConfig(path, stdio)
			if err != nil {
				return err
			}
			rdb, err := store.OpenRedis(c.Context(), cfg.Redis.URL.Reveal())
			if err != nil {
				return err
			}
			defer rdb.Close()
			out, prefix := c.OutOrStdout(), cfg.Redis.KeyPrefix
			if parts["burst"] {
				if err := bench.Sender(c.Context(), rdb, prefix, o, out); err != nil {
					return err
				}
			}
			if parts["kinds"] {
				ko.Alerts, ko.CoalesceMax, ko.Callers = o.Alerts, o.CoalesceMax, o.Callers
				if err := bench.Kinds(c.Context(), rdb, prefix, ko, out); err != nil {
					return err
				}
			}
			if parts["shared"] {
				if err := bench.Shared(c.Context(), rdb, prefix, bench.SharedOptions{Kinds: ko.Kinds}, out); err != nil {
					return err
				}
			}
			if parts["pacing"] {
				if err := bench.Pacing(c.Context(), rdb, prefix, p, out); err != nil {
					return err
				}
			}
			if parts["replicas"] {
				return bench.Replicas(c.Context(), cfg, rp, out)
			}
			return nil
		},
	}
	configFlag(cmd, &path)
	f := cmd.Flags()
	f.IntVar(&o.Senders, "senders", 4, "Sender instances (replicas) sharing the robot pool")
	f.IntVar(&o.Robots, "robots", 5, "robots of the target group")
	f.IntVar(&o.Limit, "limit", 19, "sends per robot per window the pool allows (the simulator allows 20)")
	f.IntVar(&o.NaiveLimit, "naive-limit", dingtalk.Platform.Config.MaxLimit, "sends per robot per window the naive ZCOUNT+ZADD check allows (DingTalk's documented 20)")
	durationVar(f, &o.Window, "window", 2*time.Second, "rate-limit window, standing for DingTalk's minute")
	f.IntVarP(&o.Alerts, "alerts", "n", 1000, "alerts in the burst")
	f.IntVar(&o.Callers, "callers", 200, "goroutines handing alerts to the senders")
	f.IntVar(&o.CoalesceMax, "coalesce-max", config.DefaultSenderCoalesceMax, "most alerts per merged message")
	durationVar(f, &o.NaiveTimeout, "naive-timeout", 30*time.Second, "time limit of each naive run")
	f.StringVar(&only, "only", "", "run one part only: burst, kinds, shared, pacing or replicas")
	f.StringSliceVar(&ko.Kinds, "kinds", bench.ChatKinds, "platforms of the per-channel burst (-n alerts into a target of each kind), in order; empty: none")
	f.IntVar(&ko.Robots, "kinds-robots", 3, "robots of each target of the per-channel burst")
	durationVar(f, &ko.Window, "kinds-window", 10*time.Second, "window of the per-channel burst, standing for the platforms' minute")
	f.BoolVar(&withShared, "shared", true, "compare sender.robotLimits learn and fixed on robots shared with other senders")
	f.BoolVar(&withPacing, "pacing", true, "compare sender.pacing auto and burst at 0.5x, 2x and 10x the pool's capacity")
	durationVar(f, &p.Window, "pacing-window", 5*time.Second, "window of the pacing comparison, standing for DingTalk's minute")
	f.IntVar(&p.Windows, "pacing-windows", 3, "how many windows the arrivals of the pacing comparison last")
	f.BoolVar(&withReplicas, "replicas", true, "measure 1, 2 and 4 replicas sharing a target at 0.5x, 2x and 10x its capacity (needs the broker and Postgres too)")
	durationVar(f, &rp.Window, "replicas-window", 10*time.Second, "window of the replicas measurement, standing for DingTalk's minute")
	f.IntVar(&rp.Windows, "replicas-windows", 2, "how many windows the arrivals of the replicas measurement last")
	return cmd
}

// newBenchScaleCmd is `rocketdelay bench scale`; newBenchCmd adds it to the bench group.
func newBenchScaleCmd(stdio IO) *cobra.Command {
	var path string
	o := bench.ScaleOptions{Topology: bench.LocalTopology(stdio.Getenv)}
	cmd := &cobra.Command{Use: "scale", Short: "Hand-off throughput, lateness, lost claims and each Redis primary's share with 1, 2, 4 replicas, per Redis topology and shard count",
		Long: bench.ScaleDoc, Args: exactArgs(0),
		Example: `  rocketdelay bench scale -f deploy/local/rocketdelay.yaml
  rocketdelay bench scale --replicas 1,2 --redis config,cluster -n 2000
  rocketdelay bench scale --replicas 2 --redis cluster --shards 1,3`,
		RunE: withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
			return bench.Scale(c.Context(), cfg, o, c.OutOrStdout())
		}),
	}
	configFlag(cmd, &path)
	cmd.Flags().IntSliceVar(&o.Replicas, "replicas", []int{1, 2, 4}, "replica counts")
	cmd.Flags().StringSliceVar(&o.Topologies, "redis", []string{"config"}, "Redis topologies: config, sentinel, cluster")
	cmd.Flags().IntSliceVar(&o.Shards, "shards", []int{1}, "shard counts of the wheel stage (redis.shards)")
	cmd.Flags().IntVarP(&o.N, "alerts", "n", 4000, "alerts per run")
	durationVar(cmd.Flags(), &o.Goal, "goal", 0, "judge each row's max lateness by this bound: PASS or FAIL (0: no verdict)")
	cmd.Flags().IntVar(&o.Repeat, "repeat", 1, "measure each row this many times and show the run whose max lateness is the median, with the spread")
	cmd.Flags().StringVar(&o.Profile, "profile", "", "write each run's CPU and allocation profiles and its Redis commands by name into this directory")
	return cmd
}
