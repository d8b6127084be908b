package config_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	. "github.com/rocketdelay/rocketdelay/config"
)

// principalsConfig is a configuration with two targets and the principals ps.
func principalsConfig(ps ...Principal) Config {
	c := Config{Targets: map[string]Target{"ops": {Robots: []Robot{{Name: "r", Token: "t"}}}, "billing": {Robots: []Robot{{Name: "r", Token: "t"}}}}}
	c.Ingress.Principals = ps
	c.Admin.Token = "admin-token-0123456789"
	c.Ingress.Token = "ingest-token-0123456789"
	return c.WithDefaults()
}

// Every principal is checked: a name of its own, a token of its own, known targets,
// known rights, a known priority; each error names the principal's key.
func TestPrincipalsAreValidated(t *testing.T) {
	good := Principal{Name: "billing-app", Token: "billing-token-0123456789", Targets: []string{"billing"}, Rights: []string{RightCancel}}
	require.NoError(t, principalsConfig(good).ValidatePrincipals(nil))

	for _, tc := range []struct {
		change func(p *Principal)
		key    string
		says   string
	}{
		{func(p *Principal) { p.Name = "" }, "ingress.principals[1].name", "required"},
		{func(p *Principal) { p.Name = "bad name" }, "ingress.principals[1].name", "letters, digits"},
		{func(p *Principal) { p.Name = good.Name }, "ingress.principals[1].name", "taken"},
		{func(p *Principal) { p.Name = LegacyPrincipal }, "ingress.principals[1].name", "taken"},
		{func(p *Principal) { p.Token = "short" }, "ingress.principals[1].token", "at least 16"},
		{func(p *Principal) { p.Token = good.Token }, "ingress.principals[1].token", "of its own"},
		{func(p *Principal) { p.Token = "ingest-token-0123456789" }, "ingress.principals[1].token", "of its own"},
		{func(p *Principal) { p.Token = "admin-token-0123456789" }, "ingress.principals[1].token", "of its own"},
		{func(p *Principal) { p.Targets = nil }, "ingress.principals[1].targets", "required"},
		{func(p *Principal) { p.Targets = []string{"opz"} }, "ingress.principals[1].targets", `"opz" is not a target`},
		{func(p *Principal) { p.Rights = []string{"admin"} }, "ingress.principals[1].rights", `"admin" is not one of cancel, escalate, raw, others`},
		{func(p *Principal) { p.MaxPriority = "urgent" }, "ingress.principals[1].maxPriority", `"urgent"`},
		{func(p *Principal) { p.RatePerSecond = -1 }, "ingress.principals[1].ratePerSecond", "negative"},
	} {
		other := Principal{Name: "other", Token: "other-token-0123456789", Targets: []string{"*"}}
		tc.change(&other)
		err := principalsConfig(good, other).ValidatePrincipals(nil)
		require.ErrorContains(t, err, "config: "+tc.key+": ", tc.key)
		require.ErrorContains(t, err, tc.says, tc.key)
		require.NotContains(t, err.Error(), "0123456789", "no token in an error")
	}
}

// ingress.token stands for the principal "ingest" with every right on every target; the
// defaults fill in a principal's highest priority and its burst.
func TestPrincipalsOfAConfiguration(t *testing.T) {
	c := principalsConfig(Principal{Name: "app", Token: "app-token-0123456789", Targets: []string{"ops"}, RatePerSecond: 2.5})
	ps, err := c.Principals()
	require.NoError(t, err)
	require.Len(t, ps, 2)
	require.Equal(t, "critical", ps[0].MaxPriority)
	require.Equal(t, 3, ps[0].Burst, "the rate rounded up")
	require.True(t, ps[0].MayTarget("ops"))
	require.False(t, ps[0].MayTarget("billing"))
	require.False(t, ps[0].Can(RightCancel))
	legacy := ps[1]
	require.Equal(t, LegacyPrincipal, legacy.Name)
	require.True(t, legacy.MayTarget("billing"))
	for _, r := range Rights {
		require.True(t, legacy.Can(r), r)
	}
	require.Zero(t, legacy.RatePerSecond)
}

// A principals file holds more principals (tokens may be secret references); an
// invalid one is an error naming the file, and Validate checks its principals with the
// configuration's.
func TestPrincipalsFile(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "principals.yaml")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "tok"), []byte("file-token-0123456789\n"), 0o600))
	require.NoError(t, os.WriteFile(file, []byte(`principals:
  - {name: from-file, token: "file:`+filepath.Join(dir, "tok")+`", targets: [ops], rights: [escalate]}
`), 0o600))
	c := principalsConfig()
	c.Ingress.PrincipalsFile = file
	loaded, err := LoadPrincipals(file)
	require.NoError(t, err)
	require.NoError(t, c.ValidatePrincipals(loaded))
	ps, err := c.Principals()
	require.NoError(t, err)
	require.Equal(t, "from-file", ps[0].Name)
	require.Equal(t, "file-token-0123456789", ps[0].Token.Reveal())

	require.NoError(t, os.WriteFile(file, []byte("principals:\n  - {name: x, tokn: y}\n"), 0o600))
	_, err = LoadPrincipals(file)
	require.ErrorContains(t, err, file)
	require.ErrorContains(t, err, "tokn")
	require.NoError(t, os.WriteFile(file, []byte("principals:\n  - {name: x, token: ingest-token-0123456789, targets: [ops]}\n"), 0o600))
	err = c.Validate() // the file's principals with the configuration's
	require.ErrorContains(t, err, "ingress.principalsFile "+file+": principals[0].token")
	require.False(t, strings.Contains(err.Error(), "ingest-token"), "no token in an error")
}
