// Package platforms is the registry of chat platforms: the one list that names them.
// Configuration (through config.RegisterChatChannels, which each platform's package
// calls when linked), the service's wiring, the console, the Alertmanager templates, the
// chat simulator and the benchmarks iterate it; nothing outside a platform's own package
// names a platform otherwise. A new platform is its folder under sender/ and one line
// here.
package platforms

import (
	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/slack"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// All are the chat platforms, in the order they are shown.
var All = []sender.Platform{
	dingtalk.Platform,
	wecom.Platform,
	feishu.Platform,
	slack.Platform,
}

func init() {
	if err := sender.Check(All); err != nil {
		panic(err) // a platform's descriptor is incomplete: a build mistake
	}
	// Each platform's package registered itself when linked, in the order packages are
	// initialised; registered again, they take the registry's order.
	for _, p := range All {
		config.RegisterChatChannels(p.Config)
	}
}

// Of returns the platform of kind.
func Of(kind string) (sender.Platform, bool) {
	for _, p := range All {
		if p.Kind() == kind {
			return p, true
		}
	}
	return sender.Platform{}, false
}

// Kinds returns the platforms' kinds, in order.
func Kinds() []string {
	out := make([]string, len(All))
	for i, p := range All {
		out[i] = p.Kind()
	}
	return out
}
