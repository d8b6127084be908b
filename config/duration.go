package config

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"reflect"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"time"

	"go.yaml.in/yaml/v3"
)

// DurationHint is how every duration may be written, for error messages.
const DurationHint = "a duration such as 90s, 15m, 6h, 3d or 1d12h"

// days matches a duration that starts with a number of days: its sign, the days and the
// rest (a Go duration without a sign, or nothing).
var days = regexp.MustCompile(`^([-+]?)([0-9]+(?:\.[0-9]*)?|\.[0-9]+)d(.*)$`)

// ParseDuration reads a duration as time.ParseDuration does, and with days: "3d",
// "1d12h", "1.5d" (a day is 24 hours; a leading sign applies to the whole). Every
// duration of the configuration file, of the environment and of the command line flags
// and arguments is read by it. The error does not repeat s.
func ParseDuration(s string) (time.Duration, error) {
	m := days.FindStringSubmatch(s)
	if m == nil {
		d, err := time.ParseDuration(s)
		if err != nil {
			return 0, fmt.Errorf("not %s", DurationHint)
		}
		return d, nil
	}
	sign, n, rest := m[1], m[2], m[3]
	whole, err := time.ParseDuration(n + "h") // exact for decimals: 1.5h
	if err != nil || whole > math.MaxInt64/24 {
		return 0, fmt.Errorf("not %s", DurationHint)
	}
	d := whole * 24
	if rest != "" {
		r, err := time.ParseDuration(rest)
		if err != nil || strings.ContainsAny(rest[:1], "+-") || r > math.MaxInt64-d {
			return 0, fmt.Errorf("not %s", DurationHint)
		}
		d += r
	}
	if sign == "-" {
		d = -d
	}
	return d, nil
}

// durationType is the type of every duration of Config.
var durationType = reflect.TypeFor[time.Duration]()

// unmarshalerType is yaml's Unmarshaler: a type that decodes itself.
var unmarshalerType = reflect.TypeFor[yaml.Unmarshaler]()

// withDays returns data with every duration of the configuration written with days
// ("30d", "1d12h") rewritten as hours ("720h"), which the YAML decoder reads, in place,
// so the decoder's line numbers stay the file's. A duration that is not one is an error
// naming its key and line, without its value (a secret may sit in the wrong place).
// data that does not parse is returned as it is, for the decoder to say why.
func withDays(data []byte) ([]byte, error) {
	var root yaml.Node
	if err := yaml.Unmarshal(data, &root); err != nil || len(root.Content) == 0 {
		return data, nil
	}
	var edits []edit
	var errs []error
	seen := map[*yaml.Node]bool{} // an anchor's node, and its aliases
	walkDurations(root.Content[0], reflect.TypeFor[Config](), "", func(key string, n *yaml.Node) {
		if seen[n] {
			return
		}
		seen[n] = true
		if n.Tag != "!!str" && n.Tag != "!!int" && n.Tag != "!!float" {
			return // null, or a type the decoder refuses by itself
		}
		d, err := ParseDuration(n.Value)
		if err != nil {
			errs = append(errs, &FieldError{Key: key, Reason: fmt.Sprintf("line %d: not %s", n.Line, DurationHint)})
			return
		}
		if strings.Contains(n.Value, "d") {
			edits = append(edits, edit{node: n, with: d.String()})
		}
	})
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return applyEdits(data, edits), nil
}

// walkDurations calls found with the key and node of every scalar under n that
// decodes into a time.Duration of t, following structs (by their yaml names), maps,
// slices, pointers and aliases. Keys t does not have are left to the strict decoder.
func walkDurations(n *yaml.Node, t reflect.Type, key string, found func(string, *yaml.Node)) {
	if n.Kind == yaml.AliasNode {
		n = n.Alias
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t == durationType {
		if n.Kind == yaml.ScalarNode {
			found(key, n)
		}
		return
	}
	if reflect.PointerTo(t).Implements(unmarshalerType) {
		return
	}
	join := func(k string) string {
		if key == "" {
			return k
		}
		return key + "." + k
	}
	switch t.Kind() {
	case reflect.Struct:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			name := n.Content[i].Value
			for j := range t.NumField() {
				if f := t.Field(j); strings.Split(f.Tag.Get("yaml"), ",")[0] == name {
					walkDurations(n.Content[i+1], f.Type, join(name), found)
				}
			}
		}
	case reflect.Map:
		if n.Kind != yaml.MappingNode {
			return
		}
		for i := 0; i+1 < len(n.Content); i += 2 {
			walkDurations(n.Content[i+1], t.Elem(), join(n.Content[i].Value), found)
		}
	case reflect.Slice:
		if n.Kind != yaml.SequenceNode {
			return
		}
		for i, c := range n.Content {
			walkDurations(c, t.Elem(), key+"["+strconv.Itoa(i)+"]", found)
		}
	}
}

// edit replaces the text of a scalar node with with, in the node's own quoting.
type edit struct {
	node *yaml.Node
	with string
}

// applyEdits returns data with edits made. A scalar is found at its line and column as
// it was written (plain, 'single' or "double" quoted, after its anchor); one whose text
// is not there as expected (escapes, a tag, a multi-line scalar) is left for the decoder
// to refuse.
func applyEdits(data []byte, edits []edit) []byte {
	type span struct {
		at, end int
		with    string
	}
	var spans []span
	lines := bytes.SplitAfter(data, []byte("\n"))
	for _, e := range edits {
		n := e.node
		if n.Line < 1 || n.Line > len(lines) {
			continue
		}
		start := 0
		for _, l := range lines[:n.Line-1] {
			start += len(l)
		}
		line := lines[n.Line-1]
		col := 0 // the column is counted in characters
		for i := range string(line) {
			if col == n.Column-1 {
				col, start = -1, start+i
				break
			}
			col++
		}
		if col != -1 {
			continue
		}
		quote := ""
		switch n.Style {
		case yaml.SingleQuotedStyle:
			quote = "'"
		case yaml.DoubleQuotedStyle:
			quote = `"`
		}
		if a := "&" + n.Anchor; n.Anchor != "" && bytes.HasPrefix(data[start:], []byte(a)) {
			start += len(a) // the node starts at its anchor: "&week 7d"
			for start < len(data) && (data[start] == ' ' || data[start] == '\t') {
				start++
			}
		}
		was := quote + n.Value + quote
		if !bytes.HasPrefix(data[start:], []byte(was)) {
			continue
		}
		spans = append(spans, span{at: start, end: start + len(was), with: quote + e.with + quote})
	}
	slices.SortFunc(spans, func(a, b span) int { return b.at - a.at }) // from the end: offsets stay true
	out := slices.Clone(data)
	for _, s := range spans {
		out = slices.Concat(out[:s.at], []byte(s.with), out[s.end:])
	}
	return out
}
