package store_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"testing"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// BenchmarkScriptTimePerAlert measures what an alert's life in the wheel stage costs
// the single-threaded Redis, by Redis's own account (INFO commandstats, the usec of
// EVALSHA): b.N times, a burst of 4000 alerts put one by one, claimed 1000 per call (the
// store's largest script call) and released 256 per call (scheduler/release.go's batch,
// each given its entry's target and due time, as a hand-off's release is), as a burst
// due at one instant is. It reports the script time per alert of each step: a burst of n
// alerts needs n × (claim + release) of Redis after its due instant, whatever the
// process does (docs/performance.md, Burst).
//
//	go test -run '^$' -bench ScriptTimePerAlert -benchtime 5x ./store/
func BenchmarkScriptTimePerAlert(b *testing.B) {
	ctx := context.Background()
	rdb, prefix := testenv.Redis(b)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	const n = 4000
	var put, claim, release int64
	for round := range b.N {
		ids := make([]string, n)
		due := time.Now().Add(-time.Second)
		u0 := scriptMicros(b, rdb)
		for i := range ids {
			ids[i] = fmt.Sprintf("burst-%d-%05d", round, i)
			if _, err := ws.Put(ctx, store.Entry{ID: ids[i], Target: "ops", DueAt: due, Body: []byte("alert " + ids[i])}); err != nil {
				b.Fatal(err)
			}
		}
		u1 := scriptMicros(b, rdb)
		var claimed []store.Entry
		for i := 0; i < n; i += 1000 {
			c, err := ws.Claim(ctx, ids[i:i+1000], "r/1")
			if err != nil {
				b.Fatal(err)
			}
			claimed = append(claimed, c.Entries...)
		}
		if len(claimed) != n {
			b.Fatalf("claimed %d of %d", len(claimed), n)
		}
		u2 := scriptMicros(b, rdb)
		for i := 0; i < n; i += 256 {
			var rs []store.Released
			for _, e := range claimed[i:min(i+256, n)] {
				rs = append(rs, store.Released{Claim: e.Claim(), Receipt: store.Receipt{Outcome: store.Delivered, Replica: "r"},
					Target: e.Target, DueAt: e.DueAt}) // as a hand-off's release is
			}
			if _, err := ws.ReleaseAll(ctx, rs); err != nil {
				b.Fatal(err)
			}
		}
		u3 := scriptMicros(b, rdb)
		put, claim, release = put+u1-u0, claim+u2-u1, release+u3-u2
	}
	per := func(us int64) float64 { return float64(us) / float64(b.N*n) }
	b.ReportMetric(per(put), "put-µs/alert")
	b.ReportMetric(per(claim), "claim-µs/alert")
	b.ReportMetric(per(release), "release-µs/alert")
	b.Logf("Redis script time per alert: put %.1f µs, claim %.1f µs, release %.1f µs; a burst of 4000 needs %.0f ms of Redis after its due instant",
		per(put), per(claim), per(release), (per(claim)+per(release))*n/1000)
}

var evalshaStats = regexp.MustCompile(`cmdstat_evalsha:calls=\d+,usec=(\d+)`)

// scriptMicros is the time Redis has spent in EVALSHA since its start, µs.
func scriptMicros(b *testing.B, rdb redis.UniversalClient) int64 {
	info, err := rdb.Info(context.Background(), "commandstats").Result()
	if err != nil {
		b.Fatal(err)
	}
	m := evalshaStats.FindStringSubmatch(info)
	if m == nil {
		return 0
	}
	us, err := strconv.ParseInt(m[1], 10, 64)
	if err != nil {
		b.Fatal(err)
	}
	return us
}
