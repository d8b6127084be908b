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
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

// freePortBlock finds n consecutive free ports in 23000-26299: below the kernel's
// ephemeral range (a port there can become some test's client port between this check
// and the JVM's bind, and the server then exits with "Address already in use"), above
// the ports the fault suite's private stacks take (20000-21999), below the local stack's
// Sentinel ports (26380 up).
func freePortBlock(t *testing.T, n int) int {
	t.Helper()
	const first, end = 23000, 26300
	offset := int(time.Now().UnixNano() % (end - first))
	for i := 0; i < (end-first)/(n+7); i++ { // from a random place, wrapping around
		base := first + (offset+i*(n+7))%(end-first-n)
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

// logsOnFailure shows the end of every log under state's logs directory when the test
// fails: the servers' own words are what a failure here needs.
func logsOnFailure(t *testing.T, state string) {
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		files, _ := filepath.Glob(filepath.Join(state, "logs", "*.log"))
		for _, f := range files {
			b, _ := os.ReadFile(f)
			if len(b) > 3000 {
				b = b[len(b)-3000:]
			}
			t.Logf("--- end of %s:\n%s", f, b)
		}
	})
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
	logsOnFailure(t, state)
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

// A port some other process holds stops up with a message that names the port and the
// cause: a connection on it is seen before the start; a socket only bound to it (which
// no tool lists) makes the JVM fail, and up shows the JVM's exception.
func TestNameServerThatCannotBindSaysWhy(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a JVM; skipped under -short")
	}
	base := freePortBlock(t, 2)
	state := t.TempDir()
	logsOnFailure(t, state)
	up := func(port int) (string, error) {
		env := []string{"RD_STATE_DIR=" + state, "RD_NAMESRV_PORT=" + strconv.Itoa(port), "RD_READY_TIMEOUT=90"}
		t.Cleanup(func() { _, _ = script(t, env, "down") })
		return script(t, env, "up", "namesrv")
	}

	// A client connection whose local port is the name server's.
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	defer ln.Close()
	d := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 1), Port: base}}
	conn, err := d.Dial("tcp", ln.Addr().String())
	require.NoError(t, err)
	defer conn.Close()
	out, err := up(base)
	require.Error(t, err, out)
	require.Contains(t, out, fmt.Sprintf("port %d, wanted by namesrv, is taken by another process", base))
	require.NotContains(t, out, "starting RocketMQ name server", "nothing started")

	// A socket bound to the port without a connection.
	fd, err := syscall.Socket(syscall.AF_INET, syscall.SOCK_STREAM, 0)
	require.NoError(t, err)
	defer syscall.Close(fd)
	require.NoError(t, syscall.Bind(fd, &syscall.SockaddrInet4{Port: base + 1, Addr: [4]byte{127, 0, 0, 1}}))
	out, err = up(base + 1)
	require.Error(t, err, out)
	require.Contains(t, out, "namesrv exited during start")
	require.Contains(t, out, "exceptions in its log:")
	require.Contains(t, out, "java.net.BindException: Address already in use")
}

// A server just started in the background is not taken for dead before its exec: until
// then /proc shows the forked shell's command line, which a loaded machine can make last
// (CI saw "namesrv exited during start" this way; the command line is also briefly empty
// during each exec). running covers those gaps and still tells a live server from a dead
// one. The stand-in server's exec waits on a FIFO the script opens when it has looked at
// the server before the exec, and it says when it runs after the exec: no step depends on
// how fast the machine is.
func TestRunningCoversTheForkBeforeExec(t *testing.T) {
	state := t.TempDir()
	script := `
source ./lib.sh
mkdir -p "$PID_DIR"
gate="$RD_STATE_DIR/gate" ready="$RD_STATE_DIR/ready"
mkfifo "$gate"
held_log() { read -r _ <"$gate"; echo /dev/null; }
# A stand-in server whose command line carries namesrv's marker; its redirection, run in
# the forked shell before the exec, waits for the gate. After the exec it creates $ready.
bash -c ': >"$1"; sleep 30; :' "$ROCKETMQ_HOME_DIR/namesrv.conf" "$ready" >"$(held_log)" 2>&1 &
echo $! >"$PID_DIR/namesrv.pid"
pid_alive namesrv && echo "before exec: pid_alive" || echo "before exec: not pid_alive"
running namesrv && echo "before exec: running" || echo "before exec: not running"
echo >"$gate" # blocks until the forked shell reads: from here it goes on to the exec
for ((i = 0; i < 600; i++)); do [[ -e $ready ]] && break; sleep 0.05; done
[[ -e $ready ]] || echo "the stand-in server never ran"
pid_alive namesrv && echo "after exec: pid_alive" || echo "after exec: not pid_alive"
running namesrv && echo "after exec: running" || echo "after exec: not running"
kill "$(pid_of namesrv)"; wait || true
running namesrv && echo "killed: running" || echo "killed: not running"
`
	cmd := exec.Command("bash", "-c", script)
	cmd.Env = append(os.Environ(), "RD_STATE_DIR="+state)
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, string(out))
	require.Equal(t, strings.Join([]string{
		"before exec: not pid_alive", "before exec: running",
		"after exec: pid_alive", "after exec: running",
		"killed: not running",
	}, "\n")+"\n", string(out))
}
