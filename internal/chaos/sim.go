package chaos

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// simulator is a chat simulator of every chat platform's robots on loopback ports
// that also records every request to a robot: which replica instance sent it (each has
// an address of its own), when it arrived and when it was answered, the alert ids it
// carried, and whether the client gave up on it before reading the answer (an HTTP
// timeout, a dropped connection, a SIGKILL). An acceptance is matched to its request
// (acceptances), so that a duplicate can be judged by what happened to that very
// request (ambiguity.go).
type simulator struct {
	*chatsim.Server
	ids *regexp.Regexp

	mu       sync.Mutex
	servers  []*http.Server
	requests map[string][]*simRequest // by alert id
}

// simRequest is one request to a robot as the simulator saw it.
type simRequest struct {
	instance           string    // the replica instance that sent it
	received, answered time.Time // answered is zero while it is being served
	abandoned          bool      // the client was gone before the answer was written
}

// startSimulator starts a simulator of robots, each of which accepts its Limit per
// senderWindow: the sender's own limit, so that one request over it fails the scenario.
// A robot that goes over it, or is throttled by an injected fault, stays throttled for
// throttle.
func startSimulator(robots []chatsim.Robot, throttle time.Duration, ids *regexp.Regexp) *simulator {
	return &simulator{
		Server:   chatsim.New(chatsim.Options{Robots: robots, Window: senderWindow, Throttle: throttle}),
		ids:      ids,
		requests: map[string][]*simRequest{},
	}
}

// listen serves the simulator on a new loopback port whose requests are recorded as
// instance's, and returns its root URL ("http://127.0.0.1:PORT"); Server.URL gives each
// platform's base URL under it.
func (s *simulator) listen(instance string) (string, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return "", err
	}
	srv := &http.Server{Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { s.serve(instance, w, r) }),
		ReadHeaderTimeout: 10 * time.Second}
	s.mu.Lock()
	s.servers = append(s.servers, srv)
	s.mu.Unlock()
	go func() { _ = srv.Serve(ln) }()
	return "http://" + ln.Addr().String(), nil
}

// robotPath reports whether path is where a platform's robots receive messages (a path
// that ends in "/" takes the robot's credential after it: Feishu's hook).
func robotPath(path string) bool {
	for _, pl := range platforms.All {
		p := pl.Sim
		if path == p.Path() || strings.HasSuffix(p.Path(), "/") && strings.HasPrefix(path, p.Path()) {
			return true
		}
	}
	return false
}

func (s *simulator) serve(instance string, w http.ResponseWriter, r *http.Request) {
	if !robotPath(r.URL.Path) {
		s.Server.ServeHTTP(w, r)
		return
	}
	// Read the body here to learn the ids, then hand the handler a copy.
	body, err := readAll(r, 1<<20)
	if err != nil {
		return
	}
	r.Body = newBody(body)
	req := &simRequest{instance: instance, received: time.Now()}
	ids := s.ids.FindAllString(string(body), -1)
	s.mu.Lock()
	seen := map[string]bool{}
	for _, id := range ids {
		if !seen[id] { // the text and the body repeat the id
			seen[id] = true
			s.requests[id] = append(s.requests[id], req)
		}
	}
	s.mu.Unlock()
	s.Server.ServeHTTP(w, r)
	s.mu.Lock()
	req.answered, req.abandoned = time.Now(), r.Context().Err() != nil
	s.mu.Unlock()
}

// acceptances returns, per alert id found in accepted messages, each acceptance with the
// request that carried it: the one of that id whose time at the simulator spans the
// acceptance.
func (s *simulator) acceptances() map[string][]acceptance {
	accepted := s.Accepted()
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string][]acceptance{}
	for _, m := range accepted {
		seen := map[string]bool{}
		for _, id := range s.ids.FindAllString(m.Text+"\n"+string(m.Body), -1) {
			if seen[id] {
				continue
			}
			seen[id] = true
			a := acceptance{at: m.At, sent: m.At, answered: m.At}
			for _, req := range s.requests[id] {
				if !m.At.Before(req.received) && (req.answered.IsZero() || !m.At.After(req.answered)) {
					a.instance, a.sent, a.answered, a.abandoned = req.instance, req.received, req.answered, req.abandoned
					if req.answered.IsZero() { // still being answered: not yet later than now
						a.answered = time.Now()
					}
					break
				}
			}
			out[id] = append(out[id], a)
		}
	}
	return out
}

func (s *simulator) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	s.mu.Lock()
	servers := s.servers
	s.mu.Unlock()
	for _, srv := range servers {
		_ = srv.Shutdown(ctx)
		_ = srv.Close()
	}
}

func readAll(r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r.Body, limit))
}

func newBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
