package store

import (
	"context"
	"crypto/rand"
	"fmt"
	"os"
	"slices"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/internal/quantile"
)

// pendingOff is lib_pending.lua's functions doing nothing: the scripts as they were
// before the list of pending alerts, for the benchmark's baseline.
const pendingOff = "local function pending_note() end\nlocal function pending_drop() end\n"

// BenchmarkPendingIndexCost measures what the list of pending alerts costs an alert's
// life in Redis, against the same scripts without it, in one run: each iteration takes
// one alert through its hop's note, the wheel stage's put, a claim and a release, with
// the list and without it in turn (so both halves share the machine's state of the
// moment), and reports p50 and p99 of each and their ratio.
//
//	go test -run '^$' -bench PendingIndexCost -benchtime 3000x ./store/
func BenchmarkPendingIndexCost(b *testing.B) {
	ctx := context.Background()
	rdb, prefix := benchRedis(b)
	ws := NewWheelStage(rdb, prefix, WheelStageOptions{})

	onPut, onRelease, onHop := wheelPutScript, wheelReleaseScript, traceHopScript
	offPut := newIDScript(pendingOff, mustRead("lua/wheel_put.lua"))
	offRelease := redis.NewScript(mustRead("lua/lib_holding.lua") + pendingOff + mustRead("lua/wheel_release.lua"))
	offHop := newIDScript(pendingOff, mustRead("lua/trace_hop.lua"))
	defer func() { wheelPutScript, wheelReleaseScript, traceHopScript = onPut, onRelease, onHop }()
	body := make([]byte, 512)
	_, _ = rand.Read(body)
	life := func(id string) time.Duration {
		start := time.Now()
		due := time.Now()
		if err := ws.TraceHop(ctx, HopNote{ID: id, Target: "ops", Due: due, Hops: 1, Delay: time.Second}); err != nil {
			b.Fatal(err)
		}
		if r, err := ws.Put(ctx, Entry{ID: id, Target: "ops", DueAt: due, Body: body, Hops: 1}); err != nil || r != PutStored {
			b.Fatal(r, err)
		}
		c, err := ws.Claim(ctx, []string{id}, "bench-claim")
		if err != nil || len(c.Entries) != 1 {
			b.Fatal(len(c.Entries), err)
		}
		if _, err := ws.Release(ctx, Delivered, Claim{ID: id, Token: "bench-claim"}); err != nil {
			b.Fatal(err)
		}
		return time.Since(start)
	}
	var with, without []time.Duration
	i := 0
	for b.Loop() {
		i++
		wheelPutScript, wheelReleaseScript, traceHopScript = onPut, onRelease, onHop
		with = append(with, life("with-"+strconv.Itoa(i)))
		wheelPutScript, wheelReleaseScript, traceHopScript = offPut, offRelease, offHop
		without = append(without, life("without-"+strconv.Itoa(i)))
	}
	slices.Sort(with)
	slices.Sort(without)
	w, wo := quantile.Summarize(with), quantile.Summarize(without)
	b.ReportMetric(float64(w.P50.Microseconds()), "µs-p50-with")
	b.ReportMetric(float64(wo.P50.Microseconds()), "µs-p50-without")
	b.ReportMetric(float64(w.P99.Microseconds()), "µs-p99-with")
	b.ReportMetric(float64(wo.P99.Microseconds()), "µs-p99-without")
	if wo.P99 > 0 {
		b.ReportMetric(float64(w.P99)/float64(wo.P99), "p99-ratio")
	}
	if wo.P50 > 0 {
		b.ReportMetric(float64(w.P50)/float64(wo.P50), "p50-ratio")
	}
}

// benchRedis is a client of the local stack's Redis and a key prefix of the benchmark's
// own, whose keys are deleted when it ends; it skips the benchmark without Redis.
func benchRedis(b *testing.B) (*redis.Client, string) {
	b.Helper()
	u := os.Getenv("ROCKETDELAY_REDIS_URL")
	if u == "" {
		b.Skip("needs Redis: eval \"$(deploy/local/env)\"")
	}
	opt, err := redis.ParseURL(u)
	if err != nil {
		b.Fatal(err)
	}
	rdb := redis.NewClient(opt)
	prefix := fmt.Sprintf("rdbench%d", time.Now().UnixNano())
	b.Cleanup(func() {
		_, _ = DeleteKeys(context.Background(), rdb, prefix)
		_ = rdb.Close()
	})
	return rdb, prefix
}
