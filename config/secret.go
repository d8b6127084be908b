package config

import (
	"crypto/sha256"
	"crypto/subtle"
	"errors"
	"fmt"
	"io/fs"
	"log/slog"
	"slices"
	"sort"
	"strings"
)

// Secret is a string that must never be printed: a DSN with a password, a robot token,
// a signing secret. Every way of printing it (fmt verbs, slog, YAML, JSON, text) yields
// "<secret>"; Reveal returns the value for the one place that needs it.
type Secret string

const redacted = "<secret>"

// Reveal returns the secret's value. Call it only where the value is used, never to log.
func (s Secret) Reveal() string { return string(s) }

// Matches reports whether candidate is the secret, in a time that does not tell how much
// of it matched (both are hashed first, so not even its length). An empty secret matches
// nothing.
func (s Secret) Matches(candidate string) bool {
	if s == "" {
		return false
	}
	want, got := sha256.Sum256([]byte(s)), sha256.Sum256([]byte(candidate))
	return subtle.ConstantTimeCompare(want[:], got[:]) == 1
}

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

// Secret references. A secret written in the file (or an environment override) as
//
//	env:NAME     is replaced by the value of the environment variable NAME;
//	file:/path   is replaced by the content of the file, surrounding whitespace trimmed.
//
// Load resolves them before validating, so the rest of the program sees values only.
// Errors name the key, the variable or the path, never a value.
const (
	secretEnvPrefix  = "env:"
	secretFilePrefix = "file:"
)

// resolve returns the secret a reference points to, or s itself when it is a plain
// value.
func (s Secret) resolve(getenv func(string) string, readFile func(string) ([]byte, error)) (Secret, error) {
	v := string(s)
	switch {
	case strings.HasPrefix(v, secretEnvPrefix):
		name := strings.TrimPrefix(v, secretEnvPrefix)
		if name == "" {
			return "", errors.New(`"env:" needs a variable name`)
		}
		val := getenv(name)
		if val == "" {
			return "", fmt.Errorf("environment variable %s is not set or empty", name)
		}
		return Secret(val), nil
	case strings.HasPrefix(v, secretFilePrefix):
		path := strings.TrimPrefix(v, secretFilePrefix)
		if path == "" {
			return "", errors.New(`"file:" needs a path`)
		}
		b, err := readFile(path)
		if err != nil {
			var pe *fs.PathError
			if errors.As(err, &pe) {
				err = pe.Err // the path is named below; the error adds nothing secret
			}
			return "", fmt.Errorf("read %s: %v", path, err)
		}
		val := strings.TrimSpace(string(b))
		if val == "" {
			return "", fmt.Errorf("file %s is empty", path)
		}
		return Secret(val), nil
	}
	return s, nil
}

// resolveSecrets replaces every secret reference of c (see Secret) by its value.
func (c *Config) resolveSecrets(getenv func(string) string, readFile func(string) ([]byte, error)) error {
	var errs []error
	one := func(key string, s *Secret) {
		if path, ok := strings.CutPrefix(string(*s), secretFilePrefix); ok && path != "" {
			c.files = append(c.files, path)
		}
		v, err := s.resolve(getenv, readFile)
		if err != nil {
			errs = append(errs, &FieldError{Key: key, Reason: err.Error()})
			return
		}
		*s = v
	}
	one("rocketmq.secretKey", &c.RocketMQ.SecretKey)
	one("redis.url", &c.Redis.URL)
	if c.Redis.Sentinel != nil {
		one("redis.sentinel.password", &c.Redis.Sentinel.Password)
		one("redis.sentinel.sentinelPassword", &c.Redis.Sentinel.SentinelPassword)
	}
	if c.Redis.Cluster != nil {
		one("redis.cluster.password", &c.Redis.Cluster.Password)
	}
	one("postgres.url", &c.Postgres.URL)
	one("admin.token", &c.Admin.Token)
	operators := slices.Clone(c.Admin.Operators)
	for i := range operators {
		one(fmt.Sprintf("admin.operators[%d].token", i), &operators[i].Token)
	}
	c.Admin.Operators = operators
	one("ingress.token", &c.Ingress.Token)
	principals := slices.Clone(c.Ingress.Principals)
	for i := range principals {
		one(fmt.Sprintf("ingress.principals[%d].token", i), &principals[i].Token)
	}
	c.Ingress.Principals = principals
	keys := slices.Clone(c.Signing.Keys)
	for i := range keys {
		one(fmt.Sprintf("signing.keys[%d]", i), &keys[i])
	}
	c.Signing.Keys = keys
	names := make([]string, 0, len(c.Targets))
	for name := range c.Targets {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		t := c.Targets[name]
		robots := slices.Clone(t.Robots)
		for i := range robots {
			key := fmt.Sprintf("targets.%s.robots[%d]", name, i)
			one(key+".token", &robots[i].Token)
			one(key+".signingSecret", &robots[i].SigningSecret)
		}
		t.Robots = robots
		c.Targets[name] = t
	}
	return errors.Join(errs...)
}
