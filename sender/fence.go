package sender

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// The fences: a request must start before either of two deadlines, or not at all.
//
// The confirm fence: a claim's confirm keeps the alert from a take-over for the wheel
// stage's guard (Options.Fence) from the confirm on, and no longer; a request must
// start within it, or another replica may send the alert too.
//
// The slot fence: a robot's window slot is held in flight from its pick for
// Options.HTTPTimeout twice over (store.PickOptions.Hold): the request must start within
// the first and ends within the second, so the platform counted it before the hold ends
// and the slot never frees while the platform may still count it (robot_pick.lua).
//
// So the sender notes when it asked the pick and the confirm and, once the request has
// its connection (a dial, a TLS handshake and a pause of this process all come before),
// writes it only while both fences hold; otherwise it closes that connection before a
// byte of the request is written, and the send picks and confirms again. Requests go
// over HTTP/1.1, one per connection (Client), so closing the connection stops this
// request and no other.

// ErrStaleConfirm is wrapped by the transient Failure of a send whose request could not
// start within Options.Fence of its claim's confirm, every time it was confirmed: no
// request carried it.
var ErrStaleConfirm = errors.New("sender: not sent: the request could not start within the fence of its claim's confirm")

// ErrStaleSlot is wrapped by the transient Failure of a send whose request could not
// start within Options.HTTPTimeout of its robot's pick, every time: no request carried
// it.
var ErrStaleSlot = errors.New("sender: not sent: the request could not start within the hold of its robot's slot")

// fence is one request's: it may start until the earlier of its deadlines, by now.
type fence struct {
	until   time.Time
	why     error // ErrStaleConfirm or ErrStaleSlot: which deadline until is
	now     func() time.Time
	tripped atomic.Bool // the request was stopped by the fence
}

// newFence is a fence until deadline, for why, by now.
func newFence(deadline time.Time, why error, now func() time.Time) *fence {
	return &fence{until: deadline, why: why, now: now}
}

// also adds deadline, for why, to f: the earlier of the two holds.
func (f *fence) also(deadline time.Time, why error) {
	if deadline.Before(f.until) {
		f.until, f.why = deadline, why
	}
}

// holds reports whether the request may start; it trips the fence when not.
func (f *fence) holds() bool {
	if !f.now().After(f.until) {
		return true
	}
	f.tripped.Store(true)
	return false
}

// stale is the error of a request f stopped, or nil when f did not stop it.
func (f *fence) stale() error {
	if f == nil || !f.tripped.Load() {
		return nil
	}
	return f.why
}

type fenceKey struct{}

// withFence returns ctx carrying f to Client.Post.
func withFence(ctx context.Context, f *fence) context.Context {
	return context.WithValue(ctx, fenceKey{}, f)
}

// fenceOf is the fence ctx carries, or nil.
func fenceOf(ctx context.Context) *fence {
	f, _ := ctx.Value(fenceKey{}).(*fence)
	return f
}

// fenced returns ctx, the request's, with a trace that stops the request once it has
// its connection when f no longer holds: it cancels the request, so that the transport
// does not try it again on another connection, and closes the connection before any of
// the request is written (HTTP/1.1 writes a request only after it got its connection).
func fenced(ctx context.Context, f *fence, cancel context.CancelFunc) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(info httptrace.GotConnInfo) {
			if !f.holds() {
				cancel()
				_ = info.Conn.Close()
			}
		},
	})
}
