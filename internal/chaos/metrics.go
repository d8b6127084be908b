package chaos

import (
	"net/http"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
)

// metricFamilies is one scrape of a replica's /metrics, by metric name.
type metricFamilies map[string]*dto.MetricFamily

// scrape reads rp's /metrics and keeps it as rp's last scrape, so that what a replica
// counted survives its SIGKILL (killReplicas scrapes first), and notes the local ports
// of its connections (e.ports). A scrape that fails keeps the previous one.
func (e *env) scrape(rp *replica) {
	if rp == nil {
		return
	}
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get("http://" + rp.addr + "/metrics")
	if err != nil {
		e.r.logf("  %s: scrape %s: %v", e.name, rp.name, err)
		return
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	mfs, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		e.r.logf("  %s: scrape %s: %v", e.name, rp.name, err)
		return
	}
	ports := rp.localPorts()
	e.mu.Lock()
	defer e.mu.Unlock()
	e.scrapes[rp.name] = mfs
	for _, p := range ports {
		if other, ok := e.ports[p]; ok && other != rp.name {
			e.ports[p] = "" // two instances used the port: a message of it is any replica's
			continue
		}
		e.ports[p] = rp.name
	}
}

// counterLocked sums the counter name over every replica instance's last scrape, over
// its series whose labels include labels. The caller holds e.mu.
func (e *env) counterLocked(name string, labels map[string]string) float64 {
	var sum float64
	for _, mfs := range e.scrapes {
		for _, m := range mfs[name].GetMetric() {
			if hasLabels(m, labels) {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

// histogram is a histogram summed over replica instances (and series).
type histogram struct {
	count   uint64
	buckets map[float64]uint64 // cumulative count by upper bound
}

// cumulative is how many observations were at most le (le must be a bucket's bound).
func (h histogram) cumulative(le float64) uint64 { return h.buckets[le] }

// histogramLocked sums the histogram name over every replica instance's last scrape.
// The caller holds e.mu.
func (e *env) histogramLocked(name string) histogram {
	h := histogram{buckets: map[float64]uint64{}}
	for _, mfs := range e.scrapes {
		for _, m := range mfs[name].GetMetric() {
			hm := m.GetHistogram()
			h.count += hm.GetSampleCount()
			for _, b := range hm.GetBucket() {
				h.buckets[b.GetUpperBound()] += b.GetCumulativeCount()
			}
		}
	}
	return h
}
