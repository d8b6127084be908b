package chaos

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"
)

// Stack is a private local stack: deploy/local/up run under a state directory and ports
// of its own, so restarting its components never disturbs the shared stack.
type Stack struct {
	// Dir is the stack's RD_STATE_DIR.
	Dir string
	// Env is what deploy/local/env prints for it: ROCKETDELAY_NAMESRV, _BROKERS,
	// _REDIS_URL, _POSTGRES_URL, _LEVELS.
	Env map[string]string

	local string   // deploy/local
	vars  []string // RD_STATE_DIR and the ports
	log   io.Writer
	owned bool // Stop removes Dir
}

// StackOptions configure StartStack.
type StackOptions struct {
	// RepoRoot is the repository root (where deploy/local lives). Required.
	RepoRoot string
	// Dir, when set, is the state directory to use (and keep); a stack already running
	// there with the ports recorded in Dir/chaos-ports is reused. Default a new
	// temporary directory, removed by Stop.
	Dir string
	// Log receives the scripts' output. Default discarded.
	Log io.Writer
	// Timeout bounds each deploy/local command. Default 4m.
	Timeout time.Duration
	// Components limits what is started (redis, postgres, namesrv, broker). Default all.
	Components []string
	// Env adds variables of deploy/local/up (RD_TIMER_WHEEL=false: a broker without
	// timer messages).
	Env []string
}

const portsFile = "chaos-ports"

// StartStack starts a private stack with the test delay-level profile on free loopback
// ports and waits until every component is ready.
func StartStack(ctx context.Context, opts StackOptions) (*Stack, error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	s := &Stack{local: filepath.Join(opts.RepoRoot, "deploy", "local"), log: opts.Log}
	if opts.Dir == "" {
		dir, err := os.MkdirTemp("", "rocketdelay-chaos-")
		if err != nil {
			return nil, err
		}
		s.Dir, s.owned = dir, true
	} else {
		if err := os.MkdirAll(opts.Dir, 0o755); err != nil {
			return nil, err
		}
		s.Dir = opts.Dir
	}
	vars, err := s.ports()
	if err != nil {
		return nil, err
	}
	s.vars = vars
	if _, err := s.runEnv(ctx, opts.Env, "up", append([]string{"--profile", "test"}, opts.Components...)...); err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	out, err := s.run(ctx, "env")
	if err != nil {
		s.Stop(context.WithoutCancel(ctx))
		return nil, err
	}
	s.Env = parseExports(out)
	return s, nil
}

// ports returns the RD_* variables: the ones recorded in Dir, or new free ports.
func (s *Stack) ports() ([]string, error) {
	path := filepath.Join(s.Dir, portsFile)
	if b, err := os.ReadFile(path); err == nil {
		return strings.Fields(string(b)), nil
	}
	var taken []int
	// Ports below Linux's ephemeral range (32768 up): while a component is down its
	// clients keep dialling its port, and a dial to a free port inside that range can be
	// given that very port as its own local one (a TCP self-connect), which then keeps the
	// component from starting again.
	free := func(n int) (int, error) { // n consecutive free ports, returns the first
		for range 200 {
			// Below 22000, so that a cluster node's bus port (+10000) stays below the
			// ephemeral range too; it must be free as well.
			p := 20000 + rand.IntN(2000)
			ok := true
			for i := range n {
				if !portFree(p+i) || contains(taken, p+i) || !portFree(p+i+10000) {
					ok = false
					break
				}
			}
			if ok {
				for i := range n {
					taken = append(taken, p+i)
				}
				return p, nil
			}
		}
		return 0, errors.New("chaos: no free loopback port found")
	}
	ns, err := free(1)
	if err != nil {
		return nil, err
	}
	broker, err := free(4) // the broker uses port-2 (fast channel), port, port+1 (HA)
	if err != nil {
		return nil, err
	}
	redis, err := free(1)
	if err != nil {
		return nil, err
	}
	pg, err := free(1)
	if err != nil {
		return nil, err
	}
	sentinelRedis, err := free(2) // primary and replica
	if err != nil {
		return nil, err
	}
	sentinels, err := free(3)
	if err != nil {
		return nil, err
	}
	cluster, err := free(3)
	if err != nil {
		return nil, err
	}
	vars := []string{
		"RD_STATE_DIR=" + s.Dir,
		"RD_NAMESRV_PORT=" + strconv.Itoa(ns),
		"RD_BROKER_PORT=" + strconv.Itoa(broker+2),
		"RD_REDIS_PORT=" + strconv.Itoa(redis),
		"RD_PG_PORT=" + strconv.Itoa(pg),
		"RD_SENTINEL_REDIS_PORT=" + strconv.Itoa(sentinelRedis),
		"RD_SENTINEL_PORT=" + strconv.Itoa(sentinels),
		"RD_CLUSTER_PORT=" + strconv.Itoa(cluster),
	}
	if err := os.WriteFile(path, []byte(strings.Join(vars, "\n")+"\n"), 0o644); err != nil {
		return nil, err
	}
	return vars, nil
}

func contains(xs []int, x int) bool {
	for _, v := range xs {
		if v == x {
			return true
		}
	}
	return false
}

func portFree(p int) bool {
	ln, err := net.Listen("tcp", "127.0.0.1:"+strconv.Itoa(p))
	if err != nil {
		return false
	}
	ln.Close()
	return true
}

// FreeAddr returns a free loopback host:port.
func FreeAddr() (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	defer ln.Close()
	return ln.Addr().String(), nil
}

func parseExports(out string) map[string]string {
	env := map[string]string{}
	sc := bufio.NewScanner(strings.NewReader(out))
	for sc.Scan() {
		line, ok := strings.CutPrefix(strings.TrimSpace(sc.Text()), "export ")
		if !ok {
			continue
		}
		k, v, ok := strings.Cut(line, "=")
		if ok {
			env[k] = strings.Trim(v, "'")
		}
	}
	return env
}

// run runs deploy/local/NAME ARGS under the stack's variables, bounded.
func (s *Stack) run(ctx context.Context, name string, args ...string) (string, error) {
	return s.runEnv(ctx, nil, name, args...)
}

// runEnv is run with extra variables.
func (s *Stack) runEnv(ctx context.Context, env []string, name string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(ctx, 4*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, filepath.Join(s.local, name), args...)
	cmd.Env = append(append(os.Environ(), s.vars...), env...)
	cmd.Env = append(cmd.Env, "RD_READY_TIMEOUT=120")
	var stdout, stderr bytes.Buffer
	cmd.Stdout = &stdout
	cmd.Stderr = io.MultiWriter(&stderr, s.log)
	cmd.WaitDelay = 5 * time.Second
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("chaos: deploy/local/%s %s: %w\n%s", name, strings.Join(args, " "), err, tail(stderr.String(), 2000))
	}
	return stdout.String(), nil
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "…" + s[len(s)-n:]
}

// Down stops one component (redis, postgres, namesrv, broker) with deploy/local/down.
func (s *Stack) Down(ctx context.Context, component string) error {
	_, err := s.run(ctx, "down", component)
	return err
}

// Up starts one component again with deploy/local/up and waits until it is ready; env
// adds variables of deploy/local/up (RD_REDIS_FSYNC).
func (s *Stack) Up(ctx context.Context, component string, env ...string) error {
	_, err := s.runEnv(ctx, env, "up", "--profile", "test", component)
	return err
}

// StartTopology starts one of the optional Redis topologies of the stack, "sentinel" or
// "redis-cluster" (deploy/local/up), and adds its addresses to Env.
func (s *Stack) StartTopology(ctx context.Context, topology string) error {
	if _, err := s.run(ctx, "up", topology); err != nil {
		return err
	}
	out, err := s.run(ctx, "env")
	if err != nil {
		return err
	}
	s.Env = parseExports(out)
	return nil
}

// SentinelPrimary asks the first sentinel for master's primary, host:port.
func (s *Stack) SentinelPrimary(ctx context.Context, master string) (string, error) {
	host, port, _ := strings.Cut(strings.Split(s.Env["ROCKETDELAY_LOCAL_SENTINEL"], ",")[0], ":")
	out, err := exec.CommandContext(ctx, "redis-cli", "-h", host, "-p", port, "sentinel", "get-master-addr-by-name", master).Output()
	f := strings.Fields(string(out))
	if err != nil || len(f) != 2 {
		return "", fmt.Errorf("chaos: ask sentinel %s:%s for %s: %v %q", host, port, master, err, out)
	}
	return f[0] + ":" + f[1], nil
}

// WaitPromotion waits until the sentinels name another primary for master than from,
// and returns it.
func (s *Stack) WaitPromotion(ctx context.Context, master, from string, timeout time.Duration) (string, error) {
	for deadline := time.Now().Add(timeout); time.Now().Before(deadline); {
		if p, err := s.SentinelPrimary(ctx, master); err == nil && p != from {
			return p, nil
		}
		if !sleep(ctx, 200*time.Millisecond) {
			return "", ctx.Err()
		}
	}
	return "", fmt.Errorf("chaos: the sentinels did not promote a new primary for %s within %s", master, timeout)
}

// Kill SIGKILLs a process of the stack by its pid file (redis, sentinel-primary, …) and
// waits until it is gone.
func (s *Stack) Kill(ctx context.Context, name string) error {
	b, err := os.ReadFile(filepath.Join(s.Dir, "pids", name+".pid"))
	if err != nil {
		return fmt.Errorf("chaos: %s pid: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return fmt.Errorf("chaos: %s pid %q: %w", name, b, err)
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("chaos: SIGKILL %s (pid %d): %w", name, pid, err)
	}
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); {
		if syscall.Kill(pid, 0) != nil {
			return nil
		}
		if !sleep(ctx, 50*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("chaos: %s (pid %d) still alive 10s after SIGKILL", name, pid)
}

// ListenPort is the TCP port a process of the stack (redis, sentinel-replica, …) listens
// on, found by its pid file and /proc.
func (s *Stack) ListenPort(name string) (int, error) {
	b, err := os.ReadFile(filepath.Join(s.Dir, "pids", name+".pid"))
	if err != nil {
		return 0, fmt.Errorf("chaos: %s pid: %w", name, err)
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil {
		return 0, fmt.Errorf("chaos: %s pid %q: %w", name, b, err)
	}
	ports := processPorts(pid, true)
	if len(ports) == 0 {
		return 0, fmt.Errorf("chaos: %s (pid %d) listens on no TCP port", name, pid)
	}
	return slices.Min(ports), nil
}

// KillRedis SIGKILLs the stack's Redis — no shutdown, no final AOF rewrite or flush —
// and waits until it is gone.
func (s *Stack) KillRedis(ctx context.Context) error { return s.Kill(ctx, "redis") }

// RestartBroker stops the broker gracefully (deploy/local/down broker) and starts the
// same java command line again, keeping its store: deploy/local/up empties the store on
// every start, which would be a new, empty broker rather than a restart. It returns once
// the broker listens again; the caller's publishes and the replicas' consumers find it
// through the name server.
func (s *Stack) RestartBroker(ctx context.Context, downFor time.Duration) error {
	pidFile := filepath.Join(s.Dir, "pids", "broker.pid")
	b, err := os.ReadFile(pidFile)
	if err != nil {
		return fmt.Errorf("chaos: broker pid: %w", err)
	}
	pid := strings.TrimSpace(string(b))
	cmdline, err := os.ReadFile("/proc/" + pid + "/cmdline")
	if err != nil {
		return fmt.Errorf("chaos: broker command line: %w", err)
	}
	args := strings.Split(strings.TrimRight(string(cmdline), "\x00"), "\x00")
	if len(args) < 2 || !strings.HasSuffix(args[len(args)-1], "broker.conf") {
		return fmt.Errorf("chaos: pid %s is not the broker (%q)", pid, args)
	}
	if err := s.Down(ctx, "broker"); err != nil {
		return err
	}
	sleep(ctx, downFor)
	logf, err := os.OpenFile(filepath.Join(s.Dir, "logs", "broker.log"), os.O_WRONLY|os.O_APPEND|os.O_CREATE, 0o644)
	if err != nil {
		return err
	}
	defer logf.Close()
	java, err := exec.LookPath(args[0])
	if err != nil {
		return err
	}
	cmd := exec.Command(java, args[1:]...)
	cmd.Env = append(os.Environ(), "ROCKETMQ_HOME="+filepath.Join(s.Dir, "rocketmq"))
	cmd.Stdout, cmd.Stderr = logf, logf
	cmd.SysProcAttr = &syscall.SysProcAttr{Setsid: true}
	if err := cmd.Start(); err != nil {
		return fmt.Errorf("chaos: restart broker: %w", err)
	}
	newPid := cmd.Process.Pid
	go func() { _ = cmd.Wait() }() // reap it if it ever exits while we run
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(newPid)+"\n"), 0o644); err != nil {
		return err
	}
	addr := strings.TrimPrefix(s.Env["ROCKETDELAY_BROKERS"], "")
	deadline := time.Now().Add(90 * time.Second)
	for time.Now().Before(deadline) {
		if c, err := net.DialTimeout("tcp", addr, time.Second); err == nil {
			c.Close()
			return nil
		}
		if !sleep(ctx, 500*time.Millisecond) {
			return ctx.Err()
		}
	}
	return fmt.Errorf("chaos: restarted broker (pid %d) does not listen on %s after 90s", newPid, addr)
}

// Stop stops every component with deploy/local/down and removes the state directory
// when StartStack created it.
func (s *Stack) Stop(ctx context.Context) error {
	_, err := s.run(ctx, "down")
	if s.owned && err == nil {
		_ = os.RemoveAll(s.Dir)
	}
	return err
}

// sleep waits d or until ctx ends; it reports whether d passed.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
