package sender

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"time"

	"github.com/sony/gobreaker/v2"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// Pool is the shared rate-limit state of the robots; *store.RobotPool implements it.
type Pool interface {
	Pick(ctx context.Context, target string, robots []store.PoolRobot, opts store.PickOptions) (store.Pick, error)
	Touch(ctx context.Context, target string, pick store.Pick, accepted bool) (bool, error)
	Throttled(ctx context.Context, target string, pick store.Pick, robots []store.PoolRobot, cooldown time.Duration, learn bool) (store.Throttle, error)
	Return(ctx context.Context, target string, pick store.Pick) (bool, error)
	Cool(ctx context.Context, target, robot string, d time.Duration) (time.Time, error)
	Disable(ctx context.Context, target, robot string, d time.Duration) (time.Time, error)
}

// Options configure a Sender. Zero fields take the defaults of the matching config keys
// (config.DefaultSender…).
type Options struct {
	// Targets are the robot groups by name.
	Targets map[string][]Robot
	// Limit is the sends per Window of a robot whose own Limit is 0 (config sender.limit).
	Limit int
	// BaseURL is the webhook endpoint (config sender.baseURL).
	BaseURL string
	// HTTPTimeout bounds one request (config sender.httpTimeout).
	HTTPTimeout time.Duration
	// Cooldown is how long a throttled robot rests (config sender.cooldown).
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
	// RobotLimits is config.RobotLimitsLearn (the default: a robot DingTalk throttles
	// below its configured limit gets a lower, learned one, and a robot out of a cool-down
	// takes one probe at a time) or config.RobotLimitsFixed (config sender.robotLimits).
	RobotLimits string
}

// OptionsFromConfig builds Options from the configuration (defaults filled in).
func OptionsFromConfig(c config.Config) (Options, error) {
	s := c.Sender
	o := Options{
		Targets:     make(map[string][]Robot, len(c.Targets)),
		Limit:       s.Limit,
		BaseURL:     s.BaseURL,
		HTTPTimeout: s.HTTPTimeout,
		Cooldown:    s.Cooldown,
		DisableFor:  s.DisableFor,
		Attempts:    s.Attempts,
		BackoffBase: s.BackoffBase,
		BackoffMax:  s.BackoffMax,
		MaxInFlight: s.MaxInFlight,
		MaxWait:     s.MaxWait,

		BreakerFailures: uint32(max(s.BreakerFailures, 0)),
		BreakerOpen:     s.BreakerOpen,
		Coalesce:        s.Coalesce,
		CoalesceMax:     s.CoalesceMax,
		Pacing:          s.Pacing,
		RobotLimits:     s.RobotLimits,
	}
	for name, t := range c.Targets {
		for i, r := range t.Robots {
			tok, err := r.AccessToken()
			if err != nil {
				return Options{}, fmt.Errorf("sender: targets.%s.robots[%d].token: %w", name, i, err)
			}
			o.Targets[name] = append(o.Targets[name], Robot{
				Name: r.Name, Token: tok, SigningSecret: r.SigningSecret, Keyword: r.Keyword, Limit: r.Limit,
			})
		}
	}
	return o, nil
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
	if o.BaseURL == "" {
		o.BaseURL = config.DefaultSenderBaseURL
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
	return o
}

// Failure is the error of a send that did not succeed: every error Send and SendBody
// return is one (find it with errors.As). When ctx ended, it is ClassTransient and
// wraps ctx.Err(). Reason and Error never contain a token or a secret.
type Failure struct {
	// Class says what went wrong; Class.Retryable tells whether a later send may succeed.
	Class Class
	// Reason says it in words a person can act on.
	Reason string
	// Target is the robot group.
	Target string
	// Robot names the robot of the last request, "" when none was made.
	Robot string
	// HTTPStatus and Errcode are those of the last answer, 0 when none.
	HTTPStatus int
	Errcode    int
	// Attempts counts the requests that failed transiently.
	Attempts int
	// Merged, when 2 or more, is how many alerts the failed merged message carried; every
	// one of them got this same Failure.
	Merged int
	// Part and Parts locate the failed part (Part counts from 1; Parts is 1 for a message
	// sent whole); the parts before it were delivered. Both are 0 when the message was
	// refused before sending (unknown target, invalid or oversized body).
	Part, Parts int
	// RetryAfter, when not 0, is the earliest a retry makes sense (a Retry-After longer
	// than the backoff cap, or the wait for a free robot beyond Options.MaxWait).
	RetryAfter time.Duration
	// Err is the underlying error, if any (ctx.Err(), store.ErrNoRobot, a store error).
	Err error
}

// Error describes the failure.
func (f *Failure) Error() string {
	var b strings.Builder
	fmt.Fprintf(&b, "sender: send to %s", f.Target)
	if f.Parts > 1 {
		fmt.Fprintf(&b, " (part %d/%d)", f.Part, f.Parts)
	}
	if f.Merged > 1 {
		fmt.Fprintf(&b, " (merged message of %d alerts)", f.Merged)
	}
	if f.Robot != "" {
		fmt.Fprintf(&b, " via robot %s", f.Robot)
	}
	fmt.Fprintf(&b, ": %s", f.Class)
	if f.HTTPStatus != 0 {
		fmt.Fprintf(&b, ", HTTP %d", f.HTTPStatus)
	}
	if f.Attempts > 0 {
		fmt.Fprintf(&b, ", %d attempts", f.Attempts)
	}
	fmt.Fprintf(&b, ": %s", f.Reason)
	return b.String()
}

// Unwrap returns the underlying error.
func (f *Failure) Unwrap() error { return f.Err }

// errTransientAnswer marks, for the circuit breaker, a request that failed transiently.
var errTransientAnswer = errors.New("transient failure")

// Sender delivers messages to the robots of a target: it picks a free robot from the
// shared pool (waiting exactly as long as the pool says when none is), signs and posts
// the message, and handles every class of failure: a throttled robot cools down and the
// message moves on at once, a broken robot is taken out of rotation, transient failures
// are retried with exponential backoff and full jitter, and payload failures are not
// retried. Each robot has a circuit breaker in this process, and requests in flight are
// bounded. A Sender is safe for concurrent use.
type Sender struct {
	opts    Options
	pool    Pool
	client  *Client
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
	sem     chan struct{}
	targets map[string]*target
	parking Parking // SetParking; nil: no sharing
}

type target struct {
	name     string
	robots   map[string]Robot
	order    []store.PoolRobot
	breakers map[string]*gobreaker.CircuitBreaker[Outcome]
	reserve  int // room the longest keyword needs
	queue    *alertQueue
	spacing  time.Duration // the pool's window over the target's capacity
}

// New returns a Sender. pool is the shared robot pool; metrics may come from
// NewMetrics(nil) in tests; now is the clock of signatures and metrics (nil: time.Now).
// Waits use the time package's timers, so a test can fake them with testing/synctest.
func New(opts Options, pool Pool, logger *slog.Logger, metrics *Metrics, now func() time.Time) (*Sender, error) {
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
	s := &Sender{
		opts:    opts,
		pool:    pool,
		client:  NewClient(opts.BaseURL, opts.HTTPTimeout, now),
		logger:  logger,
		metrics: metrics,
		now:     now,
		sem:     make(chan struct{}, opts.MaxInFlight),
		targets: make(map[string]*target, len(opts.Targets)),
	}
	for name, robots := range opts.Targets {
		if len(robots) == 0 {
			return nil, fmt.Errorf("sender: target %q has no robot", name)
		}
		t := &target{name: name, robots: map[string]Robot{}, breakers: map[string]*gobreaker.CircuitBreaker[Outcome]{},
			queue: newAlertQueue()}
		for _, r := range robots {
			if r.Name == "" || r.Token == "" {
				return nil, fmt.Errorf("sender: target %q: every robot needs a name and a token", name)
			}
			if _, dup := t.robots[r.Name]; dup {
				return nil, fmt.Errorf("sender: target %q: robot %q appears twice", name, r.Name)
			}
			if r.Limit <= 0 {
				r.Limit = opts.Limit
			}
			t.robots[r.Name] = r
			t.order = append(t.order, store.PoolRobot{Name: r.Name, Limit: r.Limit})
			t.reserve = max(t.reserve, keywordReserve(r.Keyword))
			t.breakers[r.Name] = s.newBreaker(name, r.Name)
		}
		t.spacing = pacing(pool, t.order)
		s.targets[name] = t
	}
	return s, nil
}

func (s *Sender) newBreaker(target, robot string) *gobreaker.CircuitBreaker[Outcome] {
	failures := s.opts.BreakerFailures
	return gobreaker.NewCircuitBreaker[Outcome](gobreaker.Settings{
		Name:        target + "/" + robot,
		MaxRequests: 1,
		Timeout:     s.opts.BreakerOpen,
		ReadyToTrip: func(c gobreaker.Counts) bool { return c.ConsecutiveFailures >= failures },
		OnStateChange: func(_ string, from, to gobreaker.State) {
			s.logger.Warn("robot circuit breaker changed state", "target", target, "robot", robot,
				"from", from.String(), "to", to.String())
		},
	})
}

// Close releases the sender's idle HTTP connections. Sends still running are not
// affected.
func (s *Sender) Close() { s.client.Close() }

// Alert is one alert for SendAlert.
type Alert struct {
	// Target names the robot group.
	Target string
	// Body is the alert as producers publish it (see ParseBody).
	Body []byte
	// Due is when the alert was due; merged messages order their sections by it. Zero
	// stands for the moment of the call.
	Due time.Time
	// FromPart, when above 1, skips the parts of a split alert before it: an earlier send
	// delivered them (Failure.Part says which part failed).
	FromPart int
	// Confirm, when set, is called right before every request that would carry the alert,
	// with the number of leading parts of a split alert delivered before that request
	// (0 for an alert sent whole, or its first part), so the caller can note the progress.
	// An error keeps the alert out of that request and ends its send with a Failure
	// (ClassTransient) wrapping the error; no robot slot is spent on it.
	Confirm func(ctx context.Context, partsSent int) error
	// Sent, when set, is called once the alert was delivered, with how.
	Sent func(Sent)
	// Park, when set, lets the sender park the alert while its target is busy (see
	// share.go): it calls Park, and when that returns nil, SendAlert returns ErrParked and
	// the caller forgets the alert. Only with SetParking and sender.pacing auto.
	Park func(ctx context.Context) error
	// Adopted says the alert was adopted from the park by this sender's Parking: it rides
	// the send that adopted it.
	Adopted bool
}

// Sent says how an alert reached DingTalk.
type Sent struct {
	// Robot is the robot that accepted its (last) message.
	Robot string
	// Merged is how many alerts the message that carried it held (1: it went alone); for
	// a split alert, the most any part's message held.
	Merged int
	// Parts is how many parts the alert was split into (1: sent whole).
	Parts int
}

// SendBody parses body as producers publish alerts (see ParseBody) and sends it; an
// invalid body is a *Failure of ClassPermanent wrapping ErrInvalidBody.
func (s *Sender) SendBody(ctx context.Context, target string, body []byte) error {
	return s.SendAlert(ctx, Alert{Target: target, Body: body})
}

// SendAlert parses a.Body as producers publish alerts (see ParseBody) and sends it like
// SendMessage, honouring a.FromPart and a.Confirm.
func (s *Sender) SendAlert(ctx context.Context, a Alert) error {
	m, err := ParseBody(a.Body)
	if err != nil {
		f := &Failure{Class: ClassPermanent, Target: a.Target, Reason: err.Error(), Err: err}
		s.metrics.failures.WithLabelValues(a.Target, string(f.Class)).Inc()
		return f
	}
	sent, err := s.send(ctx, a.Target, m, a.Due, a.FromPart, a.Confirm, shareOf{park: a.Park, adopted: a.Adopted})
	if err == nil && a.Sent != nil {
		a.Sent(sent)
	}
	return err
}

// Send delivers m to target. A text or markdown message over MaxBodyBytes goes as
// numbered parts, in order; any other type over the limit is refused. It returns nil
// once DingTalk accepted every part, or a *Failure: find it with errors.As and look at
// its Class. A Failure of a later part means the earlier parts were delivered; a retry
// sends them again unless it starts from the failed part (Alert.FromPart). When ctx
// ends, Send returns a transient Failure wrapping ctx.Err(). It is SendMessage without a
// due time.
func (s *Sender) Send(ctx context.Context, target string, m Message) error {
	return s.SendMessage(ctx, target, m, time.Time{})
}

// SendMessage is Send for an alert that was due at due (zero: the moment of the call).
// Unless Options.Coalesce is off, the alert waits for a robot in its target's queue, and
// under backlog it may go out merged with other waiting alerts of the target, in due
// order (see coalesce.go); it then counts as delivered when the merged message is, and
// a failure of the merged message is every one of its alerts' failure.
func (s *Sender) SendMessage(ctx context.Context, target string, m Message, due time.Time) error {
	_, err := s.send(ctx, target, m, due, 1, nil, shareOf{})
	return err
}

func (s *Sender) send(ctx context.Context, target string, m Message, due time.Time, fromPart int, confirm func(context.Context, int) error, share shareOf) (Sent, error) {
	t, ok := s.targets[target]
	if !ok {
		f := &Failure{Class: ClassPermanent, Target: target, Reason: fmt.Sprintf("target %q is not configured", target)}
		s.metrics.failures.WithLabelValues(target, string(f.Class)).Inc()
		return Sent{}, f
	}
	parts, err := splitMessage(m, t.reserve)
	if err != nil {
		var f *Failure
		if errors.As(err, &f) {
			f.Target = target
		}
		s.metrics.failures.WithLabelValues(target, string(ClassPermanent)).Inc()
		return Sent{}, err
	}
	sent := Sent{Merged: 1, Parts: len(parts)}
	for i, p := range parts {
		if i+1 < fromPart {
			continue // delivered by an earlier send
		}
		var partConfirm func(context.Context) error
		if confirm != nil {
			partConfirm = func(ctx context.Context) error { return confirm(ctx, i) }
		}
		var err error
		var part Sent
		if s.opts.Coalesce == config.CoalesceOff {
			part.Robot, err = s.sendPicked(ctx, t, single(p, partConfirm), nil)
		} else {
			part, err = s.sendQueued(ctx, t, p, due, len(parts) > 1 || !mergeable(p), partConfirm, share)
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
			s.metrics.failures.WithLabelValues(target, string(f.Class)).Inc()
			s.logger.Warn("send failed", "target", target, "part", i+1, "parts", len(parts),
				"class", string(f.Class), "robot", f.Robot, "http_status", f.HTTPStatus,
				"errcode", f.Errcode, "attempts", f.Attempts, "reason", f.Reason)
			return Sent{}, err
		}
	}
	if !due.IsZero() {
		s.metrics.lateness.WithLabelValues(target).Observe(max(s.now().Sub(due), 0).Seconds())
	}
	return sent, nil
}

// single is the message source of one alert sent alone: m, once confirm (if any) allows.
func single(m Message, confirm func(context.Context) error) func(context.Context) (Message, error) {
	return func(ctx context.Context) (Message, error) {
		if confirm != nil {
			if err := confirm(ctx); err != nil {
				return Message{}, err
			}
		}
		return m, nil
	}
}

// sendPicked delivers the message msg returns, which it asks for right before every
// request (an error there ends the send without a request), and returns the robot that
// accepted it; the error is always a *Failure. When first is not nil, the first robot is
// already picked and holds an in-flight slot (the queue's drainer picked it).
func (s *Sender) sendPicked(ctx context.Context, t *target, msg func(context.Context) (Message, error), first *store.Pick) (string, error) {
	observeWait := first == nil // the queue observes the wait of queued alerts
	var (
		attempts, throttles int
		waited              time.Duration
		last                Outcome
		lastRobot           string
	)
	fail := func(class Class, reason string, err error) *Failure {
		return &Failure{Class: class, Reason: reason, Target: t.name, Robot: lastRobot,
			HTTPStatus: last.HTTPStatus, Errcode: last.Errcode, Attempts: attempts, Err: err}
	}
	defer func() {
		if observeWait {
			s.metrics.wait.WithLabelValues(t.name).Observe(waited.Seconds())
		}
	}()
	for {
		var pick store.Pick
		if first != nil {
			pick, first = *first, nil
		} else {
			if err := ctx.Err(); err != nil {
				return "", fail(ClassTransient, "gave up: "+err.Error(), err)
			}
			robots := s.closedCircuits(t)
			if len(robots) == 0 {
				f := fail(ClassTransient, "the circuit breaker of every robot is open", nil)
				f.RetryAfter = s.opts.BreakerOpen
				return "", f
			}
			// Hold an in-flight slot from the pick to the answer, so that a picked send goes
			// out at once and DingTalk sees the pool's spacing.
			if err := s.acquire(ctx); err != nil {
				return "", fail(ClassTransient, "gave up: "+err.Error(), err)
			}
			var err error
			pick, err = s.pool.Pick(ctx, t.name, robots, s.pickOptions(store.Burst)) // a retry: it waited already
			if err != nil {
				s.release()
				if errors.Is(err, store.ErrNoRobot) {
					return "", fail(ClassRobotBroken, "every robot of the target is out of rotation (broken)", err)
				}
				if ctx.Err() != nil {
					return "", fail(ClassTransient, "gave up: "+ctx.Err().Error(), ctx.Err())
				}
				return "", fail(ClassTransient, "robot pool: "+err.Error(), err)
			}
			if pick.Robot == "" {
				s.release()
				if s.opts.MaxWait > 0 && waited+pick.Wait > s.opts.MaxWait {
					f := fail(ClassTransient, fmt.Sprintf("no robot free within %s", s.opts.MaxWait), nil)
					f.RetryAfter = pick.Wait
					return "", f
				}
				if err := sleep(ctx, pick.Wait); err != nil {
					return "", fail(ClassTransient, "gave up waiting for a free robot: "+err.Error(), err)
				}
				waited += pick.Wait
				continue
			}
		}
		robot := t.robots[pick.Robot]
		lastRobot = robot.Name
		m, err := msg(ctx)
		if err != nil {
			s.release()
			s.giveSlotBack(ctx, t, pick)
			if ctx.Err() != nil {
				return "", fail(ClassTransient, "gave up: "+ctx.Err().Error(), ctx.Err())
			}
			return "", fail(ClassTransient, "not sent: "+err.Error(), err)
		}
		s.metrics.limit.WithLabelValues(t.name, robot.Name).Set(float64(pick.Limit))
		o, berr := s.post(ctx, t, robot, m)
		s.release()
		if berr == nil || errors.Is(berr, errTransientAnswer) {
			// The request went out: count it from its answer, DingTalk's latest moment. An
			// answer that is not a throttle says the robot is open (a probe's doubt is over).
			open := o.OK || o.Class == ClassPermanent
			if _, err := s.pool.Touch(context.WithoutCancel(ctx), t.name, pick, open); err != nil {
				s.logger.Warn("could not move a send to its answer time in the robot's window",
					"target", t.name, "robot", robot.Name, "error", err.Error())
			}
		}
		if errors.Is(berr, gobreaker.ErrOpenState) || errors.Is(berr, gobreaker.ErrTooManyRequests) {
			s.giveSlotBack(ctx, t, pick) // no request was made: the slot is not spent
			s.metrics.requests.WithLabelValues(t.name, robot.Name, "circuit_open").Inc()
			continue // the breaker opened since closedCircuits; the next pick skips the robot
		}
		if o.OK {
			s.metrics.requests.WithLabelValues(t.name, robot.Name, "ok").Inc()
			s.metrics.delivered.WithLabelValues(t.name).Inc()
			return robot.Name, nil
		}
		last = o
		s.metrics.requests.WithLabelValues(t.name, robot.Name, string(o.Class)).Inc()
		if ctx.Err() != nil {
			return "", fail(ClassTransient, "gave up: "+ctx.Err().Error(), ctx.Err())
		}
		switch o.Class {
		case ClassPermanent:
			return "", fail(ClassPermanent, o.Reason, nil)
		case ClassThrottled:
			throttles++
			if throttles > 3*len(t.order) { // robots that keep throttling despite cool-downs
				attempts++
				if attempts >= s.opts.Attempts {
					return "", fail(ClassThrottled, o.Reason, nil)
				}
			}
			s.throttled(ctx, t, robot, pick, o)
			continue
		case ClassRobotBroken:
			until, err := s.pool.Disable(ctx, t.name, robot.Name, s.opts.DisableFor)
			s.metrics.disabled.WithLabelValues(t.name, robot.Name).Inc()
			s.logger.Error("robot broken; taken out of rotation", "target", t.name, "robot", robot.Name,
				"http_status", o.HTTPStatus, "errcode", o.Errcode, "reason", o.Reason, "until", until, "disable_error", errString(err))
			continue
		}
		// ClassTransient
		attempts++
		if attempts >= s.opts.Attempts {
			return "", fail(ClassTransient, o.Reason, nil)
		}
		d := s.backoff(attempts)
		if o.RetryAfter > d {
			if o.RetryAfter > s.opts.BackoffMax {
				f := fail(ClassTransient, o.Reason, nil)
				f.RetryAfter = o.RetryAfter
				return "", f
			}
			d = o.RetryAfter
		}
		s.logger.Info("send failed; retrying", "target", t.name, "robot", robot.Name, "attempt", attempts,
			"http_status", o.HTTPStatus, "errcode", o.Errcode, "reason", o.Reason, "backoff", d)
		if err := sleep(ctx, d); err != nil {
			return "", fail(ClassTransient, "gave up: "+err.Error(), err)
		}
	}
}

// learn reports whether robot limits are learned (sender.robotLimits learn).
func (s *Sender) learn() bool { return s.opts.RobotLimits == config.RobotLimitsLearn }

// pickOptions are the options of a pick with pacing.
func (s *Sender) pickOptions(pacing store.Pacing) store.PickOptions {
	return store.PickOptions{Pacing: pacing, Learn: s.learn(), ProbeTimeout: s.opts.HTTPTimeout + time.Second}
}

// throttled records that DingTalk throttled robot: it cools down, and, when it was
// below its configured limit, gets a lower learned one; the start of such an episode is
// logged once, by the replica that saw it, with what the operator may want to know.
func (s *Sender) throttled(ctx context.Context, t *target, robot Robot, pick store.Pick, o Outcome) {
	th, err := s.pool.Throttled(context.WithoutCancel(ctx), t.name, pick, t.order, s.opts.Cooldown, s.learn())
	s.metrics.cooldowns.WithLabelValues(t.name, robot.Name).Inc()
	if err != nil {
		s.logger.Warn("robot throttled by DingTalk; could not record it", "target", t.name, "robot", robot.Name,
			"http_status", o.HTTPStatus, "errcode", o.Errcode, "error", err.Error())
		return
	}
	s.metrics.limit.WithLabelValues(t.name, robot.Name).Set(float64(th.Limit))
	if th.Started {
		s.logger.Warn("robot throttled by DingTalk below its configured limit: is it shared with another sender? "+
			"rocketdelay now sends at most the learned limit through it, and raises it again by one per window without a throttle",
			"target", t.name, "robot", robot.Name, "sends_in_window", th.InWindow, "configured_limit", robot.Limit,
			"learned_limit", th.Limit, "cooling_until", th.CoolingUntil)
		return
	}
	s.logger.Info("robot throttled by DingTalk; cooling it down", "target", t.name, "robot", robot.Name,
		"http_status", o.HTTPStatus, "errcode", o.Errcode, "reason", o.Reason, "until", th.CoolingUntil, "limit", th.Limit)
}

// giveSlotBack frees the window slot of a pick that made no request.
func (s *Sender) giveSlotBack(ctx context.Context, t *target, pick store.Pick) {
	if pick.Probe { // the probe was not made: let another go
		_, _ = s.pool.Touch(context.WithoutCancel(ctx), t.name, pick, false)
	}
	if _, err := s.pool.Return(context.WithoutCancel(ctx), t.name, pick); err != nil {
		s.logger.Warn("could not free the window slot of a send that was not made",
			"target", t.name, "robot", pick.Robot, "error", err.Error())
	}
}

// post makes one request through robot's circuit breaker.
func (s *Sender) post(ctx context.Context, t *target, robot Robot, m Message) (Outcome, error) {
	body, err := encodeBody(addKeyword(m, robot.Keyword))
	if err != nil {
		return Outcome{Class: ClassPermanent, Reason: err.Error()}, nil
	}
	return t.breakers[robot.Name].Execute(func() (Outcome, error) {
		start := s.now()
		o := s.client.Post(ctx, robot, body)
		s.metrics.duration.WithLabelValues(t.name).Observe(s.now().Sub(start).Seconds())
		if !o.OK && o.Class == ClassTransient && ctx.Err() == nil {
			return o, errTransientAnswer
		}
		return o, nil
	})
}

// closedCircuits lists the robots of t whose circuit breaker lets requests through.
func (s *Sender) closedCircuits(t *target) []store.PoolRobot {
	out := make([]store.PoolRobot, 0, len(t.order))
	for _, r := range t.order {
		if t.breakers[r.Name].State() != gobreaker.StateOpen {
			out = append(out, r)
		}
	}
	return out
}

func (s *Sender) acquire(ctx context.Context) error {
	select {
	case s.sem <- struct{}{}:
		s.metrics.inflight.Inc()
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (s *Sender) release() {
	s.metrics.inflight.Dec()
	<-s.sem
}

// backoff is the wait before retry number attempt (1 for the first retry): exponential
// with full jitter, a random duration in [0, min(BackoffMax, BackoffBase·2^(attempt-1))].
func (s *Sender) backoff(attempt int) time.Duration {
	ceil := s.opts.BackoffBase
	for i := 1; i < attempt && ceil < s.opts.BackoffMax; i++ {
		ceil *= 2
	}
	ceil = min(ceil, s.opts.BackoffMax)
	return rand.N(ceil + 1)
}

// sleep waits d, or until ctx ends.
func sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}
