// Package dingtalksim is a DingTalk custom-robot webhook simulator for tests and demos:
// a real net/http server that implements what rocketdelay's sender relies on — the
// access_token check, the signature and its one-hour timestamp window, keywords, the
// 20000-byte limit, the per-robot rate limit (20 per minute by default) answered with
// errcode 130101 and then a throttled period of HTTP 302 redirects to a page that is not
// JSON — and records every accepted message. Faults (system busy, 5xx, slow answers,
// dropped connections, malformed bodies, robot-broken codes) can be injected per token,
// through the Go API or HTTP under /_sim/.
//
// It is a simulator: it must never be pointed at by a production configuration, and it
// keeps everything in memory.
package dingtalksim

import (
	"bytes"
	"context"
	"crypto/hmac"
	"crypto/sha256"
	"encoding/base64"
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
)

// Robot is one simulated robot.
type Robot struct {
	// Name identifies the robot in Accepted and /_sim/messages; default its position,
	// "robot1", "robot2", ….
	Name string `yaml:"name" json:"name"`
	// Token is its access_token. Required, unique.
	Token string `yaml:"token" json:"-"`
	// Secret is its signing secret; when set, every request must be signed.
	Secret string `yaml:"secret" json:"-"`
	// Keyword, when set, must appear in every message.
	Keyword string `yaml:"keyword" json:"keyword,omitempty"`
	// Limit, when set, is what this robot accepts per window instead of Options.Limit: a
	// robot shared with other senders, whose rest of the budget they use.
	Limit int `yaml:"limit" json:"limit,omitempty"`
}

// Defaults of Options.
const (
	DefaultLimit    = 20
	DefaultWindow   = time.Minute
	DefaultThrottle = 10 * time.Minute
	DefaultSkew     = time.Hour
	// MaxBodyBytes is the largest request body accepted; past it the answer is 460101.
	MaxBodyBytes = 20000
	// Path is where robots receive messages.
	Path = "/robot/send"
)

// Options configure a Server. Zero fields take their defaults.
type Options struct {
	// Robots are the known robots.
	Robots []Robot `yaml:"robots"`
	// Limit is the requests a robot accepts per Window. Default 20.
	Limit int `yaml:"limit"`
	// Window is the sliding window of Limit. Default 60s.
	Window time.Duration `yaml:"window"`
	// Throttle is how long a robot that went over the limit answers with redirects.
	// Default 10m.
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
	// FaultErrcode answers HTTP 200 with JSON errcode Fault.Errcode (e.g. -1, 310000).
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
	// Errcode is the errcode of FaultErrcode.
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
	// At is when it was accepted, by the server's clock.
	At time.Time `json:"at"`
	// MsgType is its msgtype.
	MsgType string `json:"msgtype"`
	// Text is its text content: text.content, or the title and text of the other types.
	Text string `json:"text"`
	// Body is the request body as sent.
	Body json.RawMessage `json:"body"`
}

// Stats count the server's answers.
type Stats struct {
	// Requests counts every request to Path.
	Requests int `json:"requests"`
	// Accepted counts messages accepted (errcode 0).
	Accepted int `json:"accepted"`
	// OverLimit counts requests over a robot's limit: answered 130101 or, while the robot
	// was throttled for it, with a redirect. A sender that respects the limit keeps it at
	// 0. Redirects of a throttle injected with FaultThrottle count as Faults.
	OverLimit int `json:"overLimit"`
	// Faults counts answers shaped by an injected fault.
	Faults int `json:"faults"`
	// Rejected counts other refusals (unknown token, bad signature, keyword, size, body).
	Rejected int `json:"rejected"`
	// ByRobot counts, per robot name, the over-limit answers: 130101 and redirects.
	ByRobot map[string]RobotStats `json:"byRobot,omitempty"`
}

// RobotStats count one robot's over-limit answers.
type RobotStats struct {
	// TooFast counts 130101 answers: a request over the robot's limit.
	TooFast int `json:"tooFast"`
	// Redirects counts HTTP 302 answers while the robot was throttled.
	Redirects int `json:"redirects"`
}

type robotState struct {
	Robot
	sends          []time.Time // accepted-or-counted requests within the window
	throttledUntil time.Time
	// injected: the throttle was injected (FaultThrottle), not earned by going over the
	// limit, so its redirects count as Faults, not OverLimit.
	injected bool
	faults   []*Fault
}

// Server is the simulator. It is an http.Handler; Start runs it for a test, and the
// `rocketdelay dingtalk-sim` command runs it as a program.
type Server struct {
	opts Options

	mu       sync.Mutex
	robots   map[string]*robotState // by token
	accepted []Message
	stats    Stats
}

// New returns a simulator with the robots of opts. It panics on a robot without a token
// or a token used twice.
func New(opts Options) *Server {
	if opts.Limit <= 0 {
		opts.Limit = DefaultLimit
	}
	if opts.Window <= 0 {
		opts.Window = DefaultWindow
	}
	if opts.Throttle <= 0 {
		opts.Throttle = DefaultThrottle
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
	s := &Server{opts: opts, robots: map[string]*robotState{}}
	for i, r := range opts.Robots {
		if r.Token == "" {
			panic(fmt.Sprintf("dingtalksim: robot %d has no token", i+1))
		}
		if _, dup := s.robots[r.Token]; dup {
			panic(fmt.Sprintf("dingtalksim: robot %d repeats a token", i+1))
		}
		if r.Name == "" {
			r.Name = "robot" + strconv.Itoa(i+1)
		}
		s.robots[r.Token] = &robotState{Robot: r}
	}
	return s
}

// Inject adds a fault for the robot with token; faults apply in the order injected.
func (s *Server) Inject(token string, f Fault) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	r, ok := s.robots[token]
	if !ok {
		return errors.New("dingtalksim: unknown token")
	}
	switch f.Kind {
	case FaultErrcode, FaultStatus, FaultSlow, FaultDrop, FaultMalformed:
	case FaultThrottle:
		r.throttledUntil = s.opts.Now().Add(s.opts.Throttle)
		r.injected = true
		return nil
	default:
		return fmt.Errorf("dingtalksim: unknown fault kind %q", f.Kind)
	}
	r.faults = append(r.faults, &f)
	return nil
}

// ClearFaults removes the faults and the throttling of the robot with token, or of
// every robot when token is "".
func (s *Server) ClearFaults(token string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for tok, r := range s.robots {
		if token == "" || tok == token {
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

type answer struct {
	Errcode int    `json:"errcode"`
	Errmsg  string `json:"errmsg"`
}

// ServeHTTP answers robot sends on Path and the control API:
//
//	GET    /_sim/messages   accepted messages, JSON array
//	GET    /_sim/stats      Stats, JSON
//	POST   /_sim/faults?token=T   inject a Fault given as JSON
//	DELETE /_sim/faults[?token=T] clear faults
//	POST   /_sim/reset      Reset
func (s *Server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == Path:
		s.serveSend(w, r)
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
	case r.URL.Path == "/throttled":
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		_, _ = io.WriteString(w, "<html><body>访问过于频繁 (too many requests)</body></html>")
	default:
		http.NotFound(w, r)
	}
}

func (s *Server) serveSend(w http.ResponseWriter, r *http.Request) {
	body, err := io.ReadAll(io.LimitReader(r.Body, 1<<20))
	if err != nil {
		return
	}
	q := r.URL.Query()
	token := q.Get("access_token")

	s.mu.Lock()
	s.stats.Requests++
	rs, known := s.robots[token]
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
		s.reject(w, 0, http.StatusMethodNotAllowed, "")
		return
	}
	if !known {
		s.reject(w, 300001, 0, "token is not exist")
		return
	}
	if fault != nil {
		switch fault.Kind {
		case FaultSlow:
			select {
			case <-time.After(fault.Delay):
			case <-r.Context().Done():
				return
			}
		case FaultErrcode:
			writeJSON(w, http.StatusOK, answer{Errcode: fault.Errcode, Errmsg: "injected fault"})
			return
		case FaultStatus:
			if fault.RetryAfter > 0 {
				w.Header().Set("Retry-After", strconv.Itoa(int(fault.RetryAfter.Round(time.Second)/time.Second)))
			}
			http.Error(w, http.StatusText(fault.Status), fault.Status)
			return
		case FaultMalformed:
			w.Header().Set("Content-Type", "application/json")
			_, _ = io.WriteString(w, `{"errcode": 0, "errmsg": `)
			return
		case FaultDrop:
			if hj, ok := w.(http.Hijacker); ok {
				if conn, _, err := hj.Hijack(); err == nil {
					conn.Close()
					return
				}
			}
			panic(http.ErrAbortHandler)
		}
	}
	now := s.opts.Now()
	if rs.Secret != "" {
		ts, err := strconv.ParseInt(q.Get("timestamp"), 10, 64)
		if err != nil {
			s.reject(w, 310000, 0, "sign not match: missing or invalid timestamp")
			return
		}
		if d := now.Sub(time.UnixMilli(ts)); d > s.opts.Skew || d < -s.opts.Skew {
			s.reject(w, 310000, 0, "sign not match: timestamp is more than 1 hour away")
			return
		}
		mac := hmac.New(sha256.New, []byte(rs.Secret))
		mac.Write([]byte(strconv.FormatInt(ts, 10) + "\n" + rs.Secret))
		want := base64.StdEncoding.EncodeToString(mac.Sum(nil))
		if !hmac.Equal([]byte(q.Get("sign")), []byte(want)) {
			s.reject(w, 310000, 0, "sign not match")
			return
		}
	}
	if len(body) > MaxBodyBytes {
		s.reject(w, 460101, 0, "message too long")
		return
	}
	msgType, text, err := readMessage(body)
	if err != nil {
		s.reject(w, 40035, 0, "invalid message: "+err.Error())
		return
	}
	if rs.Keyword != "" && !strings.Contains(text, rs.Keyword) {
		s.reject(w, 310000, 0, "keywords not in content")
		return
	}

	s.mu.Lock()
	if now.Before(rs.throttledUntil) {
		if rs.injected {
			s.stats.Faults++
		} else {
			s.stats.OverLimit++
		}
		s.countRobot(rs.Name, func(c *RobotStats) { c.Redirects++ })
		s.mu.Unlock()
		http.Redirect(w, r, "/throttled", http.StatusFound)
		return
	}
	cut := now.Add(-s.opts.Window)
	i := 0
	for i < len(rs.sends) && !rs.sends[i].After(cut) {
		i++
	}
	rs.sends = rs.sends[i:]
	limit := s.opts.Limit
	if rs.Limit > 0 {
		limit = rs.Limit
	}
	if len(rs.sends) >= limit {
		s.stats.OverLimit++
		s.countRobot(rs.Name, func(c *RobotStats) { c.TooFast++ })
		rs.throttledUntil, rs.injected = now.Add(s.opts.Throttle), false
		s.mu.Unlock()
		s.opts.Logger.Debug("robot over its limit; throttled", "robot", rs.Name)
		writeJSON(w, http.StatusOK, answer{Errcode: 130101, Errmsg: "send too fast, exceed 20 times per minute"})
		return
	}
	rs.sends = append(rs.sends, now)
	s.stats.Accepted++
	s.accepted = append(s.accepted, Message{
		Seq: len(s.accepted) + 1, Robot: rs.Name, At: now, MsgType: msgType, Text: text, Body: json.RawMessage(bytes.Clone(body)),
	})
	s.mu.Unlock()
	writeJSON(w, http.StatusOK, answer{Errcode: 0, Errmsg: "ok"})
}

func (s *Server) reject(w http.ResponseWriter, errcode, status int, msg string) {
	s.mu.Lock()
	s.stats.Rejected++
	s.mu.Unlock()
	if status != 0 {
		http.Error(w, http.StatusText(status), status)
		return
	}
	writeJSON(w, http.StatusOK, answer{Errcode: errcode, Errmsg: msg})
}

// readMessage checks a robot message and returns its type and its text: the fields a
// keyword is looked for in.
func readMessage(body []byte) (string, string, error) {
	var m struct {
		MsgType string `json:"msgtype"`
		Text    *struct {
			Content string `json:"content"`
		} `json:"text"`
		Markdown *struct{ Title, Text string } `json:"markdown"`
		Link     *struct {
			Title, Text string
			MessageURL  string `json:"messageUrl"`
		} `json:"link"`
		ActionCard *struct{ Title, Text string } `json:"actionCard"`
		FeedCard   *struct {
			Links []struct{ Title string } `json:"links"`
		} `json:"feedCard"`
	}
	if err := json.Unmarshal(body, &m); err != nil {
		return "", "", errors.New("body is not JSON")
	}
	switch m.MsgType {
	case "text":
		if m.Text == nil || m.Text.Content == "" {
			return "", "", errors.New("text.content is empty")
		}
		return m.MsgType, m.Text.Content, nil
	case "markdown":
		if m.Markdown == nil || m.Markdown.Title == "" || m.Markdown.Text == "" {
			return "", "", errors.New("markdown needs title and text")
		}
		return m.MsgType, m.Markdown.Title + "\n" + m.Markdown.Text, nil
	case "link":
		if m.Link == nil || m.Link.Title == "" || m.Link.Text == "" || m.Link.MessageURL == "" {
			return "", "", errors.New("link needs title, text and messageUrl")
		}
		return m.MsgType, m.Link.Title + "\n" + m.Link.Text, nil
	case "actionCard":
		if m.ActionCard == nil || m.ActionCard.Title == "" || m.ActionCard.Text == "" {
			return "", "", errors.New("actionCard needs title and text")
		}
		return m.MsgType, m.ActionCard.Title + "\n" + m.ActionCard.Text, nil
	case "feedCard":
		if m.FeedCard == nil || len(m.FeedCard.Links) == 0 {
			return "", "", errors.New("feedCard needs links")
		}
		var titles []string
		for _, l := range m.FeedCard.Links {
			titles = append(titles, l.Title)
		}
		return m.MsgType, strings.Join(titles, "\n"), nil
	}
	return "", "", fmt.Errorf("unknown msgtype %q", m.MsgType)
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
		return fmt.Errorf("dingtalksim: listen: %w", err)
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
