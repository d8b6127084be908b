package failed

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// Format is how Operator prints: table (for a terminal) or json (stable, for scripts).
type Format string

// The output formats.
const (
	FormatTable Format = "table"
	FormatJSON  Format = "json"
)

// ParseFormat reads an -o/--output value.
func ParseFormat(s string) (Format, error) {
	switch f := Format(s); f {
	case FormatTable, FormatJSON:
		return f, nil
	}
	return "", fmt.Errorf("output format %q: want table or json", s)
}

// Operator carries out the `rocketdelay failed …` commands against the store and prints
// their result to Out.
type Operator struct {
	Store Store
	Out   io.Writer
	// Now is the clock for relative ages; time.Now when nil.
	Now func() time.Time
	// Targets describe each row's target (kind, destination); nil leaves them out.
	Targets Targets
	// History finds the rows of an RD_ID: a dry run of a retry reads it to tell the
	// discarded rows a retry leaves alone (their alert has a live row of a later
	// episode). nil counts every discarded row as retried.
	History Rows
}

func (o Operator) now() time.Time {
	if o.Now == nil {
		return time.Now()
	}
	return o.Now()
}

// List prints the rows f selects.
func (o Operator) List(ctx context.Context, f store.Filter, format Format) error {
	rows, next, err := o.Store.List(ctx, f)
	if err != nil {
		return err
	}
	if format == FormatJSON {
		return WriteJSON(o.Out, NewPage(rows, next, o.Targets))
	}
	return WriteTable(o.Out, rows, next, o.now(), o.Targets)
}

// Show prints row id.
func (o Operator) Show(ctx context.Context, id int64, format Format) error {
	row, err := o.Store.Get(ctx, id)
	if err != nil {
		return err
	}
	if format == FormatJSON {
		return WriteJSON(o.Out, NewView(row, o.Targets))
	}
	return WriteDetail(o.Out, row, o.now(), o.Targets)
}

// Stats prints the counts of the table.
func (o Operator) Stats(ctx context.Context, format Format) error {
	st, err := o.Store.Stats(ctx)
	if err != nil {
		return err
	}
	if format == FormatJSON {
		return WriteJSON(o.Out, NewStatsView(st, o.now()))
	}
	return WriteStats(o.Out, st, o.now())
}

// Retry makes the rows ids due now and prints which changed and which did not
// (delivered, cancelled or unknown rows).
func (o Operator) Retry(ctx context.Context, ids []int64) error {
	changed, err := o.Store.Retry(ctx, ids)
	if err != nil {
		return err
	}
	return o.report(ctx, "retried", "delivered or cancelled already", ids, changed)
}

// RetryWhere makes every row with status (and target, unless "") due now and prints
// which.
func (o Operator) RetryWhere(ctx context.Context, status store.FailedStatus, target string) error {
	changed, err := o.Store.RetryWhere(ctx, status, target)
	if err != nil {
		return err
	}
	return o.report(ctx, "retried", "", nil, changed)
}

// Discard gives up on the rows ids and prints which changed and which did not
// (delivered, cancelled, already discarded, or unknown rows).
func (o Operator) Discard(ctx context.Context, ids []int64, reason string) error {
	changed, err := o.Store.Discard(ctx, ids, reason)
	if err != nil {
		return err
	}
	return o.report(ctx, "discarded", "delivered, cancelled or discarded already", ids, changed)
}

// report prints which of the rows asked changed (verb) and which did not (whyNot); a row
// asked that does not exist is the error, wrapping store.ErrNotFound (a script tells it
// by the exit code).
func (o Operator) report(ctx context.Context, verb, whyNot string, asked, changed []int64) error {
	if _, err := fmt.Fprintf(o.Out, "%s %d %s%s\n", verb, len(changed), rowsWord(len(changed)), idList(changed)); err != nil {
		return err
	}
	var unchanged, unknown []int64
	for _, id := range asked {
		if slices.Contains(changed, id) || slices.Contains(unchanged, id) || slices.Contains(unknown, id) {
			continue
		}
		if _, err := o.Store.Get(ctx, id); errors.Is(err, store.ErrNotFound) {
			unknown = append(unknown, id)
			continue
		} else if err != nil {
			return err
		}
		unchanged = append(unchanged, id)
	}
	if len(unchanged) > 0 {
		if _, err := fmt.Fprintf(o.Out, "unchanged (%s): %s\n", whyNot, strings.TrimPrefix(idList(unchanged), ": ")); err != nil {
			return err
		}
	}
	return noSuchRows(unknown)
}

// noSuchRows is the error for the rows ids asked for that do not exist; nil for none.
func noSuchRows(ids []int64) error {
	if len(ids) == 0 {
		return nil
	}
	return fmt.Errorf("no failed send has the row id%s %s (%w)", map[bool]string{true: "s"}[len(ids) > 1],
		strings.TrimPrefix(idList(ids), ": "), store.ErrNotFound)
}

func idList(ids []int64) string {
	if len(ids) == 0 {
		return ""
	}
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return ": " + strings.Join(parts, ", ")
}

// ParseIDs reads row ids as operators give them (the ID column of `rocketdelay failed
// list`); the error names the first that is not one.
func ParseIDs(args []string) ([]int64, error) {
	ids := make([]int64, 0, len(args))
	for _, a := range args {
		id, err := strconv.ParseInt(a, 10, 64)
		if err != nil || id < 1 {
			return nil, fmt.Errorf("%q is not a row id (a positive whole number, the ID column of `rocketdelay failed list`)", a)
		}
		ids = append(ids, id)
	}
	return ids, nil
}

// DryRunSample is how many of the rows it would change a dry run shows.
const DryRunSample = 10

// RetryDryRun prints what Retry(ids) would do, and changes nothing: how many rows and
// which would be made due now, a sample of them, and the ids it would leave alone.
func (o Operator) RetryDryRun(ctx context.Context, ids []int64) error {
	return o.dryRunIDs(ctx, "retry", ids, o.retryable, "delivered or cancelled already")
}

// DiscardDryRun prints what Discard(ids, …) would do, and changes nothing.
func (o Operator) DiscardDryRun(ctx context.Context, ids []int64) error {
	return o.dryRunIDs(ctx, "discard", ids, func(_ context.Context, r store.FailedSend) (bool, error) {
		return discardable(r.Status), nil
	}, "delivered, cancelled or discarded already")
}

// RetryWhereDryRun prints what RetryWhere(status, target) would do, and changes nothing:
// how many rows would be made due now, and the newest DryRunSample of them. It reads
// every row with status (and target), a page at a time.
func (o Operator) RetryWhereDryRun(ctx context.Context, status store.FailedStatus, target string) error {
	var (
		sample []store.FailedSend
		count  int
		after  int64
	)
	for {
		rows, next, err := o.Store.List(ctx, store.Filter{Status: status, Target: target, Limit: store.MaxListLimit, AfterID: after})
		if err != nil {
			return err
		}
		for _, r := range rows {
			ok, err := o.retryable(ctx, r)
			if err != nil {
				return err
			}
			if !ok {
				continue
			}
			count++
			if len(sample) < DryRunSample {
				sample = append(sample, r)
			}
		}
		if next == 0 {
			break
		}
		after = next
	}
	where := "status " + string(status)
	if target != "" {
		where += ", target " + target
	}
	if _, err := fmt.Fprintf(o.Out, "dry run: would retry %d %s (%s)\n", count, rowsWord(count), where); err != nil {
		return err
	}
	return o.dryRunSample(sample, count)
}

// dryRunIDs prints which of the rows ids would changes says change (verb), a sample of
// them and the others (whyNot), changing nothing; rows that do not exist are the error,
// as for report.
func (o Operator) dryRunIDs(ctx context.Context, verb string, ids []int64, changes func(context.Context, store.FailedSend) (bool, error), whyNot string) error {
	var would []store.FailedSend
	var wouldIDs, unchanged, unknown []int64
	for _, id := range ids {
		if slices.Contains(wouldIDs, id) || slices.Contains(unchanged, id) || slices.Contains(unknown, id) {
			continue
		}
		r, err := o.Store.Get(ctx, id)
		if errors.Is(err, store.ErrNotFound) {
			unknown = append(unknown, id)
			continue
		}
		if err != nil {
			return err
		}
		ok, err := changes(ctx, r)
		if err != nil {
			return err
		}
		if !ok {
			unchanged = append(unchanged, id)
			continue
		}
		would = append(would, r)
		wouldIDs = append(wouldIDs, id)
	}
	slices.Sort(wouldIDs)
	if _, err := fmt.Fprintf(o.Out, "dry run: would %s %d %s%s\n", verb, len(would), rowsWord(len(would)), idList(wouldIDs)); err != nil {
		return err
	}
	if len(unchanged) > 0 {
		if _, err := fmt.Fprintf(o.Out, "unchanged (%s): %s\n", whyNot, strings.TrimPrefix(idList(unchanged), ": ")); err != nil {
			return err
		}
	}
	if err := o.dryRunSample(would[:min(len(would), DryRunSample)], len(would)); err != nil {
		return err
	}
	return noSuchRows(unknown)
}

// dryRunSample prints sample, the first rows of the count a dry run would change, and
// says that nothing changed.
func (o Operator) dryRunSample(sample []store.FailedSend, count int) error {
	if len(sample) > 0 {
		if err := WriteTable(o.Out, sample, 0, o.now(), o.Targets); err != nil {
			return err
		}
		if more := count - len(sample); more > 0 {
			if _, err := fmt.Fprintf(o.Out, "… and %d more\n", more); err != nil {
				return err
			}
		}
	}
	_, err := fmt.Fprintln(o.Out, "nothing changed (dry run)")
	return err
}

// retryable reports whether a retry would make r due now (failed_retry.sql's rule): a
// pending, dead or rejected row, or a discarded one whose alert has no live row of a
// later episode.
func (o Operator) retryable(ctx context.Context, r store.FailedSend) (bool, error) {
	switch r.Status {
	case store.StatusPending, store.StatusDead, store.StatusRejected:
		return true, nil
	case store.StatusDiscarded:
		if o.History == nil {
			return true, nil
		}
		all, err := o.History.ByMessageID(ctx, r.MessageID)
		if err != nil {
			return false, err
		}
		return !slices.ContainsFunc(all, func(other store.FailedSend) bool {
			return other.ID != r.ID && other.Status != store.StatusDelivered && other.Status != store.StatusDiscarded &&
				other.Status != store.StatusCancelled
		}), nil
	}
	return false, nil
}

// discardable reports whether a discard would give up on a row of status (failed_discard.sql's rule).
func discardable(status store.FailedStatus) bool {
	return status == store.StatusPending || status == store.StatusDead || status == store.StatusRejected
}

func rowsWord(n int) string {
	if n == 1 {
		return "row"
	}
	return "rows"
}
