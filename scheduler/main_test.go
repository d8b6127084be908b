package scheduler

import (
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
)

func TestMain(m *testing.M) {
	flag.Parse()
	// The client warns about routine things (a retry topic not created yet); tests show
	// its log only when asked to: RD_TEST_LOG=1 its warnings, RD_TEST_LOG=debug all of it.
	level := slog.LevelError + 4
	if os.Getenv("RD_TEST_LOG") != "" {
		level = slog.LevelWarn
		if os.Getenv("RD_TEST_LOG") == "debug" {
			level = slog.LevelDebug
		}
	}
	testClientLog = &clientLogTee{base: slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})}
	RouteClientLog(slog.New(testClientLog))
	buildBinary()
	goleak.VerifyTestMain(m, append(testenv.RocketMQStragglers, goleak.Cleanup(func(code int) {
		if binDir != "" {
			os.RemoveAll(binDir)
		}
		os.Exit(code)
	}))...)
}

var (
	binDir  string
	binPath string
	binErr  error
)

// buildBinary builds cmd/rocketdelay for the tests that run it as a subprocess, before
// any test runs: a build inside a parallel test would take the CPU from its neighbours,
// whose timings it would skew. Under -short no test runs it, and nothing is built.
func buildBinary() {
	if testing.Short() {
		binErr = fmt.Errorf("not built under -short")
		return
	}
	binDir, binErr = os.MkdirTemp("", "rocketdelay-bin-")
	if binErr != nil {
		return
	}
	binPath = filepath.Join(binDir, "rocketdelay")
	out, err := exec.Command("go", "build", "-o", binPath, "../cmd/rocketdelay").CombinedOutput()
	if err != nil {
		binErr = fmt.Errorf("go build: %v\n%s", err, out)
	}
}

// binary is cmd/rocketdelay, built by TestMain.
func binary(t *testing.T) string {
	t.Helper()
	require.NoError(t, binErr)
	return binPath
}
