package delivery

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// ErrParked is Deliver's answer for an alert parked for its robot group's next send
// (sender.Claim.Park): the caller no longer holds it and forgets it.
var ErrParked = sender.ErrParked

// Rejected is an input that can never be delivered as it is.
type Rejected struct {
	// Alert is the input decoded as far as it could be.
	Alert sender.Alert
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

// Channels are where due alerts go, by target name: the chat sender (sender.Chat) for
// robot targets of every platform, the topic relay (relay.Sender) for topic targets.
// Every error a channel returns is a *sender.Failure, or sender.ErrParked.
type Channels map[string]sender.Channel

// Targets lists the targets of c, sorted; never nil, so that a replica with no targets
// claims no failed row (store.FailedSends.ClaimDue reads nil as every target).
func (c Channels) Targets() []string {
	if len(c) == 0 {
		return []string{}
	}
	return slices.Sorted(maps.Keys(c))
}

// Claims is the part of the wheel stage delivery reads besides an alert's own claim;
// *store.WheelStage implements it.
type Claims interface {
	// IsDelivered and MarkDelivered read and leave the done marker of a delivered id;
	// the retry job and the hand-off see each other's deliveries through it.
	IsDelivered(ctx context.Context, id string) (bool, error)
	MarkDelivered(ctx context.Context, id string) error
}

// Gate decides, right before a due alert is sent, whether it goes and with which body:
// an escalation's step is sent only while its episode runs, rendered then (package
// escalation implements it). send false withholds the alert for good.
type Gate interface {
	Due(ctx context.Context, a sender.Alert) (out sender.Alert, send bool, err error)
}

// Roster says when a replica of the deployment last said its configuration has a
// target (store.Roster implements it).
type Roster interface {
	Known(ctx context.Context, target string) (ago time.Duration, ok bool, err error)
}

// Options tune a Deliverer. A zero field takes its default.
type Options struct {
	// FirstRetry is how long after a failed send the retry job first tries it again (the
	// failure's RetryAfter, when longer, wins). Default config failedSends.backoffBase.
	FirstRetry time.Duration
	// Roster, when set, keeps a due alert whose target this replica's channels do not
	// have for a replica that has it: while some replica said within UnknownTargetWait
	// that it has the target, the alert is a pending row that only the retry job of such
	// a replica claims, never a rejection (a configuration rolled out replica by
	// replica). Without a Roster, such an alert is rejected at once.
	Roster Roster
	// UnknownTargetWait is config scheduler.unknownTargetWait. Default its default.
	UnknownTargetWait time.Duration
}

// Deliverer delivers due alerts, and records what it cannot deliver in failed_sends.
// It is safe for concurrent use.
type Deliverer struct {
	senders Channels
	gate    Gate // SetGate; nil: every alert goes
	claims  Claims
	failed  *store.FailedSends
	opts    Options
	logger  *slog.Logger
	metrics *Metrics
	now     func() time.Time
}

// New returns a Deliverer that sends through channels, reads done markers in claims and
// records in fs. metrics may be nil; now is the clock of the failed rows'
// first attempt.
func New(senders Channels, claims Claims, fs *store.FailedSends, opts Options, logger *slog.Logger, metrics *Metrics, now func() time.Time) *Deliverer {
	config.Default(&opts.FirstRetry, config.DefaultFailedSendsBackoffBase)
	config.Default(&opts.UnknownTargetWait, config.DefaultUnknownTargetWait)
	return &Deliverer{senders: senders, claims: claims, failed: fs, opts: opts, logger: logger.With("component", "delivery"),
		metrics: metrics, now: now}
}

// SetGate makes every alert pass g before it is sent (hand-offs and the retry job). Call
// it before the first delivery.
func (d *Deliverer) SetGate(g Gate) { d.gate = g }

// Deliver hands off a due alert held by a.Claim. It returns store.Delivered once its
// channel delivered it (the platform accepted it, or the broker stored it for a topic
// target), or store.Recorded once the channel gave up and the alert is a row of
// failed_sends (pending, for the retry job; rejected, when the platform refuses its
// content): either way the caller releases it. Before each request, and before the
// record, the claim is confirmed; when it was lost (this replica was paused or cut off
// past its lease and another holds the alert now) the error wraps store.ErrNotHeld and
// nothing was sent or recorded. ErrParked means the channel parked the alert for its
// target's next send on any replica. Any other error means the alert is neither
// delivered nor recorded (stopping, Redis or Postgres unreachable): the caller keeps it
// and tries again later. A failed send is noted under the claim (Claim.MarkFailed)
// before it is recorded, so a later try only records it and never sends it twice.
func (d *Deliverer) Deliver(ctx context.Context, a sender.Alert) (store.Receipt, error) {
	return d.DeliverWithin(ctx, a, 0)
}

// FailureRecorder is a claim that records its alert's final failure itself: a
// failed_sends row's claim (the retry job's) marks its row for another retry, or dead,
// where a hand-off's failure becomes a row (Deliverer.record). Its error is as Deliver's.
type FailureRecorder interface {
	RecordFailure(ctx context.Context, f *sender.Failure) (store.Receipt, error)
}

// DeliverWithin is Deliver with the send, the wait for a robot included, bounded to
// within (0: as long as ctx allows); a send cut by the bound is a transient failure,
// recorded like any other. Every attempt at an alert, a hand-off's or the retry job's,
// goes through it: the done marker's record, the gate, the channel, the claim's
// confirm before each request, the failure noted under the claim and recorded.
func (d *Deliverer) DeliverWithin(ctx context.Context, a sender.Alert, within time.Duration) (store.Receipt, error) {
	if a.Noted != nil {
		f, err := decodeFailure(a.Noted)
		if err != nil {
			return store.Receipt{}, fmt.Errorf("delivery: noted failure of %q: %w", a.ID, err)
		}
		return d.record(ctx, a, f)
	}
	if d.gate != nil {
		out, send, err := d.gate.Due(ctx, a)
		if rej := (*wire.Rejection)(nil); errors.As(err, &rej) {
			return d.refused(ctx, a, rej)
		}
		if err != nil {
			return store.Receipt{}, fmt.Errorf("delivery: gate: %w", err)
		}
		if !send {
			return store.Receipt{Outcome: store.Withheld}, nil
		}
		a = out
	}
	sendCtx, cancel := ctx, context.CancelFunc(func() {})
	if within > 0 {
		sendCtx, cancel = context.WithTimeout(ctx, within)
	}
	var sent sender.Sent
	var err error
	if ch, ok := d.senders[a.Target]; ok {
		sent, err = ch.Send(sendCtx, a)
	} else {
		err = d.elsewhere(sendCtx, a.Target)
	}
	cancel()
	if err == nil {
		return store.Receipt{Outcome: store.Delivered, Robot: sent.Robot, Merged: sent.Merged, Parts: sent.Parts}, nil
	}
	var f *sender.Failure
	switch {
	case errors.Is(err, store.ErrNotHeld), errors.Is(err, ErrParked):
		return store.Receipt{}, err
	case errors.Is(err, sender.ErrStopping):
		return store.Receipt{}, err // not sent, nothing failed: the caller hands it back
	case !errors.As(err, &f) || ctx.Err() != nil:
		return store.Receipt{}, err // stopping, or not a send failure: the caller retries
	case errors.Is(err, store.ErrUnavailable):
		// Redis failed the robot pick or the confirm: the platform was not asked, nothing failed.
		return store.Receipt{}, err
	}
	if a.Claim != nil {
		if err := a.Claim.MarkFailed(ctx, encodeFailure(f)); err != nil {
			return store.Receipt{}, fmt.Errorf("delivery: note the failed send: %w", err)
		}
	}
	if r, ok := a.Claim.(FailureRecorder); ok {
		return r.RecordFailure(ctx, f)
	}
	return d.record(ctx, a, f)
}

// elsewhere is the failure of an alert for target, which this replica's channels do
// not have: transient while a replica of the deployment said within UnknownTargetWait
// that it has the target (the row waits for that replica's retry job), permanent when
// none did (or no Roster says). An error that is not a Failure means the roster could
// not be read: the alert is kept and tried again.
func (d *Deliverer) elsewhere(ctx context.Context, target string) error {
	if d.opts.Roster == nil {
		return &sender.Failure{Class: sender.ClassPermanent, Target: target, Reason: fmt.Sprintf("target %q is not configured", target)}
	}
	ago, known, err := d.opts.Roster.Known(ctx, target)
	if err != nil {
		return fmt.Errorf("delivery: which replicas have target %q: %w", target, err)
	}
	if !known || ago > d.opts.UnknownTargetWait {
		return &sender.Failure{Class: sender.ClassPermanent, Target: target, Reason: unknownTarget(target, ago, known, d.opts.UnknownTargetWait)}
	}
	return &sender.Failure{Class: sender.ClassTransient, Target: target, Reason: fmt.Sprintf(
		"target %q is not in this replica's configuration; a replica that has it said so %s ago: kept for its retry job",
		target, ago.Round(time.Second))}
}

// unknownTarget says why an alert for target is given up: no replica of the deployment
// has it, or the last that had it said so ago, longer than wait ago.
func unknownTarget(target string, ago time.Duration, known bool, wait time.Duration) string {
	if !known {
		return fmt.Sprintf("target %q is not configured on any replica", target)
	}
	return fmt.Sprintf("target %q is not configured on any replica: the last replica that had it said so %s ago (scheduler.unknownTargetWait %s)",
		target, ago.Round(time.Second), wait)
}

// refused records a, which the gate refused (rej: an escalation step's mark the service
// did not make for it), as never deliverable: a rejected row of failed_sends, or, for a
// claim that records its own failures (a row's), a permanent failure. Nothing was sent.
func (d *Deliverer) refused(ctx context.Context, a sender.Alert, rej *wire.Rejection) (store.Receipt, error) {
	if r, ok := a.Claim.(FailureRecorder); ok {
		return r.RecordFailure(ctx, &sender.Failure{Class: sender.ClassPermanent, Target: a.Target, Reason: rej.Error()})
	}
	if a.Claim != nil {
		if err := a.Claim.Confirm(ctx, a.PartsSent); err != nil {
			return store.Receipt{}, err
		}
	}
	if err := d.Reject(ctx, Rejected{Alert: a, Properties: a.Props, Reason: string(rej.Reason), Detail: rej.Detail}); err != nil {
		return store.Receipt{}, err
	}
	return store.Receipt{Outcome: store.Recorded}, nil
}

// Stop ends, at once, every send that waits in a channel that can stop (the chat
// Sender: sender.Chat.Stop), and every later one: their Deliver returns an error
// wrapping sender.ErrStopping, and nothing was sent or recorded. Requests on the wire go
// on. The scheduler calls it as it stops, once it claims nothing more.
func (d *Deliverer) Stop() {
	for _, ch := range d.senders {
		if s, ok := ch.(interface{ Stop() }); ok {
			s.Stop()
		}
	}
}

// record writes the final failure f of a's send to failed_sends.
func (d *Deliverer) record(ctx context.Context, a sender.Alert, f *sender.Failure) (store.Receipt, error) {
	// The claim must still be ours: a replica that lost it must not record over the row of
	// an alert the new holder delivered.
	if a.Claim != nil {
		if err := a.Claim.Confirm(ctx, max(a.PartsSent, f.PartsSent())); err != nil {
			return store.Receipt{}, err
		}
	}
	due := a.Due
	rec := store.NewFailedSend{
		MessageID:  a.ID,
		Target:     a.Target,
		Payload:    a.Body,
		Properties: a.Props,
		DueAt:      &due,
		ErrorClass: string(f.Class),
		LastError:  f.Reason,
		HTTPStatus: nonZero(f.HTTPStatus),
		Errcode:    nonZero(f.Code),
		PartsSent:  max(a.PartsSent, f.PartsSent()),
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
		return f.PartsSent()
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
	b, _ := json.Marshal(noted{Class: f.Class, Reason: f.Reason, HTTPStatus: f.HTTPStatus, Errcode: f.Code,
		RetryAfter: f.RetryAfter, Part: f.Part, Parts: f.Parts}) // cannot fail: plain fields
	return b
}

func decodeFailure(b []byte) (*sender.Failure, error) {
	var n noted
	if err := json.Unmarshal(b, &n); err != nil {
		return nil, err
	}
	return &sender.Failure{Class: n.Class, Reason: n.Reason, HTTPStatus: n.HTTPStatus, Code: n.Errcode,
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
	if !r.Alert.Due.IsZero() {
		due = &r.Alert.Due
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
