package ingress

import (
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/sender/slack"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

var update = flag.Bool("update", false, "rewrite the golden files in testdata")

func sample(t *testing.T, name string) Notification {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	require.NoError(t, err)
	var n Notification
	require.NoError(t, json.Unmarshal(b, &n))
	return n
}

// bodyOf renders n with r and returns the DingTalk message producers would publish.
func bodyOf(t *testing.T, r *renderer, n Notification) dingtalk.Message {
	t.Helper()
	msg, err := r.render(n)
	require.NoError(t, err)
	body, err := dingtalk.New("").Body(msg)
	require.NoError(t, err)
	m, err := dingtalk.ParseBody(body)
	require.NoError(t, err)
	return m
}

func golden(t *testing.T, name string, got string) {
	t.Helper()
	path := filepath.Join("testdata", name+".golden")
	if *update {
		require.NoError(t, os.WriteFile(path, []byte(got), 0o644))
		return
	}
	want, err := os.ReadFile(path)
	require.NoError(t, err, "run `go test ./ingress -run %s -update` to create it", t.Name())
	require.Equal(t, string(want), got)
}

// The built-in template renders a notification as a DingTalk markdown message that the
// sender accepts: firing alerts first, then the resolved ones, with their labels, times
// and links; the mention rules that match a firing alert add their people, named in the
// text as DingTalk requires.
func TestRenderBuiltInTemplate(t *testing.T) {
	r, err := newRenderer("ops", config.KindDingTalk, &config.AlertmanagerTarget{Mentions: []config.Mention{
		{Match: map[string]string{"severity": "critical"}, Mobiles: []string{"13800000000"}},
		{Match: map[string]string{"team": "web"}, AtAll: true},
		{Match: map[string]string{"team": "db"}, UserIDs: []string{"dba-lead"}},
	}})
	require.NoError(t, err)
	n := sample(t, "firing.json")
	m := bodyOf(t, r, n)
	require.Equal(t, dingtalk.TypeMarkdown, m.MsgType)
	require.Equal(t, "[FIRING:1] DiskFull", m.Markdown.Title)
	require.Equal(t, &dingtalk.At{AtMobiles: []string{"13800000000"}, AtUserIDs: []string{"dba-lead"}}, m.At)
	golden(t, "firing.md", m.Markdown.Text)

	n.Status = "resolved"
	for i := range n.Alerts {
		n.Alerts[i].Status = "resolved"
	}
	m = bodyOf(t, r, n)
	require.Equal(t, "[RESOLVED] DiskFull", m.Markdown.Title)
	require.Nil(t, m.At, "a resolution mentions nobody")
	golden(t, "resolved.md", m.Markdown.Text)
}

// A target's own template replaces the built-in definitions; a template that does not
// parse, or a file that is not there, is an error naming the key.
func TestRenderOwnTemplate(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "ops.tmpl")
	require.NoError(t, os.WriteFile(own, []byte(`{{define "dingtalk.title"}}{{.GroupLabels.alertname}} x{{len .Alerts}}{{end}}`+
		`{{define "dingtalk.text"}}{{range .Alerts}}* {{.Labels.instance}} {{.Status}}
{{end}}{{end}}`), 0o600))
	r, err := newRenderer("ops", config.KindDingTalk, &config.AlertmanagerTarget{Template: own})
	require.NoError(t, err)
	m := bodyOf(t, r, sample(t, "firing.json"))
	require.Equal(t, "DiskFull x2", m.Markdown.Title)
	require.Equal(t, "* db-3:9100 firing\n* db-4:9100 resolved", m.Markdown.Text)

	bad := filepath.Join(dir, "bad.tmpl")
	require.NoError(t, os.WriteFile(bad, []byte(`{{define "dingtalk.text"}}{{.Nope`), 0o600))
	_, err = newRenderer("ops", config.KindDingTalk, &config.AlertmanagerTarget{Template: bad})
	require.ErrorContains(t, err, "targets.ops.alertmanager.template")
	_, err = newRenderer("ops", config.KindDingTalk, &config.AlertmanagerTarget{Template: filepath.Join(dir, "missing.tmpl")})
	require.ErrorContains(t, err, "targets.ops.alertmanager.template")
	require.ErrorContains(t, err, "no such file")
}

// A notification whose text is over DingTalk's 20000 bytes still renders: the sender
// splits markdown into numbered parts.
func TestRenderLargeNotification(t *testing.T) {
	r, err := newRenderer("ops", config.KindDingTalk, nil)
	require.NoError(t, err)
	n := sample(t, "firing.json")
	for i := range 300 {
		a := n.Alerts[0]
		a.Labels = KV{"alertname": "DiskFull", "instance": strings.Repeat("x", 40) + string(rune('a'+i%26))}
		n.Alerts = append(n.Alerts, a)
	}
	m := bodyOf(t, r, n)
	require.Greater(t, len(m.Markdown.Text), 20000)
}

// The built-in template of every platform but DingTalk's (the test above) renders the
// same notification in the platform's markup (its golden file, testdata/firing.KIND.md)
// and the platform's channel makes it a body it accepts and reads back; on the ones
// named here, with the mention in the platform's syntax: WeCom markdown (<@userid>), a
// Feishu card (the title as its header, <at id>), Slack mrkdwn text (<@U…>).
func TestRenderBuiltInTemplateOfEveryKind(t *testing.T) {
	mentions := &config.AlertmanagerTarget{Mentions: []config.Mention{
		{Match: map[string]string{"team": "db"}, UserIDs: []string{"dba-lead"}},
	}}
	for _, p := range platforms.All {
		kind := p.Kind()
		if kind == config.KindDingTalk {
			continue
		}
		t.Run(kind, func(t *testing.T) {
			r, err := newRenderer("ops", kind, mentions)
			require.NoError(t, err)
			msg, err := r.render(sample(t, "firing.json"))
			require.NoError(t, err)
			require.Equal(t, "[FIRING:1] DiskFull", msg.Title)
			require.Equal(t, []string{"dba-lead"}, msg.Mentions.Users)
			golden(t, "firing."+kind+".md", msg.Text)
			body, err := p.New("").Body(msg)
			require.NoError(t, err)
			_, err = p.New("").Parse(body)
			require.NoError(t, err, "the platform reads its body back")
			switch kind {
			case wecom.Kind:
				require.Contains(t, string(body), `"msgtype":"markdown"`)
				require.Contains(t, string(body), `<@dba-lead>`)
			case feishu.Kind:
				require.Contains(t, string(body), `"msg_type":"interactive"`)
				require.Contains(t, string(body), `<at id=dba-lead></at>`)
				require.Contains(t, string(body), `"content":"[FIRING:1] DiskFull"`)
				require.NotContains(t, msg.Text, "###", "Feishu's card markdown has no headings")
			case slack.Kind:
				require.Contains(t, string(body), `<@dba-lead>`)
				require.NotContains(t, msg.Text, "**", "Slack's mrkdwn bolds with one star")
			}
		})
	}
}

// Render is the receiver's rendering for a target of the configuration, with its own
// template and mention rules; it refuses a target that is not a robot group, a payload
// that is not a notification, and says where a template fails.
func TestRenderForATarget(t *testing.T) {
	dir := t.TempDir()
	own := filepath.Join(dir, "ops.tmpl")
	require.NoError(t, os.WriteFile(own, []byte(`{{define "dingtalk.title"}}{{.GroupLabels.alertname}} x{{len .Alerts}}{{end}}`+
		`{{define "dingtalk.text"}}{{range .Alerts}}* {{.Labels.instance}}{{end}}{{end}}`), 0o600))
	broken := filepath.Join(dir, "broken.tmpl")
	require.NoError(t, os.WriteFile(broken, []byte(`{{define "dingtalk.title"}}{{(index .Alerts 9).Status}}{{end}}{{define "dingtalk.text"}}x{{end}}`), 0o600))
	mentions := []config.Mention{{Match: map[string]string{"severity": "critical"}, Mobiles: []string{"13800000000"}}}
	cfg := config.Config{Targets: map[string]config.Target{
		"ops":     {Robots: []config.Robot{{Name: "r1", Token: "t1"}}, Alertmanager: &config.AlertmanagerTarget{Mentions: mentions}},
		"own":     {Robots: []config.Robot{{Name: "r1", Token: "t1"}}, Alertmanager: &config.AlertmanagerTarget{Template: own}},
		"broken":  {Robots: []config.Robot{{Name: "r1", Token: "t1"}}, Alertmanager: &config.AlertmanagerTarget{Template: broken}},
		"orders":  {Topic: &config.TopicTarget{Name: "biz"}},
		"feishu1": {Kind: feishu.Kind, Robots: []config.Robot{{Name: "f1", Token: "h1"}}},
	}}
	n := sample(t, "firing.json")

	m, err := Render(cfg, "ops", n)
	require.NoError(t, err)
	r, err := newRenderer("ops", config.KindDingTalk, cfg.Targets["ops"].Alertmanager)
	require.NoError(t, err)
	want, err := r.render(n)
	require.NoError(t, err)
	require.Equal(t, want, m, "the receiver's rendering")
	require.Equal(t, []string{"13800000000"}, m.Mentions.Mobiles)

	m, err = Render(cfg, "own", n)
	require.NoError(t, err)
	require.Equal(t, "DiskFull x2", m.Title)
	m, err = Render(cfg, "feishu1", n)
	require.NoError(t, err)
	require.NotContains(t, m.Text, "###", "Feishu's own built-in template")

	_, err = Render(cfg, "broken", n)
	require.ErrorContains(t, err, `the template of target "broken" failed on this notification: render the title:`)
	_, err = Render(cfg, "orders", n)
	require.EqualError(t, err, `"orders" is a topic target: Alertmanager notifications go to robot groups`)
	_, err = Render(cfg, "opz", n)
	require.EqualError(t, err, `"opz" is not a target of the configuration`)
	n.Version = "3"
	_, err = Render(cfg, "ops", n)
	require.EqualError(t, err, `not an Alertmanager webhook payload of version 4 (version "3", status "firing", groupKey "{}/{severity=\"critical\"}:{alertname=\"DiskFull\"}")`)
}
