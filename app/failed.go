package app

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
)

// newFailedCmd is `rocketdelay failed …`: operators list, inspect, retry and discard the
// rows of failed_sends, talking to Postgres directly.
func newFailedCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{
		Use: "failed",
		Example: `  rocketdelay failed list --status dead --since 3d
  rocketdelay failed retry --status dead --target ops`,
		Short: "List, inspect, retry and discard failed sends (the Postgres failed_sends table)",
		Long: `Alerts the sender could not deliver, and inputs that can never be delivered, are kept
in the Postgres table failed_sends. The retry job of every replica retries pending rows
with exponential backoff until they are delivered or dead; these commands let an operator
look at the rows and retry or discard them.`,
	}
	var path string
	// run opens the store named by the config, runs do, and closes the store.
	run := func(c *cobra.Command, do func(op failed.Operator) error) error {
		cfg, err := loadConfig(path, stdio, config.SectionLog, config.SectionPostgres)
		if err != nil {
			return err
		}
		return withPostgres(c, cfg, func(pg *pgxpool.Pool) error {
			fs := store.NewFailedSends(pg, store.FailedSendsOptions{})
			return do(failed.Operator{Store: fs, History: fs, Out: c.OutOrStdout(), Now: time.Now, Targets: failed.Targets(cfg.Targets)})
		})
	}

	var (
		status, target, errorClass, since string
		limit                             int
		after                             int64
	)
	list := &cobra.Command{
		Use: "list [--status S] [--target NAME] [--error-class C] [--since 6h] [--limit N] [-o table|json]",
		Example: `  rocketdelay failed list --status rejected
  rocketdelay failed list --target ops --since 6h --limit 20 -o json`,
		Short: "List failed sends, newest first",
		Args:  exactArgs(0),
	}
	listOut := outputFlag(list, outTable, outJSON)
	list.RunE = func(c *cobra.Command, _ []string) error {
		q := failed.Query{Status: status, Target: target, ErrorClass: errorClass, Since: since,
			Limit: strconv.Itoa(limit)}
		if after != 0 {
			q.After = strconv.FormatInt(after, 10)
		}
		f, err := q.Filter(time.Now())
		if perr := (*failed.ParamError)(nil); errors.As(err, &perr) {
			return usageError(c, "--%s: %s", strings.ReplaceAll(perr.Param, "_", "-"), perr.Reason)
		}
		return run(c, func(op failed.Operator) error { return op.List(c.Context(), f, listOut.failedFormat()) })
	}
	list.Flags().StringVar(&status, "status", "", "only rows with this status: pending, dead, rejected, discarded, delivered")
	list.Flags().StringVar(&target, "target", "", "only rows for this target (robot group)")
	list.Flags().StringVar(&errorClass, "error-class", "", "only rows whose last failure has this class (transient, throttled, payload_permanent, …)")
	list.Flags().StringVar(&since, "since", "", "only rows recorded since this RFC 3339 time, or this long ago (90m, 6h, 3d)")
	list.Flags().IntVar(&limit, "limit", store.DefaultListLimit, "at most this many rows")
	list.Flags().Int64Var(&after, "after", 0, "continue a listing: only rows older than this id")
	_ = list.RegisterFlagCompletionFunc("status", completeValues(store.FailedStatuses...))
	_ = list.RegisterFlagCompletionFunc("target", completeTargets(stdio, &path))

	show := &cobra.Command{
		Use: "show ID [-o table|json]",
		Example: `  rocketdelay failed show 42
  rocketdelay failed show 42 -o json`,
		Short: "Show one failed send: its error, attempts, properties and payload",
		Args:  exactArgs(1),
	}
	showOut := outputFlag(show, outTable, outJSON)
	show.RunE = func(c *cobra.Command, args []string) error {
		ids, err := parseIDs(c, args)
		if err != nil {
			return err
		}
		return run(c, func(op failed.Operator) error { return op.Show(c.Context(), ids[0], showOut.failedFormat()) })
	}

	var retryStatus, retryTarget string
	var dryRun bool
	retry := &cobra.Command{
		Use: "retry ID… | --status dead [--target NAME]",
		Example: `  rocketdelay failed retry 42 43
  # How many dead rows of ops, and which, before retrying them all
  rocketdelay failed retry --status dead --target ops --dry-run
  rocketdelay failed retry --status dead --target ops`,
		Short: "Make failed sends due now, for the retry job to send again (history is kept)",
		Long: `Make failed sends due now: the retry job of any replica sends them within its interval.
Rows that are pending, dead, rejected or discarded are retried; delivered rows never are.
Attempts and the last error are kept, so a row past its attempts or age gets exactly one
more attempt before it is dead again. With --dry-run it prints how many rows it would
retry and which (the newest 10 as a table), and changes nothing.`,
		RunE: func(c *cobra.Command, args []string) error {
			switch {
			case len(args) > 0 && (retryStatus != "" || retryTarget != ""):
				return usageError(c, "give row ids or --status (with an optional --target), not both")
			case len(args) > 0:
				ids, err := parseIDs(c, args)
				if err != nil {
					return err
				}
				return run(c, func(op failed.Operator) error {
					if dryRun {
						return op.RetryDryRun(c.Context(), ids)
					}
					return op.Retry(store.WithAuthor(c.Context(), cliAuthor(stdio)), ids)
				})
			case retryStatus != "":
				st, err := failed.ParseRetryStatus(retryStatus)
				if err != nil {
					return usageError(c, "--status: %v", err)
				}
				return run(c, func(op failed.Operator) error {
					if dryRun {
						return op.RetryWhereDryRun(c.Context(), st, retryTarget)
					}
					return op.RetryWhere(store.WithAuthor(c.Context(), cliAuthor(stdio)), st, retryTarget)
				})
			default:
				return usageError(c, "give the row ids to retry, or --status dead (with an optional --target)")
			}
		},
	}
	retry.Flags().StringVar(&retryStatus, "status", "", "retry every row with this status: dead, rejected, discarded or pending")
	retry.Flags().StringVar(&retryTarget, "target", "", "with --status: only rows for this target")
	retry.Flags().BoolVar(&dryRun, "dry-run", false, "print how many rows would be retried, and a sample; change nothing")
	_ = retry.RegisterFlagCompletionFunc("status", completeValues(failed.RetryStatuses...))
	_ = retry.RegisterFlagCompletionFunc("target", completeTargets(stdio, &path))

	var reason string
	discard := &cobra.Command{
		Use: "discard ID… --reason TEXT",
		Example: `  rocketdelay failed discard 42 43 --reason "duplicate of 41" --dry-run
  rocketdelay failed discard 42 43 --reason "duplicate of 41"`,
		Short: "Give up on failed sends; the retry job leaves them alone",
		RunE: func(c *cobra.Command, args []string) error {
			if len(args) == 0 {
				return usageError(c, "give the row ids to discard")
			}
			if reason == "" {
				return usageError(c, "--reason is required: say why these alerts are given up")
			}
			ids, err := parseIDs(c, args)
			if err != nil {
				return err
			}
			return run(c, func(op failed.Operator) error {
				if dryRun {
					return op.DiscardDryRun(c.Context(), ids)
				}
				return op.Discard(store.WithAuthor(c.Context(), cliAuthor(stdio)), ids, reason)
			})
		},
	}
	discard.Flags().StringVar(&reason, "reason", "", "why the alerts are given up (kept with the rows)")
	discard.Flags().BoolVar(&dryRun, "dry-run", false, "print how many rows would be discarded, and a sample; change nothing")

	stats := &cobra.Command{
		Use: "stats [-o table|json]",
		Example: `  rocketdelay failed stats
  rocketdelay failed stats -o json`,
		Short: "Count failed sends by status, target and error class",
		Args:  exactArgs(0),
	}
	statsOut := outputFlag(stats, outTable, outJSON)
	stats.RunE = func(c *cobra.Command, _ []string) error {
		return run(c, func(op failed.Operator) error { return op.Stats(c.Context(), statsOut.failedFormat()) })
	}

	for _, sub := range []*cobra.Command{list, show, retry, discard, stats} {
		configFlag(sub, &path)
		cmd.AddCommand(sub)
	}
	return cmd
}

func parseIDs(c *cobra.Command, args []string) ([]int64, error) {
	ids, err := failed.ParseIDs(args)
	if err != nil {
		return nil, usageError(c, "%v", err)
	}
	return ids, nil
}

func usageError(c *cobra.Command, format string, args ...any) error {
	return fmt.Errorf("%w: %s (see '%s --help')", ErrUsage, fmt.Sprintf(format, args...), c.CommandPath())
}
