package relay

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"math"
	mrand "math/rand/v2"
	"regexp"
	"strconv"
	"sync"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Defaults of Options.
const (
	// DefaultMaxBatch is the most messages one batch send carries.
	DefaultMaxBatch = 128
	// DefaultMaxBatchBytes bounds the bodies and properties of one batch send, well under
	// RocketMQ's default maxMessageSize (4 MiB), which a batch counts as a whole.
	DefaultMaxBatchBytes = 1 << 20
	// DefaultAttempts bounds the sends of one message that fail transiently (the broker
	// unreachable or busy, a timeout) within one Send.
	DefaultAttempts = 3
	// DefaultBackoffBase is the wait after the first failed attempt; it doubles, with full
	// jitter, up to DefaultBackoffMax.
	DefaultBackoffBase = 250 * time.Millisecond
	// DefaultBackoffMax caps the wait between two attempts.
	DefaultBackoffMax = 2 * time.Second
)

// Options tune a Sender. A zero field takes its default.
type Options struct {
	// NameServers are the RocketMQ name servers of the business topics. Required.
	NameServers []string
	// Access signs the producer's requests and chooses TLS. Default none.
	Access wire.Access
	// SendTimeout bounds one send to the broker. Default config rocketmq.sendTimeout.
	SendTimeout time.Duration
	// MaxBatch is the most messages one batch send carries. Default DefaultMaxBatch.
	MaxBatch int
	// MaxBatchBytes bounds one batch send's bodies and properties. Default
	// DefaultMaxBatchBytes.
	MaxBatchBytes int
	// MaxMessageSize is the largest body the brokers accept; a larger one fails for good
	// before it is sent. Default config rocketmq.maxMessageSize.
	MaxMessageSize int
	// Attempts bounds the sends of one message that fail transiently within one Send.
	// Default DefaultAttempts.
	Attempts int
	// BackoffBase and BackoffMax shape the exponential backoff, with full jitter, between
	// two attempts. Default DefaultBackoffBase and DefaultBackoffMax.
	BackoffBase, BackoffMax time.Duration
	// Fence is how long after its claims' confirms a send may still start: the wheel
	// stage's guard (store.WheelStage.Guard), in which no other replica takes them over.
	// A send that cannot start within it (this replica was paused) is not made; it is a
	// transient failure wrapping sender.ErrStaleConfirm, and the next attempt confirms
	// again. 0: no fence.
	Fence time.Duration
	// Now is the clock of the fence; nil: time.Now.
	Now func() time.Time
}

func (o Options) withDefaults() Options {
	config.Default(&o.SendTimeout, config.DefaultSendTimeout)
	config.Default(&o.MaxBatch, DefaultMaxBatch)
	config.Default(&o.MaxBatchBytes, DefaultMaxBatchBytes)
	config.Default(&o.MaxMessageSize, config.DefaultMaxMessageSize)
	config.Default(&o.Attempts, DefaultAttempts)
	config.Default(&o.BackoffBase, DefaultBackoffBase)
	config.Default(&o.BackoffMax, DefaultBackoffMax)
	if o.Now == nil {
		o.Now = time.Now
	}
	return o
}

// Rate paces the targets that have a ratePerSecond, for all replicas together;
// *store.TopicRate implements it.
type Rate interface {
	// Take takes up to n of target's tokens at perSecond a second: how many it took, and
	// when none, how long until one is free.
	Take(ctx context.Context, target string, n, perSecond int) (int, time.Duration, error)
}

// Sender delivers due messages of topic targets to their business topics, in batch
// sends when several wait for the same destination. It is safe for concurrent use.
type Sender struct {
	opts     Options
	targets  map[string]topic.Target
	rate     Rate
	producer rocketmq.Producer
	logger   *slog.Logger
	metrics  *Metrics

	mu       sync.Mutex
	batchers map[destKey]*batcher
}

// destKey names a queue: one per target and business topic.
type destKey struct{ target, topic string }

// New starts a Sender for targets. rate may be nil when no target has a ratePerSecond;
// metrics may come from NewMetrics(nil). With no targets it starts no producer.
func New(opts Options, targets map[string]topic.Target, rate Rate, logger *slog.Logger, metrics *Metrics) (*Sender, error) {
	opts = opts.withDefaults()
	s := &Sender{opts: opts, targets: targets, rate: rate, logger: logger.With("component", "topic-sender"), metrics: metrics,
		batchers: map[destKey]*batcher{}}
	for name, t := range targets {
		if t.RatePerSecond > 0 && rate == nil {
			return nil, fmt.Errorf("relay: target %q has a ratePerSecond but the sender has no rate", name)
		}
	}
	if len(targets) == 0 {
		return s, nil
	}
	if len(opts.NameServers) == 0 {
		return nil, errors.New("relay: no name servers")
	}
	p, err := rocketmq.NewProducer(append(opts.Access.ProducerOptions(),
		producer.WithNsResolver(primitive.NewPassthroughResolver(opts.NameServers)),
		producer.WithGroupName("rocketdelay-topics"),
		producer.WithInstanceName("rocketdelay-topics-"+randomHex(4)),
		producer.WithSendMsgTimeout(opts.SendTimeout),
		// No retry inside the client: a send that timed out may have been stored, and the
		// hand-off (which retries with backoff) is the one place that decides to send again.
		producer.WithRetry(0),
		// No compression: the body reaches the broker as it is, so the size the broker
		// checks is the size Send checks, and a large body costs no CPU here.
		producer.WithCompressMsgBodyOverHowmuch(math.MaxInt32),
		// No topic made up on the fly: a target naming a topic that does not exist (a
		// typo) fails its sends, transiently, rather than creating it on a broker that
		// creates topics (its default) and counting messages nobody consumes as delivered.
		producer.WithCreateTopicKey(""),
	)...)
	if err != nil {
		return nil, fmt.Errorf("relay: producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("relay: start producer: %w", err)
	}
	s.producer = p
	return s, nil
}

// Close stops the producer. Sends still in flight fail.
func (s *Sender) Close() {
	if s.producer != nil {
		_ = s.producer.Shutdown()
	}
}

// Handles reports whether target is a topic target of this Sender.
func (s *Sender) Handles(target string) bool {
	_, ok := s.targets[target]
	return ok
}

// Send delivers a to its business topic (its body, tag, keys and user properties as
// published: topic.Target.Resolve) and returns once the broker stored it, or with a
// *sender.Failure: ClassPermanent for a message that can never go where it
// asks (a topic not allowed, a message the broker refuses as illegal or too large),
// ClassTransient for everything else (the broker unreachable or busy, a timeout, the
// topic missing, a failed confirm of a.Claim). A send the broker answered short of
// SEND_OK stored the message on its master: it is delivered, and counted
// (rocketdelay_topic_sends_not_durable_total). A
// transient failure is tried again, up to Attempts sends with backoff, a.Claim confirmed
// before each; a failed confirm is not. Messages for the same destination that wait
// while a send is in flight go out together in the next one.
func (s *Sender) Send(ctx context.Context, a sender.Alert) (sender.Sent, error) {
	if err := s.send(ctx, a); err != nil {
		return sender.Sent{}, err
	}
	return sender.Sent{Merged: 1, Parts: 1}, nil
}

func (s *Sender) send(ctx context.Context, m sender.Alert) error {
	t, ok := s.targets[m.Target]
	if !ok {
		return s.fail(m.Target, &sender.Failure{Class: sender.ClassPermanent, Target: m.Target,
			Reason: fmt.Sprintf("%q is not a topic target of the configuration", m.Target)})
	}
	d, err := t.Resolve(m.ID, m.Props)
	if err != nil {
		return s.fail(m.Target, &sender.Failure{Class: sender.ClassPermanent, Target: m.Target, Reason: err.Error()})
	}
	if len(m.Body) > s.opts.MaxMessageSize {
		return s.fail(m.Target, &sender.Failure{Class: sender.ClassPermanent, Target: m.Target,
			Reason: fmt.Sprintf("the body of %d bytes is larger than the brokers accept (rocketmq.maxMessageSize, %d bytes)",
				len(m.Body), s.opts.MaxMessageSize)})
	}
	msg := primitive.NewMessage(d.Topic, m.Body)
	for k, v := range d.Properties {
		msg.WithProperty(k, v)
	}
	if d.Tag != "" {
		msg.WithTag(d.Tag)
	}
	msg.WithKeys(d.Keys)
	b := s.batcher(t, d.Topic)
	for attempt := 1; ; attempt++ {
		r := &request{msg: msg, confirm: confirmOf(m.Claim), size: messageSize(msg), done: make(chan error, 1)}
		err = b.send(ctx, r)
		if err == nil {
			s.metrics.messages.WithLabelValues(m.Target, "delivered").Inc()
			return nil
		}
		var f *sender.Failure
		if !errors.As(err, &f) {
			// ctx ended while the message waited: it was not sent.
			return s.fail(m.Target, &sender.Failure{Class: sender.ClassTransient, Target: m.Target, Reason: err.Error(), Err: err})
		}
		f.Attempts = attempt
		// A failed confirm (the claim lost, or Redis cut off) is the caller's to judge.
		if r.confirmErr != nil || f.Class != sender.ClassTransient || attempt >= s.opts.Attempts {
			return s.fail(m.Target, f)
		}
		wait := s.backoff(attempt)
		s.logger.Warn("send to a business topic failed; trying again", "target", m.Target, "topic", d.Topic, "rd_id", m.ID,
			"attempt", attempt, "retry_in", wait.String(), "err", f.Reason)
		select {
		case <-time.After(wait):
		case <-ctx.Done():
			return s.fail(m.Target, f)
		}
	}
}

// backoff is the wait after the attempt-th failed attempt: exponential from BackoffBase,
// capped at BackoffMax, with full jitter.
func (s *Sender) backoff(attempt int) time.Duration {
	d := s.opts.BackoffBase << min(attempt-1, 20)
	if d <= 0 || d > s.opts.BackoffMax {
		d = s.opts.BackoffMax
	}
	return time.Duration(mrand.Int64N(int64(d)) + 1)
}

func (s *Sender) fail(target string, f *sender.Failure) error {
	s.metrics.messages.WithLabelValues(target, string(f.Class)).Inc()
	return f
}

func (s *Sender) batcher(t topic.Target, dest string) *batcher {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := destKey{t.Target, dest}
	b := s.batchers[k]
	if b == nil {
		b = &batcher{s: s, target: t, topic: dest}
		s.batchers[k] = b
	}
	return b
}

// messageSize is about what msg counts against the broker's maxMessageSize: its body,
// topic and encoded properties.
func messageSize(msg *primitive.Message) int {
	return len(msg.Body) + len(msg.Topic) + len(msg.MarshallProperties()) + 64
}

// brokerCode matches the response code of a broker's refusal as the client reports it
// ("CODE: 13, DESC: …").
var brokerCode = regexp.MustCompile(`^CODE: (\d+)`)

// codeMessageIllegal is the broker's MESSAGE_ILLEGAL: the message is too large or its
// topic, tag or properties are invalid; sending it again cannot succeed.
const codeMessageIllegal = 13

// codeNoPermission is the broker's NO_PERMISSION: the service's user may not publish to
// the topic (ACL); nothing changes that but an operator.
const codeNoPermission = 16

// classify turns the error of a send to the broker into a Failure.
func classify(target, dest string, err error) *sender.Failure {
	f := &sender.Failure{Class: sender.ClassTransient, Target: target, Err: err,
		Reason: fmt.Sprintf("send to topic %s failed: %v", dest, err)}
	if m := brokerCode.FindStringSubmatch(err.Error()); m != nil {
		switch code, _ := strconv.Atoi(m[1]); code {
		case codeMessageIllegal:
			f.Class = sender.ClassPermanent
			f.Reason = fmt.Sprintf("the broker refuses the message for topic %s as illegal (too large, or an invalid tag or property): %v", dest, err)
		case codeNoPermission:
			f.Class = sender.ClassPermanent
			f.Reason = fmt.Sprintf("the service's user may not publish to topic %s (grant it Pub, then retry the row): %v", dest, err)
		}
	}
	return f
}

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// confirmOf is the confirm of a message held by c: none when nobody holds it.
func confirmOf(c sender.Claim) func(context.Context) error {
	if c == nil {
		return nil
	}
	return func(ctx context.Context) error { return c.Confirm(ctx, 0) }
}
