package app

import (
	"encoding/json"
	"fmt"
	"slices"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// robotRow is one robot as `rocketdelay robots` shows it.
type robotRow struct {
	Target        string     `json:"target"`
	Robot         string     `json:"robot"`
	Limit         int        `json:"limit"`
	LearnedLimit  int        `json:"learnedLimit,omitempty"`
	InWindow      int        `json:"inWindow"`
	CoolingUntil  *time.Time `json:"coolingUntil,omitempty"`
	Disabled      bool       `json:"disabled"`
	DisabledUntil *time.Time `json:"disabledUntil,omitempty"`
	InDoubt       bool       `json:"inDoubt"`
}

// newRobotsCmd is `rocketdelay robots`: every configured robot's state in the shared
// pool, as all replicas see it.
func newRobotsCmd(stdio IO) *cobra.Command {
	var path, output string
	cmd := &cobra.Command{
		Use:   "robots -f FILE [-o table|json]",
		Short: "Show each robot's sends in the window, learned limit, cool-down, disable and doubt",
		Args:  exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if output != "table" && output != "json" {
				return usageError(c, "-o: want table or json, got %q", output)
			}
			return withRedis(c, stdio, path, func(cfg config.Config, rdb *redis.Client) error {
				pool := store.NewRobotPool(rdb, cfg.Redis.KeyPrefix, cfg.Sender.Window)
				var rows []robotRow
				targets := make([]string, 0, len(cfg.Targets))
				for name := range cfg.Targets {
					targets = append(targets, name)
				}
				slices.Sort(targets)
				for _, name := range targets {
					var names []string
					for _, r := range cfg.Targets[name].Robots {
						names = append(names, r.Name)
					}
					states, err := pool.State(c.Context(), name, names)
					if err != nil {
						return err
					}
					for i, st := range states {
						row := robotRow{Target: name, Robot: st.Name, Limit: orDefault(cfg.Targets[name].Robots[i].Limit, cfg.Sender.Limit),
							LearnedLimit: st.LearnedLimit, InWindow: st.InWindow, Disabled: st.Disabled, InDoubt: st.InDoubt}
						if !st.CoolingUntil.IsZero() {
							row.CoolingUntil = &st.CoolingUntil
						}
						if !st.DisabledUntil.IsZero() {
							row.DisabledUntil = &st.DisabledUntil
						}
						rows = append(rows, row)
					}
				}
				if output == "json" {
					enc := json.NewEncoder(c.OutOrStdout())
					enc.SetIndent("", "  ")
					return enc.Encode(rows)
				}
				tw := tabwriter.NewWriter(c.OutOrStdout(), 0, 4, 2, ' ', 0)
				fmt.Fprintln(tw, "TARGET\tROBOT\tLIMIT\tLEARNED\tIN WINDOW\tCOOLING UNTIL\tDISABLED\tIN DOUBT")
				for _, r := range rows {
					learned, cooling, disabled := "-", "-", "no"
					if r.LearnedLimit > 0 {
						learned = fmt.Sprint(r.LearnedLimit)
					}
					if r.CoolingUntil != nil {
						cooling = r.CoolingUntil.UTC().Format(time.RFC3339)
					}
					switch {
					case r.DisabledUntil != nil:
						disabled = "until " + r.DisabledUntil.UTC().Format(time.RFC3339)
					case r.Disabled:
						disabled = "yes"
					}
					fmt.Fprintf(tw, "%s\t%s\t%d\t%s\t%d\t%s\t%s\t%t\n", r.Target, r.Robot, r.Limit, learned, r.InWindow, cooling, disabled, r.InDoubt)
				}
				return tw.Flush()
			})
		},
	}
	configFlag(cmd, &path)
	cmd.Flags().StringVarP(&output, "output", "o", "table", "output format: table or json")
	return cmd
}

// orDefault is v, or def when v is 0.
func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}
