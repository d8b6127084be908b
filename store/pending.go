package store

import (
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Every alert rocketdelay accepted and has not yet handed off or cancelled, hopping
// through the broker or waiting in the wheel stage, is listed in its shard's index of
// pending alerts ({p}:pending, by due time) and counted by target ({p}:pending-by). The
// index is written by the scripts that write the state it mirrors, in the same atomic
// step: the wheel stage's Put lists an alert, its release and its cancel unlist it, a
// reschedule moves it. A hopping alert has no state in Redis (a hop never waits for
// Redis), so it is listed by the note of its hop (TraceHop), written off the consume
// path like its trace: an alert whose every hop note was dropped (Redis out of reach at
// each) is listed only once it reaches the wheel stage. What an alert's row shows besides
// its id and due time (target, priority, principal, stage) is read from its trace.

var (
	pendingPageScript   = script("pending_page.lua")
	pendingUnlistScript = byIDScript("pending_unlist.lua", "lib_pending.lua")
)

// Unlist removes id from the pending alerts: it will never be handed off (the scheduler
// rejected it after it hopped, its target gone). With a target, only when the alert's
// trace names that target: a message refused for its own target says nothing of another
// alert of the same id (a producer's RD_HOPS and someone else's RD_ID); "" unlists it
// whatever its target. One round trip; an id not listed is no error.
func (w *WheelStage) Unlist(ctx context.Context, id, target string) error {
	keys := func(s *shard) []string { return []string{s.keys.pending(), s.keys.pendingBy(), s.keys.trace(id)} }
	if err := w.onShard(ctx, id, pendingUnlistScript, false, keys, id, target).Err(); err != nil {
		return w.fail("unlist", err)
	}
	return nil
}

// Pending is one pending alert as the index lists it.
type Pending struct {
	ID     string    `json:"id"`
	Target string    `json:"target"`
	DueAt  time.Time `json:"dueAt"`
	// Priority is its RD_PRIORITY ("" normal); Principal the producer its signature
	// proves ("" when none: published to the topic without one).
	Priority  string `json:"priority,omitempty"`
	Principal string `json:"principal,omitempty"`
	// Stage is hopping (in the broker), waiting (in the wheel stage) or sending (a
	// replica holds it for its hand-off).
	Stage string `json:"stage"`
	// Hops counts the broker hops it took so far.
	Hops int `json:"hops"`
}

// Stages of a pending alert (Pending.Stage).
const (
	StageHopping = "hopping"
	StageWaiting = "waiting"
	StageSending = "sending"
)

// PendingQuery selects and pages the pending alerts. The zero value lists the first
// page of every pending alert, earliest due first.
type PendingQuery struct {
	// Target and Principal, when set, keep only the alerts of that target or principal.
	Target, Principal string
	// DueAfter and DueBefore, when set, keep only the alerts due at or after DueAfter and
	// before DueBefore.
	DueAfter, DueBefore time.Time
	// Limit is the most alerts on a page. Default 100, at most MaxPendingPage.
	Limit int
	// Cursor is the Next of the previous page ("" for the first).
	Cursor string
}

// MaxPendingPage is the most alerts one page of Pending holds.
const MaxPendingPage = 1000

// pendingScan bounds how many index entries one call of Pending reads per shard while a
// filter finds few: the page then ends early, with a Next to go on from.
const pendingScan = 20000

// PendingPage is one page of pending alerts, earliest due first (then by id).
type PendingPage struct {
	Alerts []Pending `json:"alerts"`
	// Next is the cursor of the next page, "" when this page is the last.
	Next string `json:"next,omitempty"`
}

// ErrBadCursor is the error of a Pending cursor that no page gave.
var ErrBadCursor = errors.New("not a cursor of a page of pending alerts")

// position is a place in the index's order: by due time (Unix ms), then by id.
type position struct {
	ms int64
	id string
}

func (p position) less(q position) bool {
	return p.ms < q.ms || p.ms == q.ms && p.id < q.id
}

func (p position) cursor() string {
	return base64.RawURLEncoding.EncodeToString([]byte(strconv.FormatInt(p.ms, 10) + ":" + p.id))
}

func parseCursor(c string) (position, error) {
	b, err := base64.RawURLEncoding.DecodeString(c)
	if err != nil {
		return position{}, ErrBadCursor
	}
	ms, id, ok := strings.Cut(string(b), ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || id == "" {
		return position{}, ErrBadCursor
	}
	return position{ms: n, id: id}, nil
}

// Pending returns a page of the pending alerts q selects, earliest due first, in one
// or a few round trips per shard (the shards at once); Next pages on. A page read while
// alerts come and go shows each alert at most once, as it was when its shard was read.
// With a Target or Principal filter that few alerts match, a page may hold fewer than
// q.Limit alerts (at most pendingScan entries are read per shard) and still have a
// Next.
func (w *WheelStage) Pending(ctx context.Context, q PendingQuery) (PendingPage, error) {
	limit := q.Limit
	if limit <= 0 {
		limit = 100
	}
	limit = min(limit, MaxPendingPage)
	from := position{ms: math.MinInt64}
	if !q.DueAfter.IsZero() {
		from.ms = q.DueAfter.UnixMilli()
	}
	if q.Cursor != "" {
		c, err := parseCursor(q.Cursor)
		if err != nil {
			return PendingPage{}, err
		}
		from = c
	}
	last := int64(math.MaxInt64)
	if !q.DueBefore.IsZero() {
		last = q.DueBefore.UnixMilli() - 1
	}
	type part struct {
		found []Pending
		pos   []position
		upto  position // the last entry read; meaningful when !ended
		ended bool
	}
	parts := make([]part, len(w.shards))
	err := w.each(func(i int, s *shard) error {
		p := &parts[i]
		at, read := from, 0
		for len(p.found) < limit && read < pendingScan {
			batch := min(max(2*limit, 100), pendingScan-read)
			ids, dues, err := w.pendingPage(ctx, s, at, last, batch)
			if err != nil {
				return err
			}
			read += len(ids)
			if len(ids) > 0 {
				rows, err := w.pendingRows(ctx, s, ids, dues)
				if err != nil {
					return err
				}
				for k, r := range rows {
					if r == nil {
						// Ended without being unlisted (released by a release without the
						// list, during an upgrade), or its trace is gone: mend the list.
						_ = w.Unlist(ctx, ids[k], "")
						continue
					}
					if (q.Target == "" || r.Target == q.Target) && (q.Principal == "" || r.Principal == q.Principal) {
						p.found = append(p.found, *r)
						p.pos = append(p.pos, position{ms: dues[k], id: ids[k]})
					}
				}
				at = position{ms: dues[len(ids)-1], id: ids[len(ids)-1]}
				p.upto = at
			}
			if len(ids) < batch {
				p.ended = true
				break
			}
		}
		return nil
	})
	if err != nil {
		return PendingPage{}, w.fail("pending", err)
	}
	// Merge: nothing past the first shard that stopped before its end can be shown yet,
	// as that shard may hold alerts before the others' next ones.
	bound, bounded := position{}, false
	type row struct {
		Pending
		pos position
	}
	var rows []row
	for _, p := range parts {
		if !p.ended && (!bounded || p.upto.less(bound)) {
			bound, bounded = p.upto, true
		}
		for k, a := range p.found {
			rows = append(rows, row{a, p.pos[k]})
		}
	}
	slices.SortFunc(rows, func(a, b row) int {
		if a.pos.less(b.pos) {
			return -1
		}
		if b.pos.less(a.pos) {
			return 1
		}
		return 0
	})
	var page PendingPage
	more := false // alerts left past the page
	for _, r := range rows {
		if bounded && bound.less(r.pos) {
			break
		}
		if len(page.Alerts) == limit {
			more = true
			break
		}
		page.Alerts = append(page.Alerts, r.Pending)
	}
	switch {
	case len(page.Alerts) == limit && (more || bounded):
		page.Next = rows[limit-1].pos.cursor()
	case bounded:
		page.Next = bound.cursor() // every alert up to it was read and shown
	}
	if page.Alerts == nil {
		page.Alerts = []Pending{}
	}
	return page, nil
}

// PendingPager pages the pending alerts; *WheelStage implements it.
type PendingPager interface {
	Pending(ctx context.Context, q PendingQuery) (PendingPage, error)
}

// PendingIDs pages through the pending alerts q selects (its Cursor and Limit are its
// own) and returns the ids of those keep accepts (nil: every one), earliest due first,
// stopping once it has more than max: a bulk action that finds more than max refuses.
func PendingIDs(ctx context.Context, l PendingPager, q PendingQuery, max int, keep func(Pending) (bool, error)) ([]string, error) {
	q.Cursor, q.Limit = "", MaxPendingPage
	var ids []string
	for {
		page, err := l.Pending(ctx, q)
		if err != nil {
			return nil, err
		}
		for _, a := range page.Alerts {
			ok := true
			if keep != nil {
				if ok, err = keep(a); err != nil {
					return nil, err
				}
			}
			if ok {
				ids = append(ids, a.ID)
			}
		}
		if page.Next == "" || len(ids) > max {
			return ids, nil
		}
		q.Cursor = page.Next
	}
}

// pendingPage reads the next count ids of s's index after at, due at most last.
func (w *WheelStage) pendingPage(ctx context.Context, s *shard, at position, last int64, count int) ([]string, []int64, error) {
	start := at.ms
	if start == math.MinInt64 {
		start = 0
	}
	res, err := pendingPageScript.Run(ctx, w.rdb, []string{s.keys.pending()}, start, at.id, last, count).StringSlice()
	if err != nil {
		return nil, nil, err
	}
	if len(res)%2 != 0 {
		return nil, nil, fmt.Errorf("store: pending: odd reply of %d values", len(res))
	}
	ids := make([]string, 0, len(res)/2)
	dues := make([]int64, 0, len(res)/2)
	for k := 0; k < len(res); k += 2 {
		ms, err := strconv.ParseFloat(res[k+1], 64)
		if err != nil {
			return nil, nil, fmt.Errorf("store: pending: due time %q: %w", res[k+1], err)
		}
		ids, dues = append(ids, res[k]), append(dues, int64(ms))
	}
	return ids, dues, nil
}

// pendingRows reads what the traces of ids (listed at dues) say, and whether each
// waits in the wheel stage or is in flight, in one pipeline. An id whose trace says it
// ended, or that has no trace, is nil.
func (w *WheelStage) pendingRows(ctx context.Context, s *shard, ids []string, dues []int64) ([]*Pending, error) {
	traces := make([]*redis.SliceCmd, len(ids))
	sending := make([]*redis.FloatCmd, len(ids))
	waiting := make([]*redis.FloatCmd, len(ids))
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for k, id := range ids {
			traces[k] = p.HMGet(ctx, s.keys.trace(id), "tgt", "pri", "who", "st", "hops")
			sending[k] = p.ZScore(ctx, s.inflight, id)
			waiting[k] = p.ZScore(ctx, s.due, id)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, err
	}
	out := make([]*Pending, len(ids))
	for k, id := range ids {
		v := traces[k].Val()
		str := func(i int) string {
			if i < len(v) {
				s, _ := v[i].(string)
				return s
			}
			return ""
		}
		if st := str(3); st == "delivered" || st == "recorded" || st == "withheld" || st == "" && str(0) == "" {
			continue // ended, or no trace left
		}
		// The stage is the alert's state, not its trace's (a hop's note may come late).
		st := StageHopping
		switch {
		case sending[k].Err() == nil:
			st = StageSending
		case waiting[k].Err() == nil:
			st = StageWaiting
		}
		out[k] = &Pending{ID: id, Target: str(0), DueAt: time.UnixMilli(dues[k]), Priority: str(1), Principal: str(2),
			Stage: st, Hops: atoi(str(4))}
	}
	return out, nil
}

// PendingCounts counts the pending alerts: in all, by target, and by when they are due
// relative to now (the service's clock).
type PendingCounts struct {
	Total    int64            `json:"total"`
	ByTarget map[string]int64 `json:"byTarget"`
	// Overdue are due before now (being handed off, or late); ByHour[h] are due within
	// [now+h hours, now+h+1 hours); Later are due further ahead than ByHour reaches.
	Overdue int64   `json:"overdue"`
	ByHour  []int64 `json:"byHour"`
	Later   int64   `json:"later"`
}

// CountPending counts the pending alerts as PendingCounts says, with hours buckets of
// an hour each, in one round trip per shard (the shards at once): O(log n) per bucket
// whatever the number of pending alerts.
func (w *WheelStage) CountPending(ctx context.Context, now time.Time, hours int) (PendingCounts, error) {
	hours = max(hours, 0)
	type part struct {
		total  *redis.IntCmd
		by     *redis.MapStringStringCmd
		bucket []*redis.IntCmd // overdue, hours…, later
	}
	parts := make([]part, len(w.shards))
	ms := now.UnixMilli()
	bound := func(h int) string { return strconv.FormatInt(ms+int64(h)*time.Hour.Milliseconds(), 10) }
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range w.shards {
			k := s.keys.pending()
			parts[i].total = p.ZCard(ctx, k)
			parts[i].by = p.HGetAll(ctx, s.keys.pendingBy())
			parts[i].bucket = append(parts[i].bucket, p.ZCount(ctx, k, "-inf", "("+bound(0)))
			for h := range hours {
				parts[i].bucket = append(parts[i].bucket, p.ZCount(ctx, k, bound(h), "("+bound(h+1)))
			}
			parts[i].bucket = append(parts[i].bucket, p.ZCount(ctx, k, bound(hours), "+inf"))
		}
		return nil
	})
	if err != nil {
		return PendingCounts{}, w.fail("count pending", err)
	}
	c := PendingCounts{ByTarget: map[string]int64{}, ByHour: make([]int64, hours)}
	for _, p := range parts {
		c.Total += p.total.Val()
		for t, n := range p.by.Val() {
			if v, err := strconv.ParseInt(n, 10, 64); err == nil && v > 0 {
				c.ByTarget[t] += v
			}
		}
		c.Overdue += p.bucket[0].Val()
		for h := range hours {
			c.ByHour[h] += p.bucket[1+h].Val()
		}
		c.Later += p.bucket[hours+1].Val()
	}
	return c, nil
}

// PendingSet is the digest of a set of pending alerts' ids, in the list's order: a bulk
// action's preview shows it, and its confirmation acts only while the set is the same.
func PendingSet(ids []string) string {
	h := sha256.New()
	for _, id := range ids {
		h.Write([]byte(id))
		h.Write([]byte{0})
	}
	return hex.EncodeToString(h.Sum(nil)[:16])
}

// SortedTargets are the targets of c.ByTarget, most pending first (then by name).
func (c PendingCounts) SortedTargets() []string {
	out := make([]string, 0, len(c.ByTarget))
	for t := range c.ByTarget {
		out = append(out, t)
	}
	slices.SortFunc(out, func(a, b string) int {
		return cmp.Or(cmp.Compare(c.ByTarget[b], c.ByTarget[a]), cmp.Compare(a, b))
	})
	return out
}
