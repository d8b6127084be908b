package ingress

import (
	"bytes"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// Notification is Alertmanager's webhook payload (version 4), the data of a template.
type Notification struct {
	Version           string `json:"version"`
	GroupKey          string `json:"groupKey"`
	TruncatedAlerts   int    `json:"truncatedAlerts"`
	Status            string `json:"status"` // firing or resolved
	Receiver          string `json:"receiver"`
	GroupLabels       KV     `json:"groupLabels"`
	CommonLabels      KV     `json:"commonLabels"`
	CommonAnnotations KV     `json:"commonAnnotations"`
	ExternalURL       string `json:"externalURL"`
	Alerts            Alerts `json:"alerts"`
}

// Check reports whether n is an Alertmanager webhook payload of version 4, as the
// receiver takes it: its error says what is not.
func (n Notification) Check() error {
	if n.Version != "4" || (n.Status != "firing" && n.Status != "resolved") || n.GroupKey == "" {
		return fmt.Errorf("not an Alertmanager webhook payload of version 4 (version %q, status %q, groupKey %q)", n.Version, n.Status, n.GroupKey)
	}
	return nil
}

// Render renders notification n for the robot group target of cfg exactly as the
// Alertmanager receiver does: with the target's template (targets.NAME.alertmanager,
// or its platform's built-in one) and its mention rules. The target's platform turns
// the message into the body published (sender.Chat.Body). Its error says which
// target is unknown or not a robot group, which notification is not one, or where the
// template failed.
func Render(cfg config.Config, target string, n Notification) (sender.Message, error) {
	t, ok := cfg.Targets[target]
	switch {
	case !ok:
		return sender.Message{}, fmt.Errorf("%q is not a target of the configuration", target)
	case !t.Chat():
		return sender.Message{}, fmt.Errorf("%q is a %s target: Alertmanager notifications go to robot groups", target, t.Channel())
	}
	if err := n.Check(); err != nil {
		return sender.Message{}, err
	}
	r, err := newRenderer(target, t.Channel(), t.Alertmanager)
	if err != nil {
		return sender.Message{}, err
	}
	m, err := r.render(n)
	if err != nil {
		return sender.Message{}, fmt.Errorf("the template of target %q failed on this notification: %w", target, err)
	}
	return m, nil
}

// KV are labels or annotations.
type KV map[string]string

// Alert is one alert of a notification.
type Alert struct {
	Status       string    `json:"status"`
	Labels       KV        `json:"labels"`
	Annotations  KV        `json:"annotations"`
	StartsAt     time.Time `json:"startsAt"`
	EndsAt       time.Time `json:"endsAt"`
	GeneratorURL string    `json:"generatorURL"`
	Fingerprint  string    `json:"fingerprint"`
}

// Alerts are a notification's alerts.
type Alerts []Alert

// Firing returns the alerts that are firing.
func (as Alerts) Firing() Alerts { return as.with("firing") }

// Resolved returns the alerts that are resolved.
func (as Alerts) Resolved() Alerts { return as.with("resolved") }

func (as Alerts) with(status string) Alerts {
	out := Alerts{}
	for _, a := range as {
		if a.Status == status {
			out = append(out, a)
		}
	}
	return out
}

// renderer renders notifications for one robot group: its template and mentions.
type renderer struct {
	tmpl        *template.Template
	title, text string // the names of the templates that render them
	mentions    []config.Mention
}

// funcs are the functions templates may call, besides text/template's own and the
// platform's escape, escapeText and link (newRenderer).
var funcs = template.FuncMap{
	"toUpper": strings.ToUpper,
	"toLower": strings.ToLower,
	"join":    func(sep string, s []string) string { return strings.Join(s, sep) },
	// sortedPairs turns labels into "name=value" strings, sorted by name.
	"sortedPairs": func(kv KV) []string {
		out := make([]string, 0, len(kv))
		for _, k := range slices.Sorted(maps.Keys(kv)) {
			out = append(out, k+"="+kv[k])
		}
		return out
	},
	// default returns v, or def when v is empty.
	"default": func(def, v any) any {
		if s, ok := v.(string); ok && s == "" || v == nil {
			return def
		}
		return v
	},
	// date formats t with a Go layout, in UTC.
	"date": func(layout string, t time.Time) string { return t.UTC().Format(layout) },
}

// newRenderer parses the built-in template of the platform kind (its Platform's
// Template) and, when t names one, the target's own file on top of it (its definitions
// replace the built-in ones). The title and text are the templates "title" and "text",
// or "KIND.title" and "KIND.text" when the target's file defines those. Both may call
// the platform's escaping (sender/escape.go): escape for a label value, escapeText for
// annotation text (links to http(s) pages kept), link TEXT URL for a URL.
func newRenderer(target, kind string, t *config.AlertmanagerTarget) (*renderer, error) {
	p, ok := platforms.Of(kind)
	if !ok {
		return nil, fmt.Errorf("targets.%s: %q is not a chat platform", target, kind)
	}
	base, err := template.New(kind).Funcs(funcs).Funcs(template.FuncMap{"escape": p.EscapeLabel, "escapeText": p.EscapeText, "link": p.LinkTo}).Option("missingkey=zero").Parse(p.Template)
	if err != nil {
		return nil, fmt.Errorf("ingress: the built-in template of %s: %w", kind, err) // a build mistake
	}
	r := &renderer{tmpl: base, title: "title", text: "text"}
	if t == nil {
		return r, nil
	}
	r.mentions = t.Mentions
	if t.Template != "" {
		src, err := os.ReadFile(t.Template)
		if err != nil {
			return nil, fmt.Errorf("targets.%s.alertmanager.template: %w", target, err)
		}
		if r.tmpl, err = base.New(t.Template).Parse(string(src)); err != nil {
			return nil, fmt.Errorf("targets.%s.alertmanager.template: %w", target, err)
		}
		if r.tmpl.Lookup(kind+".title") != nil && r.tmpl.Lookup(kind+".text") != nil {
			r.title, r.text = kind+".title", kind+".text"
		}
	}
	return r, nil
}

// render returns the markdown message for n, with the mentions of a firing
// notification; the target's platform makes it the body producers publish.
func (r *renderer) render(n Notification) (sender.Message, error) {
	var title, text bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&title, r.title, n); err != nil {
		return sender.Message{}, fmt.Errorf("render the title: %w", err)
	}
	if err := r.tmpl.ExecuteTemplate(&text, r.text, n); err != nil {
		return sender.Message{}, fmt.Errorf("render the text: %w", err)
	}
	m := sender.Message{Format: sender.FormatMarkdown, Title: strings.TrimSpace(title.String()), Text: strings.TrimSpace(text.String())}
	if n.Status == "firing" {
		m.Mentions = r.mentionsOf(n.Alerts.Firing())
	}
	if m.Title == "" {
		m.Title = "alert"
	}
	return m, nil
}

// mentionsOf returns whom the mention rules name for alerts.
func (r *renderer) mentionsOf(alerts Alerts) sender.Mentions {
	var out sender.Mentions
	for _, rule := range r.mentions {
		if !slices.ContainsFunc(alerts, func(a Alert) bool { return matches(rule.Match, a.Labels) }) {
			continue
		}
		out = out.Add(sender.Mentions{All: rule.AtAll, Users: rule.UserIDs, Mobiles: rule.Mobiles})
	}
	return out
}

// matches reports whether labels carry every label of match.
func matches(match map[string]string, labels KV) bool {
	for k, v := range match {
		if labels[k] != v {
			return false
		}
	}
	return true
}
