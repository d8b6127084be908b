package ingress

import (
	"context"
	"sync"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
)

// leaseLife is how long a replica may spend the requests it took of a principal's rate
// (a lease) before what it did not spend is dropped.
const leaseLife = 100 * time.Millisecond

// rates takes principals' requests from their rates, which are kept in Redis for all
// replicas together (Producers.Take, and Producers.Publish with an id's owner), a lease
// at a time: one round trip takes several requests, and the requests that follow within
// leaseLife spend them without one. One refill of a principal's lease is asked at a
// time; the requests that find it empty meanwhile wait for it.
//
// A lease asks for what the last one showed this replica needs: as many as it spent
// (when demand went on: it lapsed less than leaseLife ago), twice as many when it ran out
// before leaseLife, never more than leaseSize. A principal whose requests come one at a
// time takes one at a time, exactly as Redis counts, and wastes nothing; a flood costs
// Redis a round trip every leaseSize requests. What a lease changes: a principal may be
// refused while another replica holds requests it took and has not spent (at most
// leaseSize), and over any window a principal may be let through up to leaseLife of its
// rate more than the rate allows, as a lease is spent up to leaseLife after Redis counted
// it. Once Redis says no request is free until some time, requests are refused here until
// then without asking (no one can free one sooner).
type rates struct {
	now    func() time.Time
	mu     sync.Mutex
	leases map[rateKey]*lease
}

// rateKey is a principal's rate as configured: a reload that changes it starts afresh.
type rateKey struct {
	name      string
	perSecond float64
	burst     int
}

// lease is what a replica holds of one principal's rate.
type lease struct {
	left    int           // requests taken and not spent
	spent   int           // requests spent of the lease in force
	size    int           // the requests the last refill asked for
	until   time.Time     // when the lease in force lapses (what is left is dropped)
	refused time.Time     // until when Redis said no request is free
	filling chan struct{} // closed when the refill under way is answered; nil for none
}

func newRates(now func() time.Time) *rates {
	return &rates{now: now, leases: map[rateKey]*lease{}}
}

// leaseSize is the most requests of p's rate one round trip takes: an eighth of its
// burst, at most leaseLife of its rate, at least one.
func leaseSize(p config.Principal) int {
	return max(1, min(p.Burst/8, int(p.RatePerSecond*leaseLife.Seconds())))
}

// spend spends one request of p's rate that this replica holds: ok when it held one (or
// p has no rate). Else wait > 0 when Redis said none is free until then, or want is how
// many requests a refill asks Redis for: the caller asks, and tells fill what Redis
// answered. While another request's refill is under way, spend waits for it (or for
// ctx) and looks again.
func (rs *rates) spend(ctx context.Context, p config.Principal) (ok bool, wait time.Duration, want int, err error) {
	if p.RatePerSecond <= 0 {
		return true, 0, 0, nil
	}
	for {
		now := rs.now()
		rs.mu.Lock()
		l := rs.lease(p, now)
		switch {
		case l.left > 0 && now.Before(l.until):
			l.left--
			l.spent++
			rs.mu.Unlock()
			return true, 0, 0, nil
		case now.Before(l.refused):
			rs.mu.Unlock()
			return false, l.refused.Sub(now), 0, nil
		case l.filling != nil:
			filling := l.filling
			rs.mu.Unlock()
			select {
			case <-filling:
				continue
			case <-ctx.Done():
				return false, 0, 0, ctx.Err()
			}
		case now.Before(l.until): // spent before it lapsed: more are needed
			want = 2 * l.size
		case now.Before(l.until.Add(leaseLife)): // lapsed just now: as many as it spent
			want = l.spent
		default: // after a pause: one, and more once they are spent
			want = 1
		}
		l.filling = make(chan struct{})
		rs.mu.Unlock()
		return false, 0, min(max(want, 1), leaseSize(p)), nil
	}
}

// fill records what Redis answered the refill spend asked for: granted requests of want,
// one of them the asker's, or none free for wait (granted 0 and wait 0: the refill was not
// answered, and the next request asks again).
func (rs *rates) fill(p config.Principal, want, granted int, wait time.Duration) {
	now := rs.now()
	rs.mu.Lock()
	defer rs.mu.Unlock()
	l := rs.lease(p, now)
	if l.filling != nil {
		close(l.filling)
		l.filling = nil
	}
	switch {
	case granted == 0:
		l.refused = now.Add(wait)
	default:
		l.left, l.spent, l.size = granted-1, 1, want
		l.until, l.refused = now.Add(leaseLife), time.Time{}
	}
}

// lease is p's lease; rs.mu is held. A new one is the moment to forget the leases of
// rates no longer configured, or idle, that lapsed long ago.
func (rs *rates) lease(p config.Principal, now time.Time) *lease {
	k := rateKey{p.Name, p.RatePerSecond, p.Burst}
	l := rs.leases[k]
	if l == nil {
		for k, old := range rs.leases {
			if old.filling == nil && now.Sub(old.until) > time.Minute && now.Sub(old.refused) > time.Minute {
				delete(rs.leases, k)
			}
		}
		l = &lease{}
		rs.leases[k] = l
	}
	return l
}

// take takes one request of p's rate from producers: 0 when it may go now, else how long
// until one may.
func (rs *rates) take(ctx context.Context, producers Producers, p config.Principal) (time.Duration, error) {
	ok, wait, want, err := rs.spend(ctx, p)
	if ok || wait > 0 || err != nil {
		return wait, err
	}
	granted, wait, err := producers.Take(ctx, p.Name, p.RatePerSecond, p.Burst, want)
	rs.fill(p, want, granted, wait)
	return wait, err
}
