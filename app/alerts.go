package app

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"
	"github.com/spf13/pflag"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/store"
)

// newAlertsCmd is `rocketdelay alerts …`: what is scheduled, read from Redis directly,
// and cancelled in bulk.
func newAlertsCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use: "alerts",
		Example: `  rocketdelay alerts list --due-before 1h
  rocketdelay alerts list --target ops --counts 24 -o json
  rocketdelay alerts cancel --target ops --due-before 2h --reason "maintenance window" --dry-run`,
		Short: "List the pending alerts (accepted, not yet handed off or cancelled, at any horizon), and cancel them in bulk",
	}
	cmd.AddCommand(newAlertsListCmd(stdio), newAlertsCancelCmd(stdio))
	return cmd
}

// pendingFlags are the filter flags of `alerts list` and `alerts cancel`.
type pendingFlags struct {
	path, target, principal, after, before string
}

func (f *pendingFlags) register(c *cobra.Command, stdio IO) {
	c.Flags().StringVar(&f.target, "target", "", "only alerts for this target")
	c.Flags().StringVar(&f.principal, "principal", "", "only alerts this principal published")
	c.Flags().StringVar(&f.after, "due-after", "", "only alerts due at or after this RFC 3339 time, or this long from now (30m)")
	c.Flags().StringVar(&f.before, "due-before", "", "only alerts due before this RFC 3339 time, or this long from now (2h)")
	_ = c.RegisterFlagCompletionFunc("target", completeTargets(stdio, &f.path))
	configFlag(c, &f.path)
}

// query is the filter as a store query of limit alerts a page; a bad time is a usage
// error of c.
func (f *pendingFlags) query(c *cobra.Command, now time.Time, limit int) (store.PendingQuery, error) {
	q := store.PendingQuery{Target: f.target, Principal: f.principal, Limit: limit}
	for _, t := range []struct {
		flag, value string
		into        *time.Time
	}{{"due-after", f.after, &q.DueAfter}, {"due-before", f.before, &q.DueBefore}} {
		if t.value == "" {
			continue
		}
		at, err := ingress.ParseWhen(t.value, now)
		if err != nil {
			return q, usageError(c, "--%s %q: %v", t.flag, t.value, err)
		}
		*t.into = at
	}
	return q, nil
}

func newAlertsListCmd(stdio IO) *cobra.Command {
	var (
		f            pendingFlags
		cursor       string
		limit, hours int
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
		if limit < 0 || limit > store.MaxPendingPage {
			return usageError(c, "--limit %d: from 0 to %d", limit, store.MaxPendingPage)
		}
		if hours < 0 || hours > ingress.MaxCountHours {
			return usageError(c, "--counts %d: from 0 to %d hours", hours, ingress.MaxCountHours)
		}
		q, err := f.query(c, now, limit)
		if err != nil {
			return err
		}
		q.Cursor = cursor
		cfg, err := loadConfig(f.path, stdio, config.SectionLog, config.SectionRedis, config.SectionScheduler)
		if err != nil {
			return err
		}
		return withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			ws, err := store.OpenWheelStage(c.Context(), rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
			if err != nil {
				return err
			}
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
			if hours > 0 || c.Flags().Changed("counts") || limit == 0 { // --limit 0: only the counts
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
	f.register(list, stdio)
	list.Flags().IntVar(&limit, "limit", 50, "at most this many alerts on the page (0: only the counts)")
	list.Flags().StringVar(&cursor, "cursor", "", "the page after the one that printed this cursor")
	list.Flags().IntVar(&hours, "counts", 0, "also count every pending alert: in all, by target, and by hour for this many hours ahead")
	return list
}

// maxBulkCancel is the most alerts one `alerts cancel` cancels: a filter that matches
// more is to be narrowed first.
const maxBulkCancel = 10000

// bulkCancelView is what `alerts cancel` did, for -o json.
type bulkCancelView struct {
	Matched   int            `json:"matched"`
	Cancelled int            `json:"cancelled"`
	Results   map[string]int `json:"results"`
	DryRun    bool           `json:"dryRun,omitempty"`
	// IDs are the matched alerts (with --dry-run), at most 10.
	IDs []string `json:"ids,omitempty"`
}

func newAlertsCancelCmd(stdio IO) *cobra.Command {
	var (
		f      pendingFlags
		reason string
		dryRun bool
	)
	cmd := &cobra.Command{
		Use: "cancel (--target NAME | --principal NAME | --due-after T | --due-before T)… --reason TEXT [--dry-run] [-o table|json]",
		Example: `  rocketdelay alerts cancel --target ops --due-before 2h --reason "maintenance window" --dry-run
  rocketdelay alerts cancel --target ops --due-before 2h --reason "maintenance window"`,
		Short: "Cancel every pending alert a filter matches (at most 10,000), hopping or waiting",
		Long: `alerts cancel cancels, as rocketdelay cancel does one by one, every pending alert the filter
matches (the filter of alerts list; at least one of its flags): each is dropped wherever it
waits, and its cancel is recorded as yours (cli:$USER) with --reason. --dry-run counts the
matching alerts and shows the first 10, changing nothing. It exits 2 without a filter or a
reason, or when more than 10,000 alerts match; 5 when Redis or Postgres cannot be reached.`,
		Args: exactArgs(0),
	}
	out := outputFlag(cmd, outTable, outJSON)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		if f.target == "" && f.principal == "" && f.after == "" && f.before == "" {
			return usageError(c, "give a filter (--target, --principal, --due-after or --due-before): a bulk cancel never applies to everything scheduled")
		}
		if strings.TrimSpace(reason) == "" && !dryRun {
			return usageError(c, "give --reason: it is recorded with every cancel")
		}
		q, err := f.query(c, time.Now(), store.MaxPendingPage)
		if err != nil {
			return err
		}
		cfg, err := loadConfig(f.path, stdio, config.SectionLog, config.SectionRedis, config.SectionPostgres, config.SectionScheduler)
		if err != nil {
			return err
		}
		var view bulkCancelView
		err = withRedis(c, stdio, cfg, func(rdb redis.UniversalClient) error {
			return withPostgres(c, cfg, func(pg *pgxpool.Pool) error {
				ws, err := store.OpenWheelStage(c.Context(), rdb, cfg.Redis.KeyPrefix, store.WheelStageOptionsFromConfig(cfg))
				if err != nil {
					return err
				}
				ids, err := store.PendingIDs(c.Context(), ws, q, maxBulkCancel, nil)
				if err != nil {
					return err
				}
				if len(ids) > maxBulkCancel {
					return usageError(c, "more than %d pending alerts match: narrow the filter", maxBulkCancel)
				}
				view = bulkCancelView{Matched: len(ids), Results: map[string]int{}, DryRun: dryRun}
				if dryRun {
					view.IDs = ids[:min(len(ids), 10)]
					return nil
				}
				canceller := failed.Canceller{Stage: ws, Rows: store.NewFailedSends(pg, store.FailedSendsOptions{}),
					Note: store.CancelNote{By: cliAuthor(stdio), Reason: reason}}
				for _, id := range ids {
					res, err := canceller.Cancel(c.Context(), id)
					if err != nil {
						return fmt.Errorf("cancel %s (after %d of %d): %w", id, view.Cancelled, len(ids), err)
					}
					view.Results[res.String()]++
					if res.Cancelled() {
						view.Cancelled++
					}
				}
				return nil
			})
		})
		if err != nil {
			return err
		}
		if out.is(outJSON) {
			return writeJSON(c.OutOrStdout(), view)
		}
		w := c.OutOrStdout()
		if dryRun {
			fmt.Fprintf(w, "%d pending alerts match (nothing changed: --dry-run)\n", view.Matched)
			for _, id := range view.IDs {
				fmt.Fprintf(w, "  %s\n", oneLine(id))
			}
			return nil
		}
		fmt.Fprintf(w, "cancelled %d of the %d matching alerts", view.Cancelled, view.Matched)
		if view.Cancelled < view.Matched {
			var others []string
			for r, n := range view.Results {
				others = append(others, fmt.Sprintf("%s %d", r, n))
			}
			slices.Sort(others)
			fmt.Fprintf(w, " (%s)", strings.Join(others, ", "))
		}
		fmt.Fprintln(w)
		return nil
	}
	f.register(cmd, stdio)
	cmd.Flags().StringVar(&reason, "reason", "", "why they are cancelled: recorded with every cancel (required)")
	cmd.Flags().BoolVar(&dryRun, "dry-run", false, "count the matching alerts and show the first 10; change nothing")
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
