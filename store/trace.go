package store

import (
	"context"
	"errors"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Each alert leaves a small trace in Redis for operators, under the wheel stage's hash
// tag (see keys.go): a hash written by the scripts that already run on its way (the put,
// the release) and by one write per broker hop (TraceHop), that lives as long as the
// alert's done marker. Inspect reads it together with the alert's live state.

var traceHopScript = byIDScript("trace_hop.lua", "lib_pending.lua")

// HopNote is one broker hop of an alert, as TraceHop notes it.
type HopNote struct {
	ID, Target string
	// Due is the due time the hop's message carries (the trace's due time is its
	// reschedule record's, if it has one).
	Due time.Time
	// Hops counts the hops taken, this one included; Delay is this one's.
	Hops  int
	Delay time.Duration
	// Priority (RD_PRIORITY) and Principal (the producer its signature proves, "" when
	// none), for the list of pending alerts.
	Priority, Principal string
	// Msg is the offset message id of the hop's message (primitive.SendResult.OffsetMsgID),
	// by which a reschedule earlier reads the alert back (Recall). Gen is the copy's
	// generation (RD_GEN): the note of a stale copy is not written.
	Msg string
	Gen int64
}

// TraceHop notes in its alert's trace that the alert took a broker hop, and lists it
// among the pending alerts (Pending) unless it was cancelled. It is one round trip and
// changes nothing else; a trace of an alert that is done already (a late copy), or a
// note of a stale copy (a generation that lost), is left alone.
func (w *WheelStage) TraceHop(ctx context.Context, h HopNote) error {
	keys := func(s *shard) []string {
		return []string{s.keys.trace(h.ID), s.keys.resched(h.ID), s.keys.cancel(h.ID), s.keys.pending(), s.keys.pendingBy(), s.keys.gen(h.ID)}
	}
	err := w.onShard(ctx, h.ID, traceHopScript, false, keys,
		h.Due.UnixMilli(), h.Target, h.Hops, h.Delay.Milliseconds(), w.opts.CancelTTL.Milliseconds(),
		h.Priority, h.Principal, h.ID, h.Msg, h.Gen).Err()
	if err != nil {
		return w.fail("trace hop", err)
	}
	return nil
}

// Move is a reschedule of an alert, as its trace records it: when (Redis's clock), from
// which due time to which, and who asked (store.WithAuthor; "" when unknown).
type Move struct {
	At, From, To time.Time
	By           string
}

// AlertState is what Redis knows of one alert.
type AlertState struct {
	// Traced reports that the alert has a trace: rocketdelay saw it within the trace's
	// life (the done marker's, scheduler.doneTTL, once it was handed off).
	Traced bool
	// Stage is the trace's last stage: hopping, waiting, delivered or recorded.
	Stage string
	// Target, Hops, DueAt: as the trace last noted them.
	Target string
	Hops   int
	DueAt  time.Time
	// AcceptedAt is when rocketdelay first saw the alert (Redis's clock).
	AcceptedAt time.Time
	// FirstDueAt is the due time the alert was accepted with, when a reschedule moved it
	// since (zero otherwise); MoveCount counts its moves, and Moves are the first of them
	// (at most 20), oldest first.
	FirstDueAt time.Time
	MoveCount  int
	Moves      []Move
	// LastHopAt and NextArrival: the last broker hop, and when it is expected back.
	LastHopAt, NextArrival time.Time
	// PutAt is when it entered the wheel stage.
	PutAt time.Time
	// EndedAt is when its hand-off ended (delivered or recorded); Late how long after its
	// due time.
	EndedAt time.Time
	Late    time.Duration
	// Robot, Merged, Parts and By: how it was delivered, by which replica.
	Robot         string
	Merged, Parts int
	By            string

	// Waiting reports that it waits in the wheel stage, next due at NextDue (its due
	// time, or the retry time of a hand-off given back).
	Waiting bool
	NextDue time.Time
	// InFlight reports that a replica holds it (Owner, its claim's token, which starts
	// with the replica's instance name), until LeaseUntil unless renewed.
	InFlight   bool
	LeaseUntil time.Time
	Owner      string
	// Tries counts hand-offs given back; PartsSent the leading parts of a split alert
	// delivered so far; FailureNoted that a send failed for good and only its record is
	// left to do.
	Tries, PartsSent int
	FailureNoted     bool

	// Done reports a done marker: delivered at DoneAt, or (Recorded) recorded as failed,
	// or (Withheld) not sent on purpose: an ended escalation episode's step.
	Done     bool
	Recorded bool
	Withheld bool
	DoneAt   time.Time
	// Cancelled reports a cancel tombstone, set at CancelledAt.
	Cancelled   bool
	CancelledAt time.Time
}

// MovedTo is the due time a reschedule moved the alert id to, by its trace (the record
// only the service's reschedule scripts write): the due time of its last move when that
// move names who made it (a principal or an operator: a caller allowed to move the id);
// zero when its trace records no such move, or is gone. One round trip.
func (w *WheelStage) MovedTo(ctx context.Context, id string) (time.Time, error) {
	s, err := w.readShard(ctx, id)
	if err != nil {
		return time.Time{}, err
	}
	trace, err := w.rdb.HGetAll(ctx, s.keys.trace(id)).Result()
	if err != nil {
		return time.Time{}, w.fail("moved to", err)
	}
	last := trace["move:"+trace["moves"]]
	fields := strings.SplitN(last, " ", 4)
	if len(fields) < 4 || fields[3] == "" || fields[2] != trace["due"] {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseInt(fields[2], 10, 64)
	if err != nil {
		return time.Time{}, nil
	}
	return time.UnixMilli(ms), nil
}

// Inspect reads, in one round trip and without changing anything, what Redis knows of
// the alert id: its trace, its place in the wheel stage, its claim, its done marker and
// its cancel tombstone.
func (w *WheelStage) Inspect(ctx context.Context, id string) (AlertState, error) {
	sh, err := w.readShard(ctx, id)
	if err != nil {
		return AlertState{}, err
	}
	var (
		trace                      *redis.MapStringStringCmd
		due, inflight              *redis.FloatCmd
		owner, tries, parts        *redis.StringCmd
		failed                     *redis.BoolCmd
		done, cancel               *redis.StringCmd
		stage, ownerKey, triesKey  = sh.keys.trace(id), sh.keys.owner(), sh.keys.tries()
		failedKey, partsKey        = sh.keys.failed(), sh.keys.parts()
		doneKey, cancelKey, dueKey = sh.keys.done(id), sh.keys.cancel(id), sh.due
	)
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		trace = p.HGetAll(ctx, stage)
		due = p.ZScore(ctx, dueKey, id)
		inflight = p.ZScore(ctx, sh.inflight, id)
		owner = p.HGet(ctx, ownerKey, id)
		tries = p.HGet(ctx, triesKey, id)
		failed = p.HExists(ctx, failedKey, id)
		parts = p.HGet(ctx, partsKey, id)
		done = p.Get(ctx, doneKey)
		cancel = p.Get(ctx, cancelKey)
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return AlertState{}, w.fail("inspect", err)
	}
	var s AlertState
	if t := trace.Val(); len(t) > 0 {
		s.Traced = true
		s.Stage, s.Target, s.Robot, s.By = t["st"], t["tgt"], t["robot"], t["by"]
		s.Hops, s.Merged, s.Parts = atoi(t["hops"]), atoi(t["merged"]), atoi(t["parts"])
		s.DueAt, s.AcceptedAt, s.LastHopAt = msTime(t["due"]), msTime(t["acc"]), msTime(t["hop"])
		s.NextArrival, s.PutAt, s.EndedAt = msTime(t["next"]), msTime(t["put"]), msTime(t["at"])
		s.Late = time.Duration(atoi(t["late"])) * time.Millisecond
		s.FirstDueAt, s.MoveCount = msTime(t["due0"]), atoi(t["moves"])
		for n := 1; n <= s.MoveCount; n++ {
			f := strings.SplitN(t["move:"+strconv.Itoa(n)], " ", 4)
			if len(f) < 3 {
				break // past the moves recorded one by one
			}
			m := Move{At: msTime(f[0]), From: msTime(f[1]), To: msTime(f[2])}
			if len(f) == 4 {
				m.By = f[3]
			}
			s.Moves = append(s.Moves, m)
		}
	}
	if v, err := due.Result(); err == nil {
		s.Waiting, s.NextDue = true, time.UnixMilli(int64(v))
	}
	if v, err := inflight.Result(); err == nil {
		s.InFlight, s.LeaseUntil, s.Owner = true, time.UnixMilli(int64(v)), owner.Val()
	}
	s.Tries, s.PartsSent, s.FailureNoted = atoi(tries.Val()), atoi(parts.Val()), failed.Val()
	if v, err := done.Result(); err == nil {
		s.Done = true
		s.Recorded = strings.HasPrefix(v, recordedPrefix)
		s.Withheld = strings.HasPrefix(v, withheldPrefix)
		s.DoneAt = msTime(strings.TrimPrefix(strings.TrimPrefix(v, recordedPrefix), withheldPrefix))
	}
	if v, err := cancel.Result(); err == nil {
		s.Cancelled, s.CancelledAt = true, msTime(v)
	}
	return s, nil
}

func atoi(s string) int {
	n, _ := strconv.Atoi(s)
	return n
}

// msTime reads Unix ms; the zero time when s is not a number.
func msTime(s string) time.Time {
	ms, err := strconv.ParseInt(s, 10, 64)
	if err != nil {
		return time.Time{}
	}
	return time.UnixMilli(ms)
}
