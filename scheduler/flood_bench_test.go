package scheduler

import (
	"testing"
	"time"
)

// BenchmarkFloodCalmLateness prints the figure TestFloodOnOneTargetLeavesOthersOnTime
// judges by order: the lateness (due time to hand-off) of 20 calm alerts that fall due
// while 200 alerts of another target, each taking 2s to hand off, hold the flood's share
// of the workers, next to the same 20 alerts with no flood, run first in the same
// iteration as the baseline; the ratios are flood over baseline. Each iteration runs two
// schedulers against the local broker and Redis, about a minute: run it with
// -benchtime 1x.
func BenchmarkFloodCalmLateness(b *testing.B) {
	if testing.Short() {
		b.Skip("needs RocketMQ and Redis")
	}
	var alone, flood [3]time.Duration // p50, p99, max, summed over the iterations
	for range b.N {
		calm, _, _, h, _ := floodRun(b, 0, 0)
		p50, p99, worst := h.rec.latenessReport(b, calm)
		alone = [3]time.Duration{alone[0] + p50, alone[1] + p99, alone[2] + worst}
		calm, _, _, h, _ = floodRun(b, 200, 0)
		p50, p99, worst = h.rec.latenessReport(b, calm)
		flood = [3]time.Duration{flood[0] + p50, flood[1] + p99, flood[2] + worst}
	}
	ms := func(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) / float64(b.N) }
	b.ReportMetric(ms(alone[1]), "ms-calm-p99-alone")
	b.ReportMetric(ms(flood[0]), "ms-calm-p50-flood")
	b.ReportMetric(ms(flood[1]), "ms-calm-p99-flood")
	b.ReportMetric(ms(flood[2]), "ms-calm-max-flood")
	b.ReportMetric(float64(flood[1])/float64(max(alone[1], time.Millisecond)), "p99-flood/alone")
	b.ReportMetric(float64(flood[2])/float64(max(alone[2], time.Millisecond)), "max-flood/alone")
}
