package store

import (
	"context"
	"crypto/rand"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/rocketdelay/rocketdelay/internal/quantile"
)

// BenchmarkShardMoveCost measures what online resharding costs an alert's life in
// Redis, in one run, three ways in turn (so all share the machine's state of the
// moment): "unguarded", a stage of 3 shards running its scripts of an id as they were
// before moves (the baseline); "settled", the same stage with the guard every script
// of an id now runs behind (its fence check); "moving", a stage moving from 1 to 3 in
// phase 2, where an alert whose shard changed is first routed through its old shard.
// Each iteration takes one new alert through its hop's note, the put, a claim and a
// release, and the benchmark reports each way's p50 and p99 and their ratios to the
// baseline.
//
//	go test -run '^$' -bench ShardMoveCost -benchtime 3000x ./store/
func BenchmarkShardMoveCost(b *testing.B) {
	ctx := context.Background()
	rdb, prefix := benchRedis(b)
	settled := NewWheelStage(rdb, prefix, WheelStageOptions{Shards: 3})
	moving := NewWheelStage(rdb, prefix, WheelStageOptions{Shards: 3, From: 1, Phase: 2})

	guarded := []*idScript{&wheelPutScript, &traceHopScript}
	withGuard := []idScript{wheelPutScript, traceHopScript}
	unguard := func(off bool) {
		for i, sc := range guarded {
			if off { // the plain script ignores the guard's key and arguments
				*sc = idScript{plain: withGuard[i].plain, guarded: withGuard[i].plain}
			} else {
				*sc = withGuard[i]
			}
		}
	}
	defer unguard(false)
	body := make([]byte, 512)
	_, _ = rand.Read(body)
	life := func(w *WheelStage, id string) time.Duration {
		start := time.Now()
		due := time.Now()
		if err := w.TraceHop(ctx, HopNote{ID: id, Target: "ops", Due: due, Hops: 1, Delay: time.Second}); err != nil {
			b.Fatal(err)
		}
		if r, err := w.Put(ctx, Entry{ID: id, Target: "ops", DueAt: due, Body: body, Hops: 1}); err != nil || r != PutStored {
			b.Fatal(r, err)
		}
		c, err := w.Claim(ctx, []string{id}, "bench-claim")
		if err != nil || len(c.Entries) != 1 {
			b.Fatal(len(c.Entries), err)
		}
		if _, err := w.Release(ctx, Delivered, c.Entries[0].Claim()); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var base, fenced, moved []time.Duration
	i := 0
	for b.Loop() {
		i++
		unguard(true)
		base = append(base, life(settled, "unguarded-"+strconv.Itoa(i)))
		unguard(false)
		fenced = append(fenced, life(settled, "settled-"+strconv.Itoa(i)))
		moved = append(moved, life(moving, "moving-"+strconv.Itoa(i)))
	}
	report := func(name string, ds []time.Duration, against quantile.Summary) quantile.Summary {
		slices.Sort(ds)
		s := quantile.Summarize(ds)
		b.ReportMetric(float64(s.P50.Microseconds()), "µs-p50-"+name)
		b.ReportMetric(float64(s.P99.Microseconds()), "µs-p99-"+name)
		if against.P50 > 0 && against.P99 > 0 {
			b.ReportMetric(float64(s.P50)/float64(against.P50), "p50-ratio-"+name)
			b.ReportMetric(float64(s.P99)/float64(against.P99), "p99-ratio-"+name)
		}
		return s
	}
	baseline := report("unguarded", base, quantile.Summary{})
	report("settled", fenced, baseline)
	report("moving", moved, baseline)
}
