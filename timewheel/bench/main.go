// Command bench compares the rocketdelay timewheel with time.AfterFunc and
// go-zero's TimingWheel, each measurement in a fresh child process, and
// prints one table with ratios against time.AfterFunc. Run it from this
// directory with `go run .` (flags: -n keys, -window lateness spread).
package main

import (
	"bufio"
	"encoding/json"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"runtime"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/timewheel"
	"github.com/rocketdelay/rocketdelay/timewheel/internal/benchkit"
)

var impls = []benchkit.Impl{
	benchkit.AfterFunc,
	benchkit.Wheel,
	benchkit.WheelWith("timewheel 1 wake", timewheel.Config{WakesPerTick: 1}),
	benchkit.WheelWith("timewheel 4 wakes", timewheel.Config{WakesPerTick: 4}),
	benchkit.WheelWith("timewheel 1ms", timewheel.Config{Tick: time.Millisecond}),
	goZero,
}

// result is what one child process reports.
type result struct {
	Value  float64 `json:"value"`
	Allocs float64 `json:"allocs"`
	P50    float64 `json:"p50"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
	Early  int     `json:"early"`
	Err    string  `json:"err"`
}

func main() {
	n := flag.Int("n", 1_000_000, "pending timers / burst size / lateness keys")
	window := flag.Duration("window", 10*time.Second, "lateness: keys are spread over this window")
	child := flag.String("child", "", "internal: run one measurement, impl/measurement")
	flag.Parse()
	if *child != "" {
		runChild(*child, *n, *window)
		return
	}
	if err := runAll(*n, *window); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

func runChild(spec string, n int, window time.Duration) {
	name, what, _ := strings.Cut(spec, "/")
	var impl benchkit.Impl
	for _, i := range impls {
		if i.Name == name {
			impl = i
		}
	}
	var r result
	var err error
	switch what {
	case "addcancel":
		var o benchkit.OpResult
		o, err = benchkit.AddCancel(impl, n, n)
		r.Value, r.Allocs = o.NsPerOp, o.AllocsPerOp
	case "addfire":
		var o benchkit.OpResult
		o, err = benchkit.AddFire(impl, n, n)
		r.Value, r.Allocs = o.NsPerOp, o.AllocsPerOp
	case "memory":
		r.Value, err = benchkit.BytesPerTimer(impl, n)
	case "burst":
		var d time.Duration
		d, err = benchkit.Burst(impl, n, 3*time.Second)
		r.Value = ms(d)
	case "idle":
		r.Value, err = benchkit.IdleCPU(impl, n, 3*time.Second)
		r.Value *= 100
	case "lateness":
		var l benchkit.LatenessResult
		l, err = benchkit.Lateness(impl, n, 3*time.Second, window)
		r.P50, r.P99, r.Max, r.Early = ms(l.P50), ms(l.P99), ms(l.Max), l.Early
	default:
		err = fmt.Errorf("unknown measurement %q", what)
	}
	if err != nil {
		r.Err = err.Error()
	}
	_ = json.NewEncoder(os.Stdout).Encode(r)
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

func measure(impl benchkit.Impl, what string, n int, window time.Duration) (result, error) {
	self, err := os.Executable()
	if err != nil {
		return result{}, err
	}
	cmd := exec.Command(self, "-child", impl.Name+"/"+what, "-n", fmt.Sprint(n), "-window", window.String())
	cmd.Stderr = os.Stderr
	out, err := cmd.Output()
	if err != nil {
		return result{}, fmt.Errorf("%s %s: %w", impl.Name, what, err)
	}
	var r result
	if err := json.Unmarshal(out, &r); err != nil {
		return result{}, fmt.Errorf("%s %s: %w", impl.Name, what, err)
	}
	return r, nil
}

func runAll(n int, window time.Duration) error {
	start := time.Now()
	fmt.Printf("timewheel benchmark: %s, %d cores (GOMAXPROCS %d), %s %s/%s\n",
		cpuModel(), runtime.NumCPU(), runtime.GOMAXPROCS(0), runtime.Version(), runtime.GOOS, runtime.GOARCH)
	fmt.Printf("n = %d; timewheel: default config (tick 10ms, 8192 slots, 2 wakes per tick); timewheel 1 wake / 4 wakes:\n", n)
	fmt.Printf("the same with 1 or 4 wake-ups per tick; timewheel 1ms: tick 1ms, 65536 slots, 2 wakes per tick;\n")
	fmt.Printf("go-zero TimingWheel v1.10.3: tick 10ms, 8192 slots; time.AfterFunc: one closure per key\n\n")

	type row struct {
		label string
		unit  string
		get   func(result) float64
		what  string
	}
	rows := []row{
		{"add+cancel", "ns/op", func(r result) float64 { return r.Value }, "addcancel"},
		{"add+cancel", "allocs/op", func(r result) float64 { return r.Allocs }, "addcancel"},
		{"add+fire", "ns/op", func(r result) float64 { return r.Value }, "addfire"},
		{"add+fire", "allocs/op", func(r result) float64 { return r.Allocs }, "addfire"},
		{"memory", "B/timer", func(r result) float64 { return r.Value }, "memory"},
		{"burst: last delivered", "ms", func(r result) float64 { return r.Value }, "burst"},
		{"lateness p50", "ms", func(r result) float64 { return r.P50 }, "lateness"},
		{"lateness p99", "ms", func(r result) float64 { return r.P99 }, "lateness"},
		{"lateness max", "ms", func(r result) float64 { return r.Max }, "lateness"},
		{"lateness early keys", "count", func(r result) float64 { return float64(r.Early) }, "lateness"},
		{"idle CPU, n pending", "% core", func(r result) float64 { return r.Value }, "idle"},
	}
	results := map[string]result{} // impl/what
	for _, what := range []string{"addcancel", "addfire", "memory", "burst", "lateness", "idle"} {
		for _, impl := range impls {
			fmt.Fprintf(os.Stderr, "measuring %s %s...\n", impl.Name, what)
			r, err := measure(impl, what, n, window)
			if err != nil {
				return err
			}
			if r.Err != "" {
				fmt.Fprintf(os.Stderr, "  %s %s: %s\n", impl.Name, what, r.Err)
			}
			results[impl.Name+"/"+what] = r
		}
	}

	tw := tabwriter.NewWriter(os.Stdout, 0, 0, 2, ' ', tabwriter.AlignRight)
	header := "measurement\tunit\t"
	for i, impl := range impls {
		header += impl.Name + "\t"
		if i > 0 {
			header += "ratio\t"
		}
	}
	fmt.Fprintln(tw, header)
	for _, r := range rows {
		line := r.label + "\t" + r.unit + "\t"
		base := results[impls[0].Name+"/"+r.what]
		for i, impl := range impls {
			res := results[impl.Name+"/"+r.what]
			if res.Err != "" {
				line += "failed\t"
				if i > 0 {
					line += "\t"
				}
				continue
			}
			v := r.get(res)
			line += format(v) + "\t"
			if i > 0 {
				line += ratio(v, r.get(base), base.Err != "") + "\t"
			}
		}
		fmt.Fprintln(tw, line)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Printf("\nratio = value / time.AfterFunc value (lower is better). Run time %v.\n", time.Since(start).Round(time.Second))
	return nil
}

func format(v float64) string {
	switch {
	case v == 0:
		return "0"
	case v < 10:
		return fmt.Sprintf("%.3f", v)
	default:
		return fmt.Sprintf("%.1f", v)
	}
}

func ratio(v, base float64, baseFailed bool) string {
	if baseFailed || base == 0 {
		return "-"
	}
	return fmt.Sprintf("%.2fx", v/base)
}

func cpuModel() string {
	f, err := os.Open("/proc/cpuinfo")
	if err != nil {
		return "unknown CPU"
	}
	defer f.Close()
	s := bufio.NewScanner(f)
	for s.Scan() {
		if k, v, ok := strings.Cut(s.Text(), ":"); ok && strings.TrimSpace(k) == "model name" {
			return strings.TrimSpace(v)
		}
	}
	return "unknown CPU"
}
