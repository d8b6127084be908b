package sender

import (
	"fmt"
	"slices"

	"github.com/rocketdelay/rocketdelay/config"
)

// Platform describes one chat platform to everything outside its package: a channel
// package (sender/dingtalk, sender/wecom, …) exports exactly one, and package
// sender/platforms lists them. Configuration, wiring, the console, the Alertmanager
// templates, the simulator and the benchmarks learn of a platform only from here, so a
// new platform is its own folder plus one line in that list.
type Platform struct {
	// Config is what the configuration knows of it: its kind and name, its settings'
	// section with their defaults and bounds, its credential rule, whether its robots
	// sign and have keywords, and the member id its mentions use. The channel package
	// registers it with config.RegisterChatChannels when it is linked.
	Config config.ChatChannel
	// New returns its protocol, posting to the webhook endpoint baseURL (the
	// configuration's, Config.Defaults.BaseURL when "").
	New func(baseURL string) Protocol
	// Failures is its table from answers to the neutral failure classes (Classify).
	Failures Failures
	// Template is its built-in Alertmanager template (text/template source defining
	// "title" and "text"), which puts every label value through escape, every annotation
	// through escapeText and every URL through link (escape.go).
	Template string
	// Escape makes text safe in its markup: it can open no mention, link, image or tag
	// (EscapeLabel puts it on one line too, so it opens no heading).
	Escape func(string) string
	// Link is text linked to target in its markup; target is a SafeURL, text escaped.
	Link func(text, target string) string
	// Sim are its rules in the chat simulator (package chatsim).
	Sim SimRules
}

// Kind names the platform as a target's kind does.
func (p Platform) Kind() string { return p.Config.Kind }

// Missing names the parts of p that are not there: none for a platform that can be
// listed.
func (p Platform) Missing() []string {
	var out []string
	c := p.Config
	for _, part := range []struct {
		name string
		ok   bool
	}{
		{"Config.Kind", c.Kind != ""}, {"Config.Name", c.Name != ""},
		{"Config.Section", c.Section != "" || c.Kind == config.KindDingTalk},
		{"Config.Defaults", c.Defaults.BaseURL != "" && c.Defaults.Limit > 0 && c.Defaults.Cooldown > 0},
		{"Config.MaxLimit", c.MaxLimit >= c.Defaults.Limit && c.MaxLimit > 0},
		{"Config.MaxPerSecond", c.MaxPerSecond >= c.Defaults.LimitPerSecond},
		{"Config.Credential", c.Credential != nil && c.CredentialName != ""},
		{"Config.MemberID", c.MemberID != ""},
		{"New", p.New != nil}, {"Failures", p.Failures.complete()}, {"Template", p.Template != ""},
		{"Escape", p.Escape != nil}, {"Link", p.Link != nil}, {"Sim", p.Sim != nil},
	} {
		if !part.ok {
			out = append(out, part.name)
		}
	}
	return out
}

// Check reports whether the platforms ps can be listed together: each complete, kinds
// and sections unique.
func Check(ps []Platform) error {
	var kinds, sections []string
	for _, p := range ps {
		if m := p.Missing(); len(m) > 0 {
			return fmt.Errorf("sender: platform %q lacks %v", p.Kind(), m)
		}
		if slices.Contains(kinds, p.Kind()) || (p.Config.Section != "" && slices.Contains(sections, p.Config.Section)) {
			return fmt.Errorf("sender: platform %q is listed twice", p.Kind())
		}
		kinds, sections = append(kinds, p.Kind()), append(sections, p.Config.Section)
	}
	return nil
}
