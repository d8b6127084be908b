package config

import (
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DelayLevels are the broker's delay levels in order; level i+1 (RocketMQ's DELAY=i+1)
// waits DelayLevels[i].
type DelayLevels []time.Duration

// ParseDelayLevels parses the broker's `messageDelayLevel` syntax: whole numbers with a
// unit s, m, h or d, separated by single spaces, strictly increasing.
func ParseDelayLevels(s string) (DelayLevels, error) {
	if s == "" {
		return nil, errors.New("empty level list")
	}
	fields := strings.Split(s, " ")
	levels := make(DelayLevels, 0, len(fields))
	for i, f := range fields {
		if f == "" {
			return nil, fmt.Errorf("levels must be separated by single spaces (as the broker requires): %q", s)
		}
		unit := map[byte]time.Duration{'s': time.Second, 'm': time.Minute, 'h': time.Hour, 'd': 24 * time.Hour}[f[len(f)-1]]
		n, err := strconv.Atoi(f[:len(f)-1])
		if unit == 0 || err != nil || n <= 0 || f[0] == '+' {
			return nil, fmt.Errorf("level %d %q: want a positive whole number followed by s, m, h or d", i+1, f)
		}
		if int64(n) > int64(maxLevel/unit) {
			return nil, fmt.Errorf("level %d %q is longer than %s, far beyond any broker's delay", i+1, f, maxLevel)
		}
		d := time.Duration(n) * unit
		if i > 0 && d <= levels[i-1] {
			return nil, fmt.Errorf("level %d %q is not longer than level %d (%s): levels must increase", i+1, f, i, levels[i-1])
		}
		levels = append(levels, d)
	}
	return levels, nil
}

// maxLevel bounds one delay level; it keeps the arithmetic far from overflowing.
const maxLevel = 100 * 365 * 24 * time.Hour

// MustParseDelayLevels is ParseDelayLevels for constants; it panics on a bad string.
func MustParseDelayLevels(s string) DelayLevels {
	l, err := ParseDelayLevels(s)
	if err != nil {
		panic(err)
	}
	return l
}

// String prints the levels in the broker's syntax.
func (l DelayLevels) String() string {
	parts := make([]string, len(l))
	for i, d := range l {
		switch {
		case d%(24*time.Hour) == 0:
			parts[i] = fmt.Sprintf("%dd", d/(24*time.Hour))
		case d%time.Hour == 0:
			parts[i] = fmt.Sprintf("%dh", d/time.Hour)
		case d%time.Minute == 0:
			parts[i] = fmt.Sprintf("%dm", d/time.Minute)
		default:
			parts[i] = fmt.Sprintf("%ds", d/time.Second)
		}
	}
	return strings.Join(parts, " ")
}

// MarshalText prints the levels in the broker's syntax.
func (l DelayLevels) MarshalText() ([]byte, error) { return []byte(l.String()), nil }

// UnmarshalYAML parses scheduler.levels from the configuration file; an error names the
// key and the line, as every other value's does.
func (l *DelayLevels) UnmarshalYAML(n *yaml.Node) error {
	if n.Kind != yaml.ScalarNode {
		return fmt.Errorf("scheduler.levels: line %d: want the broker's syntax, such as \"1s 5s 10s 30s 1m\"", n.Line)
	}
	if err := l.UnmarshalText([]byte(n.Value)); err != nil {
		return fmt.Errorf("scheduler.levels: line %d: %w", n.Line, err)
	}
	return nil
}

// UnmarshalText parses the broker's syntax (see ParseDelayLevels).
func (l *DelayLevels) UnmarshalText(b []byte) error {
	v, err := ParseDelayLevels(string(b))
	if err != nil {
		return err
	}
	*l = v
	return nil
}
