package app

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
)

// TestServeReloadsItsConfiguration: serve applies a changed configuration file without
// a restart of the process. A target added to the file is in force within a poll (the
// API takes an alert for it, which reaches its robot) and the metrics name the new
// content; a file that does not load keeps the running configuration, said once in the
// log and counted, and SIGHUP reads the file at once. On the code before, the added
// target was never in force.
func TestServeReloadsItsConfiguration(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "r-ops", Token: "reload-ops"}, {Name: "r-new", Token: "reload-new"}}})
	getenv, base := reloadEnv(t)
	path := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	write := func(body string) { replaceFile(t, path, body) }
	const ops = "  ops: {robots: [{name: r-ops, token: reload-ops}]}\n"
	head := fmt.Sprintf("shutdownTimeout: 5s\nsender: {baseURL: %q}\ntargets:\n", simURL)
	write(head + ops)
	cfg, err := config.Load(path, getenv)
	require.NoError(t, err)

	hup := make(chan os.Signal, 1)
	logs := serveReloading(t, Reloading{Path: path, Getenv: getenv, Hup: hup}, cfg)
	ready := func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false // not listening yet, or between two runs
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, ready, time.Minute, 50*time.Millisecond, "serve is ready")
	code, answer := publishVia(t, base, "newt", "reload-1", "0s")
	require.Equal(t, http.StatusBadRequest, code, answer)
	_, metrics := get(t, base+"/metrics")
	first := configDigest(t, metrics)

	// A target added to the file.
	write(head + ops + "  newt: {robots: [{name: r-new, token: reload-new}]}\n")
	accepted := func(id string) bool { return postAlert(t, base, "newt", id) }
	require.Eventually(t, func() bool { return accepted("reload-1") }, time.Minute, 100*time.Millisecond,
		"the added target is in force")
	require.Eventually(t, func() bool { return acceptedIDs(sim, regexp.MustCompile(`reload-\d+`))["reload-1"] == 1 },
		time.Minute, 50*time.Millisecond, "the alert for the added target reaches its robot")
	_, metrics = get(t, base+"/metrics")
	second := configDigest(t, metrics)
	require.NotEqual(t, first, second, "the metrics name the new content")
	require.Equal(t, 1.0, gaugeSum(metrics, `rocketdelay_config_reloads_total{result="applied"}`))

	// A file that does not load: the running configuration stays, said once.
	write(head + ops + "  newt: {robots: [{name: r-new, token: reload-new}]}\n  broken: {kind: carrier-pigeon}\n")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "does not load") },
		time.Minute, 50*time.Millisecond, "the bad file is said")
	hup <- syscall.SIGHUP // read again at once: said again
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "does not load") == 2 },
		time.Minute, 50*time.Millisecond, "SIGHUP reads the file again")
	// Still the same run of the service (no restart: one "in force" line per run, the first
	// and the added target's), and ready. Readiness is polled: under the race detector on a
	// loaded machine one check can pass its 2 s bound, which says nothing of the reload.
	require.Equal(t, 2, strings.Count(logs.String(), "configuration in force"), "the bad file restarted nothing")
	if !ready() {
		require.Eventually(t, ready, time.Minute, 50*time.Millisecond, "still ready on the running configuration")
		t.Logf("readiness failed once after the bad file, then passed: %s", notReadyLines(logs.String()))
	}
	code, answer = publishVia(t, base, "newt", "reload-2", "0s")
	require.Equal(t, http.StatusAccepted, code, answer)
	_, metrics = get(t, base+"/metrics")
	require.Equal(t, second, configDigest(t, metrics))
	require.Equal(t, 2.0, gaugeSum(metrics, `rocketdelay_config_reloads_total{result="invalid"}`))
	require.Equal(t, 1.0, gaugeSum(metrics, `rocketdelay_config_reloads_total{result="applied"}`))

	// A file that loads but cannot start (its public listener's port is taken): the
	// previous configuration starts again.
	busy, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer busy.Close()
	write(fmt.Sprintf("http: {publicAddr: %q}\n", busy.Addr().String()) + head + ops +
		"  newt: {robots: [{name: r-new, token: reload-new}]}\n")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the previous one starts again") },
		time.Minute, 50*time.Millisecond, "the configuration that cannot start is said")
	// Failing, it shows the service's last log lines: once, under a CI machine running the
	// fault suite beside it, the restart took more than the minute.
	if !assert.Eventually(t, func() bool { return accepted("reload-3") }, time.Minute, 100*time.Millisecond,
		"the previous configuration runs again") {
		t.Fatalf("the service's last lines:\n%s", lastLines(logs.String(), 30))
	}
	_, metrics = get(t, base+"/metrics")
	require.Equal(t, second, configDigest(t, metrics))
	require.Equal(t, 1.0, gaugeSum(metrics, `rocketdelay_config_reloads_total{result="failed"}`))
}

// configDigest is the digest label of rocketdelay_config_info in a /metrics page.
func configDigest(t *testing.T, page string) string {
	t.Helper()
	for line := range strings.Lines(page) {
		if rest, ok := strings.CutPrefix(line, `rocketdelay_config_info{digest="`); ok {
			digest, _, _ := strings.Cut(rest, `"`)
			return digest
		}
	}
	t.Fatalf("no rocketdelay_config_info in /metrics")
	return ""
}

// lastLines is the last n lines of logs, for a test's message.
func lastLines(logs string, n int) string {
	lines := strings.Split(strings.TrimRight(logs, "\n"), "\n")
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}

// notReadyLines is what a readiness check said when it failed, for a test's message.
func notReadyLines(logs string) string {
	var out []string
	for line := range strings.Lines(logs) {
		if strings.Contains(line, "not ready") {
			out = append(out, strings.TrimSpace(line))
		}
	}
	return strings.Join(out, "\n")
}

// TestServeReloadsWhenAFileItNeedsChanges: the configuration is its file and the files its
// values come from. A robot's token in a file: secret (a Kubernetes Secret's mounted
// file) rotated while the service runs is in force within a poll, its alerts reaching the
// robot of the new token; and a file that needs a secret file not there yet (the
// ConfigMap updated before the Secret) is tried again at each poll and applied once the
// secret arrives, without a SIGHUP. On the code before, the rotated token was never in
// force and the file that waited for its secret was never tried again.
func TestServeReloadsWhenAFileItNeedsChanges(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{
		{Name: "r-old", Token: "rotate-old"}, {Name: "r-new", Token: "rotate-new"}, {Name: "r-late", Token: "rotate-late"}}})
	getenv, base := reloadEnv(t)
	dir := t.TempDir()
	path, secret, late := filepath.Join(dir, "rocketdelay.yaml"), filepath.Join(dir, "ops-token"), filepath.Join(dir, "late-token")
	head := fmt.Sprintf("shutdownTimeout: 5s\nsender: {baseURL: %q}\ntargets:\n  ops: {robots: [{name: r-ops, token: %q}]}\n",
		simURL, "file:"+secret)
	require.NoError(t, os.WriteFile(secret, []byte("rotate-old\n"), 0o600))
	require.NoError(t, os.WriteFile(path, []byte(head), 0o600))
	cfg, err := config.Load(path, getenv)
	require.NoError(t, err)

	logs := serveReloading(t, Reloading{Path: path, Getenv: getenv}, cfg)
	reaches := func(target, id, robot string) {
		t.Helper()
		require.Eventually(t, func() bool { return postAlert(t, base, target, id) }, time.Minute, 100*time.Millisecond,
			"%s accepted", id)
		if !assert.Eventually(t, func() bool {
			for _, m := range sim.Accepted() {
				if strings.Contains(m.Text, id) {
					return m.Robot == robot
				}
			}
			return false
		}, time.Minute, 50*time.Millisecond, "%s reaches robot %s", id, robot) {
			t.Fatalf("accepted: %+v\nthe service's last lines:\n%s", sim.Accepted(), lastLines(logs.String(), 30))
		}
	}
	reaches("ops", "rotate-1", "r-old")

	replaceFile(t, secret, "rotate-new\n") // the Secret rotated
	// Posted before the reload restarted it, rotate-2 would be sent by the old token.
	inForce := func(n int) {
		t.Helper()
		require.Eventually(t, func() bool { return strings.Count(logs.String(), "configuration in force") == n },
			time.Minute, 20*time.Millisecond, "configuration %d in force", n)
	}
	inForce(2)
	reaches("ops", "rotate-2", "r-new")

	// A target whose token's file is not there yet: the file does not load, and is tried
	// again until the secret arrives.
	replaceFile(t, path, head+fmt.Sprintf("  late: {robots: [{name: r-late, token: %q}]}\n", "file:"+late))
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "does not load") },
		time.Minute, 50*time.Millisecond, "the file that needs a missing secret is said")
	replaceFile(t, late, "rotate-late\n")
	inForce(3)
	reaches("late", "rotate-3", "r-late")
	require.Equal(t, 1, strings.Count(logs.String(), "does not load"), "said once, tried at every poll")
}

// reloadEnv is the local stack's environment for a service on a free local port, with
// the ingest token: its getenv, and the service's base URL.
func reloadEnv(t *testing.T) (func(string) string, string) {
	t.Helper()
	env := stackEnv(t)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	addr := ln.Addr().String()
	require.NoError(t, ln.Close())
	env["ROCKETDELAY_HTTP_ADDR"] = addr
	env["ROCKETDELAY_INGEST_TOKEN"] = testIngestToken
	return func(k string) string { return env[k] }, "http://" + addr
}

// serveReloading runs r (polling every 100 ms) with cfg until the test ends, which it
// then stops and requires to end cleanly; it returns the service's log.
func serveReloading(t *testing.T, r Reloading, cfg config.Config) *lockedWriter {
	t.Helper()
	logs := &lockedWriter{w: &bytes.Buffer{}}
	r.Poll = 100 * time.Millisecond
	r.Logger = func(config.Config) *slog.Logger { return slog.New(slog.NewJSONHandler(logs, nil)) }
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- r.Serve(ctx, cfg, ServeOptions{}) }()
	t.Cleanup(func() {
		cancel()
		require.NoError(t, <-done)
	})
	return logs
}

// postAlert publishes an alert id due now for target through base's API and reports
// whether it was accepted; false, not a failure, while the service is not listening
// (starting, or between two runs of a reload).
func postAlert(t *testing.T, base, target, id string) bool {
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/alerts",
		strings.NewReader(fmt.Sprintf(`{"target":%q,"id":%q,"in":"0s","text":%q}`, target, id, id)))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+testIngestToken)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return false
	}
	resp.Body.Close()
	return resp.StatusCode == http.StatusAccepted
}

// replaceFile writes body beside path and renames it over path, as Kubernetes updates a
// mounted ConfigMap or Secret: a poll never reads half a file. (Written in place, a poll
// once read it empty, which with the test's environment is a configuration that loads.)
func replaceFile(t *testing.T, path, body string) {
	t.Helper()
	require.NoError(t, os.WriteFile(path+".new", []byte(body), 0o600))
	require.NoError(t, os.Rename(path+".new", path))
}

// A reloaded configuration that never starts (its Postgres does not answer: a typo in a
// URL) is stopped after Reloading.Fallback, said, counted as failed, and the last
// configuration that started runs again: the replica is ready again. It waited, unready,
// for ever, and every replica reloading the same file with it; and after two such
// reloads in a row, it fell back to the first of them, which never started either.
func TestServeFallsBackFromAReloadThatNeverStarts(t *testing.T) {
	getenv, base := reloadEnv(t)
	closed := "postgres://u@" + testenv.ClosedAddr(t) + "/db"
	var broken atomic.Bool
	env := func(k string) string {
		if k == "ROCKETDELAY_POSTGRES_URL" && broken.Load() {
			return closed
		}
		return getenv(k)
	}
	path := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	body := "shutdownTimeout: 5s\ntargets:\n  ops: {robots: [{name: r-ops, token: reload-ops}]}\n"
	replaceFile(t, path, body)
	cfg, err := config.Load(path, env)
	require.NoError(t, err)
	logs := serveReloading(t, Reloading{Path: path, Getenv: env, Fallback: 5 * time.Second}, cfg)
	ready := func() bool {
		resp, err := http.Get(base + "/readyz")
		if err != nil {
			return false
		}
		resp.Body.Close()
		return resp.StatusCode == http.StatusOK
	}
	require.Eventually(t, ready, time.Minute, 50*time.Millisecond, "serve is ready")

	broken.Store(true) // the next loads name a Postgres that does not answer
	replaceFile(t, path, body+"# changed\n")
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "configuration in force") == 2 },
		time.Minute, 20*time.Millisecond, "the changed file is reloaded")
	// Changed again while that one waits: the one to fall back to is still the first,
	// the last that started (it was the one stopped while it waited, which never starts).
	replaceFile(t, path, body+"# changed again\n")
	require.Eventually(t, func() bool { return strings.Count(logs.String(), "configuration in force") == 3 },
		time.Minute, 20*time.Millisecond, "the file changed again is reloaded")
	require.Eventually(t, func() bool { return strings.Contains(logs.String(), "the previous one starts again") },
		time.Minute, 50*time.Millisecond, "the reload that never started is said")
	require.Contains(t, logs.String(), "did not start in time")
	require.Eventually(t, ready, time.Minute, 50*time.Millisecond, "the previous configuration runs again")
	_, metrics := get(t, base+"/metrics")
	require.Equal(t, 1.0, gaugeSum(metrics, `rocketdelay_config_reloads_total{result="failed"}`))
}
