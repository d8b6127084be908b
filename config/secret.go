package config

import "log/slog"

// Secret is a string that must never be printed: a DSN with a password, a robot token,
// a signing secret. Every way of printing it (fmt verbs, slog, YAML, JSON, text) yields
// "<secret>"; Reveal returns the value for the one place that needs it.
type Secret string

const redacted = "<secret>"

// Reveal returns the secret's value. Call it only where the value is used, never to log.
func (s Secret) Reveal() string { return string(s) }

// String returns "<secret>" (or "" when the secret is empty).
func (s Secret) String() string {
	if s == "" {
		return ""
	}
	return redacted
}

// GoString keeps %#v from printing the value.
func (s Secret) GoString() string { return s.String() }

// LogValue keeps slog from printing the value.
func (s Secret) LogValue() slog.Value { return slog.StringValue(s.String()) }

// MarshalText prints "<secret>"; it makes YAML and JSON output safe.
func (s Secret) MarshalText() ([]byte, error) { return []byte(s.String()), nil }

// UnmarshalText takes the value as it is.
func (s *Secret) UnmarshalText(b []byte) error {
	*s = Secret(b)
	return nil
}
