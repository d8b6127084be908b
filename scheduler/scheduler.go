package scheduler

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"os"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/consumer"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/timewheel"
	"github.com/rocketdelay/rocketdelay/wire"
)

// WheelStage is the Redis side of the wheel stage as the scheduler uses it;
// *store.WheelStage implements it.
type WheelStage interface {
	Put(ctx context.Context, e store.Entry) (store.PutResult, error)
	ClaimAhead(ctx context.Context, ids []string, token string, ahead time.Duration) (store.Claimed, error)
	ClaimOverdue(ctx context.Context, grace time.Duration, limit int, token string) (store.Claimed, error)
	// Moves announces the reschedules of waiting alerts, for the timers of this
	// replica's wheel; the channel closes when ctx ends.
	Moves(ctx context.Context) <-chan store.Moved
	// ReleaseAll ends claims whose hand-offs are done, noting each receipt in its alert's
	// trace, and reports for each whether its claim had been lost.
	ReleaseAll(ctx context.Context, rs []store.Released) ([]bool, error)
	// MarkAllDelivered leaves the done markers of delivered hand-offs whose releases wait
	// (release.go); Done reads the markers of entries taken over (sweeper.go).
	MarkAllDelivered(ctx context.Context, ids []string) error
	Done(ctx context.Context, ids []string) ([]store.Outcome, error)
	// RescheduledDue is the due time of an alert rescheduled while it hopped, which
	// overrides its message's (docs/design.md, Reschedule).
	RescheduledDue(ctx context.Context, id string) (time.Time, bool, error)
	// SettleRequeue settles the generation of a copy a reschedule sent back to the
	// broker, when the copy arrives before the reschedule settled it.
	SettleRequeue(ctx context.Context, id string, gen int64, dueAt time.Time, commit bool) (store.Rescheduled, error)
	// TraceHop notes a broker hop in the alert's trace for operators, and lists the
	// alert among the pending ones (best effort); Unlist removes an alert rejected after
	// it hopped from that list.
	TraceHop(ctx context.Context, h store.HopNote) error
	Unlist(ctx context.Context, id, target string) error
	GiveBack(ctx context.Context, c store.Claim, retryAt time.Time, partsSent int) (bool, error)
	// Confirm and MarkFailed are the powers of a claim over its alert while it is sent
	// (claim.go).
	Confirm(ctx context.Context, c store.Claim, partsSent int) error
	MarkFailed(ctx context.Context, c store.Claim, failure []byte) error
	DueWithin(ctx context.Context, window time.Duration, limit int) ([]store.Due, error)
	// Park and Adopt share a busy target's sends across replicas (share.go).
	Park(ctx context.Context, target string, lease time.Duration, parked ...store.Parked) ([]string, error)
	Adopt(ctx context.Context, target string, limit int, token string) (store.Claimed, int, error)
	// Lease is the backstop of a claim (store.WheelStageOptions.Lease), and a park's
	// lease; a claim that cannot reach Redis gives up after it.
	Lease() time.Duration
}

// Delivery receives what the scheduler lets go of; *delivery.Deliverer implements it.
type Delivery interface {
	// Deliver takes a due alert. A nil error means the alert needs nothing more
	// (delivered, or durably recorded as failed: the receipt's outcome) and is released from the
	// wheel stage; an error wrapping store.ErrNotHeld means the claim was lost on the way
	// and the alert is dropped here; any other error gives it back for a later attempt.
	// Deliver must honour ctx.
	Deliver(ctx context.Context, a sender.Alert) (store.Receipt, error)
	// Stop ends, at once, every Deliver that waits to be sent (for a robot, a backoff)
	// with an error, and every later one; a request on the wire goes on to its answer.
	// Stop runs while the scheduler stops: what was not sent is handed back to the other
	// replicas.
	Stop()
	// Reject records an input that can never be delivered. nil means it is recorded and
	// the message is acknowledged; an error hands the message back to RocketMQ.
	Reject(ctx context.Context, r delivery.Rejected) error
}

// Defaults of the Options that have no config key.
const (
	// DefaultSweepInterval is how often the sweeper looks for overdue entries.
	DefaultSweepInterval = 500 * time.Millisecond
	// DefaultClaimBatch bounds the entries one sweep claims.
	DefaultClaimBatch = 512
	// DefaultClaimAhead is how long before their due time alerts are claimed: enough for
	// the claims of a burst of a few thousand alerts due at one instant on one Redis
	// (docs/performance.md, Burst).
	DefaultClaimAhead = 100 * time.Millisecond
	// DefaultRetryDelay is how long a hand-off that failed waits before it is tried again.
	DefaultRetryDelay = time.Second
	// DefaultHandoffWorkers is how many alerts are handed off at once.
	DefaultHandoffWorkers = 80
	// DefaultConsumeGoroutines is the push consumer's concurrency.
	DefaultConsumeGoroutines = 20
)

// Options configures a Scheduler. Zero fields take the defaults their comments give.
type Options struct {
	// NameServers are the RocketMQ name servers. Required.
	NameServers []string
	// Access signs the requests to the name servers and brokers and chooses TLS (the hop
	// producer, the consumer, the admin calls). Default none.
	Access wire.Access
	// Topic is consumed and receives the hops. Required.
	Topic string
	// Group is the consumer group. Required.
	Group string
	// SendTimeout bounds one hop publish. Default config rocketmq.sendTimeout.
	SendTimeout time.Duration
	// Levels are the broker's delay levels. Required.
	Levels config.DelayLevels
	// Threshold: remainders at or above it hop again. Required.
	Threshold time.Duration
	// Mode is config scheduler.mode: levels, timer or auto. Default levels.
	Mode string
	// TimerMargin is how long before the due time a timer hop lands. Default config
	// scheduler.timerMargin.
	TimerMargin time.Duration
	// Horizon is the longest delay accepted. Required.
	Horizon time.Duration
	// DedupeWindow is how long a done marker lives (config scheduler.doneTTL): an alert
	// due longer ago than this is rejected as stale. 0: no alert is stale.
	DedupeWindow time.Duration
	// KnownTarget says whether a target name is configured. Required.
	KnownTarget func(string) bool
	// Targets are the names of the configured targets, which this replica says it has
	// in Roster; Policies those of its escalation policies, said with them
	// (store.RosterPolicy), so that a policy one replica has and another not yet is not
	// refused as unknown.
	Targets, Policies []string
	// Roster is what the replicas of the deployment say their configurations have
	// (roster.go): an alert for a target this replica does not know waits for one that
	// does. Default none: such an alert is rejected at once.
	Roster TargetRoster
	// AfterFirstBeat, when set, runs once this replica's first beat has landed (it is
	// live: a replica that changes the deployment's layout now sees it) and before it
	// claims or consumes anything; an error ends the start. Serve re-reads the
	// deployment's layout there and says it acts in it (store.AckLayout). Default none.
	AfterFirstBeat func(context.Context) error
	// UnknownTargetWait is how long after the last replica that had a target said so its
	// alerts still wait for one. Default config scheduler.unknownTargetWait.
	UnknownTargetWait time.Duration
	// Topics are the topic targets, by name: their messages keep their properties in the
	// wheel stage, their bodies are any bytes, and a destination they may not choose is
	// rejected on arrival. Default none.
	Topics map[string]topic.Target
	// CheckBody checks the body of an alert for the chat target target as its platform
	// would (sender.Chat.Check); a body it refuses is rejected on arrival. Default: every
	// body is accepted here, and one the platform refuses is recorded at its due time.
	CheckBody func(target string, body []byte) error
	// Principal is the producer an alert's RD_PRINCIPAL_SIG proves it was published by,
	// "" when none; it is noted with the alert for the list of pending alerts. Default:
	// none is ever proven.
	Principal func(e store.Entry) string
	// StepMarkProven reports whether an escalation step's mark (RD_EPISODE) carries the
	// service's signature (RD_EPISODE_SIG) for the entry's id and target: a step of a
	// release that signed marks but not principals is the service's too. nil: none is.
	StepMarkProven func(e store.Entry) bool
	// Brokers, when set, are broker addresses on which the topic is created if the name
	// server does not know it; when empty a missing topic is an error at Start.
	Brokers []string
	// Grace is how far past its due time an entry must be before the sweeper claims it
	// (the replica that holds it in its wheel gets it first). Default config
	// scheduler.grace.
	Grace time.Duration
	// SweepInterval is how often the sweeper looks for overdue entries and expired
	// leases. Default DefaultSweepInterval.
	SweepInterval time.Duration
	// ClaimBatch bounds the entries one sweep claims. Default DefaultClaimBatch.
	ClaimBatch int
	// ClaimAhead is how long before their due time the wheel fires its keys and the fire
	// loop claims them (store.WheelStage.ClaimAhead): the claim's round trip is over by
	// the due instant, and a burst of alerts due together is claimed before it rather
	// than after. A claimed entry is still handed off no sooner than its due time by
	// Redis's clock; an alert cancelled or moved within ClaimAhead of its due time is
	// too late, as one being sent is. Default DefaultClaimAhead; negative: at the due
	// time.
	ClaimAhead time.Duration
	// RetryDelay is how long a hand-off that failed waits before it is tried again; it
	// doubles with every failed try of the same alert. Default DefaultRetryDelay.
	RetryDelay time.Duration
	// RetryMaxDelay caps the wait between two tries of an alert whose hand-off keeps
	// failing, and between two deliveries by RocketMQ of a message the consumer hands
	// back (Redis or Postgres down). Default config scheduler.retryMaxDelay.
	RetryMaxDelay time.Duration
	// HandoffWorkers is how many alerts are handed off at once. The chat core merges
	// only alerts that wait for a robot at the same time, so under backlog one merged
	// message carries at most this many alerts per replica: keep it above
	// sender.coalesceMax. Default DefaultHandoffWorkers.
	HandoffWorkers int
	// HandoffsPerTarget is the most hand-offs of one target in flight at once, so that a
	// target whose alerts wait for its robots leaves workers to the others; keep it above
	// sender.coalesceMax too. Default three quarters of HandoffWorkers.
	HandoffsPerTarget int
	// ConsumeGoroutines is the push consumer's concurrency. Default
	// DefaultConsumeGoroutines.
	ConsumeGoroutines int
	// Wheel configures the in-process timing wheel; the zero value is the default.
	Wheel timewheel.Config
	// InstanceName is this replica's id: it tells its RocketMQ clients apart from others
	// in the same process, its liveness from the other replicas', and starts its claims'
	// tokens (InstanceName/n), so it holds no "/". Default: hostname, pid and a random
	// suffix.
	InstanceName string
	// Liveness is this replica's heartbeat in the wheel stage (heartbeat.go), on a Redis
	// client of its own. Required.
	Liveness Liveness
	// DLQCheckInterval is how often the group's dead-letter queue is measured (the
	// rocketdelay_dlq_messages gauge). Default DefaultDLQCheckInterval.
	DLQCheckInterval time.Duration
}

func (o Options) withDefaults() Options {
	config.Default(&o.SendTimeout, config.DefaultSendTimeout)
	config.Default(&o.Mode, config.DefaultMode)
	config.Default(&o.TimerMargin, config.DefaultTimerMargin)
	config.Default(&o.Grace, config.DefaultGrace)
	config.Default(&o.SweepInterval, DefaultSweepInterval)
	config.Default(&o.RetryDelay, DefaultRetryDelay)
	config.Default(&o.RetryMaxDelay, config.DefaultRetryMaxDelay)
	o.RetryMaxDelay = max(o.RetryMaxDelay, o.RetryDelay)
	config.Default(&o.ClaimBatch, DefaultClaimBatch)
	config.Default(&o.ClaimAhead, DefaultClaimAhead)
	o.ClaimAhead = max(o.ClaimAhead, 0)
	config.Default(&o.HandoffWorkers, DefaultHandoffWorkers)
	config.Default(&o.HandoffsPerTarget, o.HandoffWorkers*3/4)
	o.HandoffsPerTarget = min(o.HandoffsPerTarget, o.HandoffWorkers)
	config.Default(&o.ConsumeGoroutines, DefaultConsumeGoroutines)
	config.Default(&o.DLQCheckInterval, DefaultDLQCheckInterval)
	config.Default(&o.UnknownTargetWait, config.DefaultUnknownTargetWait)
	if o.InstanceName == "" {
		host, _ := os.Hostname()
		o.InstanceName = fmt.Sprintf("rocketdelay-%s-%d-%s", host, os.Getpid(), randomHex(4))
	}
	return o
}

// AccessFromConfig is how every client of the service reaches the brokers: rocketmq's
// credentials and TLS.
func AccessFromConfig(c config.Config) wire.Access {
	return wire.Access{AccessKey: c.RocketMQ.AccessKey, SecretKey: string(c.RocketMQ.SecretKey), TLS: c.RocketMQ.TLS}
}

// OptionsFromConfig takes the scheduler's options from the service configuration.
func OptionsFromConfig(c config.Config) Options {
	return Options{
		NameServers: c.RocketMQ.NameServers,
		Access:      AccessFromConfig(c),
		Topic:       c.RocketMQ.Topic,
		Group:       c.RocketMQ.Group,
		SendTimeout: c.RocketMQ.SendTimeout,
		Brokers:     c.RocketMQ.Brokers,
		Levels:      c.Scheduler.Levels,
		Threshold:   c.Scheduler.Threshold,
		Mode:        c.Scheduler.Mode,
		TimerMargin: c.Scheduler.TimerMargin,
		Horizon:     c.Scheduler.Horizon,
		Grace:       c.Scheduler.Grace,

		DedupeWindow: c.Scheduler.DoneTTL,

		RetryMaxDelay: c.Scheduler.RetryMaxDelay,
		KnownTarget:   func(name string) bool { _, ok := c.Targets[name]; return ok },
		Targets:       slices.Sorted(maps.Keys(c.Targets)),
		Policies:      slices.Sorted(maps.Keys(c.Escalations)),

		UnknownTargetWait: c.Scheduler.UnknownTargetWait,
		Topics:            topic.Targets(c),
	}
}

// Scheduler consumes the topic, takes hops through the broker's delay levels (or timer
// messages), keeps the final remainder in the Redis wheel stage and an in-process
// timing wheel, and hands due alerts (and inputs that can never be delivered) to its
// Delivery, through its hand-off pool.
type Scheduler struct {
	opts     Options
	store    WheelStage
	delivery Delivery
	logger   *slog.Logger
	metrics  *Metrics
	now      func() time.Time

	life    lifecycle
	heart   *heartbeat
	unknown unknownTargets // the targets whose alerts were sent on for another replica
	broker  brokerSide
	wheel   *timewheel.Wheel
	pool    *handoffPool
	claims  atomic.Uint64 // claim tokens issued
	retry   RetryJob      // SetRetryJob; nil: none
}

// lifecycle is what Start and Stop share.
type lifecycle struct {
	mu               sync.Mutex // guards started, stopped
	started, stopped bool
	cancel           context.CancelFunc // ends the fire loop, the sweeper and the DLQ watch
	loops            sync.WaitGroup     // those three
	running          chan struct{}      // closed once the consumer runs
}

// brokerSide is the scheduler's RocketMQ side: the hop producer, the push consumer and
// the decomposition rule settled at start.
type brokerSide struct {
	producer rocketmq.Producer
	consumer rocketmq.PushConsumer
	own      ownQueues // the consumer's queues, as last allocated (hopSelector)
	route    Route
	mode     atomic.Pointer[string] // route's mode, for readers outside Start
	handling sync.RWMutex           // consume handlers hold it shared; Stop takes it to drain them
	closing  bool                   // set under handling's write lock
	traces   chan store.HopNote     // hops to note in their alerts' traces (traceLoop)

	rebalanceMu sync.Mutex                          // a rebalance of the heartbeat, or the consumer's stop
	rebalancer  interface{ RebalanceIfNotPaused() } // the running consumer; nil before its start and from its stop
}

// rebalanceNow rebalances the running consumer at once (not while it is suspended), and
// reports whether it did.
func (b *brokerSide) rebalanceNow() bool {
	b.rebalanceMu.Lock()
	defer b.rebalanceMu.Unlock()
	if b.rebalancer == nil {
		return false
	}
	b.rebalancer.RebalanceIfNotPaused()
	return true
}

// New returns a stopped Scheduler that keeps the wheel stage in ws and hands alerts to
// d. logger, metrics and now may not be nil.
func New(opts Options, ws WheelStage, d Delivery, logger *slog.Logger, metrics *Metrics, now func() time.Time) (*Scheduler, error) {
	switch {
	case len(opts.NameServers) == 0:
		return nil, errors.New("scheduler: no name servers")
	case opts.Topic == "" || opts.Group == "":
		return nil, errors.New("scheduler: topic and group are required")
	case len(opts.Levels) == 0 || opts.Threshold < opts.Levels[0]:
		return nil, errors.New("scheduler: levels are required and the threshold must be at least the smallest level")
	case opts.Horizon <= 0 || opts.KnownTarget == nil:
		return nil, errors.New("scheduler: horizon and KnownTarget are required")
	case opts.Liveness == nil || opts.Liveness.Period() <= 0:
		return nil, errors.New("scheduler: a liveness with a period is required")
	case strings.Contains(opts.InstanceName, "/"):
		return nil, fmt.Errorf("scheduler: instance name %q holds a \"/\"", opts.InstanceName)
	}
	s := &Scheduler{
		opts:     opts.withDefaults(),
		store:    ws,
		delivery: d,
		logger:   logger.With("component", "scheduler"),
		metrics:  metrics,
		now:      now,
		life:     lifecycle{running: make(chan struct{})},
		broker:   brokerSide{traces: make(chan store.HopNote, traceBuffer)},
	}
	s.heart = &heartbeat{s: s, gone: make(chan struct{}, 1), rebalance: make(chan struct{}, 1)}
	return s, nil
}

// InstanceName is this replica's id (Options.InstanceName, or the one made up for it).
func (s *Scheduler) InstanceName() string { return s.opts.InstanceName }

// RetryJob is this replica's failed-sends retry job; *delivery.RetryJob implements it.
type RetryJob interface {
	// TakeOver releases the rows that the retry job of replica, which departed, held,
	// and returns how many.
	TakeOver(ctx context.Context, replica string) (int, error)
}

// SetRetryJob has each replica that this one takes as gone (heartbeat.go) hand the
// failed-sends rows its retry job held to j, so that they are tried again at once rather
// than after their lease. j's claims must carry InstanceName. Call it before Start.
func (s *Scheduler) SetRetryJob(j RetryJob) { s.retry = j }

// Start runs, in order: the heartbeat (its first beat lands before anything is claimed),
// the wheel, the hand-off pool, the fire loop and the sweeper, the due-soon entries of
// the wheel stage loaded into the wheel, the hop producer, the topics and the route, the
// consumer, and the DLQ watch. It returns once the consumer runs; a second call is a
// no-op. Stop undoes whatever ran.
func (s *Scheduler) Start(ctx context.Context) error {
	s.life.mu.Lock()
	defer s.life.mu.Unlock()
	if s.life.started {
		return nil
	}
	if err := s.heart.first(ctx); err != nil {
		return err
	}
	if s.opts.AfterFirstBeat != nil {
		if err := s.opts.AfterFirstBeat(ctx); err != nil {
			return err
		}
	}
	if err := s.startWheel(); err != nil {
		return err
	}
	s.heart.start()
	s.startPool()
	loopCtx := s.startLoops()
	for _, step := range []func(context.Context) error{s.loadDueSoon, s.startHopProducer, s.settleRoute, s.affirmTargets, s.startConsumer} {
		if err := step(ctx); err != nil {
			return err
		}
	}
	s.life.loops.Add(1)
	go s.dlqWatch(loopCtx, s.opts.DLQCheckInterval)
	if s.opts.Roster != nil {
		s.life.loops.Add(1)
		go s.rosterLoop(loopCtx)
	}
	close(s.life.running)
	s.logger.Info("scheduler started", "topic", s.opts.Topic, "group", s.opts.Group, "mode", s.Mode(),
		"levels", s.opts.Levels.String(), "threshold", s.opts.Threshold.String(), "instance", s.opts.InstanceName)
	return nil
}

func (s *Scheduler) startWheel() error {
	wheel, err := timewheel.New(s.opts.Wheel)
	if err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	if err := wheel.Start(); err != nil {
		return fmt.Errorf("scheduler: %w", err)
	}
	s.wheel = wheel
	s.metrics.wheelLen.Store(wheel.Len)
	return nil
}

// startPool runs the hand-off pool; from here on Stop undoes whatever ran.
func (s *Scheduler) startPool() {
	s.pool = newHandoffPool(s.opts, s.store, s.delivery, s.logger, s.metrics, s.now, s.wheel, s.heart)
	s.pool.start()
	s.life.started = true
}

// startLoops runs the fire loop, the sweeper, the move loop and the hop-trace writers, and returns the
// context that ends them (and the DLQ watch).
func (s *Scheduler) startLoops() context.Context {
	loopCtx, cancel := context.WithCancel(context.Background())
	s.life.cancel = cancel
	s.life.loops.Add(3 + traceWriters)
	go s.fireLoop(loopCtx)
	go s.sweepLoop(loopCtx)
	go s.moveLoop(loopCtx)
	for range traceWriters {
		go s.traceLoop(loopCtx)
	}
	return loopCtx
}

func (s *Scheduler) startHopProducer(context.Context) error {
	var err error
	s.broker.producer, err = rocketmq.NewProducer(append(s.opts.Access.ProducerOptions(),
		producer.WithNsResolver(primitive.NewPassthroughResolver(s.opts.NameServers)),
		producer.WithGroupName(s.opts.Group+"-hops"),
		// Not the consumer's instance name: rocketmq-client-go shares one client per name,
		// and the producer's Shutdown would close it under the consumer.
		producer.WithInstanceName(s.opts.InstanceName+"-hops"),
		producer.WithSendMsgTimeout(s.opts.SendTimeout),
		producer.WithRetry(2),
		producer.WithQueueSelector(hopSelector{mine: &s.broker.own, next: producer.NewRoundRobinQueueSelector()}),
	)...)
	if err != nil {
		return fmt.Errorf("scheduler: hop producer: %w", err)
	}
	if err := s.broker.producer.Start(); err != nil {
		return fmt.Errorf("scheduler: start hop producer: %w", err)
	}
	return nil
}

// settleRoute checks (or creates) the topic, teaches the hop producer its route,
// settles the decomposition rule (levels or timer), and checks the consumer group and
// its retry topic.
func (s *Scheduler) settleRoute(ctx context.Context) error {
	if err := EnsureTopic(ctx, s.opts.NameServers, s.opts.Access, s.opts.Topic, s.opts.Brokers, s.logger); err != nil {
		return err
	}
	s.learnRoute(ctx)
	var err error
	if s.broker.route, err = s.resolveRoute(ctx); err != nil {
		return err
	}
	mode := config.ModeLevels
	if s.broker.route.Timer != nil {
		mode = config.ModeTimer
	}
	s.broker.mode.Store(&mode)
	if len(s.opts.Brokers) > 0 {
		if _, err := CheckGroup(ctx, s.opts.NameServers, s.opts.Access, s.opts.Group, s.opts.Brokers, s.logger); err != nil {
			return err
		}
	}
	return s.ensureRetryTopic(ctx)
}

func (s *Scheduler) startConsumer(context.Context) error {
	var err error
	s.broker.consumer, err = rocketmq.NewPushConsumer(append(s.opts.Access.ConsumerOptions(),
		consumer.WithNsResolver(primitive.NewPassthroughResolver(s.opts.NameServers)),
		consumer.WithGroupName(s.opts.Group),
		consumer.WithInstance(s.opts.InstanceName),
		consumer.WithConsumeFromWhere(consumer.ConsumeFromFirstOffset),
		consumer.WithConsumeGoroutineNums(s.opts.ConsumeGoroutines),
		consumer.WithConsumeMessageBatchMaxSize(1),
		// Queues only to the consumers of live replicas (allocate.go).
		consumer.WithStrategy(allocateLive(s.heart.absentReplicas, &s.broker.own)),
		// Never to the dead-letter queue: a message handed back while Redis or Postgres is
		// down comes back until they are up (see retryLevel).
		consumer.WithMaxReconsumeTimes(math.MaxInt32),
	)...)
	if err != nil {
		return fmt.Errorf("scheduler: consumer: %w", err)
	}
	if err := s.broker.consumer.Subscribe(s.opts.Topic, consumer.MessageSelector{}, s.consume); err != nil {
		return fmt.Errorf("scheduler: subscribe to %s: %w", s.opts.Topic, err)
	}
	if err := s.broker.consumer.Start(); err != nil {
		return fmt.Errorf("scheduler: start consumer of topic %s, group %s: %w", s.opts.Topic, s.opts.Group, err)
	}
	if r, ok := s.broker.consumer.(interface{ RebalanceIfNotPaused() }); ok {
		s.broker.rebalanceMu.Lock()
		s.broker.rebalancer = r
		s.broker.rebalanceMu.Unlock()
	} else {
		s.logger.Warn("this RocketMQ client cannot be asked to rebalance: the queues of a paused replica move at the client's next rebalance")
	}
	return nil
}

// Running reports whether the consumer runs (for readiness).
func (s *Scheduler) Running() bool {
	select {
	case <-s.life.running:
		s.life.mu.Lock()
		defer s.life.mu.Unlock()
		return !s.life.stopped
	default:
		return false
	}
}

// Stop hands everything this replica holds back to the other replicas, in this order:
// it stops consuming (leaving the consumer group, whose queues move to the others at
// once) and waits for the running handlers; it claims nothing more (the wheel, whose
// keys stay in Redis, the fire loop, the sweeper, adopts); it drops the hand-offs that
// are queued and ends those that wait to be sent (Delivery.Stop); it hands back all it
// holds but the hand-offs still running (a request on the wire), which the other
// replicas' sweepers claim at their next run (store.Liveness.Leave); it waits for those
// hand-offs, which release what they sent; it stops beating and hands back what is
// left, and is gone: the others load its wheel's due-soon entries. ctx bounds the waits;
// past it, hand-offs are cancelled, and whatever could not be handed back is taken over
// once this replica's liveness lapses. A second call is a no-op.
func (s *Scheduler) Stop(ctx context.Context) error {
	s.life.mu.Lock()
	if !s.life.started || s.life.stopped {
		s.life.stopped = true
		s.life.mu.Unlock()
		return nil
	}
	s.life.stopped = true
	s.life.mu.Unlock()

	s.stopConsumer(ctx)
	pending := s.wheel.Stop() // closes wheel.C, which ends the fire loop
	s.life.cancel()           // ends the sweeper and the DLQ watch
	s.pool.closeAdopting()
	s.waitLoops(ctx)
	s.pool.drop()
	s.leave(ctx, s.pool.handingOff()...)
	s.pool.wait(ctx)
	s.heart.stop()
	s.leave(ctx)
	if s.broker.producer != nil {
		_ = s.broker.producer.Shutdown()
	}
	s.logger.Info("scheduler stopped", "wheel_keys_left_in_redis", len(pending))
	return nil
}

// leaveTimeout bounds a hand-back at stop: past it, the others take over what is left
// once this replica's liveness lapses.
const leaveTimeout = 5 * time.Second

// leave hands back what this replica holds but keep (store.Liveness.Leave), within
// leaveTimeout even past ctx's deadline: it is what spares the alerts a wait for this
// replica's liveness to lapse.
func (s *Scheduler) leave(ctx context.Context, keep ...string) {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), leaveTimeout)
	defer cancel()
	ended, left, err := s.opts.Liveness.Leave(ctx, s.opts.InstanceName, keep...)
	if err != nil {
		s.logger.Warn("stop: could not hand back what this replica holds; the other replicas take it over once its liveness lapses",
			"handed_back", ended, "err", err, "liveness", s.opts.Liveness.Period().String())
		return
	}
	s.metrics.handedBack.Add(float64(ended))
	s.logger.Info("stop: handed back to the other replicas", "handed_back", ended, "kept_while_sending", left)
}

// waitLoops waits for the fire loop, the sweeper and the DLQ watch to end. Past ctx's
// deadline it cancels the pool's writes they may be retrying (give-backs of what they
// could not queue while Redis was cut off), and waits 5 s more at most.
func (s *Scheduler) waitLoops(ctx context.Context) {
	done := make(chan struct{})
	go func() { s.life.loops.Wait(); close(done) }()
	select {
	case <-done:
		return
	case <-ctx.Done():
	}
	s.pool.cancel()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		s.logger.Error("stop: the fire loop or the sweeper does not end; leaving it, its claims' leases will expire")
	}
}

// stopConsumer stops consuming and waits, until ctx ends, for the handlers in progress.
func (s *Scheduler) stopConsumer(ctx context.Context) {
	s.broker.rebalanceMu.Lock() // no rebalance of the heartbeat from here
	s.broker.rebalancer = nil
	s.broker.rebalanceMu.Unlock()
	if s.broker.consumer != nil {
		// Suspend first: it stops new rebalances (another replica leaving triggers one),
		// and the pause lets one already running finish, because rocketmq-client-go's
		// Shutdown writes a flag its rebalance reads without synchronisation.
		s.broker.consumer.Suspend()
		time.Sleep(200 * time.Millisecond)
		_ = s.broker.consumer.Shutdown()
	}
	drained := make(chan struct{})
	go func() {
		s.broker.handling.Lock() // waits for handlers in progress
		s.broker.closing = true
		s.broker.handling.Unlock()
		close(drained)
	}()
	select {
	case <-drained:
	case <-ctx.Done():
		s.logger.Warn("stop: consume handlers still running at the deadline; their messages will be redelivered")
	}
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
