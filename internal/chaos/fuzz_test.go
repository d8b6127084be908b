package chaos

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"go.yaml.in/yaml/v3"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
)

// The fuzz targets cover every parser of external input that is reachable through an
// exported API: the alert body (also sender.FuzzParseBody), the delay decomposition
// (never early), the config file and its environment overrides, the delay-level string,
// and the admin API's parameters and requests. The message-property decoder of the
// scheduler is unexported; the malformed corpus (Corpus) drives it through a real broker.

const fuzzSecret = "tok-SECRET-0123456789abcdef"

// FuzzAlertBody: ParseBody either refuses a body with ErrInvalidBody or returns a
// message that encodes to a body ParseBody accepts again, with the same type.
func FuzzAlertBody(f *testing.F) {
	for _, c := range Corpus("seed-malformed") {
		f.Add(c.Body)
	}
	f.Add([]byte(`{"msgtype":"markdown","markdown":{"title":"t","text":"x"},"at":{"isAtAll":true}}`))
	f.Add([]byte("plain text alert"))
	f.Fuzz(func(t *testing.T, body []byte) {
		m, err := dingtalk.ParseBody(body)
		if err != nil {
			require.ErrorIs(t, err, sender.ErrInvalidBody)
			return
		}
		out, err := dingtalk.MarshalMessage(m)
		require.NoError(t, err)
		back, err := dingtalk.ParseBody(out)
		require.NoError(t, err, "re-encoded body %q", out)
		require.Equal(t, m.MsgType, back.MsgType)
	})
}

// FuzzDecomposition: whatever the level string and the delay, a plan never overshoots
// the delay (never early) and leaves a remainder below the threshold.
func FuzzDecomposition(f *testing.F) {
	f.Add("1s 2s 3s 4s 5s 6s 7s 8s 9s 10s 15s 20s 30s", int64(59_999), int64(5_000))
	f.Add(config.DefaultLevels, int64(12_317_000), int64(60_000))
	f.Add("1s", int64(-5), int64(1000))
	f.Fuzz(func(t *testing.T, levelStr string, delayMS, thresholdMS int64) {
		levels, err := config.ParseDelayLevels(levelStr)
		if err != nil || len(levels) == 0 {
			return
		}
		delay := time.Duration(delayMS%(90*24*3600*1000)) * time.Millisecond
		threshold := max(time.Duration(thresholdMS%(3600*1000))*time.Millisecond, levels[0])
		hops, rem := scheduler.Plan(delay, scheduler.Route{Levels: levels, Threshold: threshold})
		require.LessOrEqual(t, len(hops), 1_000_000)
		var sum time.Duration
		for _, h := range hops {
			require.Equal(t, levels[h.Level-1], h.Delay)
			sum += h.Delay
		}
		require.LessOrEqual(t, sum, max(delay, 0), "a plan must never be early")
		require.Equal(t, max(delay, 0)-sum, rem)
		require.True(t, rem < threshold || rem < levels[0], "remainder %s left above the threshold %s", rem, threshold)
	})
}

// FuzzDelayLevels: a parsed level string prints back to a string that parses to the
// same levels, increasing and positive.
func FuzzDelayLevels(f *testing.F) {
	for _, s := range []string{config.DefaultLevels, "1s 2s 3s", "1s  5s", "0s", "1x", "2d 1d", "999999999999h", ""} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		l, err := config.ParseDelayLevels(s)
		if err != nil {
			return
		}
		back, err := config.ParseDelayLevels(l.String())
		require.NoError(t, err, "%q printed as %q", s, l.String())
		require.Equal(t, l, back)
		for i, d := range l {
			require.Positive(t, d)
			if i > 0 {
				require.Greater(t, d, l[i-1])
			}
		}
	})
}

// FuzzConfigDecode: Decode and Validate never panic, and neither an error nor the
// redacted rendering ever shows a secret.
func FuzzConfigDecode(f *testing.F) {
	seeds := []string{
		"rocketmq: {nameServers: [\"127.0.0.1:9876\"]}\nredis: {url: \"redis://:" + fuzzSecret + "@127.0.0.1:6379/0\"}\n",
		"targets:\n  ops:\n    robots:\n      - {name: r1, token: " + fuzzSecret + ", signingSecret: SEC" + fuzzSecret + "}\n",
		"postgres: {url: \"postgres://u:" + fuzzSecret + "@h/db\"}\nadmin: {token: " + fuzzSecret + "}\n",
		"scheduler: {levels: \"1s 1s\", threshold: -5s}\n",
		"sender: {window: 1ns, limit: 99}\n",
		"unknownKey: 1\n", "targets: [1,2]\n", "\xff\xfe", "",
	}
	requireCorpus(f)
	b, err := os.ReadFile(filepath.Join("..", "..", "deploy", "local", "rocketdelay.yaml"))
	require.NoError(f, err, "the local stack's configuration is a seed")
	seeds = append(seeds, string(b))
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Decode(bytes.NewReader(data))
		if err != nil {
			requireNoSecret(t, err.Error(), data) // a decode error shows no value of the input
			return
		}
		shown := shownByDesign(c)
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			requireNoSecret(t, err.Error(), data, shown...)
		}
		requireNoSecret(t, c.Redacted(), data, shown...)
	})
}

// FuzzConfigLoad: a file plus one environment override; Load never panics and its error
// never shows a secret value, from the file or from the environment.
func FuzzConfigLoad(f *testing.F) {
	names := []string{"ROCKETDELAY_REDIS_URL", "ROCKETDELAY_POSTGRES_URL", "ROCKETDELAY_ADMIN_TOKEN", "ROCKETDELAY_LEVELS",
		"ROCKETDELAY_THRESHOLD", "ROCKETDELAY_SENDER_WINDOW", "ROCKETDELAY_SENDER_LIMIT", "ROCKETDELAY_NAMESRV", "ROCKETDELAY_SHUTDOWN_TIMEOUT"}
	f.Add([]byte("rocketmq: {nameServers: [\"127.0.0.1:9876\"]}\n"), uint8(0), "redis://:"+fuzzSecret+"@h:1/0")
	f.Add([]byte("targets: {ops: {robots: [{name: r, token: \"env:RD_FUZZ_TOKEN\"}]}}\n"), uint8(2), fuzzSecret)
	f.Add([]byte("targets: {ops: {robots: [{name: r, token: \"file:/nonexistent/"+fuzzSecret+"\"}]}}\n"), uint8(3), "1s 2x")
	f.Add([]byte(""), uint8(6), "twenty")
	requireCorpus(f)
	f.Fuzz(func(t *testing.T, data []byte, which uint8, value string) {
		path := filepath.Join(t.TempDir(), "rocketdelay.yaml")
		require.NoError(t, os.WriteFile(path, data, 0o600))
		name := names[int(which)%len(names)]
		getenv := func(k string) string {
			if k == name {
				return value
			}
			return ""
		}
		_, err := config.Load(path, getenv)
		if err == nil {
			return
		}
		msg := err.Error()
		secretVar := strings.Contains(name, "URL") || strings.Contains(name, "TOKEN")
		var shown []string
		if c, err := config.Decode(bytes.NewReader(data)); err == nil {
			shown = shownByDesign(c)
		}
		if !secretVar {
			shown = append(shown, value) // an override of a setting that is not a secret
		}
		requireNoSecret(t, msg, data, shown...)
		if secretVar {
			if len(value) >= 12 {
				require.NotContains(t, msg, value, "the error shows the secret value of %s", name)
			}
		}
	})
}

// requireNoSecret fails when out shows a secret of the input in, whatever the input: the
// fuzz secret (the one the seeds carry), and every value the input writes under a key of
// a secret (secretKeys) that is long enough, and unusual enough, not to appear in out by
// chance. Two kinds of text may show one by design, and are taken out of out first: a
// secret reference — "file:PATH" or "env:NAME" — whose path or variable errors name, and
// shown, the settings that are not secrets (shownByDesign; a robot named after the fuzz
// secret is printed with its name).
func requireNoSecret(t *testing.T, out string, in []byte, shown ...string) {
	t.Helper()
	for _, ref := range secretReference.FindAllSubmatch(in, -1) {
		out = strings.ReplaceAll(out, string(ref[1]), "<reference>")
	}
	secrets := append(secretValues(in), fuzzSecret)
	for _, s := range shown {
		for _, secret := range secrets {
			if strings.Contains(s, secret) {
				out = strings.ReplaceAll(out, s, "<shown by design>")
			}
		}
	}
	for _, secret := range secrets {
		require.NotContains(t, out, secret, "a secret leaked")
	}
}

// shownByDesign returns the strings of c that are not secrets, map keys included: names,
// addresses, modes, which the rendering and the validation errors show.
func shownByDesign(c config.Config) []string {
	var out []string
	var walk func(reflect.Value)
	walk = func(v reflect.Value) {
		switch {
		case v.Type() == reflect.TypeFor[config.Secret]():
		case v.Kind() == reflect.String:
			out = append(out, v.String())
		case v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface:
			if !v.IsNil() {
				walk(v.Elem())
			}
		case v.Kind() == reflect.Struct:
			for i := range v.NumField() {
				if v.Type().Field(i).IsExported() {
					walk(v.Field(i))
				}
			}
		case v.Kind() == reflect.Slice || v.Kind() == reflect.Array:
			for i := range v.Len() {
				walk(v.Index(i))
			}
		case v.Kind() == reflect.Map:
			for it := v.MapRange(); it.Next(); {
				walk(it.Key())
				walk(it.Value())
			}
		}
	}
	walk(reflect.ValueOf(c))
	return out
}

// secretReference finds the path or variable name of a secret reference in YAML.
var secretReference = regexp.MustCompile(`(?:file|env):([^\s"',{}\[\]]+)`)

// secretKeys are the YAML keys of config.Config's Secret fields, found by reflection so
// that a new secret is covered; a key that some other field uses too is left out, as a
// value under it need not be a secret.
var secretKeys = func() map[string]bool {
	secret, other := map[string]bool{}, map[string]bool{}
	seen := map[reflect.Type]bool{}
	var walk func(reflect.Type)
	walk = func(ty reflect.Type) {
		for ty.Kind() == reflect.Pointer || ty.Kind() == reflect.Slice || ty.Kind() == reflect.Map {
			ty = ty.Elem()
		}
		if ty.Kind() != reflect.Struct || seen[ty] {
			return
		}
		seen[ty] = true
		for i := range ty.NumField() {
			fd := ty.Field(i)
			key, _, _ := strings.Cut(fd.Tag.Get("yaml"), ",")
			if key == "" || key == "-" {
				continue
			}
			if fd.Type == reflect.TypeFor[config.Secret]() {
				secret[key] = true
			} else {
				other[key] = true
			}
			walk(fd.Type)
		}
	}
	walk(reflect.TypeFor[config.Config]())
	for key := range other {
		delete(secret, key)
	}
	return secret
}()

// secretKeyValue finds a secret key's value in YAML the parser refuses (flow or block
// style, quoted or not).
var secretKeyValue = regexp.MustCompile(`(?:^|[\s{,])([A-Za-z]+)\s*:\s*["']?([^\s"',{}\[\]#]+)`)

// defaultRendering is what every configuration shows without any input: a value that
// is part of it appears in out by chance.
var defaultRendering = config.Config{}.WithDefaults().Redacted()

// secretValues returns the values in written under a key of secretKeys, found by the
// YAML parser and, for input it refuses, by secretKeyValue; left out are references,
// values shorter than 8 bytes, and values that could show for another reason (part of
// the default rendering, or written elsewhere in the input too).
func secretValues(in []byte) []string {
	var found []string
	var doc yaml.Node
	if yaml.Unmarshal(in, &doc) == nil {
		var walk func(*yaml.Node)
		walk = func(n *yaml.Node) {
			if n.Kind == yaml.MappingNode {
				for i := 0; i+1 < len(n.Content); i += 2 {
					if k, v := n.Content[i], n.Content[i+1]; secretKeys[k.Value] && v.Kind == yaml.ScalarNode {
						found = append(found, v.Value)
					}
				}
			}
			for _, c := range n.Content {
				walk(c)
			}
		}
		walk(&doc)
	} else {
		for _, m := range secretKeyValue.FindAllSubmatch(in, -1) {
			if secretKeys[string(m[1])] {
				found = append(found, string(m[2]))
			}
		}
	}
	times := map[string]int{}
	for _, v := range found {
		times[v]++
	}
	var out []string
	for v, n := range times {
		if len(v) < 8 || strings.HasPrefix(v, "env:") || strings.HasPrefix(v, "file:") ||
			strings.Contains(defaultRendering, v) || bytes.Count(in, []byte(v)) > n {
			continue
		}
		out = append(out, v)
	}
	return out
}

// requireCorpus fails when the committed corpus of f (testdata/fuzz/<name>, regression
// inputs such as issue 17's) is missing or empty: a renamed target or a moved folder
// would otherwise drop it without a word.
func requireCorpus(f *testing.F) {
	f.Helper()
	entries, err := os.ReadDir(filepath.Join("testdata", "fuzz", f.Name()))
	require.NoError(f, err, "the committed corpus of %s", f.Name())
	require.NotEmpty(f, entries, "the committed corpus of %s", f.Name())
}

// FuzzAdminParams: the admin API's and CLI's parameter parsers never panic, and what they
// accept is valid.
func FuzzAdminParams(f *testing.F) {
	for _, s := range []string{"", "pending", "dead", "Dead", "6h", "3d", "-1h", "2026-12-02T10:20:30Z", "99999999999d", "json", "table", "\xff"} {
		f.Add(s)
	}
	now := time.Date(2026, 12, 2, 10, 0, 0, 0, time.UTC)
	f.Fuzz(func(t *testing.T, s string) {
		if st, err := failed.ParseStatus(s); err == nil {
			require.True(t, s == "" || st.Valid(), "status %q", s)
		}
		if since, err := failed.ParseSince(s, now); err == nil {
			require.False(t, since.IsZero())
		}
		_, _ = failed.ParseUntil(s)
		if fm, err := failed.ParseFormat(s); err == nil {
			require.Contains(t, []failed.Format{failed.FormatTable, failed.FormatJSON}, fm)
		}
	})
}

// FuzzAdminAPI sends arbitrary requests to the admin API over a real store on a
// migrated schema of the local Postgres: no answer is a 500 caused by a parameter, and
// no answer carries the admin token. It needs ROCKETDELAY_POSTGRES_URL (make chaos sets
// it from the shared stack).
func FuzzAdminAPI(f *testing.F) {
	if os.Getenv("ROCKETDELAY_POSTGRES_URL") == "" {
		f.Skip("needs ROCKETDELAY_POSTGRES_URL (eval \"$(deploy/local/env)\")")
	}
	dsn := testenv.MigratedPostgres(f)
	fsPool, err := store.OpenPostgres(context.Background(), dsn)
	require.NoError(f, err)
	f.Cleanup(fsPool.Close)
	fs := store.NewFailedSends(fsPool, store.FailedSendsOptions{})
	for _, id := range []string{"a", "b"} {
		_, err := fs.Record(context.Background(), store.NewFailedSend{MessageID: id, Target: "ops", Payload: []byte("x"), Rejected: true, ErrorClass: "rejected_bad_body", LastError: "seed"})
		require.NoError(f, err)
	}
	const token = "admin-token-0123456789"
	h := failed.Handler(fs, nil, slog.New(slog.NewTextHandler(io.Discard, nil)), config.Secret(token))
	seeds := []struct{ method, target, body string }{
		{"GET", "/api/v1/failed?status=rejected&limit=10", ""},
		{"GET", "/api/v1/failed?status=nope&since=xx&until=yy&limit=-1&after=abc", ""},
		{"GET", "/api/v1/failed?limit=99999999999999999999&since=99999999d", ""},
		{"GET", "/api/v1/failed/stats", ""},
		{"GET", "/api/v1/failed/1", ""},
		{"GET", "/api/v1/failed/-1", ""},
		{"GET", "/api/v1/failed/9223372036854775808", ""},
		{"POST", "/api/v1/failed/1/retry", ""},
		{"POST", "/api/v1/failed/retry", `{"ids":[1,2]}`},
		{"POST", "/api/v1/failed/retry", `{"status":"dead","target":"ops"}`},
		{"POST", "/api/v1/failed/retry", `{"status":"delivered"}`},
		{"POST", "/api/v1/failed/discard", `{"ids":[2],"reason":"seen"}`},
		{"POST", "/api/v1/failed/discard", `{"ids":[1e99],"reason":""}`},
		{"POST", "/api/v1/failed/discard", "\xff{"},
	}
	for _, s := range seeds {
		f.Add(s.method, s.target, []byte(s.body))
	}
	f.Fuzz(func(t *testing.T, method, target string, body []byte) {
		if method != "GET" && method != "POST" {
			method = "GET"
		}
		if !strings.HasPrefix(target, "/") {
			target = "/" + target
		}
		req, err := http.NewRequest(method, "http://admin"+target, bytes.NewReader(body))
		if err != nil {
			return
		}
		req.Header.Set("Authorization", "Bearer "+token)
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, req)
		require.NotEqual(t, http.StatusInternalServerError, rec.Code, "%s %s %q → %s", method, target, body, rec.Body.String())
		require.NotContains(t, rec.Body.String(), token)
	})
}
