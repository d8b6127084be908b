package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/jackc/pgx/v5"
	"github.com/redis/go-redis/v9"
)

// A reschedule moves an alert that is not sent yet to a new due time, keeping its id
// (docs/design.md, Reschedule): in the wheel stage, WheelStage.Reschedule (one script,
// wheel_reschedule.lua); in failed_sends, FailedSends.Reschedule. failed.Rescheduler asks
// both, as failed.Canceller does for a cancel.

// RescheduleResult says what a reschedule did.
type RescheduleResult int

// The results of a reschedule. The first ten are wheel_reschedule.lua's codes.
const (
	// RescheduleMoved means the alert was waiting in the wheel stage and is now due at
	// the new time.
	RescheduleMoved RescheduleResult = iota + 1
	// RescheduleTooLate means the alert is being sent now: in flight in the wheel stage
	// (claimed or parked), or its failed_sends row's request was confirmed. Nothing
	// changed.
	RescheduleTooLate
	// RescheduleAlreadyDelivered means the alert was delivered. Nothing changed.
	RescheduleAlreadyDelivered
	// RescheduleCancelled means the alert was cancelled (its tombstone, or its
	// failed_sends row). Nothing changed.
	RescheduleCancelled
	// RescheduleRecorded means the wheel stage handed the alert off and its failure was
	// recorded in failed_sends: its row decides (FailedSends.Reschedule). Only when it has
	// none is this the answer: nothing is left to move.
	RescheduleRecorded
	// RescheduleHopMoved means the alert is hopping through the broker: its reschedule
	// record names the new due time, and every later arrival of it is routed by it.
	RescheduleHopMoved
	// RescheduleWithheld means the alert was withheld, never to be sent: a step of an
	// escalation episode that ended. Nothing changed.
	RescheduleWithheld
	// RescheduleTooFar means the alert waits in the wheel stage and the new due time is
	// beyond its reach (the hop threshold): it goes back to the broker. WheelStage's
	// answer carries the Requeue to publish; failed.Rescheduler publishes it and settles
	// it (SettleRequeue), answering RescheduleRequeued. As a final answer it means the
	// alert was not moved: the process that asked cannot publish, or its publish was
	// refused. Nothing changed.
	RescheduleTooFar
	// RescheduleInHop means the alert is hopping and the new due time is before the one
	// its message carries (Rescheduled.DueAt), and its message cannot be read back to be
	// published again at the new time (Recall): its hops lead there, so it could only be
	// met late. Nothing changed.
	RescheduleInHop
	// RescheduleUnknown means Redis has no trace of the alert: never published, not
	// received yet, or done longer ago than its trace lives. Nothing changed.
	RescheduleUnknown
	// RescheduleRowMoved means the alert's send had failed and its pending failed_sends
	// row's next attempt is now at the new time.
	RescheduleRowMoved
	// RescheduleNotPending means the alert's send failed for good: its failed_sends row
	// is dead, rejected or discarded, and only an operator's retry sends it. Nothing
	// changed.
	RescheduleNotPending
	// RescheduleRequeued means a copy of a new generation (RD_GEN), due at the new time,
	// went to the broker and is the alert now: it waited in the wheel stage and moves
	// farther than the wheel stage holds (the one that waited is gone), or it hopped and
	// moves earlier than its message carries (Recall; the copy still hopping is stale).
	RescheduleRequeued
)

// Moved reports whether r moved the alert.
func (r RescheduleResult) Moved() bool {
	return r == RescheduleMoved || r == RescheduleHopMoved || r == RescheduleRowMoved || r == RescheduleRequeued
}

// String returns the result's name, usable as a metric label and in answers: "moved",
// "too_late", "already_delivered", "cancelled", "recorded", "hop_moved", "withheld",
// "too_far", "in_hop", "unknown", "row_moved", "not_pending" or "requeued".
func (r RescheduleResult) String() string {
	switch r {
	case RescheduleMoved:
		return "moved"
	case RescheduleTooLate:
		return "too_late"
	case RescheduleAlreadyDelivered:
		return "already_delivered"
	case RescheduleCancelled:
		return "cancelled"
	case RescheduleRecorded:
		return "recorded"
	case RescheduleHopMoved:
		return "hop_moved"
	case RescheduleWithheld:
		return "withheld"
	case RescheduleTooFar:
		return "too_far"
	case RescheduleInHop:
		return "in_hop"
	case RescheduleUnknown:
		return "unknown"
	case RescheduleRowMoved:
		return "row_moved"
	case RescheduleNotPending:
		return "not_pending"
	case RescheduleRequeued:
		return "requeued"
	}
	return "RescheduleResult(" + strconv.Itoa(int(r)) + ")"
}

// Explain says what r means for the alert, in words for the person who moved it.
func (r RescheduleResult) Explain() string {
	switch r {
	case RescheduleMoved:
		return "moved in the wheel stage"
	case RescheduleTooLate:
		return "too late, it is being sent right now"
	case RescheduleAlreadyDelivered:
		return "too late, it was already delivered"
	case RescheduleCancelled:
		return "it was cancelled and will not be sent"
	case RescheduleRecorded:
		return "nothing to move: its send failed, and its failed_sends row is gone (past its retention)"
	case RescheduleHopMoved:
		return "it is hopping through RocketMQ; its next arrival takes the new due time"
	case RescheduleWithheld:
		return "it was withheld and will not be sent: its escalation episode ended before it was due"
	case RescheduleTooFar:
		return "not moved: it waits in the wheel stage and the new due time is beyond scheduler.threshold from now, " +
			"so it must go back to RocketMQ, which this process could not do"
	case RescheduleInHop:
		return "it is hopping through RocketMQ toward the due time its message carries, and that message cannot be read back " +
			"(the broker no longer has it, or its hop was noted by an earlier release): it can be moved to that time or later now, " +
			"and earlier once it reaches the wheel stage (within scheduler.threshold of that time)"
	case RescheduleUnknown:
		return "no alert of this id is known: never published, not received yet, or done longer ago than scheduler.doneTTL"
	case RescheduleRowMoved:
		return "its send had failed; its failed_sends row's next attempt is moved"
	case RescheduleNotPending:
		return "its send failed for good (its failed_sends row is dead, rejected or discarded): retry the row instead"
	case RescheduleRequeued:
		return "a new copy of it went to RocketMQ, due at the new time, and replaces it " +
			"(it waited in the wheel stage and moves farther than the wheel stage holds, or it hopped and moves earlier than its message carried)"
	}
	return "unknown result"
}

// Rescheduled is what a reschedule did, and when the alert is due now.
type Rescheduled struct {
	Result RescheduleResult
	// DueAt is, when Result moved the alert, its new due time: the one asked, or now
	// when that had passed (by Redis's clock, or Postgres's for a row). For
	// RescheduleInHop it is the due time its hopping message carries: the earliest time
	// the alert can be moved to while it hops. Zero otherwise.
	DueAt time.Time
	// Rows are the failed_sends rows the result is about (RescheduleRowMoved and the
	// answers a row gave), ascending.
	Rows []int64
	// Requeue is, for WheelStage's RescheduleTooFar, the copy to publish: the alert goes
	// back to the broker. nil otherwise.
	Requeue *Requeue
	// Recall is, for WheelStage's RescheduleInHop, the hopping alert's message to read
	// back from the broker and publish again at the new due time, when its trace names
	// one. nil otherwise: the alert can be moved no earlier than DueAt while it hops.
	Recall *Recall
}

// recallCode is wheel_reschedule.lua's answer for a hopping alert moved earlier than
// the due time its message carries whose last hop's message it knows: Recall.
const recallCode = 11

// Recall is a hopping alert that a reschedule moves earlier than its message carries:
// its body and properties are only in the broker, in the message of its last hop, so
// the rescheduler reads that message back (its offset message id, Msg), publishes a copy
// of it due at DueAt carrying RD_GEN=Gen, and settles Gen with SettleRequeue (committed
// if the publish succeeded, refused if not), as for a Requeue. The copy of the old
// generation still hopping is dropped when it arrives.
type Recall struct {
	ID  string
	Gen int64
	// Msg is the offset message id (primitive.SendResult.OffsetMsgID) of the alert's
	// last hop.
	Msg string
	// DueAt is the new due time (the one asked, or now when that had passed by Redis's
	// clock).
	DueAt time.Time
}

// Requeue is a copy of an alert waiting in the wheel stage that a reschedule sends back
// to the broker, because its new due time is beyond the wheel stage's reach: publish
// Entry (its DueAt is the new due time) carrying RD_GEN=Gen, then settle Gen with
// SettleRequeue, committing it if the publish succeeded and refusing it if not. Until it
// is settled the entry keeps waiting; a copy of generation Gen that arrives first
// settles it itself, so a crash between the publish and the settle loses nothing.
type Requeue struct {
	Entry Entry
	Gen   int64
}

// Reschedule moves the alert id to dueAt, atomically against its claim (a time that has
// passed by Redis's clock means now): waiting in the due index and dueAt less than reach
// from now (RescheduleMoved: its score and its entry's due time change; farther,
// RescheduleTooFar with the Requeue to publish, a generation allocated and nothing else
// changed), hopping through the broker by its trace (RescheduleHopMoved: its
// reschedule record overrides the due time its message carries when it reaches the
// wheel stage, which Put and RescheduledDue apply; before that due time,
// RescheduleInHop), or the refusals of a
// cancel: in flight, delivered, withheld, cancelled, recorded (its failed_sends row
// decides), unknown. The record lives Options().CancelTTL. Only the wheel stage is
// looked at: the service reschedules through failed.Rescheduler, which asks the
// failed_sends rows too.
func (w *WheelStage) Reschedule(ctx context.Context, id string, dueAt time.Time, reach time.Duration) (Rescheduled, error) {
	keys := func(s *shard) []string {
		return []string{s.due, s.inflight, s.entries, s.keys.done(id), s.keys.cancel(id), s.keys.trace(id), s.keys.resched(id),
			s.keys.gen(id), s.keys.parts(), s.keys.pending(), s.keys.pendingBy()}
	}
	res, err := w.onShard(ctx, id, wheelRescheduleScript, true, keys, id, dueAt.UnixMilli(), reach.Milliseconds(),
		w.opts.CancelTTL.Milliseconds(), w.moves, AuthorOf(ctx)).Slice()
	if err != nil {
		return Rescheduled{}, w.fail("reschedule", err)
	}
	code, ms, ok := codeAndMillis(res)
	if ok && code == recallCode && len(res) == 5 {
		gen, _ := res[2].(int64)
		msg, _ := res[3].(string)
		due, _ := res[4].(int64)
		if gen <= 0 || msg == "" || due <= 0 {
			return Rescheduled{}, fmt.Errorf("store: reschedule: unexpected script result %v", res)
		}
		return Rescheduled{Result: RescheduleInHop, DueAt: time.UnixMilli(ms),
			Recall: &Recall{ID: id, Gen: gen, Msg: msg, DueAt: time.UnixMilli(due)}}, nil
	}
	if !ok || code < int64(RescheduleMoved) || code > int64(RescheduleUnknown) || (code == int64(RescheduleTooFar)) != (len(res) == 4) {
		return Rescheduled{}, fmt.Errorf("store: reschedule: unexpected script result %v", res)
	}
	out := Rescheduled{Result: RescheduleResult(code)}
	if ms > 0 {
		out.DueAt = time.UnixMilli(ms)
	}
	if out.Result == RescheduleTooFar {
		gen, _ := res[2].(int64)
		rec, _ := res[3].(string)
		e, err := decodeWheelEntry(id, []byte(rec))
		if err != nil || gen <= 0 {
			return Rescheduled{}, fmt.Errorf("store: reschedule %s: generation %v: %w", id, res[2], err)
		}
		e.DueAt, e.Gen = out.DueAt, gen
		out.Requeue = &Requeue{Entry: e, Gen: gen}
	}
	return out, nil
}

// WithAuthor returns ctx naming who acts through it (a principal, an operator): a
// reschedule made with it records that name with the move in the alert's trace.
func WithAuthor(ctx context.Context, name string) context.Context {
	return context.WithValue(ctx, authorKey{}, name)
}

type authorKey struct{}

// AuthorOf is the name WithAuthor put in ctx, or "".
func AuthorOf(ctx context.Context) string {
	name, _ := ctx.Value(authorKey{}).(string)
	return name
}

// Moved is a move of an alert waiting in the wheel stage to a new due time, as the
// reschedule that made it announced it (Moves).
type Moved struct {
	ID    string
	DueAt time.Time
}

// Moves subscribes to the moves of waiting alerts, which every reschedule announces
// the moment it lands, whichever process made it: the replica whose wheel holds the
// alert's timer moves it, so an alert moved earlier is handed off at its new time, not
// when the sweeper finds it overdue. The channel closes when ctx ends. Pub/Sub does not
// keep what a replica misses while cut off from Redis; the sweeper does (the alert is
// then handed off within the grace period of its new time).
func (w *WheelStage) Moves(ctx context.Context) <-chan Moved {
	out := make(chan Moved, 64)
	sub := w.rdb.Subscribe(ctx, w.moves)
	go func() {
		defer close(out)
		defer sub.Close()
		msgs := sub.Channel()
		for {
			select {
			case <-ctx.Done():
				return
			case m, ok := <-msgs:
				if !ok {
					return
				}
				id, ms, found := strings.Cut(m.Payload, " ")
				at, err := strconv.ParseInt(ms, 10, 64)
				if !found || err != nil {
					continue // not a move: another writer's message on the channel
				}
				select {
				case out <- Moved{ID: id, DueAt: time.UnixMilli(at)}:
				case <-ctx.Done():
					return
				}
			}
		}
	}()
	return out
}

// codeAndMillis reads the {code, ms, ...} reply of a reschedule script.
func codeAndMillis(res []any) (code, ms int64, ok bool) {
	if len(res) < 2 {
		return 0, 0, false
	}
	code, ok1 := res[0].(int64)
	ms, ok2 := res[1].(int64)
	return code, ms, ok1 && ok2
}

// SettleRequeue settles generation gen of the alert id, a Requeue that Reschedule
// returned, due at dueAt, atomically against its claim (wheel_requeue.lua). With commit,
// the copy of generation gen was published: if the entry still waits (or the alert is
// not in Redis, a copy of it hopping) the entry is removed and gen becomes the live
// generation, RescheduleRequeued with dueAt, and every other copy is stale; if the alert
// was claimed, partly sent, delivered, cancelled, withheld or recorded meanwhile, gen is
// refused with that answer (too late: RescheduleTooLate) and its copy is dropped on
// arrival. Without commit, its publish failed: gen is refused and nothing else changes,
// RescheduleTooFar. A generation settled before (by the scheduler, when its copy arrived
// first) is answered as it was: RescheduleRequeued when it is the live one, else
// RescheduleTooLate. The scheduler settles with commit a copy that arrives unsettled.
func (w *WheelStage) SettleRequeue(ctx context.Context, id string, gen int64, dueAt time.Time, commit bool) (Rescheduled, error) {
	mode := "refuse"
	if commit {
		mode = "commit"
	}
	keys := func(s *shard) []string {
		return []string{s.due, s.inflight, s.entries, s.keys.done(id), s.keys.cancel(id), s.keys.trace(id), s.keys.resched(id),
			s.keys.gen(id), s.keys.tries(), s.keys.failed(), s.keys.parts(), s.keys.pending(), s.keys.pendingBy()}
	}
	res, err := w.onShard(ctx, id, wheelRequeueScript, true, keys, id, gen, dueAt.UnixMilli(), mode, w.opts.CancelTTL.Milliseconds(),
		AuthorOf(ctx)).Slice()
	if err != nil {
		return Rescheduled{}, w.fail("settle requeue", err)
	}
	code, ms, ok := codeAndMillis(res)
	var out Rescheduled
	switch code {
	case 1:
		out = Rescheduled{Result: RescheduleRequeued, DueAt: time.UnixMilli(ms)}
	case 2, 3, 4, 5, 7:
		out = Rescheduled{Result: RescheduleResult(code)}
	case 8:
		out = Rescheduled{Result: RescheduleTooFar}
	default:
		ok = false
	}
	if !ok {
		return Rescheduled{}, fmt.Errorf("store: settle requeue: unexpected script result %v", res)
	}
	return out, nil
}

// Routing is what decides where a copy of an alert goes when it reaches the wheel
// stage: its reschedule record and its generation record.
type Routing struct {
	// Due is the due time the alert's reschedule record names; zero when it has none.
	Due time.Time
	// Live is the generation of the one copy of the alert that may be delivered (0 when
	// it was never sent back to the broker). A copy of an older generation is stale.
	Live int64
	// Decided is the newest settled generation: a copy newer than it is settled on
	// arrival (SettleRequeue), one not newer and not Live is stale.
	Decided int64
}

// Routing reads id's reschedule and generation records in one round trip, for operators
// and tests: the scheduler reads neither when a copy arrives (a hop never waits for
// Redis), and Put checks both atomically.
func (w *WheelStage) Routing(ctx context.Context, id string) (Routing, error) {
	var due *redis.StringCmd
	var gens *redis.SliceCmd
	s, err := w.readShard(ctx, id)
	if err != nil {
		return Routing{}, err
	}
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		due = p.Get(ctx, s.keys.resched(id))
		gens = p.HMGet(ctx, s.keys.gen(id), "live", "decided")
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return Routing{}, w.fail("routing", err)
	}
	if err := gens.Err(); err != nil {
		return Routing{}, w.fail("routing", err)
	}
	if len(gens.Val()) != 2 {
		return Routing{}, fmt.Errorf("store: routing of %s: %d fields of the generation record, want 2", id, len(gens.Val()))
	}
	var r Routing
	if ms, err := due.Int64(); err == nil {
		r.Due = time.UnixMilli(ms)
	}
	for i, dst := range []*int64{&r.Live, &r.Decided} {
		if v, ok := gens.Val()[i].(string); ok {
			n, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Routing{}, fmt.Errorf("store: routing of %s: generation %q: %w", id, v, err)
			}
			*dst = n
		}
	}
	return r, nil
}

// RescheduledDue returns the due time id's reschedule record names, and true; false
// when the alert was not rescheduled while hopping. The scheduler asks it when a hop
// arrives, and routes the alert by it.
func (w *WheelStage) RescheduledDue(ctx context.Context, id string) (time.Time, bool, error) {
	s, err := w.readShard(ctx, id)
	if err != nil {
		return time.Time{}, false, err
	}
	ms, err := w.rdb.Get(ctx, s.keys.resched(id)).Int64()
	if errors.Is(err, redis.Nil) {
		return time.Time{}, false, nil
	}
	if err != nil {
		return time.Time{}, false, w.fail("rescheduled due", err)
	}
	return time.UnixMilli(ms), true, nil
}

var qReschedule = query("failed_reschedule.sql")

// Reschedule moves the alert id's pending failed_sends rows to their next attempt at
// dueAt (now, by Postgres's clock, when it has passed): RescheduleRowMoved, with the new
// time. A claim of the retry job on such a row ends, so its holder's confirm fails and it
// sends nothing before dueAt; a row whose request the retry job confirmed is
// RescheduleTooLate (Reschedule and Confirm lock the row: the first to commit wins).
// Otherwise nothing changes: a dead, rejected or discarded row is RescheduleNotPending,
// a delivered newest row RescheduleAlreadyDelivered, a cancelled one
// RescheduleCancelled; Result is 0 when id has no row. An error wrapping ErrUnavailable
// means Postgres could not be reached and nothing changed.
func (s *FailedSends) Reschedule(ctx context.Context, id string, dueAt time.Time) (Rescheduled, error) {
	ctx, cancel := s.bound(ctx)
	defer cancel()
	var out Rescheduled
	err := pgx.BeginFunc(ctx, s.pool, func(tx pgx.Tx) error {
		out = Rescheduled{}
		found, err := alertRows(ctx, tx, id)
		if err != nil {
			return err
		}
		var pending []int64
		for _, r := range found {
			switch {
			case r.sending:
				out = Rescheduled{Result: RescheduleTooLate, Rows: []int64{r.id}}
				return nil // its request may be in flight: change nothing
			case r.status == StatusPending:
				pending = append(pending, r.id)
			}
		}
		if len(pending) > 0 {
			moved, err := tx.Query(ctx, qReschedule, pending, dueAt)
			if err != nil {
				return err
			}
			out.Result = RescheduleRowMoved
			_, err = pgx.ForEachRow(moved, []any{new(int64), &out.DueAt}, func() error { return nil })
			out.Rows = pending
			return err
		}
		if len(found) == 0 {
			return nil
		}
		newest := found[len(found)-1]
		out.Rows = []int64{newest.id}
		switch newest.status {
		case StatusDelivered:
			out.Result = RescheduleAlreadyDelivered
		case StatusCancelled:
			out.Result = RescheduleCancelled
		default:
			out.Result = RescheduleNotPending
		}
		return nil
	})
	if err != nil {
		return Rescheduled{}, pgErr(ctx, "reschedule failed sends of "+id, err)
	}
	return out, nil
}
