package chaos

import (
	"fmt"
	"io"
	"text/tabwriter"
	"time"
)

// WriteTable prints rows as one table: scenario, alerts published, delivered, lost,
// duplicates (unexplained, and the two ambiguous kinds apart, each with the bound of
// what its timeouts or faults can explain), rejected, early, p99 (and its bound) and max
// lateness, over-limit answers, dead-letter queue depth, redeliveries past RocketMQ's 16
// reconsumes, pass; then the seed, and each scenario's faults, what its mechanism did,
// and its problems.
func WriteTable(w io.Writer, rows []Row) error {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "scenario\tpublished\tdelivered\tlost\tduplicates\tdup ambiguous timeout\tdup ambiguous crash\trejected\tearly\tp99 late\tmax late\tover-limit\tDLQ\tpast 16 retries\ttime\tpass\t")
	for _, r := range rows {
		pass := "PASS"
		if !r.Pass() {
			pass = "FAIL"
		}
		rej := fmt.Sprint(r.Rejected)
		if r.Malformed > 0 {
			rej = fmt.Sprintf("%d (%d/%d ok)", r.Rejected, r.MalformedOK, r.Malformed)
		}
		p99 := dur(r.P99Lateness)
		if r.LatenessBound > 0 {
			p99 += " (≤ " + dur(r.LatenessBound) + ")"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d (≤ %d)\t%d (≤ %d)\t%s\t%d\t%s\t%s\t%d\t%d\t%d\t%s\t%s\t\n", r.Scenario, r.Published, r.Delivered, r.Lost,
			r.Duplicates, r.AmbiguousTimeout, r.TimeoutBound, r.AmbiguousCrash, r.CrashBound, rej, r.Early, p99, dur(r.MaxLateness), r.OverLimit, r.DLQ, r.PastBudget, r.Duration, pass)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(rows) > 0 {
		fmt.Fprintf(w, "\nseed %d (rerun a scenario with -scenarios NAME -seed %d)\n", rows[0].Seed, rows[0].Seed)
	}
	for _, r := range rows {
		if r.Faults != "" {
			fmt.Fprintf(w, "\n%s: %s\n", r.Scenario, r.Faults)
		}
		if r.Observed != "" {
			fmt.Fprintf(w, "%s: observed: %s\n", r.Scenario, r.Observed)
		}
		for _, p := range r.Problems {
			fmt.Fprintf(w, "%s: PROBLEM: %s\n", r.Scenario, p)
		}
		if r.Err != nil {
			fmt.Fprintf(w, "%s: ERROR: %v\n", r.Scenario, r.Err)
		}
		if r.Lost > 0 {
			ids := r.LostIDs
			if len(ids) > 20 {
				ids = ids[:20]
			}
			fmt.Fprintf(w, "%s: lost %d: %v\n", r.Scenario, r.Lost, ids)
		}
		for _, p := range r.MalformedProblems {
			fmt.Fprintf(w, "%s: malformed input: %s\n", r.Scenario, p)
		}
	}
	return nil
}

func dur(d time.Duration) string {
	if d < time.Second {
		return d.Round(time.Millisecond).String()
	}
	return d.Round(10 * time.Millisecond).String()
}
