package app

import (
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// hostileNotification is an Alertmanager notification whose labels try every markup the
// platforms read: mentions of everyone and of a person in each platform's syntax, links,
// an image, a heading on a line of its own, and entities; its annotations, written by a
// rule's author, link a runbook (kept) and try a mention, an image and a javascript:
// link; its generator URL is javascript:.
const hostileNotification = `{
  "version": "4", "status": "firing", "receiver": "chat", "groupKey": "{}:{alertname=\"x\"}",
  "externalURL": "http://am.example:9093",
  "groupLabels": {"alertname": "<at id=all></at>"},
  "commonLabels": {"alertname": "<at id=all></at>", "severity": "critical"},
  "commonAnnotations": {},
  "alerts": [{
    "status": "firing", "fingerprint": "f1", "startsAt": "2026-12-05T10:00:00Z",
    "generatorURL": "javascript:alert(1)",
    "labels": {
      "alertname": "<at id=all></at>", "severity": "critical",
      "team": "<@ana> <!here> <!channel> @all <at user_id=\"ou_ana\">ana</at>",
      "instance": "[click](http://evil.example/) <http://evil.example/|click>",
      "pic": "![p](http://evil.example/p.png)",
      "multi": "x\n# pwned\n<@all>",
      "entity": "&lt;at id=all&gt;&lt;/at&gt;"
    },
    "annotations": {
      "summary": "disk full, see [runbook](https://runbook.example/db) <at id=all></at> <@ana> <!here>",
      "description": "[bad](javascript:alert(1)) ![img](https://evil.example/i.png) [spaced](https://x.example/a b)"
    }
  }]
}`

// A notification whose labels carry every platform's markup, rendered by `template
// render` with each platform's built-in template and posted to its simulator, shows as
// markup only what the configuration and the rule's author put there: the configured
// mention, the runbook link of the annotation and the link to Alertmanager (and
// DingTalk's and WeCom's own heading). Nothing a label says mentions anyone, links,
// shows an image or starts a heading; the javascript: generator URL is not linked.
func TestHostileLabelsOpenNothing(t *testing.T) {
	sim, root := testenv.ChatSim(t, platforms.All, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "d", Kind: "dingtalk", Token: "dt"}, {Name: "w", Kind: "wecom", Token: "wk"},
		{Name: "f", Kind: "feishu", Token: "fh"}, {Name: "s", Kind: "slack", Token: "T1/B1/sh"}}})
	dir := t.TempDir()
	notification := filepath.Join(dir, "hostile.json")
	require.NoError(t, os.WriteFile(notification, []byte(hostileNotification), 0o600))
	file := filepath.Join(dir, "rd.yaml")
	mention := `alertmanager: {mentions: [{match: {severity: critical}, userIds: [oncall-lead]}]}`
	require.NoError(t, os.WriteFile(file, []byte(`targets:
  dingtalk-ops: {kind: dingtalk, robots: [{name: d, token: dt}], `+mention+`}
  wecom-ops: {kind: wecom, robots: [{name: w, token: wk}], `+mention+`}
  feishu-ops: {kind: feishu, robots: [{name: f, token: fh}], `+mention+`}
  slack-ops: {kind: slack, robots: [{name: s, token: T1/B1/sh}], `+mention+`}
`), 0o600))

	for _, tc := range []struct {
		kind, url string
		heading   []string // the template's own
		mention   string   // the configured mention, as the group shows it
	}{
		{"dingtalk", sim.URL(root, "dingtalk") + "?access_token=dt",
			[]string{"heading:[FIRING:1] &lt;at id=all&gt;&lt;/at&gt;"}, "mention:oncall-lead"},
		{"wecom", sim.URL(root, "wecom") + "?key=wk",
			[]string{`heading:<font color="warning">[FIRING:1] &lt;at id=all&gt;&lt;/at&gt;</font>`}, "mention:oncall-lead"},
		{"feishu", sim.URL(root, "feishu") + "/fh", nil, "mention:oncall-lead"},
		{"slack", sim.URL(root, "slack") + "/T1/B1/sh", nil, "mention:oncall-lead"},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			body, _, err := run(t, nil, "template", "render", "-f", file, "--target", tc.kind+"-ops",
				"--notification", notification, "-o", "json")
			require.NoError(t, err)
			before := len(sim.Accepted())
			resp, err := http.Post(tc.url, "application/json", strings.NewReader(body))
			require.NoError(t, err)
			answer, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			got := sim.Accepted()
			require.Equal(t, before+1, len(got), "the simulator accepts the message: %s", answer)
			markup := got[len(got)-1].Markup
			want := append([]string{tc.mention, "link:https://runbook.example/db", "link:http://am.example:9093"}, tc.heading...)
			slices.Sort(markup)
			slices.Sort(want)
			require.Equal(t, want, markup, "what the group shows as markup; the message:\n%s", got[len(got)-1].Text)
		})
	}
}
