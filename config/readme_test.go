package config

import (
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// readmeRow is one row of the README's configuration table.
type readmeRow struct {
	keys, envs, defaults []string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// readmeTable parses the table under "## Configuration" in the README.
func readmeTable(t *testing.T) []readmeRow {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	text := string(b)
	start := strings.Index(text, "## Configuration")
	require.NotEqual(t, -1, start, "the README has no Configuration section")
	text = text[start:]
	if end := strings.Index(text[3:], "\n## "); end >= 0 {
		text = text[:end+3]
	}
	var rows []readmeRow
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(line, " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 4 {
			continue
		}
		var r readmeRow
		for _, m := range backticked.FindAllStringSubmatch(cells[0], -1) {
			key := m[1]
			if strings.HasPrefix(key, ".") && len(r.keys) > 0 { // ".addresses": a sibling of the key before it
				prev := r.keys[len(r.keys)-1]
				key = prev[:strings.LastIndex(prev, ".")] + key
			}
			r.keys = append(r.keys, key)
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[1], -1) {
			if strings.HasPrefix(m[1], "ROCKETDELAY_") {
				r.envs = append(r.envs, m[1])
			}
		}
		for _, m := range backticked.FindAllStringSubmatch(cells[2], -1) {
			r.defaults = append(r.defaults, m[1])
		}
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows)
	return rows
}

// field finds the field of v (a Config) at the YAML path key, e.g. "scheduler.lease".
func field(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				return reflect.Value{}, false
			}
			v = v.Elem()
		}
		if v.Kind() != reflect.Struct {
			return reflect.Value{}, false
		}
		found := false
		for i := range v.NumField() {
			if strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0] == part {
				v, found = v.Field(i), true
				break
			}
		}
		if !found {
			return reflect.Value{}, false
		}
	}
	return v, true
}

// TestREADMEConfigurationTable keeps the README's configuration table true: every
// environment variable Load reads is listed on the row of the key it overrides (and no
// row names one it does not read), every key of the table exists, and every default the
// table shows in backticks is the default WithDefaults fills in.
func TestREADMEConfigurationTable(t *testing.T) {
	rows := readmeTable(t)
	defaults := reflect.ValueOf(Config{}.WithDefaults())
	byEnv := map[string]string{}
	for _, ev := range EnvVars {
		byEnv[ev.Name] = ev.Key
	}
	listed := map[string]bool{}
	checked := 0
	for _, r := range rows {
		for _, env := range r.envs {
			key, ok := byEnv[env]
			require.True(t, ok, "the README names %s, which config does not read", env)
			require.Contains(t, r.keys, key, "the README lists %s on the row of %v; it overrides %s", env, r.keys, key)
			listed[env] = true
		}
		for i, key := range r.keys {
			v, ok := field(defaults, key)
			if !ok {
				require.True(t, strings.HasPrefix(key, "targets.") || strings.HasPrefix(key, "redis.sentinel") ||
					strings.HasPrefix(key, "redis.cluster"), "the README lists %s, which is not a configuration key", key)
				continue
			}
			if len(r.defaults) != len(r.keys) {
				continue // a default in words ("required", "none", "RocketMQ's 18 levels")
			}
			want := r.defaults[i]
			switch got := v.Interface().(type) {
			case time.Duration:
				d, err := time.ParseDuration(want)
				require.NoError(t, err, "%s: the README's default %q is not a duration", key, want)
				require.Equal(t, got, d, "%s: the README says %s", key, want)
			case int64:
				n, err := strconv.ParseInt(want, 10, 64)
				require.NoError(t, err, "%s: the README's default %q is not a number", key, want)
				require.Equal(t, got, n, "%s: the README says %s", key, want)
			case int:
				n, err := strconv.Atoi(want)
				require.NoError(t, err, "%s: the README's default %q is not a number", key, want)
				require.Equal(t, got, n, "%s: the README says %s", key, want)
			case string:
				require.Equal(t, got, want, "%s: the README says %s", key, want)
			default:
				require.Equal(t, v.Interface().(interface{ String() string }).String(), want, "%s", key)
			}
			checked++
		}
	}
	for _, ev := range EnvVars {
		require.True(t, listed[ev.Name], "%s (%s) is missing from the README's configuration table", ev.Name, ev.Key)
	}
	require.Greater(t, checked, 30, "the table's defaults were not found: has its layout changed?")
}
