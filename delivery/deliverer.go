package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/store"
)

// Alert is one alert that is due (or, for Reject, that arrived and can never be).
type Alert struct {
	// ID is the idempotency key (RD_ID).
	ID string
	// Target names the robot group or topic target.
	Target string
	// DueAt is when the alert is due, millisecond precision; zero when unknown.
	DueAt time.Time
	// Body is the alert as published: a DingTalk message JSON object or plain text for a
	// robot group, any bytes for a topic target.
	Body []byte
	// Props are a topic target's message properties as published (see topic.Message);
	// nil for a robot group.
	Props map[string]string
	// Hops is the number of broker hops the alert took.
	Hops int
	// Claim is the wheel stage's claim that holds the alert while it is handed off;
	// delivery confirms it right before every request and before recording a failure.
	Claim store.Claim
	// Failure, when not nil, is the failure of an earlier hand-off of this alert whose
	// record did not finish (Postgres down, a crash): the alert is not sent again, only
	// recorded.
	Failure []byte
	// PartsSent counts the leading parts of a split alert that earlier hand-offs
	// delivered; this one sends from the next part.
	PartsSent int
	// Park, when set, parks the alert's claim for its robot group's next send on any
	// replica (sender.Alert.Park); Deliver then returns ErrParked.
	Park func(ctx context.Context) error
	// Adopted says the alert was adopted from its target's park (sender.Alert.Adopted).
	Adopted bool
}

// ErrParked is Deliver's answer for an alert parked for its robot group's next send
// (Alert.Park): the caller no longer holds it and forgets it.
var ErrParked = sender.ErrParked

// Rejected is an input that can never be delivered as it is.
type Rejected struct {
	// Alert is the input decoded as far as it could be.
	Alert Alert
	// Properties are the message's properties as received.
	Properties map[string]string
	// MessageKey is the broker's unique key of the message; it names the row when the
	// alert has no usable id.
	MessageKey string
	// Reason classifies the rejection, a metric label such as "bad_body"; the row's
	// error class is "rejected_" + Reason.
	Reason string
	// Detail says what is wrong in words the producer can act on.
	Detail string
}

// ReasonBadID is the Reason of a rejection whose RD_ID itself is unusable: the row is
// then named after the message key.
const ReasonBadID = "bad_id"

// Sender sends one alert to the robots of a target; *sender.Sender implements it. Every
// error it returns is a *sender.Failure.
type Sender interface {
	SendAlert(ctx context.Context, a sender.Alert) error
}

// Topics sends due messages of topic targets to their business topics; *topic.Sender
// implements it. Every error it returns is a *sender.Failure.
type Topics interface {
	// Handles reports whether target is a topic target.
	Handles(target string) bool
	Send(ctx context.Context, m topic.Message) error
}

// Senders are where due alerts go, by the kind of their target.
type Senders struct {
	// DingTalk sends to robot groups. Required.
	DingTalk Sender
	// Topics sends to topic targets. Default none: every target is a robot group.
	Topics Topics
}

// outbound is one send of an alert, whatever its target's kind.
type outbound struct {
	// sent, when set, learns how a delivered DingTalk alert went.
	sent       func(sender.Sent)
	id, target string
	body       []byte
	props      map[string]string
	due        time.Time
	// partsSent counts the leading parts of a split alert delivered before (robot groups).
	partsSent int
	// confirm is called right before every request that carries the alert.
	confirm func(ctx context.Context, partsSent int) error
	// park and adopted: sender.Alert's Park and Adopted (robot groups).
	park    func(ctx context.Context) error
	adopted bool
}

// send sends o to its target's sender.
func (s Senders) send(ctx context.Context, o outbound) error {
	if s.Topics != nil && s.Topics.Handles(o.target) {
		return s.Topics.Send(ctx, topic.Message{ID: o.id, Target: o.target, Body: o.body, Properties: o.props,
			Confirm: func(ctx context.Context) error { return o.confirm(ctx, 0) }})
	}
	return s.DingTalk.SendAlert(ctx, sender.Alert{Target: o.target, Body: o.body, Due: o.due, FromPart: o.partsSent + 1,
		Confirm: o.confirm, Sent: o.sent, Park: o.park, Adopted: o.adopted})
}

// Claims is the part of the wheel stage delivery uses; *store.WheelStage implements it.
type Claims interface {
	// Confirm checks that the claim still holds its alert, right before a request, and
	// notes the leading parts of a split alert delivered so far.
	Confirm(ctx context.Context, c store.Claim, partsSent int) error
	// MarkFailed notes, under the claim, that the alert's send failed for good.
	MarkFailed(ctx context.Context, c store.Claim, failure []byte) error
	// IsDelivered and MarkDelivered read and leave the done marker of a delivered id;
	// the retry job and the hand-off see each other's deliveries through it.
	IsDelivered(ctx context.Context, id string) (bool, error)
	MarkDelivered(ctx context.Context, id string) error
}

// Options tune a Deliverer. A zero field takes its default.
type Options struct {
	// FirstRetry is how long after a failed send the retry job first tries it again (the
	// failure's RetryAfter, when longer, wins). Default config failedSends.backoffBase.
	FirstRetry time.Duration
}

// Deliverer delivers due alerts, and records what it cannot deliver in failed_sends.
// It is safe for concurrent use.
type Deliverer struct {
	senders Senders
	claims  Claims
	failed  *store.FailedSends
	opts    Options
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// New returns a Deliverer that sends through senders, checks claims and done markers in
// claims and records in fs. metrics may be nil; now is the clock of the failed rows'
// first attempt.
func New(senders Senders, claims Claims, fs *store.FailedSends, opts Options, logger *slog.Logger, metrics *Metrics, now func() time.Time) *Deliverer {
	if opts.FirstRetry <= 0 {
		opts.FirstRetry = config.DefaultFailedSendsBackoffBase
	}
	return &Deliverer{senders: senders, claims: claims, failed: fs, opts: opts, logger: logger.With("component", "delivery"),
		metrics: metrics, now: now}
}

// Deliver hands off a due alert held by a.Claim. It returns store.Delivered once
// DingTalk accepted it (or, for a topic target, the broker stored it), or store.Recorded once the sender gave up and the alert is a row
// of failed_sends (pending, for the retry job; rejected, when DingTalk refuses its
// content): either way the caller releases it. Before each request, and before the
// record, the claim is confirmed; when it was lost (this replica was paused or cut off
// past its lease and another holds the alert now) the error wraps store.ErrNotHeld and
// nothing was sent or recorded. Any other error means the alert is neither delivered nor
// recorded (stopping, Redis or Postgres unreachable): the caller keeps it and tries
// again later. A failed send is noted under the claim (Claims.MarkFailed) before it is
// recorded, so a later try only records it and never sends it twice.
func (d *Deliverer) Deliver(ctx context.Context, a Alert) (store.Receipt, error) {
	if a.Failure != nil {
		f, err := decodeFailure(a.Failure)
		if err != nil {
			return store.Receipt{}, fmt.Errorf("delivery: noted failure of %q: %w", a.ID, err)
		}
		return d.record(ctx, a, f)
	}
	var sent sender.Sent
	err := d.senders.send(ctx, outbound{id: a.ID, target: a.Target, body: a.Body, props: a.Props, due: a.DueAt, partsSent: a.PartsSent,
		confirm: func(ctx context.Context, partsSent int) error { return d.claims.Confirm(ctx, a.Claim, partsSent) },
		sent:    func(s sender.Sent) { sent = s }, park: a.Park, adopted: a.Adopted})
	if err == nil {
		return store.Receipt{Outcome: store.Delivered, Robot: sent.Robot, Merged: sent.Merged, Parts: sent.Parts}, nil
	}
	var f *sender.Failure
	switch {
	case errors.Is(err, store.ErrNotHeld), errors.Is(err, ErrParked):
		return store.Receipt{}, err
	case !errors.As(err, &f) || ctx.Err() != nil:
		return store.Receipt{}, err // stopping, or not a send failure: the caller retries
	case errors.Is(err, store.ErrUnavailable):
		// Redis failed the robot pick or the confirm: DingTalk was not asked, nothing failed.
		return store.Receipt{}, err
	}
	if err := d.claims.MarkFailed(ctx, a.Claim, encodeFailure(f)); err != nil {
		return store.Receipt{}, fmt.Errorf("delivery: note the failed send: %w", err)
	}
	return d.record(ctx, a, f)
}

// record writes the final failure f of a's send to failed_sends.
func (d *Deliverer) record(ctx context.Context, a Alert, f *sender.Failure) (store.Receipt, error) {
	// The claim must still be ours: a replica that lost it must not record over the row of
	// an alert the new holder delivered.
	if err := d.claims.Confirm(ctx, a.Claim, max(a.PartsSent, partsSent(f))); err != nil {
		return store.Receipt{}, err
	}
	due := a.DueAt
	rec := store.NewFailedSend{
		MessageID:  a.ID,
		Target:     a.Target,
		Payload:    a.Body,
		Properties: a.Props,
		DueAt:      &due,
		ErrorClass: string(f.Class),
		LastError:  f.Reason,
		HTTPStatus: nonZero(f.HTTPStatus),
		Errcode:    nonZero(f.Errcode),
		PartsSent:  max(a.PartsSent, partsSent(f)),
	}
	if f.Class.Retryable() {
		rec.NextAttemptAt = d.now().Add(max(d.opts.FirstRetry, f.RetryAfter))
	} else {
		rec.Rejected = true
	}
	res, err := d.failed.Record(ctx, rec)
	if err != nil {
		d.metrics.recordError(kindSendFailure)
		d.logger.Error("cannot record an undeliverable alert in failed_sends; it is kept and tried again",
			"rd_id", a.ID, "target", a.Target, "send_err", f.Error(), "err", err)
		return store.Receipt{}, fmt.Errorf("delivery: record failed send: %w", err)
	}
	if res == store.RecordFinal {
		d.logger.Warn("alert not delivered by this hand-off, but its failed_sends row is final (delivered or discarded): "+
			"this was a stale copy; nothing recorded", "rd_id", a.ID, "target", a.Target, "class", string(f.Class))
		return store.Receipt{Outcome: store.Recorded}, nil
	}
	d.logger.Warn("alert not delivered; recorded in failed_sends", "rd_id", a.ID, "target", a.Target,
		"class", string(f.Class), "reason", f.Reason, "retry", f.Class.Retryable(), "row", recordLabel(res))
	return store.Receipt{Outcome: store.Recorded}, nil
}

// PartsSent is how many leading parts of a split alert a hand-off that ended with err
// delivered (0 when err is nil, not a send failure, or of an alert sent whole): a later
// hand-off sends from the part after them.
func PartsSent(err error) int {
	var f *sender.Failure
	if errors.As(err, &f) {
		return partsSent(f)
	}
	return 0
}

// partsSent is how many leading parts of a split alert were delivered before f.
func partsSent(f *sender.Failure) int {
	if f.Parts > 1 && f.Part > 1 {
		return f.Part - 1
	}
	return 0
}

func recordLabel(r store.RecordResult) string {
	switch r {
	case store.RecordReplaced:
		return "replaced an earlier episode (dead or rejected)"
	case store.RecordKept:
		return "kept the pending row recorded before"
	}
	return "inserted"
}

// noted is a failed send as MarkFailed keeps it in Redis.
type noted struct {
	Class      sender.Class  `json:"class"`
	Reason     string        `json:"reason"`
	HTTPStatus int           `json:"http,omitempty"`
	Errcode    int           `json:"errcode,omitempty"`
	RetryAfter time.Duration `json:"retryAfter,omitempty"`
	Part       int           `json:"part,omitempty"`
	Parts      int           `json:"parts,omitempty"`
}

func encodeFailure(f *sender.Failure) []byte {
	b, _ := json.Marshal(noted{Class: f.Class, Reason: f.Reason, HTTPStatus: f.HTTPStatus, Errcode: f.Errcode,
		RetryAfter: f.RetryAfter, Part: f.Part, Parts: f.Parts}) // cannot fail: plain fields
	return b
}

func decodeFailure(b []byte) (*sender.Failure, error) {
	var n noted
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	return &sender.Failure{Class: n.Class, Reason: n.Reason, HTTPStatus: n.HTTPStatus, Errcode: n.Errcode,
		RetryAfter: n.RetryAfter, Part: n.Part, Parts: n.Parts}, nil
}

// Reject records an input that can never be delivered as a rejected row of
// failed_sends, with error class "rejected_" + r.Reason and r.Detail as its reason.
// Every rejection leaves a row and none overwrites another: when the alert's RD_ID
// already has a live row (an alert of the same id is pending, dead or rejected for
// another reason), the rejection is recorded under "rejected:" + the broker's message
// key instead. An error means nothing was recorded: the caller keeps the input and tries
// again.
func (d *Deliverer) Reject(ctx context.Context, r Rejected) error {
	var due *time.Time
	if !r.Alert.DueAt.IsZero() {
		due = &r.Alert.DueAt
	}
	byKey := "rejected:" + r.MessageKey
	id := r.Alert.ID
	if id == "" || r.Reason == ReasonBadID {
		// The id itself is what is wrong; keep the row findable by the broker's message key.
		id = byKey
	}
	rec := store.NewFailedSend{
		MessageID:  id,
		Target:     r.Alert.Target,
		Payload:    r.Alert.Body,
		Properties: r.Properties,
		DueAt:      due,
		Rejected:   true,
		ErrorClass: "rejected_" + r.Reason,
		LastError:  r.Detail,
	}
	res, err := d.failed.Record(ctx, rec)
	if err == nil && res == store.RecordOccupied && id != byKey && r.MessageKey != "" {
		rec.MessageID = byKey
		res, err = d.failed.Record(ctx, rec)
	}
	if err != nil {
		d.metrics.recordError(kindRejected)
		return fmt.Errorf("delivery: record rejected input: %w", err)
	}
	if res == store.RecordOccupied {
		d.logger.Error("rejected input not recorded: its id and its message key both name other rows",
			"rd_id", r.Alert.ID, "message_key", r.MessageKey, "reason", r.Reason)
	}
	return nil
}

func nonZero(v int) *int {
	if v == 0 {
		return nil
	}
	return &v
}
