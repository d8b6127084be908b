package bench

import (
	"cmp"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
)

// startProfile starts the CPU profile of a run named name in dir, and writes the
// allocation profile as it is now (name.allocs-start.pprof); stop ends the CPU profile
// and writes the allocation profile again (name.allocs-end.pprof), once, and is safe to
// call again. An empty dir profiles nothing.
func startProfile(dir, name string) (stop func() error, err error) {
	if dir == "" {
		return func() error { return nil }, nil
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, fmt.Errorf("bench: profile directory: %w", err)
	}
	if err := writeAllocs(filepath.Join(dir, name+".allocs-start.pprof")); err != nil {
		return nil, err
	}
	f, err := os.Create(filepath.Join(dir, name+".cpu.pprof"))
	if err != nil {
		return nil, fmt.Errorf("bench: CPU profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		_ = f.Close()
		return nil, fmt.Errorf("bench: CPU profile: %w", err)
	}
	stopped := false
	return func() error {
		if stopped {
			return nil
		}
		stopped = true
		pprof.StopCPUProfile()
		if err := f.Close(); err != nil {
			return fmt.Errorf("bench: CPU profile: %w", err)
		}
		return writeAllocs(filepath.Join(dir, name+".allocs-end.pprof"))
	}, nil
}

// writeAllocs writes the allocation profile (every allocation sampled since the start)
// to path.
func writeAllocs(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return fmt.Errorf("bench: allocation profile: %w", err)
	}
	runtime.GC() // the profile is as of the last collection
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		_ = f.Close()
		return fmt.Errorf("bench: allocation profile: %w", err)
	}
	return f.Close()
}

// writeCommands writes the Redis commands of a run's publishing and of its hand-off,
// per alert and by command, most first, to dir/name.commands.txt. An empty dir writes
// nothing.
func writeCommands(dir, name string, n int, put, handoff map[string]int64) error {
	if dir == "" {
		return nil
	}
	var b strings.Builder
	for _, part := range []struct {
		what  string
		calls map[string]int64
	}{{"publishing (consume and write into the wheel stage)", put}, {"hand-off (claim, hand off, release)", handoff}} {
		fmt.Fprintf(&b, "%s: %.2f commands per alert (a script's own commands included); %.1f µs of Redis in scripts per alert\n",
			part.what, float64(sumCalls(part.calls))/float64(n), float64(part.calls["evalsha"+usecSuffix])/float64(n))
		names := slices.SortedFunc(maps.Keys(part.calls), func(a, b string) int {
			return cmp.Or(cmp.Compare(part.calls[b], part.calls[a]), strings.Compare(a, b))
		})
		for _, c := range names {
			if strings.HasSuffix(c, usecSuffix) {
				continue
			}
			fmt.Fprintf(&b, "  %-24s %8d  %6.2f per alert  %8d µs\n", c, part.calls[c], float64(part.calls[c])/float64(n),
				part.calls[c+usecSuffix])
		}
	}
	return os.WriteFile(filepath.Join(dir, name+".commands.txt"), []byte(b.String()), 0o644)
}

// sumCalls is the total of the calls of commandCallsByName's counts.
func sumCalls(calls map[string]int64) int64 {
	var sum int64
	for name, n := range calls {
		if !strings.HasSuffix(name, usecSuffix) {
			sum += n
		}
	}
	return sum
}
