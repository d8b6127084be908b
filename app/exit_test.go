package app

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

var (
	binaryOnce sync.Once
	binaryDir  string
	binaryErr  error
)

// binary builds cmd/rocketdelay with a plain `go build`, once per test run (TestMain
// removes it), and returns its path.
func binary(t *testing.T) string {
	t.Helper()
	binaryOnce.Do(func() {
		if binaryDir, binaryErr = os.MkdirTemp("", "rocketdelay-bin-"); binaryErr != nil {
			return
		}
		build := exec.Command("go", "build", "-o", filepath.Join(binaryDir, "rocketdelay"), "./cmd/rocketdelay")
		build.Dir = ".."
		if out, err := build.CombinedOutput(); err != nil {
			binaryErr = errors.New("go build: " + err.Error() + ": " + string(out))
		}
	})
	require.NoError(t, binaryErr)
	return filepath.Join(binaryDir, "rocketdelay")
}

// execResult is what the real program did.
type execResult struct {
	code        int
	out, errOut string
}

// execBinary runs the built program with args and only the environment env (and PATH),
// and returns its exit code and output.
func execBinary(t *testing.T, env map[string]string, args ...string) execResult {
	t.Helper()
	cmd := exec.Command(binary(t), args...)
	cmd.Env = []string{"PATH=" + os.Getenv("PATH"), "HOME=" + t.TempDir()}
	for k, v := range env {
		cmd.Env = append(cmd.Env, k+"="+v)
	}
	cmd.Dir = t.TempDir() // no ./rocketdelay.yaml
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err := cmd.Run()
	var exit *exec.ExitError
	if err != nil && !errors.As(err, &exit) {
		require.NoError(t, err)
	}
	return execResult{code: cmd.ProcessState.ExitCode(), out: out.String(), errOut: errOut.String()}
}

// A mistyped command or flag anywhere is a usage error, exit 2, never help and 0: a
// script that runs `rocketdelay failed retyr 42` learns that nothing was retried.
func TestUnknownCommandsAndFlagsAreUsageErrors(t *testing.T) {
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"failed", "retyr", "42"}, `unknown command "retyr" for "rocketdelay failed"; did you mean "retry"?`},
		{[]string{"failed"}, "rocketdelay failed needs a command: discard, list, retry, show, stats"},
		{[]string{"bogus"}, `unknown command "bogus" for "rocketdelay"`},
		{[]string{}, "rocketdelay needs a command: "},
		{[]string{"migrate", "upp"}, `unknown command "upp" for "rocketdelay migrate"; did you mean "up"?`},
		{[]string{"escalations", "lsit"}, `unknown command "lsit" for "rocketdelay escalations"`},
		{[]string{"config", "chek"}, `unknown command "chek" for "rocketdelay config"`},
		{[]string{"completion", "tcsh"}, `unknown command "tcsh" for "rocketdelay completion"`},
		{[]string{"help", "failed", "retyr"}, `unknown help topic "failed retyr"`},
		{[]string{"failed", "list", "--statsu", "dead"}, "unknown flag: --statsu"},
		{[]string{"failed", "--bogus", "list"}, "unknown flag: --bogus"},
	} {
		out, _, err := run(t, nil, tc.args...)
		require.ErrorIs(t, err, ErrUsage, "%v", tc.args)
		require.ErrorContains(t, err, tc.want, "%v", tc.args)
		require.Empty(t, out, "%v: nothing on stdout", tc.args)
	}
	out, _, err := run(t, nil, "failed", "--help")
	require.NoError(t, err, "asking for help is no mistake")
	require.Contains(t, out, "Available Commands:")
	out, _, err = run(t, nil, "help", "failed", "retry")
	require.NoError(t, err)
	require.Contains(t, out, "rocketdelay failed retry")
}

// The real program exits with the documented codes, which `rocketdelay --help` lists:
// 0 ok, 2 usage, and for `cancel` against the real stores 3 for an id rocketdelay has
// no trace of, 4 for an alert being sent or delivered, 5 when Redis or Postgres cannot
// be reached.
func TestExitCodesOfTheProgram(t *testing.T) {
	dsn := testenv.MigratedPostgres(t)
	rdb, prefix := testenv.Redis(t)
	ctx := context.Background()
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{CancelTTL: time.Hour})
	due := time.Now().Add(-time.Second).Truncate(time.Millisecond)
	put := func(id string) store.Entry {
		_, err := ws.Put(ctx, store.Entry{ID: id, Target: "ops", DueAt: due, Body: []byte("x")})
		require.NoError(t, err)
		c, err := ws.Claim(ctx, []string{id}, "replica-a/"+id)
		require.NoError(t, err)
		require.Len(t, c.Entries, 1)
		return c.Entries[0]
	}
	delivered := put("order-1-delivered")
	_, err := ws.Release(ctx, store.Delivered, delivered.Claim())
	require.NoError(t, err)
	put("order-2-in-flight")
	_, err = ws.Put(ctx, store.Entry{ID: "order-3-waiting", Target: "ops", DueAt: time.Now().Add(time.Hour), Body: []byte("x")})
	require.NoError(t, err)
	require.NoError(t, ws.TraceHop(ctx, store.HopNote{ID: "order-4-hopping", Due: time.Now().Add(time.Hour), Target: "ops", Hops: 1, Delay: time.Minute}))

	env := map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t), "ROCKETDELAY_POSTGRES_URL": dsn,
		"ROCKETDELAY_REDIS_KEY_PREFIX": prefix, "ROCKETDELAY_NAMESRV": "127.0.0.1:1"}
	with := func(k, v string) map[string]string {
		e := map[string]string{}
		for key, val := range env {
			e[key] = val
		}
		e[k] = v
		return e
	}
	for _, tc := range []struct {
		env    map[string]string
		args   []string
		code   int
		stderr string
	}{
		{nil, []string{"version"}, ExitOK, ""},
		{nil, []string{"failed", "retyr", "42"}, ExitUsage, `did you mean "retry"?`},
		{nil, []string{"cancel", "a", "b"}, ExitUsage, "accepts 1 arg(s)"},
		{env, []string{"cancel", "order-3-waiting"}, ExitOK, ""},
		{env, []string{"cancel", "order-4-hopping"}, ExitOK, ""},
		{env, []string{"cancel", "order-5-mistyped"}, ExitNotFound, "no alert order-5-mistyped is known"},
		{env, []string{"cancel", "order-1-delivered"}, ExitTooLate, "too late, it was already delivered"},
		{env, []string{"cancel", "order-2-in-flight"}, ExitTooLate, "too late, it is being sent right now"},
		{with("ROCKETDELAY_REDIS_URL", "redis://"+testenv.ClosedAddr(t)), []string{"cancel", "order-3-waiting"}, ExitUnavailable, "connect to redis"},
		{with("ROCKETDELAY_POSTGRES_URL", "postgres://u@"+testenv.ClosedAddr(t)+"/db"), []string{"cancel", "order-3-waiting"}, ExitUnavailable, "connect to postgres"},
	} {
		res := execBinary(t, tc.env, tc.args...)
		require.Equal(t, tc.code, res.code, "%v: stderr %s", tc.args, res.errOut)
		require.Contains(t, res.errOut, tc.stderr, "%v", tc.args)
	}
	help := execBinary(t, nil, "--help")
	require.Equal(t, ExitOK, help.code)
	require.Contains(t, help.out, exitCodesHelp)
}

// ExitCode tells the classes apart however deep they are wrapped.
func TestExitCode(t *testing.T) {
	for err, want := range map[error]int{
		nil:                             ExitOK,
		errors.New("boom"):              ExitFailure,
		usageError(newHelpCmd(), "bad"): ExitUsage,
		classError(ErrNotFound, "x"):    ExitNotFound,
		classError(ErrTooLate, "x"):     ExitTooLate,
		errors.Join(errors.New("a"), store.ErrUnavailable): ExitUnavailable,
		errors.Join(errors.New("a"), store.ErrNotFound):    ExitNotFound,
	} {
		require.Equal(t, want, ExitCode(err), "%v", err)
	}
	require.Equal(t, "x", classError(ErrTooLate, "x").Error(), "the class adds nothing to the message")
}

// publish refuses what the consumer would refuse before it sends anything (2, usage: a
// due time past the horizon or so far back that it is stale, a negative delay, a bad id, a
// file that cannot be read), and a broker it cannot reach is 5, unavailable: trying again
// may succeed. The name server here is closed, so a refusal that came after a send would
// be 5.
func TestPublishExitCodes(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(fmt.Sprintf(`rocketmq: {nameServers: [%q], sendTimeout: 200ms}
targets:
  ops: {robots: [{name: r1, token: t1}]}
`, testenv.ClosedAddr(t))), 0o600))
	for _, tc := range []struct {
		args []string
		code int
		says string
	}{
		{[]string{"--in", "31d", "--text", "x"}, ExitUsage, "beyond_horizon"},
		{[]string{"--at", "2020-01-01T00:00:00Z", "--text", "x"}, ExitUsage, "stale"},
		{[]string{"--in", "-5m", "--text", "x"}, ExitUsage, ""},
		{[]string{"--in", "1m", "--id", "a b", "--text", "x"}, ExitUsage, "bad_id"},
		{[]string{"--in", "1m", "--markdown-file", filepath.Join(dir, "missing.md"), "--title", "t"}, ExitUsage, "--markdown-file"},
		{[]string{"--in", "1m", "--json", filepath.Join(dir, "missing.json")}, ExitUsage, "--json"},
		{[]string{"--in", "1m", "--text", "x"}, ExitUnavailable, ""},
	} {
		_, _, err := run(t, nil, append([]string{"publish", "-f", file, "--target", "ops"}, tc.args...)...)
		require.Error(t, err, "%v", tc.args)
		require.Equal(t, tc.code, ExitCode(err), "%v: %v", tc.args, err)
		require.Contains(t, err.Error(), tc.says, "%v", tc.args)
	}
}
