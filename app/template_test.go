package app

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
)

// `template render` prints what the receiver renders for a notification: the title,
// the mentions and the text of the built-in template (the receiver's golden rendering
// in ingress/testdata), and with -o json the platform body it publishes; a target's
// own template, stdin, and the mistakes a user makes, each said as such.
func TestTemplateRender(t *testing.T) {
	golden, err := os.ReadFile("../ingress/testdata/firing.md.golden")
	require.NoError(t, err)
	notification, err := filepath.Abs("../ingress/testdata/firing.json")
	require.NoError(t, err)
	dir := t.TempDir()
	own := filepath.Join(dir, "short.tmpl")
	require.NoError(t, os.WriteFile(own, []byte(`{{define "wecom.title"}}{{.CommonLabels.alertname}}{{end}}`+
		`{{define "wecom.text"}}{{len .Alerts.Firing}} firing on {{.CommonLabels.team}}{{end}}`), 0o600))
	file := filepath.Join(dir, "rd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`targets:
  ops:
    robots: [{name: r1, token: t1}]
    alertmanager:
      mentions:
        - {match: {severity: critical}, mobiles: ["13800000000"]}
        - {match: {team: db}, userIds: [dba-lead]}
  chat-eu:
    kind: wecom
    robots: [{name: w1, token: k1}]
    alertmanager: {template: `+own+`}
  orders: {topic: {name: biz}}
`), 0o600))

	out, _, err := run(t, nil, "template", "render", "-f", file, "--target", "ops", "--notification", notification)
	require.NoError(t, err)
	text, found := strings.CutSuffix(string(golden), "\n\n@13800000000 @dba-lead")
	require.True(t, found, "DingTalk's body names the people it mentions at the end of the text")
	require.Equal(t, "title: [FIRING:1] DiskFull\nmentions: dba-lead, 13800000000\ntext:\n"+text+"\n", out)

	out, _, err = run(t, nil, "template", "render", "-f", file, "--target", "ops", "--notification", notification, "-o", "json")
	require.NoError(t, err)
	var body struct {
		MsgType  string `json:"msgtype"`
		Markdown struct {
			Title string `json:"title"`
			Text  string `json:"text"`
		} `json:"markdown"`
		At struct {
			AtMobiles []string `json:"atMobiles"`
			AtUserIDs []string `json:"atUserIds"`
		} `json:"at"`
	}
	require.NoError(t, json.Unmarshal([]byte(out), &body))
	require.Equal(t, "markdown", body.MsgType)
	require.Equal(t, "[FIRING:1] DiskFull", body.Markdown.Title)
	require.Equal(t, string(golden), body.Markdown.Text)
	require.Equal(t, []string{"13800000000"}, body.At.AtMobiles)
	require.Equal(t, []string{"dba-lead"}, body.At.AtUserIDs)

	stdin, err := os.ReadFile(notification)
	require.NoError(t, err)
	var o, e strings.Builder
	err = Run(t.Context(), []string{"template", "render", "-f", file, "--target", "chat-eu", "--notification", "-", "-o", "json"},
		IO{Stdin: strings.NewReader(string(stdin)), Stdout: &o, Stderr: &e, Getenv: func(string) string { return "" }})
	require.NoError(t, err)
	require.JSONEq(t, `{"msgtype": "markdown", "markdown": {"content": "1 firing on db"}}`, o.String(),
		"the target's own template, in WeCom's body (a markdown message without its title)")

	for _, tc := range []struct {
		args  []string
		usage bool
		want  string
	}{
		{[]string{"--target", "opz", "--notification", notification}, true, `--target "opz" is not a target of this configuration (known: chat-eu, ops, orders)`},
		{[]string{"--target", "ops"}, true, "give --target NAME and --notification FILE"},
		{[]string{"--target", "ops", "--notification", filepath.Join(dir, "none.json")}, true, "none.json"},
		{[]string{"--target", "orders", "--notification", notification}, false, `"orders" is a topic target: Alertmanager notifications go to robot groups`},
		{[]string{"--target", "ops", "--notification", file}, false, "not the JSON of an Alertmanager notification"},
	} {
		_, _, err := run(t, nil, append([]string{"template", "render", "-f", file}, tc.args...)...)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
		require.Equal(t, tc.usage, ExitCode(err) == ExitUsage, "%v: %v", tc.args, err)
	}
	empty := filepath.Join(dir, "empty.json")
	require.NoError(t, os.WriteFile(empty, []byte(`{"version": "3"}`), 0o600))
	_, _, err = run(t, nil, "template", "render", "-f", file, "--target", "ops", "--notification", empty)
	require.ErrorContains(t, err, `not an Alertmanager webhook payload of version 4 (version "3"`)
}

// The console's template page renders through the same renderer as `template render`:
// the chat targets only, the built-in template's title, and a pasted text that is not a
// notification said as such.
func TestRendererOfTheConsole(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`targets:
  ops: {robots: [{name: r1, token: t1}]}
  chat-eu: {kind: wecom, robots: [{name: w1, token: k1}]}
  orders: {topic: {name: biz}}
`), 0o600))
	cfg, err := config.Load(file, func(string) string { return "" }, config.SectionLog, config.SectionTargets, config.SectionSender)
	require.NoError(t, err)
	r, err := newRenderer(cfg)
	require.NoError(t, err)
	require.Equal(t, []string{"chat-eu", "ops"}, r.Targets())
	notification, err := os.ReadFile("../ingress/testdata/firing.json")
	require.NoError(t, err)
	out, err := r.Render("chat-eu", notification)
	require.NoError(t, err)
	require.Equal(t, "[FIRING:1] DiskFull", out.Title)
	require.Contains(t, out.Body, `"msgtype": "markdown"`)
	_, err = r.Render("chat-eu", []byte("firing"))
	require.ErrorContains(t, err, "not the JSON of an Alertmanager notification")
}
