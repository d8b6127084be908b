package chaos

import (
	"bytes"
	"context"
	"io"
	"net"
	"net/http"
	"regexp"
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/notify/chatsim"
	"github.com/rocketdelay/rocketdelay/notify/dingtalk"
)

// simulator is a DingTalk simulator on a loopback port that also notes, per alert id,
// requests the client abandoned before reading the answer (an HTTP timeout or a dropped
// connection seen from the sender): a message accepted by such a request may be sent
// again by design, so its duplicates are reported apart.
type simulator struct {
	*chatsim.Server
	URL string
	ids *regexp.Regexp

	srv *http.Server

	mu        sync.Mutex
	abandoned map[string]int // alert id → requests carrying it that the client gave up on
}

func startSimulator(robots []chatsim.Robot, throttle time.Duration, ids *regexp.Regexp) (*simulator, error) {
	s := &simulator{
		Server: dingtalk.NewSim(chatsim.Options{
			// The sender's own limit: one request over it fails the scenario.
			Robots: robots, Window: time.Second, Limit: senderLimit, Throttle: throttle,
		}),
		ids:       ids,
		abandoned: map[string]int{},
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	s.URL = "http://" + ln.Addr().String() + dingtalk.SimPath
	s.srv = &http.Server{Handler: http.HandlerFunc(s.serve), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = s.srv.Serve(ln) }()
	return s, nil
}

func (s *simulator) serve(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != dingtalk.SimPath {
		s.Server.ServeHTTP(w, r)
		return
	}
	// Read the body here to learn the ids, then hand the handler a copy.
	body, err := readAll(r, 1<<20)
	if err != nil {
		return
	}
	r.Body = newBody(body)
	defer func() {
		if r.Context().Err() == nil {
			return
		}
		s.mu.Lock()
		for _, id := range s.ids.FindAllString(string(body), -1) {
			s.abandoned[id]++
		}
		s.mu.Unlock()
	}()
	s.Server.ServeHTTP(w, r)
}

// abandonedIDs returns a copy of the ids seen in abandoned requests.
func (s *simulator) abandonedIDs() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make(map[string]int, len(s.abandoned))
	for k, v := range s.abandoned {
		out[k] = v
	}
	return out
}

// acceptances returns, per alert id found in accepted messages, when each was accepted.
func (s *simulator) acceptances() map[string][]time.Time {
	out := map[string][]time.Time{}
	for _, m := range s.Accepted() {
		seen := map[string]bool{}
		for _, id := range s.ids.FindAllString(m.Text+"\n"+string(m.Body), -1) {
			if !seen[id] { // the text and the body repeat the id
				seen[id] = true
				out[id] = append(out[id], m.At)
			}
		}
	}
	return out
}

func (s *simulator) close() {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	_ = s.srv.Shutdown(ctx)
	_ = s.srv.Close()
}

func readAll(r *http.Request, limit int64) ([]byte, error) {
	return io.ReadAll(io.LimitReader(r.Body, limit))
}

func newBody(b []byte) io.ReadCloser { return io.NopCloser(bytes.NewReader(b)) }
