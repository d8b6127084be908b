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
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/sender"
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
		m, err := sender.ParseBody(body)
		if err != nil {
			require.ErrorIs(t, err, sender.ErrInvalidBody)
			return
		}
		out, err := sender.MarshalMessage(m)
		require.NoError(t, err)
		back, err := sender.ParseBody(out)
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
	if b, err := os.ReadFile(filepath.Join("..", "deploy", "local", "rocketdelay.yaml")); err == nil {
		seeds = append(seeds, string(b))
	}
	for _, s := range seeds {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		c, err := config.Decode(bytes.NewReader(data))
		if err != nil {
			requireNoSecret(t, err.Error(), data)
			return
		}
		c = c.WithDefaults()
		if err := c.Validate(); err != nil {
			requireNoSecret(t, err.Error(), data)
		}
		requireNoSecret(t, c.Redacted(), data)
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
		requireNoSecret(t, msg, data)
		if strings.Contains(name, "URL") || strings.Contains(name, "TOKEN") {
			if len(value) >= 12 {
				require.NotContains(t, msg, value, "the error shows the secret value of %s", name)
			}
		}
	})
}

// requireNoSecret fails when out contains the fuzz secret although the input did (the
// only secret the seeds carry). A secret reference — "file:PATH" or "env:NAME" — is not a
// secret: errors name the path or the variable by design, so the fuzz secret written
// inside one may show.
func requireNoSecret(t *testing.T, out string, in []byte) {
	t.Helper()
	if !bytes.Contains(in, []byte(fuzzSecret)) {
		return
	}
	for _, ref := range secretReference.FindAllSubmatch(in, -1) {
		out = strings.ReplaceAll(out, string(ref[1]), "<reference>")
	}
	require.NotContains(t, out, fuzzSecret, "a secret leaked")
}

// secretReference finds the path or variable name of a secret reference in YAML.
var secretReference = regexp.MustCompile(`(?:file|env):([^\s"',{}\[\]]+)`)

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
	h := failed.Handler(fs, slog.New(slog.NewTextHandler(io.Discard, nil)), config.Secret(token))
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
