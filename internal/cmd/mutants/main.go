// Command mutants applies each mutation of the curated list (internal/mutants) to the
// source in turn, runs the tests it names, and restores the file: every mutant must be
// killed (its tests fail). It prints, per mutant, whether it was killed and by which test,
// and exits 1 when one survived, its original text is gone, or its mutated code does not
// build. Run it from the repository's root with the local stack's environment (make
// mutants); the working tree's files are changed one at a time and always put back.
package main

import (
	"bytes"
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"regexp"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/internal/mutants"
)

func main() {
	only := flag.String("only", "", "run only the mutants whose name matches this regular expression")
	list := flag.Bool("list", false, "list the mutants and exit")
	timeout := flag.Duration("timeout", 10*time.Minute, "bound of each mutant's test run")
	flag.Parse()
	os.Exit(run(*only, *list, *timeout))
}

// outcome is how one mutant ended.
type outcome struct {
	m      mutants.Mutant
	result string // killed, SURVIVED, STALE (original text not found once), BROKEN (does not build)
	by     string // the first failing test
	took   time.Duration
}

func run(only string, list bool, timeout time.Duration) int {
	match, err := regexp.Compile(only)
	if err != nil {
		fmt.Fprintln(os.Stderr, "mutants: -only:", err)
		return 2
	}
	var chosen []mutants.Mutant
	names := map[string]bool{}
	for _, m := range mutants.List {
		if names[m.Name] {
			fmt.Fprintln(os.Stderr, "mutants: two mutants named", m.Name)
			return 2
		}
		names[m.Name] = true
		if match.MatchString(m.Name) {
			chosen = append(chosen, m)
		}
	}
	if list {
		for _, m := range chosen {
			fmt.Printf("%-28s %s (%s)\n", m.Name, m.Invariant, m.File)
		}
		return 0
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	fmt.Printf("mutants: %d of %d, each judged by its own tests\n", len(chosen), len(mutants.List))
	var outcomes []outcome
	for _, m := range chosen {
		o := judge(ctx, m, timeout)
		fmt.Printf("%-28s %-9s %-50s %s\n", m.Name, o.result, o.by, o.took.Round(time.Second))
		outcomes = append(outcomes, o)
		if ctx.Err() != nil {
			fmt.Fprintln(os.Stderr, "mutants: interrupted")
			return 2
		}
	}
	return report(outcomes)
}

// judge applies m, runs its tests, and puts the file back.
func judge(ctx context.Context, m mutants.Mutant, timeout time.Duration) outcome {
	start := time.Now()
	o := outcome{m: m}
	orig, err := os.ReadFile(m.File)
	if err != nil {
		o.result, o.by = "STALE", err.Error()
		return o
	}
	if n := bytes.Count(orig, []byte(m.From)); n != 1 {
		o.result, o.by = "STALE", fmt.Sprintf("original text found %d times", n)
		return o
	}
	mutated := bytes.Replace(orig, []byte(m.From), []byte(m.To), 1)
	info, err := os.Stat(m.File)
	if err != nil {
		o.result, o.by = "STALE", err.Error()
		return o
	}
	if err := os.WriteFile(m.File, mutated, info.Mode()); err != nil {
		o.result, o.by = "STALE", err.Error()
		return o
	}
	defer func() {
		if err := os.WriteFile(m.File, orig, info.Mode()); err != nil {
			fmt.Fprintf(os.Stderr, "mutants: CANNOT RESTORE %s: %v (git checkout -- %s)\n", m.File, err, m.File)
			os.Exit(3)
		}
	}()
	tctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	cmd := exec.CommandContext(tctx, "go", append([]string{"test", "-count=1", "-run", m.Tests}, strings.Fields(m.Package)...)...)
	out, err := cmd.CombinedOutput()
	o.took = time.Since(start)
	text := string(out)
	switch {
	case strings.Contains(text, "[build failed]") || strings.Contains(text, "[setup failed]"):
		o.result, o.by = "BROKEN", "the mutated code does not build"
	case err == nil:
		o.result, o.by = "SURVIVED", "its tests passed"
		if strings.Contains(text, "no tests to run") {
			o.by = "no test matched " + m.Tests
		}
	case tctx.Err() != nil:
		o.result, o.by = "killed", "timeout "+timeout.String()
	default:
		o.result, o.by = "killed", firstFailure(text)
	}
	return o
}

// firstFailure names the first test that failed in go test's output.
func firstFailure(out string) string {
	for line := range strings.Lines(out) {
		if name, ok := strings.CutPrefix(strings.TrimSpace(line), "--- FAIL: "); ok {
			name, _, _ = strings.Cut(name, " ")
			return name
		}
	}
	return "go test failed (no test named)"
}

// report prints the summary and returns the exit code.
func report(outcomes []outcome) int {
	counts := map[string]int{}
	tw := tabwriter.NewWriter(os.Stdout, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "\nmutant\tresult\tkilled by\tinvariant")
	for _, o := range outcomes {
		counts[o.result]++
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", o.m.Name, o.result, o.by, o.m.Invariant)
	}
	_ = tw.Flush()
	fmt.Printf("\n%d killed, %d survived, %d stale, %d broken\n", counts["killed"], counts["SURVIVED"], counts["STALE"], counts["BROKEN"])
	if len(outcomes) != counts["killed"] {
		return 1
	}
	return 0
}
