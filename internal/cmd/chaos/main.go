// Command chaos runs rocketdelay's fault-injection suite (package chaos) against a
// private local stack and prints one table. It is `make chaos`:
//
//	go run ./internal/cmd/chaos                       # every scenario, full size
//	go run ./internal/cmd/chaos -scenarios kill-one -alerts 2000 -kills 5
//
// It exits 1 when a scenario fails its pass criteria.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"strings"
	"syscall"
	"time"

	"github.com/rocketdelay/rocketdelay/internal/chaos"
)

func main() {
	var opts chaos.Options
	scen := flag.String("scenarios", strings.Join(chaos.AllScenarios, ","), "comma-separated scenarios: "+strings.Join(chaos.AllScenarios, ", ")+", baseline")
	flag.IntVar(&opts.Alerts, "alerts", 2000, "alerts published by the kill-one scenarios")
	flag.IntVar(&opts.OtherAlerts, "other-alerts", 400, "alerts published by every other scenario")
	flag.IntVar(&opts.Kills, "kills", 5, "SIGKILLs in kill-one")
	flag.DurationVar(&opts.MaxDelay, "max-delay", 60*time.Second, "alert delays are spread over [0, max-delay]")
	flag.DurationVar(&opts.PublishOver, "publish-over", 40*time.Second, "publishing of a scenario's alerts is spread over this long")
	flag.DurationVar(&opts.Outage, "outage", 5*time.Second, "how long a stopped component stays down")
	flag.DurationVar(&opts.Storm, "storm", 42*time.Second, "length of the storms (storm, storm-wecom, storm-feishu)")
	flag.DurationVar(&opts.LongOutage, "long-outage", 5*time.Minute, "how long Redis or Postgres stays down in redis-outage and postgres-outage")
	flag.DurationVar(&opts.Drain, "drain", 150*time.Second, "wait for every alert at most this long after the last was due")
	flag.StringVar(&opts.StackDir, "stack-dir", "", "state directory of the private stack (kept); default a temporary one")
	flag.StringVar(&opts.RepoRoot, "repo-root", "", "build the replicas, and start the stack, from this checkout (an earlier version, to compare); default this one")
	flag.BoolVar(&opts.KeepStack, "keep-stack", false, "leave the private stack running")
	flag.Uint64Var(&opts.Seed, "seed", 0, "seed of delays, kill moments and the combined schedule (a scenario run alone with a run's seed repeats its schedule); 0 random")
	flag.DurationVar(&opts.CombinedFor, "combined-for", 5*time.Minute, "how long scenario combined publishes and injects faults")
	quiet := flag.Bool("q", false, "no progress lines")
	flag.Parse()
	opts.Scenarios = strings.Split(*scen, ",")
	if !*quiet {
		opts.Log = os.Stderr
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, 90*time.Minute)
	defer cancel()
	built := commit(opts.RepoRoot) // what the replicas are built from, before a commit made while it runs
	rows, err := chaos.Run(ctx, opts)
	if len(rows) > 0 {
		// What the docs need to cite the table, so that it is pasted as printed.
		fmt.Printf("go run ./internal/cmd/chaos %s · %s · commit %s · seed %d\n\n",
			strings.Join(os.Args[1:], " "), time.Now().UTC().Format("2006-01-02"), built, rows[0].Seed)
	}
	_ = chaos.WriteTable(os.Stdout, rows)
	if err != nil {
		fmt.Fprintln(os.Stderr, "chaos:", err)
		os.Exit(1)
	}
	for _, r := range rows {
		if !r.Pass() {
			os.Exit(1)
		}
	}
}

// commit names the checkout's HEAD, with "+changes" when its work tree differs from it,
// or "unknown" outside a git checkout.
func commit(dir string) string {
	if dir == "" {
		dir = "."
	}
	head, err := exec.Command("git", "-C", dir, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "unknown"
	}
	c := strings.TrimSpace(string(head))
	if changes, err := exec.Command("git", "-C", dir, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(changes) > 0 {
		c += "+changes"
	}
	return c
}
