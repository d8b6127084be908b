package sender

import (
	"context"
	"errors"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// The confirm fence: a claim's confirm keeps the alert from a take-over for the wheel
// stage's guard (Options.Fence) from the confirm on, and no longer; a request must
// start within it, or another replica may send the alert too. So the sender notes when
// it asked the confirm and, once the request has its connection (a dial, a TLS
// handshake and a pause of this process all come before), writes it only while the
// fence holds; otherwise it closes that connection before a byte of the request is
// written, and the send confirms again. Requests go over HTTP/1.1, one per connection
// (Client), so closing the connection stops this request and no other.

// ErrStaleConfirm is wrapped by the transient Failure of a send whose request could not
// start within Options.Fence of its claim's confirm, every time it was confirmed: no
// request carried it.
var ErrStaleConfirm = errors.New("sender: not sent: the request could not start within the fence of its claim's confirm")

// fence is one request's: it may start until since + limit, by now.
type fence struct {
	since   time.Time
	limit   time.Duration
	now     func() time.Time
	tripped atomic.Bool // the request was stopped by the fence
}

// holds reports whether the request may start; it trips the fence when not.
func (f *fence) holds() bool {
	if f.now().Sub(f.since) <= f.limit {
		return true
	}
	f.tripped.Store(true)
	return false
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
