package k8s

import (
	"os"
	"os/exec"
	"testing"

	"github.com/stretchr/testify/require"
	"sigs.k8s.io/yaml"
)

// TestAlertRules checks the alerting rules with Prometheus's own promtool (Debian's
// prometheus package, which deploy/local/up installs) and runs their unit tests,
// rules_test.yml: every alert fires on the series that should raise it and stays silent
// before.
func TestAlertRules(t *testing.T) {
	promtool, err := exec.LookPath("promtool")
	require.NoError(t, err, "promtool is missing: deploy/local/up installs it (Debian package prometheus)")
	for _, args := range [][]string{
		{"check", "rules", "rocketdelay.rules.yml"},
		{"test", "rules", "rules_test.yml"},
	} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = "monitoring"
		out, err := cmd.CombinedOutput()
		require.NoError(t, err, "promtool %v:\n%s", args, out)
		require.Contains(t, string(out), "SUCCESS", "promtool %v", args)
	}
}

// TestPrometheusRuleMatchesTheRulesFile: the PrometheusRule for the Operator carries
// exactly the groups of the plain rules file.
func TestPrometheusRuleMatchesTheRulesFile(t *testing.T) {
	var plain struct {
		Groups []any `json:"groups"`
	}
	var cr struct {
		APIVersion string `json:"apiVersion"`
		Kind       string `json:"kind"`
		Spec       struct {
			Groups []any `json:"groups"`
		} `json:"spec"`
	}
	b, err := os.ReadFile("monitoring/rocketdelay.rules.yml")
	require.NoError(t, err)
	require.NoError(t, yaml.UnmarshalStrict(b, &plain))
	b, err = os.ReadFile("monitoring/prometheusrule.yaml")
	require.NoError(t, err)
	require.NoError(t, yaml.Unmarshal(b, &cr))
	require.Equal(t, "monitoring.coreos.com/v1", cr.APIVersion)
	require.Equal(t, "PrometheusRule", cr.Kind)
	require.NotEmpty(t, plain.Groups)
	require.Equal(t, plain.Groups, cr.Spec.Groups)
}
