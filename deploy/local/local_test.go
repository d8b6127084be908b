// Package local_test checks the deploy/local scripts themselves: a broker that cannot
// start is reported with its log, and down stops exactly what up started.
package local_test

import (
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freePortBlock finds n consecutive free loopback ports.
func freePortBlock(t *testing.T, n int) int {
	t.Helper()
	for base := 31000 + int(time.Now().UnixNano()%2000)*4; base < 60000; base += n + 7 {
		ok := true
		for p := base; p < base+n; p++ {
			ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
			if err != nil {
				ok = false
				break
			}
			ln.Close()
		}
		if ok {
			return base
		}
	}
	t.Fatal("no free ports")
	return 0
}

func script(t *testing.T, env []string, name string, args ...string) (string, error) {
	t.Helper()
	cmd := exec.Command("./"+name, args...)
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	return string(out), err
}

func processAlive(pid int) bool {
	_, err := os.Stat(fmt.Sprintf("/proc/%d", pid))
	return err == nil
}

func readPid(t *testing.T, path string) int {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	require.NoError(t, err)
	return pid
}

func TestBrokerThatCannotStartPointsAtItsLog(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM; skipped under -short")
	}
	state := t.TempDir()
	base := freePortBlock(t, 5)
	env := []string{
		"RD_STATE_DIR=" + state,
		"RD_NAMESRV_PORT=" + strconv.Itoa(base),
		"RD_BROKER_PORT=" + strconv.Itoa(base+3), // the broker also takes port-2 and port+1
		"RD_READY_TIMEOUT=90",
	}
	t.Cleanup(func() { _, _ = script(t, env, "down") })

	// "2x" is not a unit the broker knows: it refuses to start.
	out, err := script(t, env, "up", "--levels", "1s 2x", "namesrv", "broker")
	require.Error(t, err, out)
	brokerLog := filepath.Join(state, "logs", "broker.log")
	require.Contains(t, out, "broker exited during start; see its log: "+brokerLog)
	require.Contains(t, out, "parse message delay level failed")
	require.FileExists(t, brokerLog)

	// The name server did start; down stops it by its pid and waits for it to exit.
	pid := readPid(t, filepath.Join(state, "pids", "namesrv.pid"))
	require.True(t, processAlive(pid))
	out, err = script(t, env, "down")
	require.NoError(t, err, out)
	require.Contains(t, out, fmt.Sprintf("stopping namesrv (pid %d)", pid))
	require.False(t, processAlive(pid), "namesrv still running after down")

	out, err = script(t, env, "status")
	require.Error(t, err, "status must fail when components are down")
	require.Contains(t, out, "namesrv   stopped")
}

func TestUpRejectsUnknownArguments(t *testing.T) {
	for _, args := range [][]string{{"--profile", "fast"}, {"kafka"}} {
		out, err := script(t, []string{"RD_STATE_DIR=" + t.TempDir()}, "up", args...)
		require.Error(t, err)
		require.Contains(t, out, "ERROR")
	}
}
