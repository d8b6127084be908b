package platforms_test

import (
	"os/exec"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// Every registered platform describes itself whole: each part of its descriptor is
// there, and the configuration knows it, in the registry's order. A descriptor that
// lacks a part fails Check, part by part.
func TestEveryPlatformIsDescribedWhole(t *testing.T) {
	require.NoError(t, sender.Check(platforms.All))
	require.GreaterOrEqual(t, len(platforms.All), 4, "DingTalk, WeCom, Feishu, Slack at least")
	var kinds []string
	for _, c := range config.ChatChannels() {
		kinds = append(kinds, c.Kind)
	}
	require.Equal(t, platforms.Kinds(), kinds, "config knows every platform, in the registry's order")
	require.Equal(t, append(platforms.Kinds(), config.KindTopic), config.Kinds())
	for _, p := range platforms.All {
		require.Empty(t, p.Missing(), p.Kind())
		got, ok := platforms.Of(p.Kind())
		require.True(t, ok)
		require.Equal(t, p.Kind(), got.Kind())
		require.Equal(t, p.Kind(), p.New("").Kind(), "the protocol says its kind")
	}

	// Every part, taken away, is missed.
	whole := platforms.All[len(platforms.All)-1]
	parts := map[string]func(p *sender.Platform){
		"Config.Kind":       func(p *sender.Platform) { p.Config.Kind = "" },
		"Config.Name":       func(p *sender.Platform) { p.Config.Name = "" },
		"Config.Section":    func(p *sender.Platform) { p.Config.Section = "" },
		"Config.Defaults":   func(p *sender.Platform) { p.Config.Defaults.BaseURL = "" },
		"Config.MaxLimit":   func(p *sender.Platform) { p.Config.MaxLimit = 0 },
		"Config.Credential": func(p *sender.Platform) { p.Config.Credential = nil },
		"Config.MemberID":   func(p *sender.Platform) { p.Config.MemberID = "" },
		"New":               func(p *sender.Platform) { p.New = nil },
		"Failures":          func(p *sender.Platform) { p.Failures.Codes = nil },
		"Template":          func(p *sender.Platform) { p.Template = "" },
		"Escape":            func(p *sender.Platform) { p.Escape = nil },
		"Link":              func(p *sender.Platform) { p.Link = nil },
		"Sim":               func(p *sender.Platform) { p.Sim = nil },
	}
	for part, drop := range parts {
		p := whole
		drop(&p)
		require.Contains(t, p.Missing(), part, "a platform without its %s", part)
		require.Error(t, sender.Check([]sender.Platform{p}), part)
	}
	require.Error(t, sender.Check([]sender.Platform{whole, whole}), "a platform listed twice")
	// The test names every part of the descriptor.
	require.Equal(t, reflect.TypeFor[sender.Platform]().NumField(), 7, "a new part of sender.Platform needs its line above")
}

// Production code never links a simulator: the service's packages (everything but the
// chat-sim command's package app, the simulators and the tooling under internal/) link
// no package of sender/chatsim, and no channel package links it either.
func TestProductionLinksNoSimulator(t *testing.T) {
	out, err := exec.Command("go", "list", "-f", `{{.ImportPath}}: {{join .Deps " "}}`, "github.com/rocketdelay/rocketdelay/...").CombinedOutput()
	require.NoError(t, err, "%s", out)
	checked := 0
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		pkg, deps, _ := strings.Cut(line, ": ")
		rel := strings.TrimPrefix(pkg, "github.com/rocketdelay/rocketdelay")
		switch {
		case rel == "/app", rel == "/cmd/rocketdelay", strings.HasPrefix(rel, "/internal/"), strings.HasSuffix(rel, "/chatsim"),
			strings.HasPrefix(rel, "/deploy/"), strings.HasPrefix(rel, "/timewheel/"):
			continue
		}
		checked++
		for _, d := range strings.Fields(deps) {
			require.False(t, strings.HasSuffix(d, "/chatsim") || strings.HasSuffix(d, "sim"), "%s links the simulator %s", pkg, d)
		}
	}
	require.Greater(t, checked, 15, "the packages were not listed")
}
