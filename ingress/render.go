package ingress

import (
	"bytes"
	"embed"
	"encoding/json"
	"fmt"
	"maps"
	"os"
	"slices"
	"strings"
	"text/template"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
)

//go:embed templates/default.tmpl
var templates embed.FS

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
	tmpl     *template.Template
	mentions []config.Mention
}

// funcs are the functions templates may call, besides text/template's own.
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

// newRenderer parses the built-in template and, when t names one, the target's own file
// on top of it (its definitions replace the built-in ones).
func newRenderer(target string, t *config.AlertmanagerTarget) (*renderer, error) {
	base, err := template.New("default.tmpl").Funcs(funcs).Option("missingkey=zero").ParseFS(templates, "templates/default.tmpl")
	if err != nil {
		return nil, fmt.Errorf("ingress: the built-in template: %w", err) // a build mistake
	}
	r := &renderer{tmpl: base}
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
	}
	return r, nil
}

// render returns the DingTalk markdown message (as producers publish it) for n, with the
// mentions of a firing notification.
func (r *renderer) render(n Notification) ([]byte, error) {
	var title, text bytes.Buffer
	if err := r.tmpl.ExecuteTemplate(&title, "dingtalk.title", n); err != nil {
		return nil, fmt.Errorf("render the title: %w", err)
	}
	if err := r.tmpl.ExecuteTemplate(&text, "dingtalk.text", n); err != nil {
		return nil, fmt.Errorf("render the text: %w", err)
	}
	m := sender.Message{MsgType: sender.TypeMarkdown, Markdown: &sender.Markdown{
		Title: strings.TrimSpace(title.String()), Text: strings.TrimSpace(text.String())}}
	if n.Status == "firing" {
		m.At = r.at(n.Alerts.Firing())
		if m.At != nil {
			// DingTalk mentions a person in markdown only when the text names them too.
			var named []string
			for _, id := range slices.Concat(m.At.AtMobiles, m.At.AtUserIDs) {
				if !strings.Contains(m.Markdown.Text, "@"+id) {
					named = append(named, "@"+id)
				}
			}
			if len(named) > 0 {
				m.Markdown.Text += "\n\n" + strings.Join(named, " ")
			}
		}
	}
	if m.Markdown.Title == "" {
		m.Markdown.Title = "alert"
	}
	return json.Marshal(m)
}

// at returns whom the mention rules name for alerts, nil for nobody.
func (r *renderer) at(alerts Alerts) *sender.At {
	var at sender.At
	for _, rule := range r.mentions {
		if !slices.ContainsFunc(alerts, func(a Alert) bool { return matches(rule.Match, a.Labels) }) {
			continue
		}
		at.IsAtAll = at.IsAtAll || rule.AtAll
		for _, m := range rule.Mobiles {
			if !slices.Contains(at.AtMobiles, m) {
				at.AtMobiles = append(at.AtMobiles, m)
			}
		}
		for _, u := range rule.UserIDs {
			if !slices.Contains(at.AtUserIDs, u) {
				at.AtUserIDs = append(at.AtUserIDs, u)
			}
		}
	}
	if !at.IsAtAll && len(at.AtMobiles) == 0 && len(at.AtUserIDs) == 0 {
		return nil
	}
	return &at
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
