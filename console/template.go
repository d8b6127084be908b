package console

import (
	"net/http"
	"slices"
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
	// Body is the platform's message JSON the receiver would publish, indented.
	Body string
}

// templatePage shows the form that renders a notification with a target's template
// (GET), and its result (POST: rendering changes nothing, but the notification may be
// larger than a URL carries).
func (c *Console) templatePage(w http.ResponseWriter, r *http.Request) {
	data := map[string]any{}
	if c.renderer == nil {
		c.fail(w, r, http.StatusNotFound, "This replica renders no templates: it has no chat target.")
		return
	}
	targets := c.renderer.Targets()
	data["Targets"] = targets
	target := r.URL.Query().Get("target")
	if r.Method != http.MethodPost {
		data["Target"] = target
		c.render(w, r, http.StatusOK, "template", data)
		return
	}
	target = r.PostForm.Get("target")
	notification := r.PostForm.Get("notification")
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
		}
	}
	c.render(w, r, status, "template", data)
}
