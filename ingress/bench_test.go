package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/quantile"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// noOwners is the ways in without principals' records: no owner is read or written and
// no rate taken, as before principals were.
type noOwners struct{}

func (noOwners) Own(_ context.Context, _, _, principal string, _ time.Duration) (string, error) {
	return principal, nil
}
func (noOwners) Owner(context.Context, string, string) (string, error) { return "", nil }
func (noOwners) Extend(context.Context, string, string, time.Duration) (string, error) {
	return "", nil
}
func (noOwners) Take(context.Context, string, float64, int) (time.Duration, error) { return 0, nil }
func (noOwners) Publish(_ context.Context, principal string, _ float64, _ int, _ string, _ time.Duration) (time.Duration, string, error) {
	return 0, principal, nil
}
func (noOwners) OpenEpisode(context.Context, string, string, int) (bool, int, error) {
	return true, 0, nil
}

// BenchmarkPublishAPIPrincipals measures what principals cost a publish: each iteration
// publishes one markdown alert through each of two ways in on the same broker and Redis,
// interleaved so that both see the same load: the baseline, ingress.token with no
// owner records and no rate (the ways in as they were), and a principal (team: one
// target, no raw right, so its text is checked for mentions; a rate it never reaches,
// taken in Redis; its id recorded with SET NX before the publish). It reports each
// way's p50 and p99 (from the request to the 202, which waits for the broker) and the
// ratio of the p99s, against the goal of 1.05 (PASS or FAIL: a report, not a gate).
//
//	make bench-api   (go test -run '^$' -bench PublishAPIPrincipals -benchtime 10000x ./ingress/)
func BenchmarkPublishAPIPrincipals(b *testing.B) {
	ns := testenv.NameServer(b)
	rdb, prefix := testenv.Redis(b)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{ns}, Topic: testenv.Unique("rd_bench_api_")})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = p.Close() })
	cfg := config.Config{Targets: map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "t"}}}}}
	cfg.Ingress.Token = ingestToken
	cfg.Ingress.Principals = []config.Principal{{Name: "team", Token: config.Secret(teamToken[7:]), Targets: []string{"ops"},
		Rights: []string{config.RightCancel}, RatePerSecond: 1e6, Burst: 1e6}}
	cfg = cfg.WithDefaults()
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops": {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	if err != nil {
		b.Fatal(err)
	}
	server := func(producers Producers) string {
		in, err := New(cfg, Deps{Publisher: p, Chat: chat, Producers: producers, Logger: testenv.Logger(), Now: time.Now}, NewMetrics(nil))
		if err != nil {
			b.Fatal(err)
		}
		srv := httptest.NewServer(in.Handler())
		b.Cleanup(srv.Close)
		return srv.URL
	}
	base, principals := server(noOwners{}), server(store.NewProducers(rdb, prefix, 1))
	publish := func(url, auth string, i int) time.Duration {
		body, _ := json.Marshal(map[string]any{"target": "ops", "in": "1h", "id": fmt.Sprintf("bench-%s-%d", auth[7:11], i),
			"markdown": map[string]any{"title": "disk", "text": "### disk full\n**db-3** at 97%, see [runbook](https://runbook.example/db)"}})
		req, _ := http.NewRequest(http.MethodPost, url+AlertsPath, bytes.NewReader(body))
		req.Header.Set("Authorization", auth)
		start := time.Now()
		resp, err := http.DefaultClient.Do(req)
		took := time.Since(start)
		if err != nil {
			b.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted {
			b.Fatalf("publish answered %d", resp.StatusCode)
		}
		return took
	}
	for i := range 20 { // warm the connections and the producer's route
		publish(base, "Bearer "+ingestToken, -i-1)
		publish(principals, teamToken, -i-1)
	}
	var without, with []time.Duration
	b.ResetTimer()
	for i := range b.N {
		if i%2 == 0 { // alternate which goes first
			without = append(without, publish(base, "Bearer "+ingestToken, i))
			with = append(with, publish(principals, teamToken, i))
		} else {
			with = append(with, publish(principals, teamToken, i))
			without = append(without, publish(base, "Bearer "+ingestToken, i))
		}
	}
	b.StopTimer()
	w, s := quantile.Summarize(without), quantile.Summarize(with)
	b.ReportMetric(float64(w.P50.Microseconds())/1000, "base-p50-ms")
	b.ReportMetric(float64(w.P99.Microseconds())/1000, "base-p99-ms")
	b.ReportMetric(float64(s.P50.Microseconds())/1000, "principals-p50-ms")
	b.ReportMetric(float64(s.P99.Microseconds())/1000, "principals-p99-ms")
	ratio := float64(s.P99) / float64(w.P99)
	b.ReportMetric(ratio, "p99-ratio")
	// The goal: principals cost at most 5 % of the p99. A principal adds one Redis round
	// trip before the broker's send (its rate and its id's owner, principal_publish.lua:
	// an id is refused to another principal before anything is published), which this
	// machine's p99 shows as 1.1-1.4x (docs/performance.md, Principals on the publish
	// API). Without the round trip both paths measure the same: the rest of what a
	// principal does costs nothing measurable.
	verdict := "PASS"
	if ratio > 1.05 {
		verdict = "FAIL"
	}
	b.Logf("goal: principals' p99 within 1.05x of the single token's (%.2fx: %s)", ratio, verdict)
}
