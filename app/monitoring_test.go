package app

import (
	"encoding/json"
	"log/slog"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic/relay"
)

// describer is a Registerer that keeps what every collector describes: metric names and
// their variable labels.
type describer map[string]map[string]bool

var descRE = regexp.MustCompile(`fqName: "([^"]+)".*variableLabels: \{([^}]*)\}`)

func (d describer) Register(c prometheus.Collector) error {
	ch := make(chan *prometheus.Desc, 64)
	go func() { c.Describe(ch); close(ch) }()
	for desc := range ch {
		m := descRE.FindStringSubmatch(desc.String())
		if m == nil {
			continue
		}
		labels := map[string]bool{}
		for _, l := range strings.Split(m[2], ",") {
			if l = strings.TrimSpace(l); l != "" {
				labels[l] = true
			}
		}
		d[m[1]] = labels
	}
	return nil
}

func (d describer) MustRegister(cs ...prometheus.Collector) {
	for _, c := range cs {
		_ = d.Register(c)
	}
}

func (d describer) Unregister(prometheus.Collector) bool { return false }

var (
	metricRE   = regexp.MustCompile(`\b(rocketdelay_[a-z_]+?)(_bucket|_sum|_count)?(\{[^}]*\})?(?:\[|\)|\s|$| offset)`)
	matcherRE  = regexp.MustCompile(`([a-z_]+)\s*(?:=~|!~|!=|=)`)
	groupingRE = regexp.MustCompile(`\b(?:by|without)\s*\(([^)]*)\)`)
)

// TestMonitoringUsesRealMetrics reads every PromQL expression of the alerting rules and
// the Grafana dashboard in deploy/k8s/monitoring: each names a metric rocketdelay
// exports, and filters or groups only by labels it has (plus "pod", which the scrape
// adds, and "le" of a histogram).
func TestMonitoringUsesRealMetrics(t *testing.T) {
	known := describer{}
	scheduler.NewMetrics(known)
	sender.NewMetrics(known)
	delivery.NewMetrics(known)
	relay.NewMetrics(known)
	ingress.NewMetrics(known)
	escalation.NewMetrics(known)
	newHealth(known, "", slog.New(slog.DiscardHandler))
	newDurabilityWatch(known, slog.New(slog.DiscardHandler))
	newConnMetrics(known)
	known.MustRegister(newBuildInfo())
	require.Contains(t, known, "rocketdelay_handoff_lateness_seconds")

	var exprs []string
	var rules struct {
		Groups []struct {
			Rules []struct {
				Alert string `yaml:"alert"`
				Expr  string `yaml:"expr"`
			} `yaml:"rules"`
		} `yaml:"groups"`
	}
	b, err := os.ReadFile("../deploy/k8s/monitoring/rocketdelay.rules.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &rules))
	for _, g := range rules.Groups {
		for _, r := range g.Rules {
			exprs = append(exprs, r.Expr)
		}
	}
	var dash struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
	}
	b, err = os.ReadFile("../deploy/k8s/monitoring/grafana-dashboard.json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal(b, &dash))
	for _, p := range dash.Panels {
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
	}
	require.Greater(t, len(exprs), 25)

	for _, e := range exprs {
		labels := map[string]bool{"pod": true}
		found := 0
		for _, m := range metricRE.FindAllStringSubmatch(e, -1) {
			name := m[1]
			if _, ok := known[name]; !ok && m[2] != "" {
				name += m[2] // a counter named …_count, not a histogram's series
			}
			metricLabels, ok := known[name]
			require.True(t, ok, "%q uses %s, which rocketdelay does not export", e, m[1]+m[2])
			found++
			for l := range metricLabels {
				labels[l] = true
			}
			if m[2] == "_bucket" {
				labels["le"] = true
			}
			for _, lm := range matcherRE.FindAllStringSubmatch(m[3], -1) {
				require.True(t, metricLabels[lm[1]] || lm[1] == "pod", "%q filters %s by %q, a label it does not have", e, name, lm[1])
			}
		}
		require.Positive(t, found, "%q names no rocketdelay metric", e)
		for _, g := range groupingRE.FindAllStringSubmatch(e, -1) {
			for _, l := range strings.Split(g[1], ",") {
				l = strings.TrimSpace(l)
				require.True(t, l == "" || labels[l], "%q groups by %q, a label none of its metrics has", e, l)
			}
		}
	}
}
