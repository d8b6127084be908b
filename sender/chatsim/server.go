// Package chatsim is a chat-robot webhook simulator for tests and demos: a real
// net/http server that serves the robots of DingTalk, WeCom and Feishu at once, each at
// its platform's path and with its platform's documented behaviour. The engine here holds
// what every platform shares: robots by credential, the per-robot rate limits (a
// per-minute window, and a per-second one where the platform has it), the lock-out that
// follows going over them, injected faults, the record of every accepted message and the
// control API. Each platform's rules come from its descriptor (sender.Platform's Sim,
// the sender.SimRules of its channel package): where its robots listen, how a request
// names its robot, what the platform checks (signature and its window, keyword, size,
// the message's shape) and how it answers. The platforms served are those of the
// registry (package sender/platforms) unless Options say otherwise.
//
// It is a simulator: it must never be pointed at by a production configuration, and it
// keeps everything in memory.
package chatsim

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// Robot is one simulated robot.
type Robot struct {
	// Name identifies the robot in Accepted and /_sim/messages; default its position,
	// "robot1", "robot2", ….
	Name string `yaml:"name" json:"name"`
	// Kind is its platform's kind ("dingtalk", "wecom", "feishu", "slack", …); default
	// the first of Options.Platforms.
	Kind string `yaml:"kind" json:"kind,omitempty"`
	// Token is its credential (DingTalk's access_token, WeCom's key, Feishu's hook
	// token, Slack's webhook path). Required, unique.
	Token string `yaml:"token" json:"-"`
	// Secret is its signing secret; when set, every request must be signed.
	Secret string `yaml:"secret" json:"-"`
	// Keyword, when set, must appear in every message.
	Keyword string `yaml:"keyword" json:"keyword,omitempty"`
	// Limit, when set, is what this robot accepts per window instead of its platform's:
	// a robot shared with other senders, whose rest of the budget they use.
	Limit int `yaml:"limit" json:"limit,omitempty"`
}

// Defaults of Options.
const (
	DefaultWindow = time.Minute
	DefaultSkew   = time.Hour
)

// Options configure a Server. Zero fields take their defaults.
type Options struct {
	// Platforms are the platforms served, each at its path. Default every platform of
	// the registry (platforms.All).
	Platforms []sender.Platform `yaml:"-"`
	// Robots are the known robots.
	Robots []Robot `yaml:"robots"`
	// Limit, when set, is the messages every robot accepts per Window instead of its
	// platform's.
	Limit int `yaml:"limit"`
	// Window is the sliding window of the limits. Default 60s; the per-second limits
	// count in a sixtieth of it.
	Window time.Duration `yaml:"window"`
	// Throttle, when set, is how long a robot that went over its limit stays throttled
	// instead of its platform's lock-out (DingTalk's ten minutes; none for WeCom and
	// Feishu).
	Throttle time.Duration `yaml:"throttle"`
	// Skew is how far a signature's timestamp may be from the server's clock. Default 1h.
	Skew time.Duration `yaml:"skew"`
	// Now is the server's clock; default time.Now.
	Now func() time.Time `yaml:"-"`
	// Logger logs every answer at debug level; default none.
	Logger *slog.Logger `yaml:"-"`
}

// FaultKind is a kind of injected fault.
type FaultKind string

// The kinds of faults.
const (
	// FaultErrcode answers with the platform's error code Fault.Errcode (e.g. -1, 310000).
	FaultErrcode FaultKind = "errcode"
	// FaultStatus answers HTTP Fault.Status (e.g. 503, 429) with Retry-After when
	// Fault.RetryAfter is set.
	FaultStatus FaultKind = "status"
	// FaultSlow waits Fault.Delay before handling the request normally.
	FaultSlow FaultKind = "slow"
	// FaultDrop closes the connection without an answer.
	FaultDrop FaultKind = "drop"
	// FaultMalformed answers HTTP 200 with a body that is not JSON.
	FaultMalformed FaultKind = "malformed"
	// FaultThrottle throttles the robot now, as if it had gone over its limit.
	FaultThrottle FaultKind = "throttle"
)

// Fault is a fault injected for one token.
type Fault struct {
	// Kind says what happens.
	Kind FaultKind `json:"kind"`
	// Count is how many requests it affects; 0 means until ClearFaults.
	Count int `json:"count"`
	// Errcode is the error code of FaultErrcode.
	Errcode int `json:"errcode,omitempty"`
	// Status is the HTTP status of FaultStatus.
	Status int `json:"status,omitempty"`
	// RetryAfter is the Retry-After of FaultStatus, whole seconds.
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	// Delay is the wait of FaultSlow.
	Delay time.Duration `json:"delay,omitempty"`
}

// Message is one accepted message.
type Message struct {
	// Seq numbers accepted messages from 1, in the order they were accepted.
	Seq int `json:"seq"`
	// Robot is the name of the robot that accepted it.
	Robot string `json:"robot"`
	// Kind is the robot's platform.
	Kind string `json:"kind"`
	// At is when it was accepted, by the server's clock.
	At time.Time `json:"at"`
	// MsgType is its type.
	MsgType string `json:"msgtype"`
	// Text is its text content: the content, or the title and text of the other types.
	Text string `json:"text"`
	// Markup is what its group shows as markup: mentions, links, images, headings
	// (sender.SimReceived.Markup).
	Markup []string `json:"markup,omitempty"`
	// Body is the request body as sent.
	Body json.RawMessage `json:"body"`
}

// Stats count the server's answers.
type Stats struct {
	// Requests counts every request to a robot path.
	Requests int `json:"requests"`
	// Accepted counts messages accepted.
	Accepted int `json:"accepted"`
	// OverLimit counts requests over a robot's limits: answered over the limit or, while
	// the robot was throttled for it, locked out. A sender that respects the limits keeps
	// it at 0. Answers of a throttle injected with FaultThrottle count as Faults.
	OverLimit int `json:"overLimit"`
	// Busy counts the refusals of Feishu's busy moments (11232) that the robot's own limits
	// did not cause.
	Busy int `json:"busy"`
	// Faults counts answers shaped by an injected fault.
	Faults int `json:"faults"`
	// Rejected counts other refusals (unknown token, bad signature, keyword, size, body).
	Rejected int `json:"rejected"`
	// ByRobot counts, per robot name, the over-limit answers.
	ByRobot map[string]RobotStats `json:"byRobot,omitempty"`
}

// RobotStats count one robot's over-limit answers.
type RobotStats struct {
	// TooFast counts answers over the robot's limits (DingTalk's 130101, WeCom's 45009,
	// Feishu's 9499).
	TooFast int `json:"tooFast"`
	// Redirects counts answers while the robot was locked out (DingTalk's HTTP 302).
	Redirects int `json:"redirects"`
}

type robotState struct {
	Robot
	platform       sender.Platform
	rules          sender.SimRules
	limits         sender.SimLimits
	sends          []time.Time // accepted-or-counted requests within the window
	throttledUntil time.Time
	// injected: the throttle was injected (FaultThrottle), not earned by going over the
	// limit, so its answers count as Faults, not OverLimit.
	injected bool
	faults   []*Fault
}

// Server is the simulator. It is an http.Handler; Start runs it for a test, and the
// `rocketdelay chat-sim` command runs it as a program.
type Server struct {
	opts  Options
	paths map[string]sender.Platform // by path

	mu       sync.Mutex
	robots   map[string]*robotState // by kind and token
	accepted []Message
	stats    Stats
}

// New returns a simulator of opts's platforms and robots. It panics without a platform,
// on a robot without a token, a token used twice on one platform, or a robot of a
// platform not served.
func New(opts Options) *Server {
	if len(opts.Platforms) == 0 {
		opts.Platforms = platforms.All
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Skew <= 0 {
		opts.Skew = DefaultSkew
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.Logger == nil {
		opts.Logger = slog.New(slog.DiscardHandler)
	}
	s := &Server{opts: opts, robots: map[string]*robotState{}, paths: map[string]sender.Platform{}}
	kinds := map[string]sender.Platform{}
	for _, p := range opts.Platforms {
		s.paths[p.Sim.Path()] = p
		kinds[p.Kind()] = p
	}
	for i, r := range opts.Robots {
		if r.Token == "" {
			panic(fmt.Sprintf("chatsim: robot %d has no token", i+1))
		}
		if r.Kind == "" {
			r.Kind = opts.Platforms[0].Kind()
		}
		platform, ok := kinds[r.Kind]
		if !ok {
			panic(fmt.Sprintf("chatsim: robot %d is of kind %q, which is not served", i+1, r.Kind))
		}
		if _, dup := s.robots[r.Kind+"/"+r.Token]; dup {
			panic(fmt.Sprintf("chatsim: robot %d repeats a token", i+1))
		}
		if r.Name == "" {
			r.Name = "robot" + strconv.Itoa(i+1)
		}
		limits := platform.Sim.Limits()
		if opts.Limit > 0 {
			limits.PerWindow = opts.Limit
		}
		if r.Limit > 0 {
			limits.PerWindow = r.Limit
		}
		if opts.Throttle > 0 {
			limits.Lockout = opts.Throttle
		}
		s.robots[r.Kind+"/"+r.Token] = &robotState{Robot: r, platform: platform, rules: platform.Sim, limits: limits}
	}
	return s
}

// URL is the webhook base of platform kind on a server whose root is root
// ("http://127.0.0.1:18090"): what a configuration's base URL is set to.
func (s *Server) URL(root, kind string) string {
	for path, p := range s.paths {
		if p.Kind() == kind {
			return root + strings.TrimSuffix(path, "/")
		}
	}
	return ""
}

// SenderKeys are the keys of a configuration's sender section that point every platform
// served at this server, whose root is root, as YAML flow mapping entries:
// baseURL: "…", wecom: {baseURL: "…"}, ….
func (s *Server) SenderKeys(root string) string {
	var keys []string
	for _, p := range s.opts.Platforms {
		u := strconv.Quote(s.URL(root, p.Kind()))
		if p.Config.Section == "" {
			keys = append(keys, "baseURL: "+u)
		} else {
			keys = append(keys, p.Config.Section+": {baseURL: "+u+"}")
		}
	}
	return strings.Join(keys, ", ")
}

// find returns the robot with token; the caller holds s.mu.
func (s *Server) find(token string) (*robotState, bool) {
	for _, r := range s.robots {
		if r.Token == token {
			return r, true
		}
	}
	return nil, false
}

// Inject adds a fault for the robot with token; faults apply in the order injected.
func (s *Server) Inject(token string, f Fault) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.find(token)
	if !ok {
		return errors.New("chatsim: unknown token")
	}
	switch f.Kind {
	case FaultErrcode, FaultStatus, FaultSlow, FaultDrop, FaultMalformed:
	case FaultThrottle:
		lockout := r.limits.Lockout
		if lockout <= 0 {
			lockout = s.opts.Window
		}
		r.throttledUntil = s.opts.Now().Add(lockout)
		r.injected = true
		return nil
	default:
		return fmt.Errorf("chatsim: unknown fault kind %q", f.Kind)
	}
	r.faults = append(r.faults, &f)
	return nil
}

// ClearFaults removes the faults and the throttling of the robot with token, or of
// every robot when token is "".
func (s *Server) ClearFaults(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, r := range s.robots {
		if token == "" || r.Token == token {
			r.faults = nil
			r.throttledUntil = time.Time{}
		}
	}
}

// Accepted returns the accepted messages in the order they were accepted.
func (s *Server) Accepted() []Message {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.accepted)
}

// Stats returns the answer counts.
func (s *Server) Stats() Stats {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := s.stats
	st.ByRobot = make(map[string]RobotStats, len(s.stats.ByRobot))
	for k, v := range s.stats.ByRobot {
		st.ByRobot[k] = v
	}
	return st
}

// countRobot updates robot's counts; the caller holds s.mu.
func (s *Server) countRobot(robot string, f func(*RobotStats)) {
	if s.stats.ByRobot == nil {
		s.stats.ByRobot = map[string]RobotStats{}
	}
	c := s.stats.ByRobot[robot]
	f(&c)
	s.stats.ByRobot[robot] = c
}

// Reset forgets the accepted messages, the counts, the windows, throttling and faults.
func (s *Server) Reset() {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.accepted, s.stats = nil, Stats{}
	for _, r := range s.robots {
		r.sends, r.faults, r.throttledUntil = nil, nil, time.Time{}
	}
}

// ServeHTTP answers robot sends on each platform's path and the control API:
//
//	GET    /_sim/messages   accepted messages, JSON array
//	GET    /_sim/stats      Stats, JSON
//	POST   /_sim/faults?token=T   inject a Fault given as JSON
//	DELETE /_sim/faults[?token=T] clear faults
//	POST   /_sim/reset      Reset
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if rules, ok := s.rulesOf(r.URL.Path); ok {
		s.serveSend(w, r, rules)
		return
	}
	switch {
	case r.URL.Path == "/_sim/messages" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Accepted())
	case r.URL.Path == "/_sim/stats" && r.Method == http.MethodGet:
		writeJSON(w, http.StatusOK, s.Stats())
	case r.URL.Path == "/_sim/faults" && r.Method == http.MethodPost:
		var f Fault
		if err := json.NewDecoder(r.Body).Decode(&f); err != nil {
			http.Error(w, "fault: "+err.Error(), http.StatusBadRequest)
			return
		}
		if err := s.Inject(r.URL.Query().Get("token"), f); err != nil {
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_sim/faults" && r.Method == http.MethodDelete:
		s.ClearFaults(r.URL.Query().Get("token"))
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == "/_sim/reset" && r.Method == http.MethodPost:
		s.Reset()
		w.WriteHeader(http.StatusNoContent)
	case r.URL.Path == sender.SimThrottledPath:
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><body>访问过于频繁 (too many requests)</body></html>")
	default:
		http.NotFound(w, r)
	}
}

// rulesOf returns the platform whose robots listen at path.
func (s *Server) rulesOf(path string) (sender.Platform, bool) {
	if p, ok := s.paths[path]; ok && !strings.HasSuffix(path, "/") {
		return p, true
	}
	for prefix, p := range s.paths {
		if strings.HasSuffix(prefix, "/") && strings.HasPrefix(path, prefix) && len(path) > len(prefix) {
			return p, true
		}
	}
	return sender.Platform{}, false
}

func (s *Server) serveSend(w http.ResponseWriter, r *http.Request, platform sender.Platform) {
	rules := platform.Sim
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	token := rules.Credential(r)
	// A platform's gateway counts a request against the robot's limits when it arrives:
	// a slow answer (FaultSlow) is late, not counted late.
	arrived := s.opts.Now()

	s.mu.Lock()
	s.stats.Requests++
	rs, known := s.robots[platform.Kind()+"/"+token]
	var fault *Fault
	if known && len(rs.faults) > 0 {
		f := *rs.faults[0]
		fault = &f
		if rs.faults[0].Count > 0 {
			rs.faults[0].Count--
			if rs.faults[0].Count == 0 {
				rs.faults = rs.faults[1:]
			}
		}
		if f.Kind != FaultSlow {
			s.stats.Faults++
		}
	}
	s.mu.Unlock()

	if r.Method != http.MethodPost {
		s.reject(w, r, sender.SimReply{Status: http.StatusMethodNotAllowed})
		return
	}
	if !known {
		s.reject(w, r, rules.Answer(sender.SimAnswer{Kind: sender.SimUnknown}))
		return
	}
	// A slow answer (FaultSlow) is judged and counted at its arrival like any other, and
	// answered late; a client that gives up meanwhile leaves its slot unused and nothing
	// accepted. Judged when the wait ended, a request that came first was counted after
	// those that came during its wait, against sends later than itself.
	var slow time.Duration
	if fault != nil && fault.Kind == FaultSlow {
		slow = fault.Delay
	} else if fault != nil && s.fault(w, r, rules, *fault) {
		return
	}
	now := arrived
	got, refusal := rules.Check(sender.SimRequest{Secret: rs.Secret, Keyword: rs.Keyword, Request: r, Body: body, Now: now, Skew: s.opts.Skew})
	if refusal != nil {
		if s.wait(r, slow) {
			s.reject(w, r, *refusal)
		}
		return
	}
	reply, ok := s.count(rs, now)
	if !ok {
		if s.wait(r, slow) {
			write(w, r, reply)
		}
		return
	}
	if !s.wait(r, slow) {
		s.uncount(rs, now)
		return
	}
	s.mu.Lock()
	s.stats.Accepted++
	s.accepted = append(s.accepted, Message{Seq: len(s.accepted) + 1, Robot: rs.Name, Kind: platform.Kind(), At: now,
		MsgType: got.MsgType, Text: got.Text, Markup: got.Markup, Body: json.RawMessage(bytes.Clone(body))})
	s.mu.Unlock()
	write(w, r, rules.Answer(sender.SimAnswer{Kind: sender.SimOK}))
}

// wait waits d before a request's answer and reports whether its client still waits.
func (s *Server) wait(r *http.Request, d time.Duration) bool {
	if d <= 0 {
		return true
	}
	select {
	case <-time.After(d):
		return true
	case <-r.Context().Done():
		return false
	}
}

// uncount takes back the send count counted at at, for a request whose client gave up
// before its answer: nothing was accepted.
func (s *Server) uncount(rs *robotState, at time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if i := slices.IndexFunc(rs.sends, func(t time.Time) bool { return t.Equal(at) }); i >= 0 {
		rs.sends = slices.Delete(rs.sends, i, i+1)
	}
}

// fault answers with an injected fault other than a slow one (serveSend waits for that
// itself) and reports whether it did.
func (s *Server) fault(w http.ResponseWriter, r *http.Request, rules sender.SimRules, f Fault) bool {
	switch f.Kind {
	case FaultErrcode:
		write(w, r, rules.Answer(sender.SimAnswer{Kind: sender.SimCode, Code: f.Errcode}))
	case FaultStatus:
		if f.RetryAfter > 0 {
			w.Header().Set("Retry-After", strconv.Itoa(int(f.RetryAfter.Round(time.Second)/time.Second)))
		}
		http.Error(w, http.StatusText(f.Status), f.Status)
	case FaultMalformed:
		w.Header().Set("Content-Type", "application/json")
		_, _ = io.WriteString(w, `{"errcode": 0, "errmsg": `)
	case FaultDrop:
		if hj, ok := w.(http.Hijacker); ok {
			if conn, _, err := hj.Hijack(); err == nil {
				conn.Close()
				return true
			}
		}
		panic(http.ErrAbortHandler)
	}
	return true
}

// count applies rs's limits to a request at now: it returns the refusal and false when
// the robot is locked out or over a limit, and counts the send otherwise.
func (s *Server) count(rs *robotState, now time.Time) (sender.SimReply, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := rs.limits
	if now.Before(rs.throttledUntil) {
		if rs.injected {
			s.stats.Faults++
		} else {
			s.stats.OverLimit++
		}
		s.countRobot(rs.Name, func(c *RobotStats) { c.Redirects++ })
		return rs.rules.Answer(sender.SimAnswer{Kind: sender.SimLocked, RetryAfter: rs.throttledUntil.Sub(now)}), false
	}
	cut := now.Add(-s.opts.Window)
	i := 0
	for i < len(rs.sends) && !rs.sends[i].After(cut) {
		i++
	}
	rs.sends = rs.sends[i:]
	recent := 0
	second := now.Add(-max(s.opts.Window/60, time.Millisecond))
	for _, t := range rs.sends {
		if t.After(second) {
			recent++
		}
	}
	over := sender.SimAnswer{Kind: -1}
	switch {
	case len(rs.sends) >= l.PerWindow:
		over = sender.SimAnswer{Kind: sender.SimOverLimit, RetryAfter: rs.sends[0].Add(s.opts.Window).Sub(now)}
	case l.PerSecond > 0 && recent >= l.PerSecond:
		over = sender.SimAnswer{Kind: sender.SimOverSecond, RetryAfter: max(s.opts.Window/60, time.Millisecond)}
	case l.HotPerSecond > 0 && l.Hot != nil && l.Hot(now, s.opts.Window) && recent >= l.HotPerSecond:
		// The platform is busy: it refuses more readily, but the robot kept its limits.
		s.stats.Busy++
		return rs.rules.Answer(sender.SimAnswer{Kind: sender.SimBusy, RetryAfter: max(s.opts.Window/60, time.Millisecond)}), false
	}
	if over.Kind >= 0 {
		s.stats.OverLimit++
		s.countRobot(rs.Name, func(c *RobotStats) { c.TooFast++ })
		if l.Lockout > 0 {
			rs.throttledUntil, rs.injected = now.Add(l.Lockout), false
		}
		s.opts.Logger.Debug("robot over its limit", "robot", rs.Name, "kind", rs.Kind)
		return rs.rules.Answer(over), false
	}
	// in time order: two requests may reach this lock in another order than they arrived
	at, _ := slices.BinarySearchFunc(rs.sends, now, time.Time.Compare)
	rs.sends = slices.Insert(rs.sends, at, now)
	return sender.SimReply{}, true
}

func (s *Server) reject(w http.ResponseWriter, r *http.Request, reply sender.SimReply) {
	s.mu.Lock()
	s.stats.Rejected++
	s.mu.Unlock()
	write(w, r, reply)
}

// write sends reply.
func write(w http.ResponseWriter, r *http.Request, reply sender.SimReply) {
	status := reply.Status
	if status == 0 {
		status = http.StatusOK
	}
	if reply.RetryAfter > 0 {
		w.Header().Set("Retry-After", strconv.Itoa(int((reply.RetryAfter+time.Second-1)/time.Second)))
	}
	switch {
	case reply.Location != "":
		http.Redirect(w, r, reply.Location, http.StatusFound)
	case reply.JSON != nil:
		writeJSON(w, status, reply.JSON)
	case reply.Text != "":
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		w.WriteHeader(status)
		_, _ = io.WriteString(w, reply.Text)
	default:
		http.Error(w, http.StatusText(status), status)
	}
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// ListenAndServe serves the simulator on addr until ctx ends; then it shuts down,
// waiting at most 5s for requests in flight. ready, when not nil, is called with the
// bound address once the listener is open.
func (s *Server) ListenAndServe(ctx context.Context, addr string, ready func(net.Addr)) error {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return fmt.Errorf("chatsim: listen: %w", err)
	}
	srv := &http.Server{Handler: s, ReadHeaderTimeout: 10 * time.Second}
	if ready != nil {
		ready(ln.Addr())
	}
	done := make(chan error, 1)
	go func() { done <- srv.Serve(ln) }()
	select {
	case err := <-done:
		return err
	case <-ctx.Done():
	}
	sctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
	defer cancel()
	err = srv.Shutdown(sctx)
	<-done
	return err
}
