package ingress

import (
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/slack"
)

// An episode's content is rendered for every robot group its policy pages, escaped for
// each one's platform: a Slack receiver's text (which escapes only &, < and >) paged
// to DingTalk let a label's image and link through as markup.
func TestAnEpisodeIsRenderedForEachPlatformItPages(t *testing.T) {
	cfg := config.Config{Targets: map[string]config.Target{
		"slack-ops": {Kind: slack.Kind, Robots: []config.Robot{{Name: "s", Token: "T1/B1/sh"}}},
		"ops":       {Robots: []config.Robot{{Name: "d", Token: "dt"}}},
	}, Escalations: map[string]config.Policy{"db": {Steps: []config.EscalationStep{{Target: "slack-ops"}, {Target: "ops"}}}}}
	cfg.Ingress.Token = ingestToken
	cfg = cfg.WithDefaults()
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops":       {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "d", Token: "dt"}}},
		"slack-ops": {Protocol: slack.New(""), Robots: []sender.Robot{{Name: "s", Token: "T1/B1/sh"}}},
	}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	in, err := New(cfg, Deps{Chat: chat, Producers: noOwners{}, Logger: testenv.Logger()}, NewMetrics(nil))
	require.NoError(t, err)
	n := notification(t, "firing", "{}:{alertname=\"Disk\"}")
	n.Alerts[0].Labels["instance"] = "![x](https://evil.example/i.png) [login](https://evil.example/phish)"

	texts := in.renderedFor("db", "slack-ops", n)
	require.NotContains(t, texts, "slack-ops", "the receiver's own text is the caller's")
	dingtalkText := texts["ops"]
	require.Contains(t, dingtalkText, "evil.example", "the label is shown")
	require.NotContains(t, dingtalkText, "![x](", "no image")
	require.NotContains(t, dingtalkText, "[login](", "no link")
	receiverText, _, err := in.renderFitting(in.renderers["slack-ops"], "slack-ops", n)
	require.NoError(t, err)
	// What every step was sent before: Slack's text, whose "![x](…)" is no markup on Slack
	// and an image on DingTalk.
	require.Contains(t, receiverText.Text, "![x](https://evil.example/i.png)")
}
