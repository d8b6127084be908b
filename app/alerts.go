package app

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/store"
)

// newAlertsCmd is `rocketdelay alerts …`: what is scheduled, read from Redis directly.
func newAlertsCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use: "alerts",
		Example: `  rocketdelay alerts list --due-before 1h
  rocketdelay alerts list --target ops --counts 24 -o json`,
		Short: "List the pending alerts: accepted, not yet handed off or cancelled, at any horizon",
	}
	var (
		path, target, principal, after, before, cursor string
		limit, hours                                   int
	)
	list := &cobra.Command{
		Use: "list [--target NAME] [--principal NAME] [--due-after T] [--due-before T] [--limit N] [--cursor C] [--counts HOURS] [-o table|json]",
		Example: `  rocketdelay alerts list --due-before 1h
  rocketdelay alerts list --target ops --principal billing --limit 20 -o json
  rocketdelay alerts list --counts 24 --limit 0`,
		Short: "List pending alerts, earliest due first, hopping through the broker or waiting in the wheel stage",
		Long: `alerts list answers "what will fire, when, for which target, and from whom": every alert
accepted and not yet handed off or cancelled, whether it still hops through the broker
(hours or days ahead) or waits in the wheel stage, earliest due first. --due-after and
--due-before take an RFC 3339 time or a duration from now (2h, -30m). A page holds
--limit alerts; the line after it gives the command for the next. --counts HOURS adds the
counts of every pending alert: in all, by target, and by hour ahead for HOURS hours.`,
		Args: exactArgs(0),
	}
	out := outputFlag(list, outTable, outJSON)
	list.RunE = func(c *cobra.Command, _ []string) error {
		now := time.Now()
		q := store.PendingQuery{Target: target, Principal: principal, Cursor: cursor, Limit: limit}
		for _, f := range []struct {
			flag, value string
			into        *time.Time
		}{{"due-after", after, &q.DueAfter}, {"due-before", before, &q.DueBefore}} {
			if f.value == "" {
				continue
			}
			t, err := ingress.ParseWhen(f.value, now)
			if err != nil {
				return usageError(c, "--%s %q: %v", f.flag, f.value, err)
			}
			*f.into = t
		}
		if limit < 0 || limit > store.MaxPendingPage {
			return usageError(c, "--limit %d: from 0 to %d", limit, store.MaxPendingPage)
		}
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionRedis, config.SectionScheduler)
		if err != nil {
			return err
		}
		return withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
			var res ingress.PendingResponse
			if limit > 0 {
				page, err := ws.Pending(c.Context(), q)
				if errors.Is(err, store.ErrBadCursor) {
					return usageError(c, "--cursor %q: %v", cursor, err)
				}
				if err != nil {
					return err
				}
				res.Alerts, res.Next = page.Alerts, page.Next
			}
			if hours > 0 || c.Flags().Changed("counts") {
				counts, err := ws.CountPending(c.Context(), now, hours)
				if err != nil {
					return err
				}
				res.Counts = &counts
			}
			if out.is(outJSON) {
				return writeJSON(c.OutOrStdout(), res)
			}
			return writePending(c.OutOrStdout(), res, now, nextCommand(c, res.Next))
		})
	}
	list.Flags().StringVar(&target, "target", "", "only alerts for this target")
	list.Flags().StringVar(&principal, "principal", "", "only alerts this principal published")
	list.Flags().StringVar(&after, "due-after", "", "only alerts due at or after this RFC 3339 time, or this long from now (30m)")
	list.Flags().StringVar(&before, "due-before", "", "only alerts due before this RFC 3339 time, or this long from now (2h)")
	list.Flags().IntVar(&limit, "limit", 50, "at most this many alerts on the page (0: only the counts)")
	list.Flags().StringVar(&cursor, "cursor", "", "the page after the one that printed this cursor")
	list.Flags().IntVar(&hours, "counts", 0, "also count every pending alert: in all, by target, and by hour for this many hours ahead")
	_ = list.RegisterFlagCompletionFunc("target", completeTargets(stdio, &path))
	configFlag(list, &path)
	cmd.AddCommand(list)
	return cmd
}

// nextCommand is the command line that prints the page after this one: c's own, with
// --cursor next.
func nextCommand(c *cobra.Command, next string) string {
	if next == "" {
		return ""
	}
	args := []string{c.CommandPath()}
	c.Flags().Visit(func(f *pflag.Flag) {
		if f.Name != "cursor" {
			args = append(args, "--"+f.Name, f.Value.String())
		}
	})
	return strings.Join(append(args, "--cursor", next), " ")
}

// writePending prints res as a table: the counts, if any, then the page, then how to
// get the next one.
func writePending(w io.Writer, res ingress.PendingResponse, now time.Time, next string) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	if c := res.Counts; c != nil {
		fmt.Fprintf(tw, "pending\t%d\n", c.Total)
		for _, t := range c.SortedTargets() {
			fmt.Fprintf(tw, "  target %s\t%d\n", oneLine(t), c.ByTarget[t])
		}
		fmt.Fprintf(tw, "  due already (overdue)\t%d\n", c.Overdue)
		for h, n := range c.ByHour {
			fmt.Fprintf(tw, "  due in %dh–%dh\t%d\n", h, h+1, n)
		}
		fmt.Fprintf(tw, "  due later\t%d\n", c.Later)
		fmt.Fprintln(tw)
	}
	if res.Alerts != nil || res.Counts == nil {
		if len(res.Alerts) == 0 {
			fmt.Fprintln(tw, "no pending alert matches")
		} else {
			fmt.Fprintln(tw, "DUE\tIN\tID\tTARGET\tSTAGE\tPRIORITY\tPRINCIPAL")
			for _, a := range res.Alerts {
				fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\n", a.DueAt.Format(time.RFC3339), a.DueAt.Sub(now).Round(time.Second),
					oneLine(a.ID), oneLine(a.Target), a.Stage, orDash(oneLine(a.Priority)), orDash(oneLine(a.Principal)))
			}
		}
	}
	if next != "" {
		fmt.Fprintf(tw, "\nmore: %s\n", next)
	}
	return tw.Flush()
}
