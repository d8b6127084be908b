package sender

import (
	"context"
	"errors"
	"slices"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// Sharing a busy target across replicas (SetParking; sender.pacing auto).
//
// Each replica has its own queue per target (coalesce.go), but a target's pace is one for
// the deployment: the token bucket in Redis. Without sharing, a token carries only the
// queue of the replica that won it, so with n replicas an alert waits for about n tokens.
// With sharing, once a target is busy (a pick found no token, and reserved the next) the
// alerts a replica holds for it are parked in Redis (Claim.Park; the scheduler parks the
// wheel stage's claim, so no replica holds the alert any more) instead of waiting here,
// and whichever replica's drainer gets the target's next send adopts every parked alert
// of the target (Parking.Adopt: a claim of its own, as the fire loop's), waits for them
// to reach its queue, and sends them merged with its own. So each token carries what
// waits on every replica, and an alert waits about one token, whatever the number of
// replicas.
//
// Exactly once holds by the wheel stage's claims: a parked alert belongs to no replica
// (its former claim can no longer confirm it), an adopted one to its adopter's claim,
// confirmed right before the request as every claim is; an adopter that dies before the
// send leaves the alert to its lease, and a park nobody adopts from to the park's lease:
// either way the sweeper of any replica claims it again. Nothing changes for a target
// that is not busy: no park, no adopt, no extra round trip.

// Parking is where a replica adopts the alerts other replicas parked; the scheduler
// implements it on the wheel stage.
type Parking interface {
	// Adopt claims up to limit parked alerts of target and hands each of them, with
	// Alert.Adopted set, to this Chat's Send (asynchronously); it returns how many it
	// handed and how many stay parked.
	Adopt(ctx context.Context, target string, limit int) (adopted, left int, err error)
}

// adoptWait bounds how long a drainer waits for the alerts it adopted to reach its queue.
const adoptWait = 200 * time.Millisecond

// SetParking lets s share its busy targets' sends with the other replicas through p. Call
// it before the first send.
func (s *Chat) SetParking(p Parking) { s.parking = p }

// sharing reports whether alerts of busy targets are parked and adopted.
func (s *Chat) sharing() bool { return s.parking != nil && s.opts.Pacing == config.PacingAuto }

// parkable reports whether w may be parked now; the caller holds the queue's lock.
func parkable(w *waiter) bool { return w.park && !w.solo && !w.adopted && !w.taken }

// parkWaiting parks the parkable alerts of t's queue (the pick found the target busy);
// one whose park fails stays in the queue.
func (q *alertQueue) parkWaiting() {
	q.mu.Lock()
	var ws []*waiter
	for _, w := range q.waiting {
		if parkable(w) {
			w.taken = true
			ws = append(ws, w)
		}
	}
	q.waiting = deleteTaken(q.waiting)
	q.mu.Unlock()
	for _, w := range ws {
		if q.parkOne(w) {
			w.done <- ErrParked
			continue
		}
		q.mu.Lock()
		w.taken = false
		q.insert(w)
		q.mu.Unlock()
	}
}

// parkOne parks w and reports whether it did; t's drainer then keeps adopting until the
// park is empty.
func (q *alertQueue) parkOne(w *waiter) bool {
	s, t := q.s, q.t
	if err := w.claim.Park(w.ctx, w.principal); err != nil {
		if errors.Is(err, ErrNoPark) {
			w.park = false // it waits here
		} else {
			s.logger.Warn("could not park an alert; it waits for this replica's next send", "target", t.name, "err", err)
		}
		return false
	}
	s.metrics.shared.WithLabelValues(t.name, "parked").Inc()
	q.mu.Lock()
	q.parked = true
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.drain()
	}
	return true
}

// adopt claims what waits parked for t, up to what one message has room for besides its
// own queue, and waits (at most adoptWait) until the adopted alerts are in the queue.
func (q *alertQueue) adopt() {
	s, t := q.s, q.t
	q.mu.Lock()
	room := s.opts.CoalesceMax - len(q.waiting)
	q.mu.Unlock()
	if room <= 0 {
		return
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.HTTPTimeout)
	adopted, left, err := s.parking.Adopt(ctx, t.name, room)
	cancel()
	q.mu.Lock()
	q.parked = err == nil && left > 0 // on an error, the park's lease brings them back
	q.expect += adopted
	q.mu.Unlock()
	if err != nil {
		s.logger.Warn("could not adopt the target's parked alerts; another replica or the park's lease brings them",
			"target", t.name, "err", err)
		return
	}
	if adopted == 0 {
		return
	}
	s.metrics.shared.WithLabelValues(t.name, "adopted").Add(float64(adopted))
	q.sleep(adoptWait, func() bool { return q.expect <= 0 })
	q.mu.Lock()
	q.expect = min(q.expect, 0) // those that did not come (recorded, given back) are not waited for again
	q.mu.Unlock()
}

// deleteTaken drops the taken waiters from ws.
func deleteTaken(ws []*waiter) []*waiter {
	return slices.DeleteFunc(ws, func(w *waiter) bool { return w.taken })
}

// stopSharing forgets that t's alerts may wait parked (Redis failed the pick): the park's
// lease brings them back if no other replica adopts them first.
func (q *alertQueue) stopSharing() {
	q.mu.Lock()
	q.parked = false
	q.mu.Unlock()
}
