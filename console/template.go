package console

import (
	"bytes"
	"encoding/json"
	"net/http"
	"slices"
	"strings"
	"time"
)

// Renderer renders an Alertmanager notification with a target's template, as the
// receiver would; app wires it to what `rocketdelay template render` runs, so the page
// and the command agree.
type Renderer interface {
	// Targets are the targets whose template can render a notification: the chat ones.
	Targets() []string
	// Render renders notification, the JSON Alertmanager posts, for target. Its error
	// says what is wrong with the notification, the template or the rendered message.
	Render(target string, notification []byte) (Rendered, error)
}

// Rendered is a notification as a target's template renders it.
type Rendered struct {
	// Title and Text are the message's; Mentions says whom it mentions ("nobody").
	Title, Mentions, Text string
	// Body is the platform's message JSON the receiver would publish, indented; Kind is
	// the target's platform (config.KindDingTalk, …), which reads it.
	Body, Kind string
}

// Samples of the notifications the template page opens with, by ?sample=.
const (
	sampleFiring   = "firing"
	sampleResolved = "resolved"
)

// sampleNotification is a notification as Alertmanager posts it (webhook version 4) of
// two alerts of one group, firing or resolved, to try a target's template on.
func sampleNotification(status string, now time.Time) string {
	ends := time.Time{}
	if status == sampleResolved {
		ends = now.Add(-time.Minute)
	}
	alert := func(instance, summary string) map[string]any {
		a := map[string]any{"status": status,
			"labels":      map[string]string{"alertname": "DiskFull", "severity": "critical", "instance": instance},
			"annotations": map[string]string{"summary": summary, "runbook_url": "https://runbooks.example.com/disk-full"},
			"startsAt":    now.Add(-10 * time.Minute).UTC().Format(time.RFC3339), "generatorURL": "http://prometheus.example.com/graph?g0.expr=disk"}
		if !ends.IsZero() {
			a["endsAt"] = ends.UTC().Format(time.RFC3339)
		}
		return a
	}
	n := map[string]any{"version": "4", "groupKey": `{}:{alertname="DiskFull"}`, "status": status, "receiver": "rocketdelay",
		"groupLabels": map[string]string{"alertname": "DiskFull"}, "commonLabels": map[string]string{"alertname": "DiskFull", "severity": "critical"},
		"commonAnnotations": map[string]string{}, "externalURL": "http://alertmanager.example.com",
		"alerts": []any{alert("db-3:9100", "Disk /var on db-3 is 97% full"), alert("db-4:9100", "Disk /var on db-4 is 95% full")}}
	b, _ := json.MarshalIndent(n, "", "  ") // maps of strings: cannot fail
	return string(b)
}

// templatePage renders a notification with a target's template: a GET opens with a
// sample (?sample=firing or resolved) rendered for the target ?target= (or the first),
// a POST renders the pasted one (rendering changes nothing, but a notification may be
// larger than a URL carries). The result is shown as the chat would show it (markdown
// rendered, without raw HTML) beside the platform's JSON, with whom it mentions; what
// the platform would refuse is said instead.
func (c *Console) templatePage(w http.ResponseWriter, r *http.Request) {
	data := map[string]any{}
	if c.renderer == nil {
		c.fail(w, r, http.StatusNotFound, "This replica renders no templates: it has no chat target.")
		return
	}
	targets := c.renderer.Targets()
	data["Targets"] = targets
	target := r.URL.Query().Get("target")
	notification := ""
	if r.Method != http.MethodPost {
		// A GET opens with a sample notification, rendered for the chosen (or first) target.
		sample := sampleFiring
		if r.URL.Query().Get("sample") == sampleResolved {
			sample = sampleResolved
		}
		if !slices.Contains(targets, target) && len(targets) > 0 {
			target = targets[0]
		}
		data["Sample"], notification = sample, sampleNotification(sample, c.now())
	} else {
		target, notification = r.PostForm.Get("target"), r.PostForm.Get("notification")
	}
	data["Target"], data["Notification"] = target, notification
	status := http.StatusOK
	switch {
	case !slices.Contains(targets, target):
		status, data["Error"] = http.StatusBadRequest, "Choose one of the targets listed."
	case notification == "":
		status, data["Error"] = http.StatusBadRequest, "Paste the JSON of an Alertmanager notification."
	default:
		out, err := c.renderer.Render(target, []byte(notification))
		if err != nil {
			status, data["Error"] = http.StatusUnprocessableEntity, err.Error()
		} else {
			data["Rendered"] = out
			data["Shown"] = renderBody([]byte(out.Body), out.Kind) // as the chat shows it
			var compact bytes.Buffer
			if json.Compact(&compact, []byte(out.Body)) == nil {
				data["Size"] = compact.Len() // the bytes the receiver publishes
			}
			data["MentionsAll"] = strings.Contains(out.Mentions, "everyone")
		}
	}
	c.render(w, r, status, "template", data)
}
