package chaos

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// BuildBinary builds cmd/rocketdelay of the repository at root into dir.
func BuildBinary(ctx context.Context, root, dir string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 5*time.Minute)
	defer cancel()
	bin := filepath.Join(dir, "rocketdelay")
	cmd := exec.CommandContext(ctx, "go", "build", "-o", bin, "./cmd/rocketdelay")
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		return "", fmt.Errorf("chaos: go build ./cmd/rocketdelay: %v\n%s", err, out)
	}
	return bin, nil
}

// replica is one `rocketdelay serve` subprocess.
type replica struct {
	name string
	addr string // its HTTP listener
	cmd  *exec.Cmd
	done chan struct{}
	// root is its address of the simulator (simulator.listen), which its configuration
	// names; the env sets it.
	root string
}

// startReplica starts `rocketdelay serve -f cfg ARGS…` with env and waits until /readyz answers
// 200, at most 90s.
func startReplica(ctx context.Context, bin, cfg, logPath, name string, env []string, args ...string) (*replica, error) {
	r, err := launchReplica(bin, cfg, logPath, name, env, args...)
	if err != nil {
		return nil, err
	}
	if err := r.waitReady(ctx, 90*time.Second, logPath); err != nil {
		r.kill()
		return nil, err
	}
	return r, nil
}

// launchReplica starts `rocketdelay serve -f cfg ARGS…` with env, its output appended to
// logPath, and returns at once.
func launchReplica(bin, cfg, logPath, name string, env []string, args ...string) (*replica, error) {
	addr, err := FreeAddr()
	if err != nil {
		return nil, err
	}
	logf, err := os.OpenFile(logPath, os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return nil, err
	}
	cmd := exec.Command(bin, append([]string{"serve", "-f", cfg}, args...)...)
	cmd.Env = append(append(os.Environ(), env...), "ROCKETDELAY_HTTP_ADDR="+addr)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		logf.Close()
		return nil, fmt.Errorf("chaos: start %s: %w", name, err)
	}
	r := &replica{name: name, addr: addr, cmd: cmd, done: make(chan struct{})}
	go func() {
		_ = cmd.Wait()
		logf.Close()
		close(r.done)
	}()
	return r, nil
}

// waitReady waits until the replica's /readyz answers 200, at most timeout; it fails at
// once when the process exits (its log is logPath).
func (r *replica) waitReady(ctx context.Context, timeout time.Duration, logPath string) error {
	client := &http.Client{Timeout: time.Second}
	deadline := time.Now().Add(timeout)
	for time.Now().Before(deadline) {
		if r.exited() {
			return fmt.Errorf("chaos: %s exited during start (%s); see %s", r.name, r.cmd.ProcessState, logPath)
		}
		if code, _ := r.get(client, "/readyz"); code == http.StatusOK {
			return nil
		}
		if !sleep(ctx, 300*time.Millisecond) {
			break
		}
	}
	return fmt.Errorf("chaos: %s not ready within %s; see %s", r.name, timeout, logPath)
}

// exited reports whether the replica's process has ended.
func (r *replica) exited() bool {
	select {
	case <-r.done:
		return true
	default:
		return false
	}
}

// get answers the status and body of GET path on the replica, 0 when it does not answer.
func (r *replica) get(client *http.Client, path string) (int, string) {
	resp, err := client.Get("http://" + r.addr + path)
	if err != nil {
		return 0, ""
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(io.LimitReader(resp.Body, 16<<20))
	return resp.StatusCode, string(b)
}

// kill sends SIGKILL — no graceful stop, no give-back, no offset commit — and waits.
func (r *replica) kill() {
	if r == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGKILL)
	<-r.done
}

// pause sends SIGSTOP: the process holds everything it held, does nothing, and answers
// nobody, as a VM paused by its host or a process stuck in a long GC would.
func (r *replica) pause() { _ = r.cmd.Process.Signal(syscall.SIGSTOP) }

// resume sends SIGCONT to a paused replica.
func (r *replica) resume() { _ = r.cmd.Process.Signal(syscall.SIGCONT) }

// stop sends SIGTERM and waits up to 30s, then SIGKILLs.
func (r *replica) stop() {
	if r == nil {
		return
	}
	_ = r.cmd.Process.Signal(syscall.SIGCONT) // a paused replica could not stop
	_ = r.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-r.done:
	case <-time.After(30 * time.Second):
		r.kill()
	}
}

// localPorts returns the local ports of the TCP connections the replica has open (from
// /proc): a message the broker stored names its producer's connection by that port
// (MessageExt.BornHost), so the suite can tell which replica sent it. Nil when the
// process is gone or /proc cannot be read.
func (r *replica) localPorts() []int { return processPorts(r.cmd.Process.Pid, false) }

// processPorts returns the local ports of the TCP sockets process pid has open (only
// those that listen, when listening), from /proc.
func processPorts(pid int, listening bool) []int {
	fds, err := os.ReadDir(fmt.Sprintf("/proc/%d/fd", pid))
	if err != nil {
		return nil
	}
	inodes := map[string]bool{}
	for _, fd := range fds {
		link, err := os.Readlink(fmt.Sprintf("/proc/%d/fd/%s", pid, fd.Name()))
		if inode, ok := strings.CutPrefix(link, "socket:["); err == nil && ok {
			inodes[strings.TrimSuffix(inode, "]")] = true
		}
	}
	var ports []int
	for _, table := range []string{"tcp", "tcp6"} {
		f, err := os.Open(fmt.Sprintf("/proc/%d/net/%s", pid, table))
		if err != nil {
			continue
		}
		sc := bufio.NewScanner(f)
		for sc.Scan() {
			// sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode …
			fields := strings.Fields(sc.Text())
			if len(fields) < 10 || !inodes[fields[9]] || (listening && fields[3] != "0A") {
				continue
			}
			_, hexPort, _ := strings.Cut(fields[1], ":")
			if port, err := strconv.ParseInt(hexPort, 16, 32); err == nil {
				ports = append(ports, int(port))
			}
		}
		f.Close()
	}
	return ports
}
