package sender

import (
	"context"
	"errors"
	"time"
)

// Alert is one due alert on its way to a channel: the one value that travels from the
// stage that holds it (the wheel stage's hand-off, the failed-sends retry job) through
// delivery to the channel.
type Alert struct {
	// ID is the idempotency key (RD_ID).
	ID string
	// Target names the target of the configuration.
	Target string
	// Due is when the alert is due, millisecond precision; merged messages order their
	// sections by it. Zero stands for the moment of the send.
	Due time.Time
	// Body is the alert as published: the target channel's message JSON or plain text
	// for a chat target, any bytes for a topic target.
	Body []byte
	// Props are the message's properties as published; a topic target delivers by them
	// (see package topic). nil when there are none.
	Props map[string]string
	// Priority orders alerts of one target that wait for its budget: a higher one goes
	// first; 0 is normal (wire.Priority).
	Priority int
	// Hops is the number of broker hops the alert took.
	Hops int
	// PartsSent counts the leading parts of a split alert that earlier sends delivered;
	// this send starts from the next part.
	PartsSent int
	// Noted, when not nil, is the failure of an earlier hand-off of this alert whose
	// record did not finish (Postgres down, a crash): the alert is not sent again, only
	// recorded (package delivery).
	Noted []byte
	// Claim is the holder's power over the alert while it is sent; nil when nobody holds
	// it (a test, a command that sends at once).
	Claim Claim
	// Adopted says the alert was adopted from its target's park by this replica's
	// Parking: it rides the send that adopted it.
	Adopted bool
}

// Claim is what the stage that holds an alert lets its send do. The wheel stage's claim
// and the retry job's row claim implement it.
type Claim interface {
	// Confirm checks that the claim still holds the alert, right before every request
	// that carries it, and notes the leading parts of a split alert delivered so far. An
	// error keeps the alert out of that request.
	Confirm(ctx context.Context, partsSent int) error
	// Park ends the claim, leaving the alert in its target's park for the target's next
	// send on any replica (see share.go), in share, its principal's share of the park's
	// turns. It returns ErrNoPark when this claim cannot be parked (a retry job's row, an
	// alert resumed part by part).
	Park(ctx context.Context, share string) error
	// MarkFailed notes, under the claim, that the alert's send failed for good, so a
	// later hand-off only records it and never sends it twice.
	MarkFailed(ctx context.Context, failure []byte) error
}

// ErrNoPark is Claim.Park's answer for a claim that cannot be parked.
var ErrNoPark = errors.New("sender: this claim cannot be parked")

// ErrParked is a channel's answer for an alert it parked (Claim.Park returned nil):
// the caller forgets the alert, another send carries it. It is the one error of a send
// that is not a *Failure.
var ErrParked = errors.New("sender: alert parked for the target's next send, on any replica")

// Sent says how an alert was delivered.
type Sent struct {
	// Robot is the robot that accepted its (last) message; "" for a topic target.
	Robot string
	// Merged is how many alerts the message that carried it held (1: it went alone); for
	// a split alert, the most any part's message held.
	Merged int
	// Parts is how many parts the alert was split into (1: sent whole).
	Parts int
}

// Channel delivers due alerts to the targets of one kind: the chat core (Chat) for robot
// targets of every platform, package topic's relay for topic targets.
type Channel interface {
	// Send delivers a. It returns how, or a *Failure, or ErrParked.
	Send(ctx context.Context, a Alert) (Sent, error)
}

// ConfirmFunc is a Claim that only confirms, with itself: it cannot be parked, and a
// failure noted under it is forgotten (the caller records failures itself).
type ConfirmFunc func(ctx context.Context, partsSent int) error

// Confirm calls f.
func (f ConfirmFunc) Confirm(ctx context.Context, partsSent int) error { return f(ctx, partsSent) }

// Park returns ErrNoPark.
func (ConfirmFunc) Park(context.Context, string) error { return ErrNoPark }

// MarkFailed does nothing.
func (ConfirmFunc) MarkFailed(context.Context, []byte) error { return nil }
