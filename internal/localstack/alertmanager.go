package localstack

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"time"
)

// Alertmanager is a Prometheus Alertmanager of one's own: Debian's
// prometheus-alertmanager (deploy/local/up installs it, never starts it), on a free
// loopback port; clustering is off unless its command line turns it on.
type Alertmanager struct {
	// URL is its base URL, http://127.0.0.1:port.
	URL    string
	dir    string
	cmd    *exec.Cmd
	exited chan struct{}
}

// alertmanagerBinaries are the names Alertmanager's binary has: Debian's, then upstream's.
var alertmanagerBinaries = []string{"prometheus-alertmanager", "alertmanager"}

// StartAlertmanager starts an Alertmanager with the configuration config (alertmanager.yml
// as text) and waits until it is ready. args are added to its command line; clustering
// is off unless they set --cluster.listen-address.
func StartAlertmanager(ctx context.Context, config string, args ...string) (*Alertmanager, error) {
	var bin string
	for _, name := range alertmanagerBinaries {
		if p, err := exec.LookPath(name); err == nil {
			bin = p
			break
		}
	}
	if bin == "" {
		return nil, errors.New("localstack: prometheus-alertmanager is not installed (deploy/local/up installs it)")
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	addr := ln.Addr().String()
	ln.Close()
	dir, err := os.MkdirTemp("", "rocketdelay-alertmanager-")
	if err != nil {
		return nil, fmt.Errorf("localstack: %w", err)
	}
	cfg := filepath.Join(dir, "alertmanager.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localstack: %w", err)
	}
	logFile, err := os.Create(filepath.Join(dir, "alertmanager.log"))
	if err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localstack: %w", err)
	}
	defer logFile.Close()
	line := []string{"--config.file=" + cfg, "--storage.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr, "--log.level=warn"}
	if !slices.ContainsFunc(args, func(a string) bool { return strings.HasPrefix(a, "--cluster.listen-address=") }) {
		line = append(line, "--cluster.listen-address=")
	}
	cmd := exec.Command(bin, append(line, args...)...)
	cmd.Stdout, cmd.Stderr = logFile, logFile
	if err := cmd.Start(); err != nil {
		os.RemoveAll(dir)
		return nil, fmt.Errorf("localstack: start %s: %w", bin, err)
	}
	am := &Alertmanager{URL: "http://" + addr, dir: dir, cmd: cmd, exited: make(chan struct{})}
	go func() { _ = cmd.Wait(); close(am.exited) }()
	client := &http.Client{Timeout: time.Second}
	for deadline := time.Now().Add(20 * time.Second); ; {
		if resp, err := client.Get(am.URL + "/-/ready"); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return am, nil
			}
		}
		select {
		case <-am.exited:
			log, _ := os.ReadFile(filepath.Join(dir, "alertmanager.log"))
			am.Stop()
			return nil, fmt.Errorf("localstack: alertmanager exited at start: %s", lastLine(string(log)))
		case <-time.After(50 * time.Millisecond):
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			am.Stop()
			return nil, fmt.Errorf("localstack: alertmanager on %s was not ready within 20s", addr)
		}
	}
}

// Log returns what Alertmanager logged so far.
func (am *Alertmanager) Log() string {
	b, _ := os.ReadFile(filepath.Join(am.dir, "alertmanager.log"))
	return string(b)
}

// Stop kills Alertmanager, waits for it and removes its directory.
func (am *Alertmanager) Stop() {
	_ = am.cmd.Process.Kill()
	<-am.exited
	os.RemoveAll(am.dir)
}
