package config_test

import (
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"os"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// docRow is one row of a configuration table in the docs: the keys of its first cell,
// the environment variables of its second, the backticked defaults of its third, and its
// fourth cell (the range, in docs/configuration.md).
type docRow struct {
	keys, envs, defaults []string
	rangeCell            string
}

var backticked = regexp.MustCompile("`([^`]+)`")

// configTable parses the configuration table of the markdown file path: every row whose
// first cell starts with a backticked key, in the section under heading (up to the next
// heading of its level), or in the whole file when heading is "".
func configTable(t *testing.T, path, heading string) []docRow {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	text := string(b)
	if heading != "" {
		start := strings.Index(text, "\n"+heading+"\n")
		require.NotEqual(t, -1, start, "%s has no %q section", path, heading)
		text = text[start+1:]
		level := heading[:strings.Index(heading, " ")+1]
		if end := strings.Index(text[len(heading):], "\n"+level); end >= 0 {
			text = text[:end+len(heading)]
		}
	}
	var rows []docRow
	for _, line := range strings.Split(text, "\n") {
		cells := strings.Split(strings.TrimSuffix(line, " |"), " | ")
		if !strings.HasPrefix(line, "| `") || len(cells) < 4 {
			continue
		}
		var r docRow
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
		if len(cells) > 4 {
			r.rangeCell = cells[3]
		}
		rows = append(rows, r)
	}
	require.NotEmpty(t, rows, "%s: no configuration table found", path)
	return rows
}

// configKeys lists every key of a configuration of type typ under prefix: the YAML path of
// each field that holds a value, with NAME for the key of a map of sections
// (targets.NAME.kind) and [] for an element of a list of sections (targets.NAME.robots[].token).
func configKeys(typ reflect.Type, prefix string) []string {
	var keys []string
	for i := range typ.NumField() {
		f := typ.Field(i)
		tag := f.Tag.Get("yaml")
		name := strings.Split(tag, ",")[0]
		if tag == ",inline" && f.Type.Kind() == reflect.Map {
			// The chat channels' keys: their sections (sender.wecom) or their ids
			// (members[].wecomUserId).
			for _, c := range ChatChannels() {
				switch {
				case f.Type.Elem().Kind() == reflect.Struct && c.Section != "":
					keys = append(keys, configKeys(f.Type.Elem(), prefix+c.Section+".")...)
				case f.Type.Elem().Kind() == reflect.String && c.MemberID != "":
					keys = append(keys, prefix+c.MemberID)
				}
			}
			continue
		}
		if name == "" || name == "-" {
			continue
		}
		key := prefix + name
		ft := f.Type
		if ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		switch {
		case ft.Kind() == reflect.Struct:
			keys = append(keys, configKeys(ft, key+".")...)
		case ft.Kind() == reflect.Map && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, configKeys(ft.Elem(), key+".NAME.")...)
		case ft.Kind() == reflect.Slice && ft.Elem().Kind() == reflect.Struct:
			keys = append(keys, configKeys(ft.Elem(), key+"[].")...)
		default:
			keys = append(keys, key)
		}
	}
	return keys
}

// lookup finds the value at key (a path of configKeys) in v, a Config: a map is indexed
// by NAME and a list by its first element, falling back to the zero value of the type
// where v holds none (a nil section, an empty map or list).
func lookup(v reflect.Value, key string) (reflect.Value, bool) {
	for _, part := range strings.Split(key, ".") {
		name, list := strings.CutSuffix(part, "[]")
		if v.Kind() == reflect.Pointer {
			if v.IsNil() {
				v = reflect.Zero(v.Type().Elem())
			} else {
				v = v.Elem()
			}
		}
		switch {
		case v.Kind() == reflect.Map && name == "NAME":
			e := v.MapIndex(reflect.ValueOf("NAME"))
			if !e.IsValid() {
				e = reflect.Zero(v.Type().Elem())
			}
			v = e
			continue
		case v.Kind() != reflect.Struct:
			return reflect.Value{}, false
		}
		found := false
		for i := range v.NumField() {
			if strings.Split(v.Type().Field(i).Tag.Get("yaml"), ",")[0] == name {
				v, found = v.Field(i), true
				break
			}
		}
		for i := 0; !found && i < v.NumField(); i++ {
			if f := v.Field(i); v.Type().Field(i).Tag.Get("yaml") == ",inline" && f.Kind() == reflect.Map {
				if v = f.MapIndex(reflect.ValueOf(name)); !v.IsValid() {
					v = reflect.Zero(f.Type().Elem())
				}
				found = true
			}
		}
		if !found {
			return reflect.Value{}, false
		}
		if list {
			if v.Kind() != reflect.Slice {
				return reflect.Value{}, false
			}
			if v.Len() > 0 {
				v = v.Index(0)
			} else {
				v = reflect.Zero(v.Type().Elem())
			}
		}
	}
	return v, true
}

// defaultsWithSections is the default configuration with one section of every map of
// sections whose defaults are filled in (escalations.NAME with a repeat, rotations.NAME),
// so that their defaults can be looked up.
func defaultsWithSections() reflect.Value {
	return reflect.ValueOf(Config{
		Escalations: map[string]Policy{"NAME": {Repeat: &Repeat{}}},
		Rotations:   map[string]Rotation{"NAME": {}},
		Ingress:     Ingress{Principals: []Principal{{}}},
	}.WithDefaults())
}

// checkRows checks rows of a table of file against the config package: every key exists,
// every environment variable is on the row of the key it overrides, and every default
// shown in backticks (one per key) is the one WithDefaults fills in. It returns the keys
// and the variables the rows list, and how many defaults it compared.
func checkRows(t *testing.T, file string, rows []docRow) (keys, envs map[string]bool, checked int) {
	t.Helper()
	defaults := defaultsWithSections()
	all := configKeys(reflect.TypeFor[Config](), "")
	byEnv := map[string]string{}
	for _, ev := range EnvVars {
		byEnv[ev.Name] = ev.Key
	}
	keys, envs = map[string]bool{}, map[string]bool{}
	for _, r := range rows {
		for _, env := range r.envs {
			key, ok := byEnv[env]
			require.True(t, ok, "%s names %s, which config does not read", file, env)
			require.Contains(t, r.keys, key, "%s lists %s on the row of %v; it overrides %s", file, env, r.keys, key)
			envs[env] = true
		}
		for i, key := range r.keys {
			require.True(t, slices.Contains(all, key), "%s lists %s, which is not a configuration key", file, key)
			v, ok := lookup(defaults, key)
			require.True(t, ok, "%s: %s has no value in the default configuration", file, key)
			keys[key] = true
			if len(r.defaults) != len(r.keys) {
				continue // a default in words ("required", "none", "RocketMQ's 18 levels")
			}
			want := r.defaults[i]
			switch got := v.Interface().(type) {
			case time.Duration:
				d, err := ParseDuration(want)
				require.NoError(t, err, "%s: %s's default %q is not a duration", file, key, want)
				require.Equal(t, got, d, "%s: %s says %s", file, key, want)
			case int64:
				n, err := strconv.ParseInt(want, 10, 64)
				require.NoError(t, err, "%s: %s's default %q is not a number", file, key, want)
				require.Equal(t, got, n, "%s: %s says %s", file, key, want)
			case int:
				n, err := strconv.Atoi(want)
				require.NoError(t, err, "%s: %s's default %q is not a number", file, key, want)
				require.Equal(t, got, n, "%s: %s says %s", file, key, want)
			case float64:
				n, err := strconv.ParseFloat(want, 64)
				require.NoError(t, err, "%s: %s's default %q is not a number", file, key, want)
				require.Equal(t, got, n, "%s: %s says %s", file, key, want)
			case bool:
				require.Equal(t, strconv.FormatBool(got), want, "%s: %s says %s", file, key, want)
			case string:
				require.Equal(t, got, want, "%s: %s says %s", file, key, want)
			case DelayLevels:
				require.Equal(t, got.String(), want, "%s: %s says %s", file, key, want)
			case Secret:
				require.Equal(t, got.Reveal(), want, "%s: %s says %s", file, key, want)
			default:
				t.Fatalf("%s: %s shows the default %q of a %T, which this test cannot compare: write it in words", file, key, want, got)
			}
			checked++
		}
	}
	return keys, envs, checked
}

// TestConfigurationReference keeps docs/configuration.md true both ways: every key of
// the Config struct has a row, and every key a row names is a key of the struct; every
// environment variable Load reads is listed on the row of the key it overrides, and no
// row names one it does not read; every default shown in backticks is the one
// WithDefaults fills in; and where Validate bounds a number, the row's range says the
// bound.
func TestConfigurationReference(t *testing.T) {
	const file = "../docs/configuration.md"
	rows := configTable(t, file, "")
	keys, envs, checked := checkRows(t, file, rows)
	var missing []string
	for _, key := range configKeys(reflect.TypeFor[Config](), "") {
		if !keys[key] {
			missing = append(missing, key)
		}
	}
	require.Empty(t, missing, "keys of the Config struct missing from %s", file)
	for _, ev := range EnvVars {
		require.True(t, envs[ev.Name], "%s (%s) is missing from %s", ev.Name, ev.Key, file)
	}
	require.Greater(t, checked, 60, "the table's defaults were not found: has its layout changed?")

	// Where Validate bounds a value, the row's range says the bound.
	bounds := map[string][]string{
		"sender.coalesceMax":               {strconv.Itoa(MaxCoalesceMax)},
		"failedSends.batchSize":            {strconv.Itoa(MaxFailedSendsBatchSize)},
		"targets.NAME.topic.ratePerSecond": {strconv.Itoa(MaxTopicRate)},
		"escalations.NAME.repeat.limit":    {strconv.Itoa(MaxRepeatLimit)},
		"admin.token":                      {strconv.Itoa(MinAdminTokenLen)},
		"ingress.token":                    {strconv.Itoa(MinAdminTokenLen)},
		"scheduler.lease":                  {"1s"},
		"scheduler.retryMaxDelay":          {"1s"},
		"scheduler.doneTTL":                {"1m"},
		"failedSends.interval":             {"100ms"},
		"failedSends.claimLease":           {"1s"},
		"failedSends.retention":            {"1h"},
		"sender.window":                    {"1s", "60s"},
	}
	for _, c := range ChatChannels() { // each chat channel's own bounds
		section := "sender."
		if c.Section != "" {
			section += c.Section + "."
		}
		bounds[section+"limit"] = []string{strconv.Itoa(c.MaxLimit)}
		if c.MaxPerSecond > 0 {
			bounds[section+"limitPerSecond"] = []string{strconv.Itoa(c.MaxPerSecond)}
		}
		bounds["targets.NAME.robots[].limit"] = append(bounds["targets.NAME.robots[].limit"], strconv.Itoa(c.MaxLimit))
	}
	for _, r := range rows {
		for _, key := range r.keys {
			for _, b := range bounds[key] {
				require.Contains(t, strings.ReplaceAll(r.rangeCell, ",", ""), b,
					"%s: the range of %s does not say Validate's bound %s", file, key, b)
			}
		}
	}
}

// TestREADMEEssentialKeys keeps the README's short table of essential keys true: each
// is a key, with its environment variable and its default as docs/configuration.md and
// the config package have them.
func TestREADMEEssentialKeys(t *testing.T) {
	rows := configTable(t, "../README.md", "### Essential keys")
	keys, _, checked := checkRows(t, "README.md", rows)
	require.GreaterOrEqual(t, len(keys), 8, "the README's essential keys were not found: has its layout changed?")
	require.Positive(t, checked)
}
