package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// Pool is the shared rate-limit state of the robots; *store.RobotPool implements it.
// A send picks a robot (Pick), and every attempt through it ends in one Settle.
type Pool interface {
	Pick(ctx context.Context, target string, robots []store.PoolRobot, opts store.PickOptions) (store.Pick, error)
	Settle(ctx context.Context, target string, pick store.Pick, robots []store.PoolRobot, s store.Settlement) (store.Settled, error)
}

// Target is one chat target: a pool of robots of one platform.
type Target struct {
	// Protocol is the robots' platform.
	Protocol Protocol
	// Robots share the target's load; at least one.
	Robots []Robot
	// Cooldown is how long a robot the platform throttled rests at first; 0 takes
	// Options.Cooldown.
	Cooldown time.Duration
	// CooldownMax, when above Cooldown, lets the rest grow: a robot throttled again by the
	// first request after its rest (the platform's lock-out was longer) rests twice as
	// long, up to CooldownMax, until a request goes through. For platforms whose lock-out
	// after a throttle is not documented (WeCom, Feishu): it is learned. 0: Cooldown.
	// A throttle that says how long to wait (Slack's 429 with Retry-After) rests at least
	// that long, up to the longer of Cooldown and CooldownMax.
	CooldownMax time.Duration
}

// Options configure a Chat. Zero fields take the defaults of the matching config keys
// (config.DefaultSender…).
type Options struct {
	// Targets are the chat targets by name.
	Targets map[string]Target
	// Limit is the sends per Window of a robot whose own Limit is 0 (config sender.limit).
	Limit int
	// HTTPTimeout bounds one request (config sender.httpTimeout).
	HTTPTimeout time.Duration
	// Cooldown is how long a throttled robot rests when its target does not say
	// (config sender.cooldown).
	Cooldown time.Duration
	// DisableFor is how long a broken robot stays out of rotation (config
	// sender.disableFor).
	DisableFor time.Duration
	// Attempts bounds the tries on transient errors (config sender.attempts).
	Attempts int
	// BackoffBase and BackoffMax shape the backoff (config sender.backoffBase,
	// sender.backoffMax).
	BackoffBase, BackoffMax time.Duration
	// MaxInFlight bounds concurrent requests (config sender.maxInFlight).
	MaxInFlight int
	// MaxWait bounds the wait for a free robot; 0 means no bound but ctx (config
	// sender.maxWait).
	MaxWait time.Duration
	// BreakerFailures and BreakerOpen tune the per-robot circuit breakers (config
	// sender.breakerFailures, sender.breakerOpen).
	BreakerFailures uint32
	BreakerOpen     time.Duration
	// Coalesce is config.CoalesceAuto (the default) or config.CoalesceOff; see
	// coalesce.go (config sender.coalesce).
	Coalesce string
	// CoalesceMax is the most alerts one merged message carries (config
	// sender.coalesceMax).
	CoalesceMax int
	// Pacing is config.PacingAuto (the default) or config.PacingBurst; see coalesce.go
	// (config sender.pacing). It applies when coalescing is on.
	Pacing string
	// RobotLimits is config.RobotLimitsLearn (the default: a robot the platform throttles
	// below its configured limit gets a lower, learned one, and a robot out of a cool-down
	// takes one probe at a time) or config.RobotLimitsFixed (config sender.robotLimits).
	RobotLimits string
	// PriorityMaxWait bounds how long an alert of low priority waits behind higher ones:
	// past it, it goes ahead of every priority (config sender.priorityMaxWait).
	PriorityMaxWait time.Duration
	// Fence is how long after a claim's confirm is asked its request may still start:
	// the wheel stage's guard (store.WheelStage.Guard, a third of scheduler.liveness), in
	// which no other replica takes the alert over. A request that cannot start within it
	// (this replica was paused, or its connection slow to open) is not sent: the claim is
	// confirmed again and the send tried again, as one more attempt (fence.go). 0: no
	// fence, for a sender whose claims no other replica takes over.
	Fence time.Duration
	// PrincipalOf names the principal an alert came from, as the service proved it
	// (RD_PRINCIPAL and its signature), or "" for none: while a target's robots are busy,
	// its waiting alerts go in turns over their principals (coalesce.go's inTurns, the
	// park's turns), so one principal's flood cannot keep another's alerts waiting behind
	// it. nil: every alert is "".
	PrincipalOf func(Alert) string
}

func (o Options) withDefaults() Options {
	def := func(v *time.Duration, d time.Duration) {
		if *v <= 0 {
			*v = d
		}
	}
	if o.Limit <= 0 {
		o.Limit = config.DefaultSenderLimit
	}
	def(&o.HTTPTimeout, config.DefaultSenderHTTPTimeout)
	def(&o.Cooldown, config.DefaultSenderCooldown)
	def(&o.DisableFor, config.DefaultSenderDisableFor)
	def(&o.BackoffBase, config.DefaultSenderBackoffBase)
	def(&o.BackoffMax, config.DefaultSenderBackoffMax)
	def(&o.BreakerOpen, config.DefaultSenderBreakerOpen)
	if o.Attempts <= 0 {
		o.Attempts = config.DefaultSenderAttempts
	}
	if o.MaxInFlight <= 0 {
		o.MaxInFlight = config.DefaultSenderMaxInFlight
	}
	if o.BreakerFailures == 0 {
		o.BreakerFailures = config.DefaultSenderBreakerFailures
	}
	if o.Coalesce == "" {
		o.Coalesce = config.DefaultSenderCoalesce
	}
	if o.CoalesceMax <= 0 {
		o.CoalesceMax = config.DefaultSenderCoalesceMax
	}
	config.Default(&o.Pacing, config.DefaultSenderPacing)
	config.Default(&o.RobotLimits, config.DefaultSenderRobotLimits)
	def(&o.PriorityMaxWait, config.DefaultSenderPriorityMaxWait)
	return o
}

// errTransientAnswer marks, for the circuit breaker, a request that failed transiently.
var errTransientAnswer = errors.New("transient failure")

// Chat delivers messages to the robots of a target: it picks a free robot from the
// shared pool (waiting exactly as long as the pool says when none is), signs and posts
// the message, and handles every class of failure: a throttled robot cools down and the
// message moves on at once, a broken robot is taken out of rotation, transient failures
// are retried with exponential backoff and full jitter, and payload failures are not
// retried. Each robot has a circuit breaker in this process, and requests in flight are
// bounded. A Chat is safe for concurrent use.
type Chat struct {
	opts    Options
	pool    Pool
	client  *Client // every platform's requests
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
	sem     chan struct{}
	targets map[string]*target
	parking Parking // SetParking; nil: no sharing
	stop    stopSignal
}

type target struct {
	name        string
	proto       Protocol
	style       MergeStyle
	robots      map[string]Robot
	order       []store.PoolRobot
	breakers    map[string]*gobreaker.CircuitBreaker[Outcome]
	reserve     int      // room the longest keyword needs
	keywords    []string // its robots' keywords, each once
	mergeRoom   int      // bytes a merged message has for its sections
	cooldown    time.Duration
	cooldownMax time.Duration
	busy        store.Busy // the platform's busy moments (BusyMoments)
	queue       *alertQueue
	spacing     time.Duration // the pool's window over the target's capacity
	gap         time.Duration // spacing/burstGap: two alerts this close start a burst (linger)
	tokenTime   time.Duration // how long the target's token bucket takes to gain a token
}

// NewChat returns a Chat. pool is the shared robot pool; it may be nil for a Chat that
// only checks and renders bodies (Check, Body), whose sends fail. metrics may come from
// NewMetrics(nil) in tests; now is the clock of signatures and metrics (nil: time.Now).
// Waits use the time package's timers, so a test can fake them with testing/synctest.
func NewChat(opts Options, pool Pool, logger *slog.Logger, metrics *Metrics, now func() time.Time) (*Chat, error) {
	opts = opts.withDefaults()
	if now == nil {
		now = time.Now
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	if opts.Coalesce != config.CoalesceAuto && opts.Coalesce != config.CoalesceOff {
		return nil, fmt.Errorf("sender: coalesce must be %q or %q, got %q", config.CoalesceAuto, config.CoalesceOff, opts.Coalesce)
	}
	if opts.Pacing != config.PacingAuto && opts.Pacing != config.PacingBurst {
		return nil, fmt.Errorf("sender: pacing must be %q or %q, got %q", config.PacingAuto, config.PacingBurst, opts.Pacing)
	}
	if opts.RobotLimits != config.RobotLimitsLearn && opts.RobotLimits != config.RobotLimitsFixed {
		return nil, fmt.Errorf("sender: robotLimits must be %q or %q, got %q", config.RobotLimitsLearn, config.RobotLimitsFixed, opts.RobotLimits)
	}
	s := &Chat{
		opts:    opts,
		pool:    pool,
		client:  NewClient(opts.HTTPTimeout, now),
		logger:  logger,
		metrics: metrics,
		now:     now,
		sem:     make(chan struct{}, opts.MaxInFlight),
		targets: make(map[string]*target, len(opts.Targets)),
		stop:    stopSignal{c: make(chan struct{})},
	}
	for name, tc := range opts.Targets {
		t, err := s.newTarget(name, tc)
		if err != nil {
			return nil, err
		}
		s.targets[name] = t
		metrics.Target(name, tc.Protocol.Kind())
	}
	return s, nil
}

// newTarget checks and prepares the chat target name.
func (s *Chat) newTarget(name string, tc Target) (*target, error) {
	if tc.Protocol == nil {
		return nil, fmt.Errorf("sender: target %q has no platform", name)
	}
	if len(tc.Robots) == 0 {
		return nil, fmt.Errorf("sender: target %q has no robot", name)
	}
	t := &target{name: name, proto: tc.Protocol, style: tc.Protocol.Style(), robots: map[string]Robot{},
		breakers: map[string]*gobreaker.CircuitBreaker[Outcome]{},
		cooldown: tc.Cooldown, cooldownMax: tc.CooldownMax}
	t.queue = newAlertQueue(s, t)
	if t.cooldown <= 0 {
		t.cooldown = s.opts.Cooldown
	}
	t.cooldownMax = max(t.cooldownMax, t.cooldown)
	for _, r := range tc.Robots {
		if r.Name == "" || r.Token == "" {
			return nil, fmt.Errorf("sender: target %q: every robot needs a name and a token", name)
		}
		if _, dup := t.robots[r.Name]; dup {
			return nil, fmt.Errorf("sender: target %q: robot %q appears twice", name, r.Name)
		}
		if r.Limit <= 0 {
			r.Limit = s.opts.Limit
		}
		t.robots[r.Name] = r
		t.order = append(t.order, store.PoolRobot{Name: r.Name, Limit: r.Limit, LimitPerSecond: r.LimitPerSecond})
		t.reserve = max(t.reserve, tc.Protocol.KeywordRoom(r.Keyword))
		if r.Keyword != "" && !slices.Contains(t.keywords, r.Keyword) {
			t.keywords = append(t.keywords, r.Keyword)
		}
		t.breakers[r.Name] = s.newBreaker(name, r.Name)
	}
	// What the sections of a merged message may take: the room of one with a heading and
	// the longest title, less a keyword's.
	skeleton := Message{Format: FormatMarkdown, Title: fmt.Sprintf("%d alerts: %s", s.opts.CoalesceMax,
		strings.Repeat("字", maxTitleRunes)), Text: t.style.Heading(s.opts.CoalesceMax)}
	t.mergeRoom = tc.Protocol.Room(skeleton) - t.reserve
	t.spacing = pacing(s.pool, t.order)
	if b, ok := tc.Protocol.(BusyMoments); ok {
		if w, ok := s.pool.(windowed); ok {
			busy := b.Busy(w.Window())
			t.busy = store.Busy{Every: busy.Every, For: busy.For, PerSecond: busy.PerSecond}
		}
	}
	t.gap, t.tokenTime = t.spacing/burstGap, tokenTime(s.pool, t.order)
	return t, nil
}

// Kind returns the platform of the chat target name, "" when it is not one of s's.
func (s *Chat) Kind(name string) string {
	if t, ok := s.targets[name]; ok {
		return t.proto.Kind()
	}
	return ""
}

func (s *Chat) newBreaker(target, robot string) *gobreaker.CircuitBreaker[Outcome] {
	failures := s.opts.BreakerFailures
	return gobreaker.NewCircuitBreaker[Outcome](gobreaker.Settings{
		Name:        target + "/" + robot,
		MaxRequests: 1,
		Timeout:     s.opts.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		// A request stopped by its confirm fence, or by its slot's hold (a paused replica,
		// a slow dial), never reached the robot: it says nothing of the robot.
		IsExcluded: func(err error) bool { return errors.Is(err, ErrStaleConfirm) || errors.Is(err, ErrStaleSlot) },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.logger.Warn("robot circuit breaker changed state", "target", target, "robot", robot,
				"from", from.String(), "to", to.String())
		},
	})
}

// Close releases the sender's idle HTTP connections. Sends still running are not
// affected.
func (s *Chat) Close() { s.client.Close() }

// ErrStopping is wrapped by the transient Failure of a send that did not go because the
// Chat stopped (Stop): no request carried it.
var ErrStopping = errors.New("sender: the sender is stopping")

// stopSignal is closed by Stop.
type stopSignal struct {
	once sync.Once
	c    chan struct{}
}

func (s *stopSignal) done() bool {
	select {
	case <-s.c:
		return true
	default:
		return false
	}
}

// stopped is the Failure of a send that did not go because the Chat stopped.
func stopped(target string) *Failure {
	return &Failure{Class: ClassTransient, Target: target, Reason: "not sent: this replica is stopping", Err: ErrStopping}
}

// Stop ends every send that waits, at once and without a request: an alert waiting in
// its target's queue or for a free robot, a send waiting out a backoff before its next
// try; each returns a transient Failure wrapping ErrStopping, and so does every later
// send. A request on the wire goes on to its answer. A replica calls it as it stops,
// after it claims nothing more: what waited here is handed back to the other replicas,
// rather than sent late or given back one by one.
func (s *Chat) Stop() {
	s.stop.once.Do(func() { close(s.stop.c) })
	for _, t := range s.targets {
		q := t.queue
		q.mu.Lock()
		ws := q.waiting
		q.waiting, q.parked, q.expect = nil, false, 0
		for _, w := range ws {
			w.taken = true
		}
		q.mu.Unlock()
		for _, w := range ws {
			w.done <- stopped(t.name)
		}
		q.signal()
	}
}

// SendBody sends body, as producers publish alerts, to target at once; an invalid body
// is a *Failure of ClassPermanent wrapping ErrInvalidBody.
func (s *Chat) SendBody(ctx context.Context, target string, body []byte) error {
	_, err := s.Send(ctx, Alert{Target: target, Body: body})
	return err
}

// Send parses a.Body with its target's platform (Protocol.Parse) and sends it: a text or
// markdown message over the platform's size limit goes as numbered parts, in order,
// starting after a.PartsSent; any other type over the limit is refused. Unless
// Options.Coalesce is off, the alert waits for a robot in its target's queue, and under
// backlog it may go out merged with other waiting alerts of the target (see
// coalesce.go), or be parked for the target's next send on any replica (a.Claim.Park;
// Send then returns ErrParked). Right before every request that carries it, a.Claim (if
// any) confirms it. It returns how the alert went once the platform accepted every
// part, or a *Failure: a Failure of a later part means the earlier parts were
// delivered; a merged message's failure is every one of its alerts' failure. When ctx
// ends, Send returns a transient Failure wrapping ctx.Err().
func (s *Chat) Send(ctx context.Context, a Alert) (Sent, error) {
	t, ok := s.targets[a.Target]
	if !ok {
		f := &Failure{Class: ClassPermanent, Target: a.Target, Reason: fmt.Sprintf("target %q is not a chat target of the configuration", a.Target)}
		s.metrics.failures.WithLabelValues(a.Target, string(f.Class)).Inc()
		return Sent{}, f
	}
	m, err := t.proto.Parse(a.Body)
	if err != nil {
		f := &Failure{Class: ClassPermanent, Target: a.Target, Reason: err.Error(), Err: err}
		s.metrics.failures.WithLabelValues(a.Target, string(f.Class)).Inc()
		return Sent{}, f
	}
	return s.send(ctx, t, a, m)
}

// errNoPool is the failure of a send by a Chat made without a pool.
var errNoPool = errors.New("sender: this sender has no robot pool: it only checks and renders bodies")

// Check checks body as the chat target target's platform would, when it is published:
// nil, or an error that says what is wrong (wrapping ErrInvalidBody for a body the
// platform would refuse).
func (s *Chat) Check(target string, body []byte) error {
	t, ok := s.targets[target]
	if !ok {
		return fmt.Errorf("target %q is not a chat target of the configuration", target)
	}
	m, err := t.proto.Parse(body)
	if err != nil {
		return err
	}
	reserve, err := t.reserveFor(m)
	if err != nil {
		return err
	}
	_, err = Split(t.proto, m, reserve)
	return err
}

// reserveFor is the room m needs for the keyword of any robot of t (any may be picked):
// t.reserve, or more when the platform says m needs more (KeywordCarrier); an error
// wrapping ErrInvalidBody when m cannot carry one.
func (t *target) reserveFor(m Message) (int, error) {
	kc, ok := t.proto.(KeywordCarrier)
	if !ok {
		return t.reserve, nil
	}
	reserve := t.reserve
	for _, k := range t.keywords {
		n, err := kc.CarryKeyword(m, k)
		if err != nil {
			return 0, err
		}
		reserve = max(reserve, n)
	}
	return reserve, nil
}

// Body is the body a producer publishes to the chat target target for m: its platform's
// message JSON.
func (s *Chat) Body(target string, m Message) ([]byte, error) {
	t, ok := s.targets[target]
	if !ok {
		return nil, fmt.Errorf("target %q is not a chat target of the configuration", target)
	}
	return t.proto.Body(m)
}

// SendMessage sends m to target as an alert that was due at due (zero: the moment of
// the call), with no claim.
func (s *Chat) SendMessage(ctx context.Context, target string, m Message, due time.Time) error {
	t, ok := s.targets[target]
	if !ok {
		return &Failure{Class: ClassPermanent, Target: target, Reason: fmt.Sprintf("target %q is not a chat target of the configuration", target)}
	}
	_, err := s.send(ctx, t, Alert{Target: target, Due: due}, m)
	return err
}

func (s *Chat) send(ctx context.Context, t *target, a Alert, m Message) (Sent, error) {
	if s.pool == nil {
		return Sent{}, &Failure{Class: ClassTransient, Target: t.name, Reason: errNoPool.Error(), Err: errNoPool}
	}
	reserve, err := t.reserveFor(m)
	if err != nil {
		s.metrics.failures.WithLabelValues(t.name, string(ClassPermanent)).Inc()
		return Sent{}, &Failure{Class: ClassPermanent, Target: t.name, Reason: err.Error(), Err: err}
	}
	parts, err := Split(t.proto, m, reserve)
	if err != nil {
		var f *Failure
		if errors.As(err, &f) {
			f.Target = t.name
		}
		s.metrics.failures.WithLabelValues(t.name, string(ClassPermanent)).Inc()
		return Sent{}, err
	}
	if s.stop.done() {
		return Sent{}, stopped(t.name)
	}
	sent := Sent{Merged: 1, Parts: len(parts)}
	for i, p := range parts {
		if i < a.PartsSent {
			continue // delivered by an earlier send
		}
		var err error
		var part Sent
		if s.opts.Coalesce == config.CoalesceOff {
			part.Robot, err = s.sendPicked(ctx, t, single(p, a.Claim, i), nil)
		} else {
			part, err = t.queue.sendQueued(ctx, a, i, p, len(parts) > 1 || !p.Mergeable())
		}
		if errors.Is(err, ErrParked) {
			return Sent{}, err
		}
		sent.Robot, sent.Merged = part.Robot, max(sent.Merged, part.Merged)
		if err != nil {
			var f *Failure
			if errors.As(err, &f) && f.Parts == 0 { // a merged message's Failure is shared and set already
				f.Part, f.Parts = i+1, len(parts)
			}
			s.metrics.failures.WithLabelValues(t.name, string(f.Class)).Inc()
			s.logger.Warn("send failed", "target", t.name, "kind", t.proto.Kind(), "part", i+1, "parts", len(parts),
				"class", string(f.Class), "robot", f.Robot, "http_status", f.HTTPStatus,
				"code", f.Code, "attempts", f.Attempts, "reason", f.Reason)
			return Sent{}, err
		}
	}
	if !a.Due.IsZero() {
		s.metrics.lateness.WithLabelValues(t.name).Observe(max(s.now().Sub(a.Due), 0).Seconds())
	}
	return sent, nil
}

// source is what a send asks for right before every request: the message, and whether a
// claim was confirmed for it (then the request must start within the confirm fence).
type source func(context.Context) (m Message, confirmed bool, err error)

// single is the message source of part part of one alert sent alone: m, once the
// alert's claim (if any) confirms it.
func single(m Message, claim Claim, part int) source {
	return func(ctx context.Context) (Message, bool, error) {
		if claim == nil {
			return m, false, nil
		}
		if err := claim.Confirm(ctx, part); err != nil {
			return Message{}, false, err
		}
		return m, true, nil
	}
}

// sendPicked delivers the message msg returns, which it asks for right before every
// request (an error there ends the send without a request), and returns the robot that
// accepted it; the error is always a *Failure. When first is not nil, the first robot is
// already picked and holds an in-flight slot (the queue's drainer picked it). A request
// that cannot start within Options.Fence of its confirm is not made; msg is asked again.
//
// Each round picks a robot (attempt.pick), makes one request through it (attempt.request)
// and acts on the class of its answer (attempt.settle), until the platform accepts the
// message or the attempt gives up.
func (s *Chat) sendPicked(ctx context.Context, t *target, msg source, first *slot) (string, error) {
	a := &attempt{s: s, t: t}
	if first == nil { // the queue observes the wait of queued alerts
		defer func() { s.metrics.wait.WithLabelValues(t.name).Observe(a.waited.Seconds()) }()
	}
	for {
		var pick slot
		if first != nil {
			pick, first = *first, nil
		} else {
			var err error
			if pick, err = a.pick(ctx); err != nil {
				return "", err
			}
		}
		robot := t.robots[pick.Robot]
		a.lastRobot = robot.Name
		o, again, err := a.request(ctx, pick, robot, msg)
		switch {
		case err != nil:
			return "", err
		case again:
			continue
		case o.OK:
			s.metrics.requests.WithLabelValues(t.name, robot.Name, "ok").Inc()
			s.metrics.delivered.WithLabelValues(t.name).Inc()
			return robot.Name, nil
		}
		if err := a.settle(ctx, pick.Pick, robot, o); err != nil {
			return "", err
		}
	}
}

// attempt is one message's way through a target's robots: what its failure, when it
// ends in one, says (the attempts and throttles counted, the time waited for a robot,
// the last answer and its robot).
type attempt struct {
	s                   *Chat
	t                   *target
	attempts, throttles int
	waited              time.Duration
	last                Outcome
	lastRobot           string
}

// fail is the attempt's Failure of class, for reason.
func (a *attempt) fail(class Class, reason string, err error) *Failure {
	return &Failure{Class: class, Reason: reason, Target: a.t.name, Robot: a.lastRobot,
		HTTPStatus: a.last.HTTPStatus, Code: a.last.Code, Attempts: a.attempts, Err: err}
}

// gaveUp is the attempt's Failure when ctx ended.
func (a *attempt) gaveUp(ctx context.Context) *Failure {
	return a.fail(ClassTransient, "gave up: "+ctx.Err().Error(), ctx.Err())
}

// pick picks a free robot of the target whose circuit is closed, holding an in-flight
// slot from the pick to the answer (so that a picked send goes out at once and the
// platform sees the pool's spacing), and waits as long as the pool says when none is
// free.
func (a *attempt) pick(ctx context.Context) (slot, error) {
	s, t := a.s, a.t
	for {
		if ctx.Err() != nil {
			return slot{}, a.gaveUp(ctx)
		}
		robots := s.closedCircuits(t)
		if len(robots) == 0 {
			f := a.fail(ClassTransient, "the circuit breaker of every robot is open", nil)
			f.RetryAfter = s.opts.BreakerOpen
			return slot{}, f
		}
		if err := s.acquire(ctx); err != nil {
			return slot{}, a.fail(ClassTransient, "gave up: "+err.Error(), err)
		}
		pick, err := s.pickSlot(ctx, t, robots, store.Burst) // a retry: it waited already
		switch {
		case err != nil:
			s.release()
			if errors.Is(err, store.ErrNoRobot) {
				return slot{}, a.fail(ClassRobotBroken, "every robot of the target is out of rotation (broken)", err)
			}
			if ctx.Err() != nil {
				return slot{}, a.gaveUp(ctx)
			}
			return slot{}, a.fail(ClassTransient, "robot pool: "+err.Error(), err)
		case pick.Robot != "":
			return pick, nil
		}
		s.release()
		if s.opts.MaxWait > 0 && a.waited+pick.Wait > s.opts.MaxWait {
			f := a.fail(ClassTransient, fmt.Sprintf("no robot free within %s", s.opts.MaxWait), nil)
			f.RetryAfter = pick.Wait
			return slot{}, f
		}
		if err := s.sleep(ctx, pick.Wait); err != nil {
			return slot{}, a.fail(ClassTransient, "gave up waiting for a free robot: "+err.Error(), err)
		}
		a.waited += pick.Wait
	}
}

// request asks msg for the message (confirming the alerts' claims) and makes one request
// of it through robot, the robot of pick, within the fence of that confirm; it releases
// the in-flight slot. again reports that no request was made and the round starts over
// (a request that could not start within the fence, a circuit that opened since the
// pick): the robot's slot is given back.
func (a *attempt) request(ctx context.Context, pick slot, robot Robot, msg source) (o Outcome, again bool, err error) {
	s, t := a.s, a.t
	asked := s.now()
	m, confirmed, err := msg(ctx)
	if err != nil {
		s.release()
		s.giveSlotBack(ctx, t, pick.Pick)
		if ctx.Err() != nil {
			return Outcome{}, false, a.gaveUp(ctx)
		}
		return Outcome{}, false, a.fail(ClassTransient, "not sent: "+err.Error(), err)
	}
	s.metrics.limit.WithLabelValues(t.name, robot.Name).Set(float64(pick.Limit))
	f := newFence(pick.asked.Add(s.opts.HTTPTimeout), ErrStaleSlot, s.now)
	if confirmed && s.opts.Fence > 0 {
		f.also(asked.Add(s.opts.Fence), ErrStaleConfirm)
	}
	o, berr := s.post(withFence(ctx, f), t, robot, m)
	s.release()
	switch {
	case errors.Is(berr, ErrStaleConfirm) || errors.Is(berr, ErrStaleSlot):
		// No request was made: the slot is not spent, and the send picks and confirms again.
		s.giveSlotBack(ctx, t, pick.Pick)
		reason := "stale_confirm"
		if errors.Is(berr, ErrStaleSlot) {
			reason = "stale_slot"
		}
		s.metrics.requests.WithLabelValues(t.name, robot.Name, reason).Inc()
		a.attempts++
		if a.attempts >= s.opts.Attempts {
			return Outcome{}, false, a.fail(ClassTransient, berr.Error(), berr)
		}
		s.logger.Warn("a request could not start in time (this replica was paused, or the connection slow to open): "+
			"not sent; picking and confirming again", "target", t.name, "robot", robot.Name, "reason", berr.Error(),
			"fence", s.opts.Fence.String(), "slot_hold", s.opts.HTTPTimeout.String(), "attempt", a.attempts)
		return Outcome{}, true, nil
	case errors.Is(berr, gobreaker.ErrOpenState) || errors.Is(berr, gobreaker.ErrTooManyRequests):
		s.giveSlotBack(ctx, t, pick.Pick) // no request was made: the slot is not spent
		s.metrics.requests.WithLabelValues(t.name, robot.Name, "circuit_open").Inc()
		return Outcome{}, true, nil // the breaker opened since closedCircuits; the next pick skips the robot
	}
	if o.OK || o.Class == ClassTransient || o.Class == ClassPermanent {
		// The request went out: count it from its answer, the platform's latest moment. An
		// answer that is not a throttle says the robot is open (a probe's doubt is over);
		// a throttle, a broken robot or one out of its quota settle in settle.
		s.settlePool(ctx, t, pick.Pick, store.Settlement{How: store.SettleAnswered, Open: o.OK || o.Class == ClassPermanent})
	}
	return o, false, nil
}

// settle acts on the class of o, the failed answer of robot: a permanent one ends the
// attempt; a throttle rests the robot; a broken robot, or one out of its quota, leaves
// the rotation; a transient answer is tried again after a backoff (Retry-After, when
// longer), a bounded number of times. A nil error means the next round goes on.
func (a *attempt) settle(ctx context.Context, pick store.Pick, robot Robot, o Outcome) error {
	s, t := a.s, a.t
	a.last = o
	s.metrics.requests.WithLabelValues(t.name, robot.Name, string(o.Class)).Inc()
	if ctx.Err() != nil {
		if o.Class != ClassTransient && o.Class != ClassPermanent { // not settled by request: counted from its answer
			s.settlePool(ctx, t, pick, store.Settlement{How: store.SettleAnswered})
		}
		return a.gaveUp(ctx)
	}
	switch o.Class {
	case ClassPermanent:
		return a.fail(ClassPermanent, o.Reason, nil)
	case ClassThrottled:
		a.throttles++
		if a.throttles > 3*len(t.order) { // robots that keep throttling despite cool-downs
			a.attempts++
			if a.attempts >= s.opts.Attempts {
				return a.fail(ClassThrottled, o.Reason, nil)
			}
		}
		s.throttled(ctx, t, robot, pick, o)
		return nil
	case ClassRobotBroken:
		done, err := s.pool.Settle(context.WithoutCancel(ctx), t.name, pick, t.order,
			store.Settlement{How: store.SettleDisabled, DisableFor: s.opts.DisableFor})
		s.metrics.disabled.WithLabelValues(t.name, robot.Name, "broken").Inc()
		s.logger.Error("robot broken; taken out of rotation", "target", t.name, "kind", t.proto.Kind(), "robot", robot.Name,
			"http_status", o.HTTPStatus, "code", o.Code, "reason", o.Reason, "until", done.DisabledUntil, "disable_error", errString(err))
		return nil
	case ClassOutOfQuota:
		// Out of rotation until the quota period ends: a retry through it is in vain.
		done, err := s.pool.Settle(context.WithoutCancel(ctx), t.name, pick, t.order,
			store.Settlement{How: store.SettleDisabled, DisableFor: max(o.Until.Sub(s.now()), time.Minute)})
		s.metrics.disabled.WithLabelValues(t.name, robot.Name, "out_of_quota").Inc()
		s.logger.Error("robot out of its quota; taken out of rotation until the quota period ends", "target", t.name,
			"kind", t.proto.Kind(), "robot", robot.Name, "code", o.Code, "reason", o.Reason, "until", done.DisabledUntil,
			"disable_error", errString(err))
		return nil
	}
	return a.retryLater(ctx, robot, o)
}

// retryLater counts a transient failure of robot and waits its backoff (o's Retry-After
// when longer); past Options.Attempts, or a Retry-After past Options.BackoffMax, the
// attempt ends (the latter saying when to try again).
func (a *attempt) retryLater(ctx context.Context, robot Robot, o Outcome) error {
	s := a.s
	a.attempts++
	if a.attempts >= s.opts.Attempts {
		return a.fail(ClassTransient, o.Reason, nil)
	}
	d := s.backoff(a.attempts)
	if o.RetryAfter > d {
		if o.RetryAfter > s.opts.BackoffMax {
			f := a.fail(ClassTransient, o.Reason, nil)
			f.RetryAfter = o.RetryAfter
			return f
		}
		d = o.RetryAfter
	}
	s.logger.Info("send failed; retrying", "target", a.t.name, "robot", robot.Name, "attempt", a.attempts,
		"http_status", o.HTTPStatus, "code", o.Code, "reason", o.Reason, "backoff", d)
	if err := s.sleep(ctx, d); err != nil {
		return a.fail(ClassTransient, "gave up: "+err.Error(), err)
	}
	return nil
}

// principalOf is a's principal (Options.PrincipalOf), "" for none.
func (s *Chat) principalOf(a Alert) string {
	if s.opts.PrincipalOf == nil {
		return ""
	}
	return s.opts.PrincipalOf(a)
}

// learn reports whether robot limits are learned (sender.robotLimits learn).
func (s *Chat) learn() bool { return s.opts.RobotLimits == config.RobotLimitsLearn }

// slot is a robot's window slot the sender holds: the pool's pick, and when this replica
// asked for it, by its own clock (its request must start within Options.HTTPTimeout of
// that: the slot fence, fence.go).
type slot struct {
	store.Pick
	asked time.Time
}

// pickSlot asks the pool for a robot of t among robots, with pacing.
func (s *Chat) pickSlot(ctx context.Context, t *target, robots []store.PoolRobot, pacing store.Pacing) (slot, error) {
	asked := s.now()
	// A request may start up to HTTPTimeout after its pick (the slot fence) and take as
	// long again: a probe holds its robot in doubt that long (its Hold), so that a second
	// probe never reaches a robot whose first is still on the wire.
	hold := 2 * s.opts.HTTPTimeout
	pick, err := s.pool.Pick(ctx, t.name, robots, store.PickOptions{Pacing: pacing, Learn: s.learn(),
		ProbeTimeout: hold + time.Second, Busy: t.busy, Hold: hold})
	return slot{Pick: pick, asked: asked}, err
}

// throttled records that the platform throttled robot: it cools down (at least o's
// Retry-After, up to the target's longest cool-down), and, when it was below its
// configured limit, gets a lower learned one; the start of such an episode is logged
// once, by the replica that saw it, with what the operator may want to know.
func (s *Chat) throttled(ctx context.Context, t *target, robot Robot, pick store.Pick, o Outcome) {
	done, err := s.pool.Settle(context.WithoutCancel(ctx), t.name, pick, t.order, store.Settlement{How: store.SettleThrottled,
		Throttle: store.ThrottleOptions{Cooldown: t.cooldown, CooldownMax: t.cooldownMax, RetryAfter: o.RetryAfter,
			Learn: s.learn() && !o.Busy}})
	th := done.Throttle
	s.metrics.cooldowns.WithLabelValues(t.name, robot.Name).Inc()
	if err != nil {
		s.logger.Warn("robot throttled; could not record it", "target", t.name, "kind", t.proto.Kind(), "robot", robot.Name,
			"http_status", o.HTTPStatus, "code", o.Code, "error", err.Error())
		return
	}
	s.metrics.limit.WithLabelValues(t.name, robot.Name).Set(float64(th.Limit))
	if th.Started {
		s.logger.Warn("robot throttled below its configured limit: is it shared with another sender? "+
			"rocketdelay now sends at most the learned limit through it, and raises it again by one per window without a throttle",
			"target", t.name, "robot", robot.Name, "sends_in_window", th.InWindow, "configured_limit", robot.Limit,
			"learned_limit", th.Limit, "cooling_until", th.CoolingUntil)
		return
	}
	s.logger.Info("robot throttled; cooling it down", "target", t.name, "kind", t.proto.Kind(), "robot", robot.Name,
		"http_status", o.HTTPStatus, "code", o.Code, "reason", o.Reason, "until", th.CoolingUntil, "limit", th.Limit)
}

// giveSlotBack frees the window slot of a pick that made no request (and lets another
// probe go, when it was the robot's probe).
func (s *Chat) giveSlotBack(ctx context.Context, t *target, pick store.Pick) {
	s.settlePool(ctx, t, pick, store.Settlement{How: store.SettleReturned})
}

// settlePool records a returned or answered attempt in the pool; a failure to is logged:
// the window's record stays an upper bound (the send counted from its pick), and a
// probe's doubt lasts until its timeout.
func (s *Chat) settlePool(ctx context.Context, t *target, pick store.Pick, how store.Settlement) {
	if _, err := s.pool.Settle(context.WithoutCancel(ctx), t.name, pick, t.order, how); err != nil {
		s.logger.Warn("could not record a send's end in the robot's window", "target", t.name, "robot", pick.Robot,
			"how", string(how.How), "error", err.Error())
	}
}

// post makes one request through robot's circuit breaker.
func (s *Chat) post(ctx context.Context, t *target, robot Robot, m Message) (Outcome, error) {
	return t.breakers[robot.Name].Execute(func() (Outcome, error) {
		start := s.now()
		o := t.proto.Post(ctx, s.client, robot, m)
		if stale := fenceOf(ctx).stale(); stale != nil {
			return o, stale // no request: neither a duration nor a failure of the robot
		}
		s.metrics.duration.WithLabelValues(t.name).Observe(s.now().Sub(start).Seconds())
		if !o.OK && o.Class == ClassTransient && ctx.Err() == nil {
			return o, errTransientAnswer
		}
		return o, nil
	})
}

// closedCircuits lists the robots of t whose circuit breaker lets requests through.
func (s *Chat) closedCircuits(t *target) []store.PoolRobot {
	out := make([]store.PoolRobot, 0, len(t.order))
	for _, r := range t.order {
		if t.breakers[r.Name].State() != gobreaker.StateOpen {
			out = append(out, r)
		}
	}
	return out
}

func (s *Chat) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		s.metrics.inflight.Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Chat) release() {
	s.metrics.inflight.Dec()
	<-s.sem
}

// backoff is the wait before retry number attempt (1 for the first retry): exponential
// with full jitter, a random duration in [0, min(BackoffMax, BackoffBase·2^(attempt-1))].
func (s *Chat) backoff(attempt int) time.Duration {
	ceil := s.opts.BackoffBase
	for i := 1; i < attempt && ceil < s.opts.BackoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, s.opts.BackoffMax)
	return rand.N(ceil + 1)
}

// sleep waits d, or until ctx ends (its error), or the Chat stops (ErrStopping).
func (s *Chat) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-s.stop.c:
		return ErrStopping
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
