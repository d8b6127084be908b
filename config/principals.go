package config

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// Principal is a producer of the HTTP ways in: a name, the credential it presents, and
// what that credential allows. Nothing a request says grants more.
type Principal struct {
	// Name identifies it in logs, metrics, inspect and the console, and owns the alerts
	// and escalation episodes it starts. Required, unique; letters, digits, '-', '_', '.'.
	Name string `yaml:"name" json:"name"`
	// Token is its bearer token (Authorization: Bearer …); at least 16 characters,
	// unique, not admin.token. Required; secret.
	Token Secret `yaml:"token" json:"token"`
	// Targets are the targets it may publish to, post Alertmanager notifications for and
	// page through escalations; "*" is every target. Required.
	Targets []string `yaml:"targets" json:"targets"`
	// Rights are what it may do besides publishing: Rights… names them.
	Rights []string `yaml:"rights" json:"rights,omitempty"`
	// RatePerSecond bounds its requests (publish, cancel, reschedule, Alertmanager
	// notifications, escalations), for all replicas together: past it the answer is 429
	// with Retry-After (a publish counts once its body and rights are checked: one
	// refused as malformed or forbidden costs neither Redis nor the broker anything).
	// 0: no bound.
	RatePerSecond float64 `yaml:"ratePerSecond" json:"ratePerSecond,omitempty"`
	// Burst is how many requests may come at once within the rate. Default
	// RatePerSecond rounded up (at least 1).
	Burst int `yaml:"burst" json:"burst,omitempty"`
	// MaxPriority is the highest priority its alerts may have: a request asking more is
	// refused (403), an Alertmanager notification's is lowered to it. Default critical.
	MaxPriority string `yaml:"maxPriority" json:"maxPriority,omitempty"`
	// MaxOpenEpisodes is the most escalation episodes it may have open at once (running
	// or acknowledged, not resolved): one more is refused with 429 until one of its own
	// ends. 0: no bound.
	MaxOpenEpisodes int `yaml:"maxOpenEpisodes" json:"maxOpenEpisodes,omitempty"`
}

// The rights a principal may hold besides publishing to its targets.
const (
	// RightCancel lets it cancel and reschedule the alerts it published.
	RightCancel = "cancel"
	// RightEscalate lets it start escalation episodes on policies that page only its
	// targets (the API, an Alertmanager receiver's ?policy=), and list, show,
	// acknowledge and resolve the episodes it started.
	RightEscalate = "escalate"
	// RightRaw lets it publish a platform's message object as written (body: mentions,
	// @all, any message type) and mention people in text and markdown; without it, a
	// chat alert's text may open no mention.
	RightRaw = "raw"
	// RightOthers lets it act on every principal's alerts and episodes (cancel,
	// reschedule, list, acknowledge, resolve), and on alerts published to the topic
	// directly, which no principal owns.
	RightOthers = "others"
)

// Rights are every right a principal may hold.
var Rights = []string{RightCancel, RightEscalate, RightRaw, RightOthers}

// PrincipalName reports whether name is a principal's name as the configuration takes
// one: letters, digits, '-', '_' and '.', so that a scoped id's principal
// (wire.ScopePrefix) ends at its first ':'.
func PrincipalName(name string) bool {
	return name != "" && strings.Trim(name, "abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789-_.") == ""
}

// LegacyPrincipal is the name of the principal ingress.token stands for: every target,
// every right, no bound.
const LegacyPrincipal = "ingest"

// Can reports whether p holds right.
func (p Principal) Can(right string) bool { return slices.Contains(p.Rights, right) }

// MayTarget reports whether p may publish to target and page it.
func (p Principal) MayTarget(target string) bool {
	return slices.Contains(p.Targets, "*") || slices.Contains(p.Targets, target)
}

// Principals are the producers of the HTTP ways in: ingress.principals, the principals
// of ingress.principalsFile (read as it is now), and ingress.token as the principal
// "ingest" with every right.
func (c Config) Principals() ([]Principal, error) {
	out := slices.Clone(c.Ingress.Principals)
	if c.Ingress.PrincipalsFile != "" {
		more, err := LoadPrincipals(c.Ingress.PrincipalsFile)
		if err != nil {
			return nil, err
		}
		out = append(out, more...)
	}
	if c.Ingress.Token != "" {
		out = append(out, Principal{Name: LegacyPrincipal, Token: c.Ingress.Token, Targets: []string{"*"},
			Rights: slices.Clone(Rights)})
	}
	for i := range out {
		out[i] = out[i].withDefaults()
	}
	return out, nil
}

func (p Principal) withDefaults() Principal {
	if p.MaxPriority == "" {
		p.MaxPriority = PriorityNames[0]
	}
	if p.Burst == 0 && p.RatePerSecond > 0 {
		p.Burst = max(1, int(p.RatePerSecond+0.999))
	}
	return p
}

// principalsFile is the document of ingress.principalsFile.
type principalsFile struct {
	Principals []Principal `yaml:"principals"`
}

// LoadPrincipals reads the principals of a principals file (YAML: "principals: [...]",
// each as in ingress.principals; tokens may be secret references), checked as Validate
// checks ingress.principals. The service reads it again when it changes.
func LoadPrincipals(path string) ([]Principal, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, err
	}
	var doc principalsFile // an empty file is no principals: every one of them revoked
	if err := decodeStrict(data, &doc); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	for i := range doc.Principals {
		tok, err := doc.Principals[i].Token.resolve(os.Getenv, os.ReadFile)
		if err != nil {
			return nil, fmt.Errorf("%s: principals[%d].token: %w", path, i, err)
		}
		doc.Principals[i].Token = tok
	}
	return doc.Principals, nil
}

// ValidatePrincipals checks ingress.principals together with file, the principals of
// the principals file (a reload's), as Validate does: every error names its key.
func (c Config) ValidatePrincipals(file []Principal) error {
	var errs []error
	c.validatePrincipals(func(key, format string, args ...any) {
		errs = append(errs, &FieldError{Key: key, Reason: fmt.Sprintf(format, args...)})
	}, file)
	return errors.Join(errs...)
}

// validatePrincipals checks ingress.principals and file, the principals file's, against
// the targets, the admin token, ingress.token and one another.
func (c Config) validatePrincipals(bad badFunc, file []Principal) {
	ps := append(slices.Clone(c.Ingress.Principals), file...)
	names, tokens := map[string]bool{}, map[string]bool{c.Ingress.Token.Reveal(): true}
	// An operator's token is a console login: a file's principal holding one would sign
	// in as that operator (validateOperators checks it against ingress.principals).
	logins := map[string]bool{}
	for _, o := range c.Admin.Operators {
		logins[o.Token.Reveal()] = true
	}
	n := len(c.Ingress.Principals)
	for i, p := range ps {
		k := fmt.Sprintf("ingress.principals[%d]", i)
		if i >= n {
			k = fmt.Sprintf("ingress.principalsFile %s: principals[%d]", c.Ingress.PrincipalsFile, i-n)
		}
		switch {
		case !PrincipalName(p.Name):
			bad(k+".name", "%q: required, of letters, digits, '-', '_' and '.'", p.Name)
		case names[p.Name] || p.Name == LegacyPrincipal:
			bad(k+".name", "%q is taken (%q is ingress.token's)", p.Name, LegacyPrincipal)
		}
		names[p.Name] = true
		switch tok := p.Token.Reveal(); {
		case len(tok) < MinAdminTokenLen || strings.ContainsAny(tok, " \t\r\n"):
			bad(k+".token", "must be at least %d characters without whitespace", MinAdminTokenLen)
		case tokens[tok] || tok == c.Admin.Token.Reveal() || i >= n && logins[tok]:
			bad(k+".token", "must be a token of its own, not another principal's, ingress.token, admin.token or an operator's")
		}
		tokens[p.Token.Reveal()] = true
		if len(p.Targets) == 0 {
			bad(k+".targets", "required: the targets it may publish to, or \"*\" for every one")
		}
		for _, t := range p.Targets {
			if _, ok := c.Targets[t]; !ok && t != "*" {
				bad(k+".targets", "%q is not a target of the configuration", t)
			}
		}
		for _, r := range p.Rights {
			if !slices.Contains(Rights, r) {
				bad(k+".rights", "%q is not one of %s", r, strings.Join(Rights, ", "))
			}
		}
		if p.MaxOpenEpisodes < 0 {
			bad(k+".maxOpenEpisodes", "must not be negative, got %d", p.MaxOpenEpisodes)
		}
		if !(p.RatePerSecond >= 0) || math.IsInf(p.RatePerSecond, 1) || p.Burst < 0 { // NaN too: it bounded nothing
			bad(k+".ratePerSecond", "ratePerSecond must be a number, not negative and finite, and burst not negative")
		}
		if p.MaxPriority != "" && !slices.Contains(PriorityNames, p.MaxPriority) {
			bad(k+".maxPriority", "%q is not one of %s", p.MaxPriority, strings.Join(PriorityNames, ", "))
		}
	}
}
