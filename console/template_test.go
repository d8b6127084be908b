package console_test

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/url"
	"strings"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/console"
)

// testRenderer renders a notification's common alertname as the title and its first
// alert's summary as the text; app's renderer (the receiver's templates) has tests of
// its own.
type testRenderer struct{}

func (testRenderer) Targets() []string { return []string{"ops", "wecom-ops"} }

func (testRenderer) Render(target string, notification []byte) (console.Rendered, error) {
	var n struct {
		CommonLabels map[string]string `json:"commonLabels"`
		Alerts       []struct {
			Annotations map[string]string `json:"annotations"`
		} `json:"alerts"`
	}
	if err := json.Unmarshal(notification, &n); err != nil {
		return console.Rendered{}, errors.New("not the JSON of an Alertmanager notification")
	}
	if len(n.Alerts) == 0 {
		return console.Rendered{}, errors.New("template: the notification has no alert")
	}
	title, text := n.CommonLabels["alertname"], n.Alerts[0].Annotations["summary"]
	body, err := json.MarshalIndent(map[string]any{"msgtype": "markdown", "target": target,
		"markdown": map[string]string{"title": title, "text": "### " + title + "\n**" + text + "**"}}, "", "  ")
	if err != nil {
		return console.Rendered{}, err
	}
	return console.Rendered{Title: title, Mentions: "nobody", Text: text, Body: string(body), Kind: "dingtalk"}, nil
}

// The template page renders a pasted notification with the chosen target's template and
// shows the result escaped (a summary with markup is text, not markup); a notification
// that is not one, a template error and an unknown target are each said, with the form
// kept; without the form's CSRF token nothing is rendered.
func TestTemplatePage(t *testing.T) {
	s := newSite(t, token)
	s.login()
	resp, page := s.get("/ui/template?target=wecom-ops")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "<option>ops</option><option selected>wecom-ops</option>")
	csrf := s.csrf(page)

	const notification = `{"version": "4", "commonLabels": {"alertname": "DiskFull"},
		"alerts": [{"status": "firing", "annotations": {"summary": "<script>alert(1)</script> disk 91% full"}}]}`
	resp, page = s.post("/ui/template", url.Values{"csrf": {csrf}, "target": {"wecom-ops"}, "notification": {notification}}, s.srv.URL)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, `<dd id="rendered-title">DiskFull</dd>`)
	require.Contains(t, page, `<pre id="rendered-text">&lt;script&gt;alert(1)&lt;/script&gt; disk 91% full</pre>`)
	require.NotContains(t, page, "<script>")
	require.Contains(t, page, `&#34;target&#34;: &#34;wecom-ops&#34;`, "the body of the chosen target")
	require.Contains(t, page, "<h3>DiskFull</h3>\n<p><strong><!-- raw HTML omitted -->alert(1)<!-- raw HTML omitted --> disk 91% full</strong></p>",
		"the markdown as the chat shows it, raw HTML left out")
	require.Contains(t, page, "&lt;script&gt;alert(1)&lt;/script&gt; disk 91% full&#34;}}]}</textarea>", "the form keeps the notification")

	for _, tc := range []struct {
		target, notification string
		status               int
		says                 string
	}{
		{"wecom-ops", `{"alerts": [`, http.StatusUnprocessableEntity, "not the JSON of an Alertmanager notification"},
		{"ops", `{"alerts": []}`, http.StatusUnprocessableEntity, "template: the notification has no alert"},
		{"orders", notification, http.StatusBadRequest, "Choose one of the targets listed."},
		{"ops", "", http.StatusBadRequest, "Paste the JSON of an Alertmanager notification."},
	} {
		resp, page = s.post("/ui/template", url.Values{"csrf": {csrf}, "target": {tc.target}, "notification": {tc.notification}}, s.srv.URL)
		require.Equal(t, tc.status, resp.StatusCode, tc.says)
		require.Contains(t, page, `<p class="error" id="error">`+tc.says, tc.says)
		require.NotContains(t, page, `id="rendered"`)
	}

	resp, page = s.post("/ui/template", url.Values{"csrf": {strings.Repeat("0", len(csrf))}, "target": {"ops"}, "notification": {notification}}, s.srv.URL)
	require.Equal(t, http.StatusForbidden, resp.StatusCode)
	require.NotContains(t, page, `id="rendered"`)
}

// The template page opens with a sample notification (firing, or resolved) rendered for
// the first target, as the chat shows it beside the JSON the receiver publishes.
func TestTemplatePageOpensWithASample(t *testing.T) {
	s := newSite(t, token)
	s.login()
	resp, page := s.get("/ui/template")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "<option selected>ops</option>")
	require.Contains(t, page, "(shown: the firing sample)")
	require.Contains(t, page, `&#34;status&#34;: &#34;firing&#34;`)
	require.Contains(t, page, `<dd id="rendered-title">DiskFull</dd>`)
	require.Contains(t, page, "<h3>DiskFull</h3>\n<p><strong>Disk /var on db-3 is 97% full</strong></p>")
	require.Regexp(t, `What the receiver publishes \([0-9]+ bytes\)`, page)
	resp, page = s.get("/ui/template?sample=resolved&target=wecom-ops")
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Contains(t, page, "<option selected>wecom-ops</option>")
	require.Contains(t, page, `&#34;status&#34;: &#34;resolved&#34;`)
	require.Contains(t, page, `&#34;endsAt&#34;`)
}
