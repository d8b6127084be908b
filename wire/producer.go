package wire

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
)

// Producer publishes delayed alerts to the topic, following the wire contract. It is the
// Go producer API; `rocketdelay publish` uses it.
type Producer struct {
	p         rocketmq.Producer
	topic     string
	now       func() time.Time
	checkBody func(target string, body []byte) error
}

// ProducerOptions configures a Producer.
type ProducerOptions struct {
	// NameServers are the RocketMQ name servers. Required.
	NameServers []string
	// Topic is the topic rocketdelay consumes. Default "guava".
	Topic string
	// SendTimeout bounds one publish. Default 3s.
	SendTimeout time.Duration
	// Access signs the producer's requests and chooses TLS. Default none.
	Access Access
	// Now is the clock. Default time.Now.
	Now func() time.Time
	// CheckBody, when set, checks the body of an alert for a chat target as its platform
	// would (sender.Chat.Check), so Publish refuses what the scheduler would reject.
	// Default: bodies are checked on arrival only.
	CheckBody func(target string, body []byte) error
}

// NewProducer starts a producer.
func NewProducer(opts ProducerOptions) (*Producer, error) {
	if len(opts.NameServers) == 0 {
		return nil, errors.New("wire: producer: no name servers")
	}
	if opts.Topic == "" {
		opts.Topic = "guava"
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 3 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p, err := rocketmq.NewProducer(append(opts.Access.ProducerOptions(),
		producer.WithNsResolver(primitive.NewPassthroughResolver(opts.NameServers)),
		producer.WithGroupName("rocketdelay-producer"),
		producer.WithInstanceName("rocketdelay-producer-"+randomHex(4)),
		producer.WithSendMsgTimeout(opts.SendTimeout),
		producer.WithRetry(2),
	)...)
	if err != nil {
		return nil, fmt.Errorf("wire: producer: %w", err)
	}
	if err := p.Start(); err != nil {
		return nil, fmt.Errorf("wire: start producer: %w", err)
	}
	return &Producer{p: p, topic: opts.Topic, now: opts.Now, checkBody: opts.CheckBody}, nil
}

// Publish sends a message at most publishAttempts times, waiting publishBackoff times the
// attempt's number between two.
const (
	publishAttempts = 4
	publishBackoff  = 250 * time.Millisecond
)

// Publication is one alert, or one business message for a topic target, to publish.
type Publication struct {
	// Target names a robot group or a topic target of rocketdelay's configuration.
	// Required.
	Target string
	// At is the due time. Either At or In is set.
	At time.Time
	// In is the delay from now. Either At or In is set.
	In time.Duration
	// ID is the idempotency key; publishing the same ID twice delivers once. Default: a
	// new random id.
	ID string
	// Body is the target platform's message JSON object or plain text for a robot group;
	// any bytes for a topic target (Raw).
	Body []byte
	// Priority is the alert's priority (RD_PRIORITY), one of Priorities; "" is normal.
	Priority string
	// Episode marks the alert as a step of an escalation episode (RD_EPISODE), and
	// EpisodeSig proves the mark (RD_EPISODE_SIG); set by rocketdelay's escalations only.
	Episode, EpisodeSig string
	// Principal names the producer (RD_PRINCIPAL) and PrincipalSig proves it
	// (RD_PRINCIPAL_SIG); set by rocketdelay's ways in and escalations only.
	Principal, PrincipalSig string

	// The fields below are for topic targets: setting any of them makes the publication
	// Raw.

	// Raw marks a publication for a topic target: the body is delivered byte for byte,
	// and not checked as a chat message.
	Raw bool
	// Topic, when set, is the business topic (RD_TOPIC); the target must allow overrides
	// and list it. Default: the target's topic.
	Topic string
	// Tag is the delivered message's tag (the published message's own tag). Default:
	// the target's tag, if any.
	Tag string
	// Keys are the delivered message's keys; the ID is always one of them.
	Keys []string
	// Properties are user properties, delivered with the message as they are. Names
	// starting with RD_ are rocketdelay's and are refused.
	Properties map[string]string
}

// raw reports whether pub is for a topic target.
func (pub Publication) raw() bool {
	return pub.Raw || pub.Topic != "" || pub.Tag != "" || len(pub.Keys) > 0 || len(pub.Properties) > 0
}

// Published says what was published.
type Published struct {
	ID        string
	DeliverAt time.Time
	MsgID     string
}

// Check says why pub, published at now, would be refused, in the consumer's reasons: by
// Publish (no target, a due time and a delay, a negative delay, a bad priority, a bad id,
// keys or properties a message cannot carry), or by the consumer on receipt, for a due
// time outside limits (the zero DueLimits checks none). Every way in calls it before it
// publishes; nil means none refuses it. The body of an alert for a chat target is
// checked by its platform (ProducerOptions.CheckBody), which Check does not know.
func (pub Publication) Check(now time.Time, limits DueLimits) *Rejection {
	if pub.Target == "" {
		return Reject(RejectMissingTarget, "a target is required")
	}
	if separated(pub.Target) {
		return Reject(RejectUnknownTarget, "target %q holds %s: no target is named so", pub.Target, separators)
	}
	if !pub.At.IsZero() && pub.In != 0 {
		return Reject(RejectBadDue, "give a due time or a delay, not both")
	}
	if !pub.At.IsZero() && (pub.At.Before(time.UnixMilli(0)) || pub.At.After(time.UnixMilli(MaxDueMillis))) {
		// As the consumer refuses it; and far enough ahead, its milliseconds would
		// overflow into an early due time.
		return Reject(RejectBadDue, "due time %s is outside the years 1970–9999", pub.At.UTC().Format(time.RFC3339))
	}
	if pub.In < 0 {
		return Reject(RejectBadDue, "negative delay %s", pub.In)
	}
	if _, err := ParsePriority(pub.Priority); err != nil {
		return Reject(RejectBadPriority, "%v", err)
	}
	if pub.ID != "" { // Publish makes one up
		if err := CheckID(pub.ID); err != nil {
			return Reject(RejectBadID, "%v", err)
		}
		// The service's own ids go only with the service's proof; without it the
		// consumer refuses the message (the service's publishers sign theirs).
		if prefix, principal, ok := ReservedID(pub.ID); ok && (pub.PrincipalSig == "" || principal != "" && pub.Principal != principal) {
			return Reject(RejectBadID, "id %q begins with %q: ids beginning so are the service's own (escalation steps, "+
				"Alertmanager notifications) or in a principal's scope (@<principal>:…), refused on arrival unless "+
				"the service published them (for a scoped id, the ways in, for its principal)", pub.ID, prefix)
		}
	}
	if separated(pub.Tag) {
		return Reject(RejectDestination, "tag %q holds %s", pub.Tag, separators)
	}
	for _, k := range pub.Keys {
		switch {
		case k == "" || strings.ContainsFunc(k, unicode.IsSpace):
			return Reject(RejectDestination, "key %q is empty or holds whitespace (keys are separated by spaces)", k)
		case separated(k):
			return Reject(RejectDestination, "key %q holds %s", k, separators)
		}
	}
	size := len(pub.Tag) + len(strings.Join(pub.Keys, " "))
	for k, v := range pub.Properties {
		size += len(k) + len(v) + 2 // and the encoding's two separators
	}
	if size > MaxPropertyBytes {
		return Reject(RejectDestination, "the tag, keys and properties take %d bytes; at most %d are accepted "+
			"(the broker refuses a message whose properties pass 32767 bytes, and rocketdelay adds its own)", size, MaxPropertyBytes)
	}
	for _, k := range slices.Sorted(maps.Keys(pub.Properties)) {
		switch {
		case k == "" || strings.ContainsFunc(k, unicode.IsSpace):
			return Reject(RejectDestination, "property name %q is empty or holds whitespace", k)
		case strings.HasPrefix(k, "RD_") || SystemProperty(k) || k == primitive.PropertyTags || k == primitive.PropertyKeys:
			return Reject(RejectDestination, "property %q is reserved (rocketdelay's RD_* or the broker's own)", k)
		case separated(k) || separated(pub.Properties[k]):
			return Reject(RejectDestination, "property %q holds %s", k, separators)
		case pub.Properties[k] == "":
			return Reject(RejectDestination, "property %q has no value: RocketMQ carries no empty property, so it would not be delivered", k)
		}
	}
	at := pub.At
	if at.IsZero() {
		at = now.Add(pub.In)
	}
	return limits.Check(at, now)
}

// MaxPropertyBytes bounds what a producer's tag, keys and properties may take of a
// message's properties, encoded: the broker refuses a message whose properties pass
// 32767 bytes (their length is a 16-bit field), and the rest is left for rocketdelay's
// own (RD_*) and the broker's.
const MaxPropertyBytes = 16 << 10

// separators are the characters the broker's encoding of a message's properties
// separates names, values and properties with: a value holding one would be read back as
// other properties (another RD_TARGET, another RD_ID).
const separators = `\x01 or \x02, the separators of the broker's property encoding`

// separated reports whether s holds one of the separators.
func separated(s string) bool { return strings.ContainsAny(s, "\x01\x02") }

// Publish sends one alert. It refuses what Check refuses (with the zero DueLimits),
// before sending: the error wraps the *Rejection. A send the broker refused for a moment
// (busy, flow control), did not answer in time, or answered with a status other than
// SEND_OK is sent again, the same RD_ID, up to publishAttempts sends; the error is the
// last one's.
func (p *Producer) Publish(ctx context.Context, pub Publication) (Published, error) {
	if rej := pub.Check(p.now(), DueLimits{}); rej != nil {
		return Published{}, fmt.Errorf("wire: publish: %w", rej)
	}
	if !pub.raw() && p.checkBody != nil {
		if err := p.checkBody(pub.Target, pub.Body); err != nil {
			return Published{}, fmt.Errorf("wire: publish: %w", Reject(RejectBadBody, "%v", err))
		}
	}
	if pub.ID == "" {
		pub.ID = NewID()
	}
	at := pub.At
	if at.IsZero() {
		at = p.now().Add(pub.In)
	}
	at = at.Truncate(time.Millisecond)
	m := primitive.NewMessage(p.topic, pub.Body)
	m.WithProperty(PropDeliverAt, strconv.FormatInt(at.UnixMilli(), 10))
	m.WithProperty(PropTarget, pub.Target)
	m.WithProperty(PropID, pub.ID)
	if pub.Priority != "" {
		m.WithProperty(PropPriority, pub.Priority)
	}
	if pub.Episode != "" {
		m.WithProperty(PropEpisode, pub.Episode)
	}
	if pub.EpisodeSig != "" {
		m.WithProperty(PropEpisodeSig, pub.EpisodeSig)
	}
	if pub.Principal != "" {
		m.WithProperty(PropPrincipal, pub.Principal)
		m.WithProperty(PropPrincipalSig, pub.PrincipalSig)
	}
	for k, v := range pub.Properties {
		m.WithProperty(k, v)
	}
	m.WithProperty(PropTopic, pub.Topic)
	if pub.Tag != "" {
		m.WithTag(pub.Tag)
	}
	keys := slices.DeleteFunc(slices.Clone(pub.Keys), func(k string) bool { return k == pub.ID })
	m.WithKeys(append(keys, pub.ID))
	msgID, err := p.send(ctx, m, pub.ID)
	if err != nil {
		return Published{}, err
	}
	return Published{ID: pub.ID, DeliverAt: at, MsgID: msgID}, nil
}

// Copy is a new copy of an alert that rocketdelay already holds, as a reschedule sends it
// back through the broker: its body and the properties it was stored with, untouched.
type Copy struct {
	ID     string
	Target string
	At     time.Time
	Body   []byte
	// Props are the properties the alert was stored with (priority, episode; a topic
	// target's tag, keys and user properties), published as they are.
	Props map[string]string
	// Hops are the hops the alert took so far.
	Hops int
	// Gen is the copy's generation, PropGen.
	Gen int64
}

// PublishCopy sends c, retried as Publish retries. The scheduler routes it by its due
// time as any arrival.
func (p *Producer) PublishCopy(ctx context.Context, c Copy) (string, error) {
	m := primitive.NewMessage(p.topic, c.Body)
	for k, v := range c.Props {
		m.WithProperty(k, v)
	}
	m.WithProperty(PropDeliverAt, strconv.FormatInt(c.At.UnixMilli(), 10))
	m.WithProperty(PropTarget, c.Target)
	m.WithProperty(PropID, c.ID)
	m.WithProperty(PropHops, strconv.Itoa(c.Hops))
	m.WithProperty(PropGen, strconv.FormatInt(c.Gen, 10))
	return p.send(ctx, m, c.ID)
}

// send sends m, the alert id, at most publishAttempts times: a send the broker refused
// (busy, flow control, a status short of SEND_OK) or that timed out is sent again, the
// same RD_ID, so one that did land and is sent again is delivered once. It returns the
// message id.
func (p *Producer) send(ctx context.Context, m *primitive.Message, id string) (string, error) {
	var err error
	for attempt := 1; ; attempt++ {
		var res *primitive.SendResult
		res, err = p.p.SendSync(ctx, m)
		switch {
		case err == nil && res.Status == primitive.SendOK:
			return res.MsgID, nil
		case err == nil:
			err = fmt.Errorf("broker answered %s", SendStatus(res.Status))
		}
		if attempt == publishAttempts || ctx.Err() != nil {
			return "", fmt.Errorf("wire: publish %s: %w", id, err)
		}
		select {
		case <-time.After(time.Duration(attempt) * publishBackoff):
		case <-ctx.Done():
			return "", fmt.Errorf("wire: publish %s: %w", id, err)
		}
	}
}

// Close stops the producer.
func (p *Producer) Close() error { return p.p.Shutdown() }

// randomHex returns n random bytes as hex.
// NewID is a new random RD_ID, as Publish makes up for a publication without one.
func NewID() string { return "rd-" + randomHex(12) }

func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
