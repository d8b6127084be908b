// Package netproxy is a loopback TCP proxy that a test or the fault suite takes down and
// brings back, to cut one process off a shared server (Redis, Postgres) without stopping
// the server for everyone else. It is test tooling, not product: nothing under cmd
// links it.
package netproxy

import (
	"fmt"
	"net"
	"sync"
	"sync/atomic"
)

// Proxy forwards every connection it accepts to one target address.
type Proxy struct {
	target string
	addr   string

	mu    sync.Mutex
	ln    net.Listener
	conns map[net.Conn]struct{}
	drop  func(request []byte) bool // armed by DropReply; nil when not
	// down: the proxy goes down when it loses the reply (DropReplyAndGoDown)
	downOnDrop bool
	// hold: the next request match reports true for waits for release (HoldRequest)
	hold        func(request []byte) bool
	holdRelease <-chan struct{}
	holdHeld    chan struct{}
	wg          sync.WaitGroup
}

// Start listens on a free loopback port and forwards every connection to target.
func Start(target string) (*Proxy, error) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, fmt.Errorf("netproxy: %w", err)
	}
	p := &Proxy{target: target, addr: ln.Addr().String(), conns: map[net.Conn]struct{}{}}
	p.serve(ln)
	return p, nil
}

// Addr is the proxy's host:port.
func (p *Proxy) Addr() string { return p.addr }

// Down closes the listener and every connection, and waits for their copies to end: the
// target looks unreachable (connections refused) until Up.
func (p *Proxy) Down() {
	p.cutOff()
	p.wg.Wait()
}

// cutOff closes the listener and every connection.
func (p *Proxy) cutOff() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ln != nil {
		p.ln.Close()
		p.ln = nil
	}
	for c := range p.conns {
		c.Close()
	}
}

// Up listens again on the same address. It is a no-op while the proxy is up.
func (p *Proxy) Up() error {
	p.mu.Lock()
	up := p.ln != nil
	p.mu.Unlock()
	if up {
		return nil
	}
	ln, err := net.Listen("tcp", p.addr)
	if err != nil {
		return fmt.Errorf("netproxy: listen again on %s: %w", p.addr, err)
	}
	p.serve(ln)
	return nil
}

// DropReply makes the proxy lose one reply, as a connection cut at the wrong moment
// does: the next request (one read from a client) for which match reports true reaches
// the server, and the connection it came on is closed as soon as the server answers,
// the answer unsent. The client sees its command fail although it ran. It is armed for
// one request: the ones after it pass.
func (p *Proxy) DropReply(match func(request []byte) bool) {
	p.mu.Lock()
	p.drop, p.downOnDrop = match, false
	p.mu.Unlock()
}

// DropReplyAndGoDown is DropReply, and the proxy goes down (as Down) the moment the reply
// is lost, every other connection with it, until Up: the client can learn nothing of
// the request it sent, however it retries, for as long as the test keeps it down.
func (p *Proxy) DropReplyAndGoDown(match func(request []byte) bool) {
	p.mu.Lock()
	p.drop, p.downOnDrop = match, true
	p.mu.Unlock()
}

// dropping reports whether the reply to request is the one DropReply asked to lose, and
// whether the proxy goes down with it, and disarms it if so.
func (p *Proxy) dropping(request []byte) (drop, down bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.drop == nil || !p.drop(request) {
		return false, false
	}
	p.drop = nil
	return true, p.downOnDrop
}

// HoldRequest delays one request on its way, as a slow network or a congested gateway
// does: the next request (one read from a client) for which match reports true waits at
// the proxy, its connection open, until release is closed, and then goes on to the
// server. The returned channel is closed once the request is held. It is armed for one
// request: the ones after it pass.
func (p *Proxy) HoldRequest(match func(request []byte) bool, release <-chan struct{}) (held <-chan struct{}) {
	h := make(chan struct{})
	p.mu.Lock()
	p.hold, p.holdRelease, p.holdHeld = match, release, h
	p.mu.Unlock()
	return h
}

// holding returns the release to wait for when request is the one HoldRequest asked to
// hold (closing its held channel and disarming it), or nil.
func (p *Proxy) holding(request []byte) <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.hold == nil || !p.hold(request) {
		return nil
	}
	release := p.holdRelease
	close(p.holdHeld)
	p.hold, p.holdRelease, p.holdHeld = nil, nil, nil
	return release
}

// Close takes the proxy down for good.
func (p *Proxy) Close() { p.Down() }

func (p *Proxy) serve(ln net.Listener) {
	p.mu.Lock()
	p.ln = ln
	p.mu.Unlock()
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return // closed by Down
			}
			p.forward(c)
		}
	}()
}

func (p *Proxy) forward(c net.Conn) {
	up, err := net.Dial("tcp", p.target)
	if err != nil {
		c.Close()
		return
	}
	p.mu.Lock()
	if p.ln == nil { // went down meanwhile
		p.mu.Unlock()
		c.Close()
		up.Close()
		return
	}
	p.conns[c], p.conns[up] = struct{}{}, struct{}{}
	p.mu.Unlock()
	done := func() {
		c.Close()
		up.Close()
		p.mu.Lock()
		delete(p.conns, c)
		delete(p.conns, up)
		p.mu.Unlock()
	}
	var once sync.Once
	var cut atomic.Bool     // the next reply on this connection is lost (DropReply)
	var cutDown atomic.Bool // and the proxy goes down with it (DropReplyAndGoDown)
	p.wg.Add(2)
	go func() { // requests
		defer p.wg.Done()
		defer once.Do(done) // either side closing ends both
		buf := make([]byte, 32<<10)
		for {
			n, err := c.Read(buf)
			if n > 0 {
				if drop, down := p.dropping(buf[:n]); drop {
					cutDown.Store(down)
					cut.Store(true)
				}
				if release := p.holding(buf[:n]); release != nil {
					<-release
				}
				if _, werr := up.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	go func() { // replies
		defer p.wg.Done()
		defer once.Do(done)
		buf := make([]byte, 32<<10)
		for {
			n, err := up.Read(buf)
			if n > 0 {
				if cut.Load() {
					if cutDown.Load() {
						p.cutOff()
					}
					return // the reply is lost with the connection
				}
				if _, werr := c.Write(buf[:n]); werr != nil {
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
}
