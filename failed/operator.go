package failed

import (
	"context"
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
	return o.report("retried", "delivered or cancelled already, or no such row", ids, changed)
}

// RetryWhere makes every row with status (and target, unless "") due now and prints
// which.
func (o Operator) RetryWhere(ctx context.Context, status store.FailedStatus, target string) error {
	changed, err := o.Store.RetryWhere(ctx, status, target)
	if err != nil {
		return err
	}
	return o.report("retried", "", nil, changed)
}

// Discard gives up on the rows ids and prints which changed and which did not
// (delivered, cancelled, already discarded, or unknown rows).
func (o Operator) Discard(ctx context.Context, ids []int64, reason string) error {
	changed, err := o.Store.Discard(ctx, ids, reason)
	if err != nil {
		return err
	}
	return o.report("discarded", "delivered, cancelled or discarded already, or no such row", ids, changed)
}

func (o Operator) report(verb, whyNot string, asked, changed []int64) error {
	word := "rows"
	if len(changed) == 1 {
		word = "row"
	}
	if _, err := fmt.Fprintf(o.Out, "%s %d %s%s\n", verb, len(changed), word, idList(changed)); err != nil {
		return err
	}
	var unchanged []int64
	for _, id := range asked {
		if !slices.Contains(changed, id) && !slices.Contains(unchanged, id) {
			unchanged = append(unchanged, id)
		}
	}
	if len(unchanged) > 0 {
		_, err := fmt.Fprintf(o.Out, "unchanged (%s): %s\n", whyNot, strings.TrimPrefix(idList(unchanged), ": "))
		return err
	}
	return nil
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
