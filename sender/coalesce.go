package sender

import (
	"context"
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// Coalescing (Options.Coalesce "auto", the default).
//
// Every alert (every part of a split alert) waits for a robot in its target's queue in
// this process, ordered by due time. One goroutine per target and process, the drainer,
// runs while the queue is not empty: it picks a robot from the shared pool and hands the
// queue's first alert to a send, or — when the queue is longer than the pool can drain
// within its window — a merged markdown message of the waiting alerts, in priority then
// due order, within the platform's size limit (less the room a keyword needs) and
// Options.CoalesceMax alerts.
// "Longer than the pool can drain" means either that the pool answered "no robot free"
// since the queue was last empty (backlog), or that the queue holds more alerts than an
// upper bound of the sends the pool still has room for in the window, derived from the
// picked robot's count (it is the least used: no robot has fewer sends). Without backlog
// every alert goes alone, exactly as with coalescing off.
//
// A merged message is, in the platform's style (Protocol.Style): title "<n> alerts:
// <first alert's title>", a heading ("#### <n> alerts") and one section per alert between
// separators. A text alert's section is its content as is; a markdown alert's section is
// its text, under its title when the text does not contain the title. Mentions are
// merged: the message mentions everyone any of its alerts mentions (everyone when any of
// them does), and each section ends with the platform's hint of its own mentions that its
// text does not show already, so a reader sees whom each alert concerns. Native alerts
// (links, cards) and the parts of a split alert are never merged: they keep their place
// in the queue and go alone.
//
// Priority: alerts wait in priority order (Alert.Priority, higher first), then due order,
// so when more waits than one message carries, the higher priority goes first and the
// rest rides the next sends; an alert that has waited Options.PriorityMaxWait goes ahead
// of every priority, so none starves.
//
// Every alert of a merged message gets that send's result: nil, or the same *Failure
// (Merged says how many alerts it carried). One exception: when DingTalk refuses a
// merged message as permanent (content rejected, HTTP 4xx), one alert's content may be
// the cause, so its alerts go again alone and each gets its own verdict; refusing them
// all would record good alerts as undeliverable.
//
// With sender.pacing burst: while the pool has room, each alert goes alone; under
// backlog, after a merged message that emptied the queue, the drainer waits one send's
// share of the window (window over the target's sends per window) before the next pick,
// unless a full message's worth of alerts arrives first, so merged messages fill up
// instead of spending the freed robot slots on one or two alerts each.
//
// Bursts, with sender.pacing auto (the default). Each pick spends a token of the
// target's bucket (robot_pick.lua), which lets a sixth of the capacity per window go at
// once; a burst that needs k messages should go in k messages, as soon as tokens allow,
// not spend them on the few alerts that came first. So:
//
//   - Lingering: an alert that arrives within a quarter of one send's share of the
//     window (target.spacing) of the one before starts a burst, which lasts until alerts
//     pause for a whole share. While a burst lasts and the queue does not hold a full
//     message (the sections reach CoalesceMax or the size limit), the drainer waits
//     before its next pick if the burst, at the rate it has come so far, fills the
//     message before the queue's oldest alert has waited one token's time (the bucket's
//     refill of one token): until a full message waits, the burst pauses for half a
//     share, or it could no longer fill the message in time. A burst that began with the
//     first send of a quiet pool (below) is a flood, whose start may be slow: its rate is
//     not asked, one token's time is the bound. A lone alert never waits, nor do alerts that come too
//     slowly to fill a message within a token's time (a few close together under a
//     moderate load), nor a backlog that waited for a reserved token (that send carries
//     everything waiting). Under sustained load the bound is one token: lingering never
//     holds an alert past the moment its token would come.
//   - The first send of a quiet pool: the drainer's first pick after the queue was empty,
//     when its robot had no other send in the window, takes what waits before a burst can
//     show (often one alert). When that is less than a full message, the drainer's next
//     paced pick within one token's time does not take from the bucket (store.Burst), so
//     the burst that follows keeps the whole bucket. The robots' windows hold as ever,
//     and at most one such send per quiet robot and window escapes the bucket.
//   - Full messages: a section's size is an upper bound (its JSON length); once the
//     rendered message is the judge, a message takes the following alerts too while they
//     fit (fill), so WeCom's 4096 bytes of markdown carry as many as they can.
//   - Full messages do not wait for tokens: while the queue holds a full message's worth
//     and the target is not busy (no pick reserved a token since the queue was last
//     empty), the pick (store.Full) takes a token if the bucket has one and otherwise goes
//     on the robots' windows without reserving, so a flood goes out in full messages as
//     fast as the windows allow instead of one token's time apart. Pacing exists to let what
//     comes next ride along; a full message can carry no more, and holding it back only
//     makes it late (a flood of 200 groups into one WeCom robot, whose 4096 bytes carry
//     13: 16 messages over 48 s, paced). The robots' windows remain the limit; what
//     arrives after such a flood waits for room in them, as it would have waited behind
//     the flood in the queue. When no robot has room, a full message reserves a token like
//     any other: the target is busy, its alerts park (share.go), and from then on every
//     pick is paced, so the replicas share the target's sends one token at a time.
//   - Parking (share.go) starts only when a pick found the bucket empty and reserved a
//     token (the target is busy), not when a robot has to wait for its window, such as
//     Feishu's per-second one: those alerts wait here, with those that come meanwhile,
//     and go merged.

// maxTitleRunes bounds the part of a merged message's title taken from its first alert.
const maxTitleRunes = 48

// alertQueue is a target's queue in this process: the alerts waiting for a robot, and
// the drainer that sends them (coalescing them under load) and parks them while the
// target is busy (share.go).
type alertQueue struct {
	s       *Chat   // the chat core it sends through
	t       *target // the target it queues for
	mu      sync.Mutex
	waiting []*waiter // by priority (higher first), due time, then arrival
	seq     uint64
	running bool          // a drainer runs
	backlog bool          // the pool said "no robot free" since the queue was last empty
	busy    bool          // a pick found the bucket empty since the queue was last empty: alerts park (share.go)
	wake    chan struct{} // a change of waiting, for a sleeping drainer
	parked  bool          // alerts of the target may wait parked (share.go): keep draining
	expect  int           // adopted alerts not in the queue yet, less those that came first (share.go)
	// arrived is when the latest alert came (sent since or not). burst counts the alerts
	// of the burst arriving (linger), since burstFrom: 0 for none, 2 once an alert came
	// within the target's gap of the one before, one more for each alert after it until
	// alerts pause for the target's spacing.
	arrived, burstFrom time.Time
	burst              int
	// quietSend is when the first send of a quiet pool went (drain); credit, within one
	// token's time of it, lets the next paced pick skip the bucket.
	quietSend time.Time
	credit    bool
}

func newAlertQueue(s *Chat, t *target) *alertQueue {
	return &alertQueue{s: s, t: t, wake: make(chan struct{}, 1)}
}

// waiter is one alert, or one part of a split alert, in a queue.
type waiter struct {
	ctx       context.Context
	m         Message
	due       time.Time
	seq       uint64
	enqueued  time.Time
	solo      bool   // never merged
	claim     Claim  // the alert's claim, confirmed for part before every request; nil: none
	part      int    // the part of the alert it carries (from 0)
	park      bool   // the claim may park it (a mergeable alert, while replicas share targets)
	adopted   bool   // Alert.Adopted: rides the adopter's next send
	priority  int    // Alert.Priority; promoted past every priority once it waited too long
	principal string // Options.PrincipalOf: whose share of the target it waits in
	section   string // its section in a merged message
	size      int    // upper bound of the bytes it adds to a merged message
	taken     bool   // under the queue's lock: out of the queue, in a send
	done      chan error
	sent      Sent // how it went, set before a nil on done
}

func (q *alertQueue) signal() {
	select {
	case q.wake <- struct{}{}:
	default:
	}
}

// insert adds w in its place; the caller holds q.mu.
func (q *alertQueue) insert(w *waiter) {
	i, _ := slices.BinarySearchFunc(q.waiting, w, queueOrder)
	q.waiting = slices.Insert(q.waiting, i, w)
}

// queueOrder orders waiters by priority (higher first), due time, then arrival.
func queueOrder(a, b *waiter) int {
	if a.priority != b.priority {
		return b.priority - a.priority
	}
	if c := a.due.Compare(b.due); c != 0 {
		return c
	}
	return compareUint(a.seq, b.seq)
}

// promoted is the priority of an alert that waited past the bound: ahead of all.
const promoted = math.MaxInt32

// age promotes the waiters that have waited maxWait or more (0: never) ahead of every
// priority, keeping the queue in order; the caller holds q.mu.
func (q *alertQueue) age(now time.Time, maxWait time.Duration) {
	if maxWait <= 0 {
		return
	}
	moved := false
	for _, w := range q.waiting {
		if w.priority != promoted && now.Sub(w.enqueued) >= maxWait {
			w.priority, moved = promoted, true
		}
	}
	if moved {
		slices.SortStableFunc(q.waiting, queueOrder)
	}
}

func compareUint(a, b uint64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// remove takes w out of the queue; the caller holds q.mu.
func (q *alertQueue) remove(w *waiter) {
	if i := slices.Index(q.waiting, w); i >= 0 {
		q.waiting = slices.Delete(q.waiting, i, i+1)
	}
}

// sleep waits d, or less when done (called under q.mu) holds at a change of the queue.
func (q *alertQueue) sleep(d time.Duration, done func() bool) {
	t := time.NewTimer(d)
	defer t.Stop()
	for {
		q.mu.Lock()
		ok := done()
		q.mu.Unlock()
		if ok {
			return
		}
		select {
		case <-t.C:
			return
		case <-q.wake:
		}
	}
}

// windowed is the part of a pool that tells its window (*store.RobotPool does).
type windowed interface{ Window() time.Duration }

// pacing is one send's share of the pool's window for robots: the drainer's pause after
// a merged message under backlog. 0 when the pool does not tell its window.
func pacing(pool Pool, robots []store.PoolRobot) time.Duration {
	w, ok := pool.(windowed)
	if !ok {
		return 0
	}
	capacity := 0
	for _, r := range robots {
		capacity += r.Limit
	}
	if capacity == 0 {
		return 0
	}
	return w.Window() / time.Duration(capacity)
}

// tokenTime is how long the target's token bucket takes to gain one token (robot_pick.lua:
// it holds capacity/store.BucketShare and refills at the rest of the capacity per
// window), for robots' configured limits. 0 when the pool does not tell its window.
func tokenTime(pool Pool, robots []store.PoolRobot) time.Duration {
	w, ok := pool.(windowed)
	if !ok {
		return 0
	}
	capacity := 0.0
	for _, r := range robots {
		capacity += float64(r.Limit)
	}
	if capacity == 0 {
		return 0
	}
	size := max(capacity/store.BucketShare, 1)
	return time.Duration(float64(w.Window()) / max(capacity-size, capacity/store.BucketShare))
}

// sendQueued sends m, part part of a, through t's queue and returns its result; solo
// alerts are never merged. a's claim, when it has one, is confirmed right before every
// request that would carry m.
func (q *alertQueue) sendQueued(ctx context.Context, a Alert, part int, m Message, solo bool) (Sent, error) {
	s, t := q.s, q.t
	if err := ctx.Err(); err != nil {
		return Sent{}, &Failure{Class: ClassTransient, Reason: "gave up: " + err.Error(), Target: t.name, Err: err}
	}
	now := s.now()
	due := a.Due
	if due.IsZero() {
		due = now
	}
	w := &waiter{ctx: ctx, m: m, due: due, enqueued: now, solo: solo, claim: a.Claim, part: part, done: make(chan error, 1),
		adopted: a.Adopted, priority: a.Priority, principal: s.principalOf(a), park: s.sharing() && a.Claim != nil && !solo}
	if !solo {
		w.section, w.size = section(t.style, m)
	}
	q.mu.Lock()
	if s.stop.done() { // Stop has emptied the queue, or is about to
		q.mu.Unlock()
		return Sent{}, stopped(t.name)
	}
	if q.busy && parkable(w) {
		// The target is busy: park the alert for its next send, whichever replica makes it.
		q.mu.Unlock()
		if q.parkOne(w) {
			return Sent{}, ErrParked
		}
		q.mu.Lock()
		if s.stop.done() {
			q.mu.Unlock()
			return Sent{}, stopped(t.name)
		}
	}
	q.seq++
	w.seq = q.seq
	q.arrival(t, now)
	q.insert(w)
	if w.adopted {
		q.expect-- // may arrive before its adopter counts it: then below 0 until it does
		q.signal()
	}
	s.metrics.waiting.WithLabelValues(t.name).Set(float64(len(q.waiting)))
	start := !q.running
	q.running = true
	q.mu.Unlock()
	if start {
		go q.drain()
	} else {
		q.signal()
	}
	select {
	case err := <-w.done:
		return w.sent, err
	case <-ctx.Done():
	}
	q.mu.Lock()
	taken := w.taken
	if !taken {
		q.remove(w)
	}
	q.mu.Unlock()
	q.signal()
	if taken {
		// The alert rides in a send that has begun. That send goes on for the other alerts
		// it carries (it ends early only when all of them gave up), so its result is this
		// alert's too: reporting "not sent" while it may be delivered would send it twice.
		err := <-w.done
		return w.sent, err
	}
	return Sent{}, &Failure{Class: ClassTransient, Reason: "gave up: " + ctx.Err().Error(), Target: t.name, Err: ctx.Err()}
}

// arrival notes an alert's arrival at now in q, t's queue, whose lock the caller holds:
// one within t.gap of the last starts a burst, one a send's share of the window after
// it ends the burst.
func (q *alertQueue) arrival(t *target, now time.Time) {
	switch since := now.Sub(q.arrived); {
	case since >= t.spacing:
		q.burst = 0
	case q.burst > 0:
		q.burst++
	case since < t.gap:
		q.burst, q.burstFrom = 2, q.arrived
	}
	q.arrived = now
}

// drain picks robots for t's queue until it is empty.
func (q *alertQueue) drain() {
	s, t := q.s, q.t
	ctx := context.Background() // the queue's alerts leave on their own contexts
	paid := false               // a reserved token came due: the next pick is not paced again
	first := true               // no robot picked yet in this run: the queue was empty before
	for {
		q.mu.Lock()
		if len(q.waiting) == 0 && !q.parked {
			q.running, q.backlog, q.busy = false, false, false
			s.metrics.waiting.WithLabelValues(t.name).Set(0)
			q.mu.Unlock()
			return
		}
		q.mu.Unlock()
		if !paid && q.linger() {
			continue // alerts may have left meanwhile: look again
		}
		robots := s.closedCircuits(t)
		if len(robots) == 0 {
			// Nothing can be sent here for a while: what waits is given back, and this
			// replica stops adopting the target's parked alerts (their park's lease hands
			// them on), so the run ends rather than spins until a breaker half-opens.
			q.stopSharing()
			q.failWaiting(func() *Failure {
				return &Failure{Class: ClassTransient, Reason: "the circuit breaker of every robot is open",
					Target: t.name, RetryAfter: s.opts.BreakerOpen}
			})
			continue
		}
		_ = s.acquire(ctx) // cannot fail: ctx never ends
		reserved := paid
		pacing := q.pacingOf(paid)
		paid = false
		pick, err := s.pickSlot(ctx, t, robots, pacing)
		if err != nil {
			s.release()
			q.stopSharing()
			q.failWaiting(func() *Failure {
				if errors.Is(err, store.ErrNoRobot) {
					return &Failure{Class: ClassRobotBroken, Reason: "every robot of the target is out of rotation (broken)", Target: t.name, Err: err}
				}
				return &Failure{Class: ClassTransient, Reason: "robot pool: " + err.Error(), Target: t.name, Err: err}
			})
			continue
		}
		if pick.Robot == "" {
			s.release()
			q.waitForRobot(pick.Pick)
			paid = pick.Reserved
			continue
		}
		q.mu.Lock()
		share := s.sharing() && (reserved || q.backlog || q.parked)
		q.mu.Unlock()
		if share {
			q.adopt()
		}
		q.mu.Lock()
		batch := q.take(pick.Pick, robots)
		backlog, left := q.backlog, len(q.waiting)
		if first && pacing == store.Paced && left == 0 && pick.InWindow == 1 && missing(batch, s.opts.CoalesceMax, t.mergeRoom) > 0 {
			// The first send of a quiet pool (its robot had no other send in the window) took
			// what waited before a burst could show: the burst keeps the whole bucket.
			q.quietSend, q.credit = s.now(), true
		}
		first = false
		s.metrics.waiting.WithLabelValues(t.name).Set(float64(left))
		q.mu.Unlock()
		if len(batch) == 0 { // every alert left meanwhile, or another replica's send took the parked ones
			s.release()
			s.giveSlotBack(ctx, t, pick.Pick)
			continue
		}
		go q.sendBatch(pick, batch)
		if s.opts.Pacing == config.PacingBurst && backlog && left == 0 && t.spacing > 0 {
			q.sleep(t.spacing, func() bool { return len(q.waiting) == 0 || len(q.waiting) >= s.opts.CoalesceMax })
		}
	}
}

// pacingOf is how the queue's next pick of t is paced: Burst when a token it reserved
// came due (paid), or for a quiet pool's first send's token; Full when what waits makes
// a full message while the target is not busy (see Bursts above); else the configured
// pacing.
func (q *alertQueue) pacingOf(paid bool) store.Pacing {
	s, t := q.s, q.t
	pacing := s.pacing()
	q.mu.Lock()
	defer q.mu.Unlock()
	switch {
	case paid:
		pacing = store.Burst
	case pacing == store.Paced && q.credit && s.now().Before(q.quietSend.Add(t.tokenTime)):
		pacing, q.credit = store.Burst, false // a quiet pool's first send's token
	case pacing == store.Paced && !q.busy && fullMessage(q.waiting, s.opts.CoalesceMax, t.mergeRoom):
		pacing = store.Full // a full message gains nothing by waiting
	}
	return pacing
}

// waitForRobot is the queue's wait when no robot of t is free (pick says how long): the
// target has a backlog (busy once a token was reserved), the alerts that would wait past
// Options.MaxWait fail now, saying when to try again, and a busy target's alerts are
// parked for its next send on any replica.
func (q *alertQueue) waitForRobot(pick store.Pick) {
	s, t := q.s, q.t
	var expired []*waiter
	q.mu.Lock()
	q.backlog = true
	q.busy = q.busy || pick.Reserved
	if s.opts.MaxWait > 0 {
		now := s.now()
		q.waiting = slices.DeleteFunc(q.waiting, func(w *waiter) bool {
			if now.Sub(w.enqueued)+pick.Wait > s.opts.MaxWait {
				w.taken = true
				expired = append(expired, w)
				return true
			}
			return false
		})
	}
	q.mu.Unlock()
	for _, w := range expired {
		w.done <- &Failure{Class: ClassTransient, Reason: fmt.Sprintf("no robot free within %s", s.opts.MaxWait),
			Target: t.name, RetryAfter: pick.Wait}
	}
	if s.sharing() && pick.Reserved {
		q.parkWaiting()
	}
	q.sleep(pick.Wait, func() bool { return len(q.waiting) == 0 && !q.parked })
}

// Lingering's thresholds, as parts of one send's share of the window (target.spacing):
// an alert that arrives within spacing/burstGap of the one before starts a burst, and
// while it lasts a pause of spacing/quietGap lets what waits go.
const (
	burstGap = 4
	quietGap = 2
)

// linger waits, before the drainer's next pick, while a burst is arriving and the queue
// does not hold a full message yet (see Bursts above); it reports whether it waited.
func (q *alertQueue) linger() bool {
	s, t := q.s, q.t
	if s.opts.Pacing != config.PacingAuto || t.gap <= 0 {
		return false
	}
	q.mu.Lock()
	d := q.lingerFor(s.now())
	q.mu.Unlock()
	if d <= 0 {
		return false
	}
	q.sleep(d, func() bool {
		return len(q.waiting) == 0 || missing(q.waiting, s.opts.CoalesceMax, t.mergeRoom) == 0
	})
	return true
}

// lingerFor is how long the drainer lingers at now, for the burst to fill the queue's
// next message: until the burst pauses for half a send's share of the window
// (t.spacing/quietGap), and no longer than the burst, at the rate it has come so far,
// can fill the message before the queue's oldest alert has waited one token's time
// (t.tokenTime; for a burst that began with a quiet pool's first send, that time
// itself). 0 when no burst is arriving (or it paused for a whole share: it is over), it
// would not fill the message in time, the queue's first alert goes alone, or the queue
// holds a full message. The caller holds the queue's lock.
func (q *alertQueue) lingerFor(now time.Time) time.Duration {
	s, t := q.s, q.t
	if now.Sub(q.arrived) >= t.spacing {
		q.burst = 0
	}
	if q.burst < 2 || len(q.waiting) == 0 || q.waiting[0].solo {
		return 0
	}
	need := missing(q.waiting, s.opts.CoalesceMax, t.mergeRoom)
	if need == 0 {
		return 0
	}
	oldest := q.waiting[0].enqueued
	for _, w := range q.waiting[1:] {
		if w.enqueued.Before(oldest) {
			oldest = w.enqueued
		}
	}
	last := oldest.Add(t.tokenTime)
	if q.burstFrom.Sub(q.quietSend).Abs() > t.tokenTime {
		// The burst brought burst-1 alerts over arrived-burstFrom: need more take as long.
		// A burst that began with a quiet pool's first send is a flood, whose start may be
		// slow: it has no such test.
		last = last.Add(-time.Duration(float64(q.arrived.Sub(q.burstFrom)) * float64(need) / float64(q.burst-1)))
	}
	until := q.arrived.Add(t.spacing / quietGap)
	if last.Before(until) {
		until = last
	}
	return until.Sub(now)
}

// fullMessage reports whether waiting (in queue order) starts with a full merged message:
// its first alert mergeable and no room for another (missing).
func fullMessage(waiting []*waiter, most, limit int) bool {
	return len(waiting) > 0 && !waiting[0].solo && missing(waiting, most, limit) == 0
}

// missing is how many more alerts the merged message of waiting (in queue order, its
// first alert mergeable) has room for: by most alerts, and by limit bytes at the average
// size of the sections pickSections takes, at least one; 0 when waiting holds a full
// message (most alerts, or a mergeable alert that does not fit: the sizes are upper
// bounds, and take fills a message by the rendered size).
func missing(waiting []*waiter, most, limit int) int {
	n, used := 0, 0
	for _, w := range waiting {
		if w.solo {
			continue
		}
		if n >= most || used+w.size > limit {
			return 0
		}
		n, used = n+1, used+w.size
	}
	if n == 0 || used == 0 {
		return most - n
	}
	return min(most-n, max((limit-used)*n/used, 1))
}

// pacing is how the drainer's picks spend the pool's budget: sender.pacing auto paces
// every pick through the target's token bucket, whose burst lets alerts go out at once
// while the recent rate is sustainable (a lone alert waits only when the bucket is
// empty, for at most one token's time); sender.pacing burst never paces.
func (s *Chat) pacing() store.Pacing {
	if s.opts.Pacing == config.PacingAuto {
		return store.Paced
	}
	return store.Burst
}

// failWaiting ends every alert of t's queue with a failure of its own.
func (q *alertQueue) failWaiting(f func() *Failure) {
	q.mu.Lock()
	ws := q.waiting
	q.waiting = nil
	for _, w := range ws {
		w.taken = true
	}
	q.mu.Unlock()
	for _, w := range ws {
		w.done <- f()
	}
}

// take removes from t's queue what the picked robot sends: the first alert alone, or,
// when the queue is longer than the pool can drain, the first alert merged with the
// following mergeable ones that fit, the alerts taken in turns over their principals
// (inTurns) and the message's sections in queue order. The caller holds the queue's
// lock.
func (q *alertQueue) take(pick store.Pick, robots []store.PoolRobot) []*waiter {
	s, t := q.s, q.t
	if len(q.waiting) == 0 {
		return nil
	}
	q.age(s.now(), s.opts.PriorityMaxWait)
	order, turned := inTurns(q.waiting)
	head := order[0]
	batch := []*waiter{head}
	merge := q.backlog || len(q.waiting)-1 > roomAfter(pick, robots)
	if s.opts.Pacing == config.PacingAuto {
		merge = len(q.waiting) > 1 // everything that waits goes in this send
	}
	if !head.solo && merge {
		batch = pickSections(order, s.opts.CoalesceMax, t.mergeRoom)
		// The sizes are upper bounds; the rendered message is the judge: it may carry fewer,
		// or more.
		n := len(batch)
		batch = q.fit(batch)
		if len(batch) == n {
			batch = q.fill(batch, order)
		}
		if len(batch) > 1 && turned {
			// Taken in turns; the message lists them in queue order, which may render a
			// little longer (its title is its first alert's): it keeps what fits.
			slices.SortFunc(batch, queueOrder)
			batch = q.fit(batch)
		}
	}
	if turned {
		q.countTurns(batch)
	}
	for _, w := range batch {
		w.taken = true
	}
	q.waiting = deleteTaken(q.waiting)
	return batch
}

// fit drops the last alerts of batch until its rendered message keeps within the
// platform's size limit (one alert always stays).
func (q *alertQueue) fit(batch []*waiter) []*waiter {
	for len(batch) > 1 && q.t.proto.Room(mergeMessage(q.t.style, batch)) < q.t.reserve {
		batch = batch[:len(batch)-1]
	}
	return batch
}

// inTurns returns waiting (in queue order) in the order a send takes them: by priority,
// then in turns over the principals — every principal's first waiting alert, then every
// one's second, and so on —, each principal's alerts in queue order (due time, then
// arrival); turned reports that it is not waiting's order. With one principal waiting
// it is waiting itself.
func inTurns(waiting []*waiter) (order []*waiter, turned bool) {
	if !slices.ContainsFunc(waiting, func(w *waiter) bool { return w.principal != waiting[0].principal }) {
		return waiting, false
	}
	type share struct {
		priority  int
		principal string
	}
	type turn struct {
		w *waiter
		n int // its place among its principal's waiting alerts of its priority
	}
	seen := map[share]int{}
	turns := make([]turn, len(waiting))
	for i, w := range waiting {
		k := share{w.priority, w.principal}
		turns[i] = turn{w, seen[k]}
		seen[k]++
	}
	slices.SortStableFunc(turns, func(a, b turn) int {
		if a.w.priority != b.w.priority {
			return b.w.priority - a.w.priority
		}
		return a.n - b.n
	})
	out := make([]*waiter, len(turns))
	for i, t := range turns {
		out[i] = t.w
	}
	return out, !slices.Equal(out, waiting)
}

// countTurns counts, per principal, the sends that took batch, taken in turns, and left
// alerts of that principal waiting ahead (in queue order) of one they took
// (rocketdelay_sender_turns_deferred_total): what the turns delayed, and whose. The
// caller holds the queue's lock.
func (q *alertQueue) countTurns(batch []*waiter) {
	in := make(map[*waiter]bool, len(batch))
	for _, w := range batch {
		in[w] = true
	}
	deferred := map[string]bool{}
	var passed []string
	for _, w := range q.waiting {
		if len(in) == 0 {
			break
		}
		if in[w] {
			delete(in, w)
			for _, p := range passed {
				deferred[p] = true
			}
			passed = passed[:0]
			continue
		}
		passed = append(passed, w.principal)
	}
	for p := range deferred {
		q.s.metrics.turnsDeferred.WithLabelValues(q.t.name, principalLabel(p)).Inc()
	}
}

// principalLabel is principal as a metric's label: "topic" for the alerts of no proven
// principal (published to the topic directly).
func principalLabel(principal string) string {
	if principal == "" {
		return "topic"
	}
	return principal
}

// fill adds to batch, taken by pickSections from the front of order (t's queue in
// turns), the mergeable alerts that follow it in order while the rendered message keeps
// within the platform's size limit and Options.CoalesceMax alerts: a section's size is
// an upper bound (its JSON length), so more may fit than pickSections took. The caller
// holds the queue's lock.
func (q *alertQueue) fill(batch, order []*waiter) []*waiter {
	s, t := q.s, q.t
	i := slices.Index(order, batch[len(batch)-1])
	for _, w := range order[i+1:] {
		if len(batch) >= s.opts.CoalesceMax {
			break
		}
		if w.solo {
			continue
		}
		next := append(slices.Clip(batch), w)
		if t.proto.Room(mergeMessage(t.style, next)) < t.reserve {
			break
		}
		batch = next
	}
	return batch
}

// pickSections returns, from waiting (in queue order, the first one mergeable), the
// first alert and the mergeable alerts after it that one merged message of at most max
// alerts and limit bytes of sections can carry; it stops at the first one that does not
// fit, so merged messages keep the queue's order. Solo alerts are skipped: they go alone.
func pickSections(waiting []*waiter, max, limit int) []*waiter {
	batch := []*waiter{waiting[0]}
	used := waiting[0].size
	for _, w := range waiting[1:] {
		if len(batch) >= max {
			break
		}
		if w.solo {
			continue
		}
		if used+w.size > limit {
			break
		}
		used += w.size
		batch = append(batch, w)
	}
	return batch
}

// roomAfter is an upper bound of the sends the pool can still take in the window after
// pick: the picked robot was the least used, so every robot has at least
// pick.InWindow-1 sends in the window.
func roomAfter(pick store.Pick, robots []store.PoolRobot) int {
	room := -1
	for _, r := range robots {
		room += max(r.Limit-(pick.InWindow-1), 0)
	}
	return max(room, 0)
}

// sendBatch sends batch through the picked robot, whose in-flight slot it releases, and
// gives every alert of it the result. Right before every request it asks each alert's
// confirm; an alert refused there leaves the batch with that error, and the message is
// made of the alerts that are left.
func (q *alertQueue) sendBatch(pick slot, batch []*waiter) {
	s, t := q.s, q.t
	now := s.now()
	for _, w := range batch {
		s.metrics.wait.WithLabelValues(t.name).Observe(now.Sub(w.enqueued).Seconds())
	}
	ctx, stop := batchContext(batch)
	defer stop()
	live := batch
	msg := func(ctx context.Context) (Message, bool, error) {
		kept := make([]*waiter, 0, len(live))
		confirmed := false
		for _, w := range live {
			if w.claim != nil {
				if err := w.claim.Confirm(ctx, w.part); err != nil {
					w.done <- &Failure{Class: ClassTransient, Reason: "not sent: " + err.Error(), Target: t.name, Err: err}
					continue
				}
				confirmed = true
			}
			kept = append(kept, w)
		}
		live = kept
		switch len(live) {
		case 0:
			return Message{}, false, errNothingToSend
		case 1:
			return live[0].m, confirmed, nil
		}
		return mergeMessage(t.style, live), confirmed, nil
	}
	robot, err := s.sendPicked(ctx, t, msg, &pick)
	if len(live) > 1 {
		var f *Failure
		switch {
		case err == nil:
			s.metrics.merged.WithLabelValues(t.name).Inc()
			s.metrics.coalesced.WithLabelValues(t.name).Add(float64(len(live)))
		case errors.As(err, &f) && f.Class == ClassPermanent:
			s.logger.Warn("the platform refused a merged message; sending its alerts alone", "target", t.name,
				"kind", t.proto.Kind(), "alerts", len(live), "robot", f.Robot, "http_status", f.HTTPStatus, "code", f.Code, "reason", f.Reason)
			q.requeueAlone(live)
			return
		case errors.As(err, &f):
			f.Part, f.Parts, f.Merged = 1, 1, len(live)
		}
	}
	for _, w := range live {
		if err == nil {
			w.sent = Sent{Robot: robot, Merged: len(live)}
		}
		w.done <- err
	}
}

// errNothingToSend ends a batch whose every alert was refused by its confirm.
var errNothingToSend = errors.New("every alert of the message was withdrawn")

// requeueAlone puts the alerts of a refused merged message back in t's queue, to go
// alone, in their places.
func (q *alertQueue) requeueAlone(batch []*waiter) {
	t := q.t
	q.mu.Lock()
	for _, w := range batch {
		if w.ctx.Err() != nil { // its caller has gone
			w.done <- &Failure{Class: ClassTransient, Reason: "gave up: " + w.ctx.Err().Error(), Target: t.name, Err: w.ctx.Err()}
			continue
		}
		w.taken, w.solo = false, true
		q.insert(w)
	}
	start := !q.running && len(q.waiting) > 0
	if start {
		q.running = true
	}
	q.mu.Unlock()
	if start {
		go q.drain()
	} else {
		q.signal()
	}
}

// batchContext returns the context of a batch's send: it ends when every alert's
// context has ended, or when stop is called.
func batchContext(batch []*waiter) (context.Context, func()) {
	ctx, cancel := context.WithCancel(context.Background())
	var left atomic.Int64
	left.Store(int64(len(batch)))
	stops := make([]func() bool, 0, len(batch))
	for _, w := range batch {
		stops = append(stops, context.AfterFunc(w.ctx, func() {
			if left.Add(-1) == 0 {
				cancel()
			}
		}))
	}
	return ctx, func() {
		for _, stop := range stops {
			stop()
		}
		cancel()
	}
}

// section returns m's section in a merged message of style and an upper bound of the
// bytes it adds to the message (separator, section, mentions).
func section(style MergeStyle, m Message) (string, int) {
	text := m.Text
	if m.Format == FormatText && style.Text != nil {
		text = style.Text(text)
	}
	if title := strings.TrimSpace(m.Title); m.Format == FormatMarkdown && title != "" && !strings.Contains(text, title) {
		text = style.SectionTitle(title) + "\n\n" + text
	}
	size := 0
	for _, id := range slices.Concat(m.Mentions.Mobiles, m.Mentions.Users) {
		size += JSONStringLen(id) + 3 // quotes and comma in the merged mentions
	}
	if style.Hint != nil {
		if hint := style.Hint(text, m.Mentions); hint != "" {
			text += "\n\n" + hint
		}
	}
	return text, size + JSONStringLen(style.Separator+text)
}

// CountHeading is the usual heading of a merged message: "#### <n> alerts".
func CountHeading(n int) string { return fmt.Sprintf("#### %d alerts", n) }

// alertTitle is how a merged message's title names its first alert: a markdown alert's
// title, or a text alert's first non-blank line, cut to maxTitleRunes.
func alertTitle(m Message) string {
	var title string
	switch m.Format {
	case FormatMarkdown:
		title = m.Title
	case FormatText:
		for line := range strings.Lines(m.Text) {
			if line = strings.TrimSpace(line); line != "" {
				title = line
				break
			}
		}
	}
	title = strings.TrimSpace(title)
	if utf8.RuneCountInString(title) > maxTitleRunes {
		title = string([]rune(title)[:maxTitleRunes-1]) + "…"
	}
	return title
}

// Merge returns the markdown message, in style, that carries ms (each mergeable), in
// order: what a platform receives when alerts wait for its robots together.
func Merge(style MergeStyle, ms []Message) Message {
	sections := make([]string, len(ms))
	for i, m := range ms {
		sections[i], _ = section(style, m)
	}
	return merged(style, ms, sections)
}

// mergeMessage is the message, in style, that carries the alerts of batch, in order.
func mergeMessage(style MergeStyle, batch []*waiter) Message {
	ms := make([]Message, len(batch))
	sections := make([]string, len(batch))
	for i, w := range batch {
		ms[i], sections[i] = w.m, w.section
	}
	return merged(style, ms, sections)
}

// merged is the message, in style, of ms whose sections are sections.
func merged(style MergeStyle, ms []Message, sections []string) Message {
	var b strings.Builder
	b.WriteString(style.Heading(len(ms)))
	var mentions Mentions
	for i, m := range ms {
		b.WriteString(style.Separator)
		b.WriteString(sections[i])
		mentions = mentions.Add(m.Mentions)
	}
	return Message{Format: FormatMarkdown, Type: string(FormatMarkdown), Mentions: mentions,
		Title: fmt.Sprintf("%d alerts: %s", len(ms), alertTitle(ms[0])), Text: b.String()}
}
