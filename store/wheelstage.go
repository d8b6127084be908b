package store

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/redis/go-redis/v9"

	"github.com/rocketdelay/rocketdelay/config"
)

// The wheel stage keeps, in Redis, every alert whose remaining delay is below the
// scheduler's hop threshold, under the hash tag {p} (see keys.go), or, split into shards
// (WheelStageOptions.Shards), under one tag per shard: {p} for shard 0, {p/i} for shard
// i. An id belongs to one shard, by a hash of the id, and every key that concerns it sits
// in its shard. An id that has an entry is in exactly one of the due and in-flight
// indexes of its shard. All entries of a shard share one hash rather than a key each so
// that the sweeper's script, which finds its ids in the sorted sets, reads only keys it
// was given in KEYS.

// cancelMargin is how much longer than the longest accepted delay a cancel tombstone
// lives.
const cancelMargin = 24 * time.Hour

// WheelStageOptions tune a WheelStage. A zero or negative field takes its default.
type WheelStageOptions struct {
	// Lease is how long a claimed entry belongs to its claimer before the sweeper of any
	// replica may claim it again, unless the claimer is a live replica (with liveness on,
	// an expired claim of a live replica is renewed instead: see ClaimOverdue); it is also
	// a park's lease. Default config scheduler.lease.
	Lease time.Duration
	// DoneTTL is how long the done marker that Release leaves turns a later Put of the same
	// id into a no-op. It must exceed the longest time a duplicate can still arrive: the
	// broker's redelivery window for the last hop plus a consumer's downtime. Default
	// config scheduler.doneTTL.
	DoneTTL time.Duration
	// CancelTTL is how long a cancel tombstone makes the arrival of its id a no-op. It must
	// exceed the longest delay the scheduler accepts (config scheduler.horizon, 30 days by
	// default), as the cancelled alert may still be hopping through the broker until then.
	// Default config scheduler.horizon's default plus a day.
	CancelTTL time.Duration
	// Replicas, when above 0, is how many Redis replicas must have taken every write of
	// the wheel stage (WAIT) before it counts as stored (config redis.durability
	// replicas=N); a write they did not take in time fails with ErrNotReplicated, so the
	// caller keeps what it was storing and tries again. Default 0: Redis's answer is
	// enough.
	Replicas int
	// WaitTimeout bounds that WAIT. Default config redis.waitTimeout.
	WaitTimeout time.Duration
	// OnDurability, when set, is called each time the writes start (met false) and stop
	// falling short of Replicas, once per change: detail says how many replicas took the
	// last write. Default none.
	OnDurability func(met bool, detail string)
	// Liveness, when above 0, is the liveness period T of the replicas sharing the stage
	// (liveness.go), at millisecond precision: a replica that has not beaten
	// (Liveness.Beat) for T has lapsed. Default 0: liveness is off, and only leases tell
	// a dead replica's holdings.
	Liveness time.Duration
	// Shards is how many shards the stage is split into, each under a hash tag of its own
	// (keys.go), so that a Redis Cluster spreads the stage over its primaries; an id's
	// shard is FNV-1a-32(id) mod Shards. Every replica of a deployment acts in the
	// deployment's layout (ClaimShards), which From and Phase complete while it moves.
	// Default 1 (config redis.shards): one tag, {p}, the layout of a stage that was
	// never sharded.
	Shards int
	// From, when above 0 and not Shards, is the count the stage moves from to Shards
	// (online resharding, moving.go: the deployment's Layout): the stage scans the
	// shards of both, and finds each id's records in its shard of From until the id
	// moves. Phase 1 unless Phase is 2. Default 0: settled.
	From, Phase int
}

func (o WheelStageOptions) withDefaults() WheelStageOptions {
	config.Default(&o.Lease, config.DefaultLease)
	config.Default(&o.DoneTTL, config.DefaultDoneTTL)
	config.Default(&o.CancelTTL, config.DefaultHorizon+cancelMargin)
	config.Default(&o.WaitTimeout, config.DefaultWaitTimeout)
	o.Liveness = max(o.Liveness, 0).Truncate(time.Millisecond)
	o.Shards = max(o.Shards, 1)
	return o
}

// WheelStageOptionsFromConfig takes the wheel stage's options from the service
// configuration: the scheduler's lease, liveness and done TTL, tombstones that outlive
// the horizon, and Redis's durability and shards.
func WheelStageOptionsFromConfig(c config.Config) WheelStageOptions {
	_, replicas, _ := config.ParseDurability(c.Redis.Durability) // validated
	return WheelStageOptions{Lease: c.Scheduler.Lease, DoneTTL: c.Scheduler.DoneTTL, CancelTTL: c.Scheduler.Horizon + cancelMargin,
		Replicas: replicas, WaitTimeout: c.Redis.WaitTimeout, Liveness: c.Scheduler.Liveness, Shards: c.Redis.Shards}
}

// Entry is one alert waiting in the wheel stage, and a consumed message as the scheduler
// decodes and routes it (its claim state then unset): one value from the broker to the
// hand-off, where it becomes the sender.Alert that travels to a channel.
type Entry struct {
	// ID is the alert's idempotency key (RD_ID): any string up to a few hundred bytes.
	ID string
	// Target names the target the alert goes to.
	Target string
	// DueAt is when the alert is due, at millisecond precision. It is the alert's own due
	// time: GiveBack reschedules the entry without changing it.
	DueAt time.Time
	// Body is the alert as the producer sent it, arbitrary bytes.
	Body []byte
	// Props are the original message's properties, carried along for the sender; nil when
	// there are none (an empty map is stored as nil).
	Props map[string]string
	// Hops counts the broker hops the alert took before reaching the wheel stage.
	Hops int
	// Gen is the generation of the copy being put (RD_GEN, 0 when absent): a reschedule
	// that sends an alert back to the broker makes a copy of a new generation, and Put
	// stores only the live one. Not stored in the entry.
	Gen int64
	// Priority (RD_PRIORITY) and Principal (the producer its RD_PRINCIPAL_SIG proves, ""
	// when none) are noted by Put in the alert's trace, where the list of pending alerts
	// reads them (Pending). Not stored in the entry.
	Priority, Principal string

	// The claim state, set on entries returned by Claim and ClaimOverdue:

	// Token identifies the claim that holds the entry; extend, give back, confirm and
	// mark failed only work with it.
	Token string
	// Tries counts the hand-offs of the entry that were given back.
	Tries int
	// Failure is what MarkFailed noted: the send failed for good and only its record is
	// left to do. nil when no send failed.
	Failure []byte
	// PartsSent counts the leading parts of a split alert that earlier hand-offs
	// delivered (noted by Confirm and GiveBack): the next hand-off sends from the part
	// after them.
	PartsSent int
	// DueIn, set on entries a claim took before they were due (ClaimAhead, and
	// ClaimOverdue, which takes over entries claimed ahead and handed back or left by a
	// replica gone), is how long after the claim's reply the alert is due by the clock
	// of the Redis that holds it: it is handed off no sooner. 0 for an entry due already.
	DueIn time.Duration
	// home is the shard it was claimed in while the stage moves (Claim.home).
	home *shard
}

// Claimed is what a claim took, and what it left.
type Claimed struct {
	// Entries are the entries the claim holds now, with their claim state.
	Entries []Entry
	// Corrupt are entries the claim holds whose record cannot be decoded (damaged, or
	// written by an unknown version): they can never be delivered as they are. The
	// caller records each as rejected and releases it, so one bad record never blocks
	// the others of its batch.
	Corrupt []Corrupt
	// NotDue are ids of the batch that are waiting but not due yet by Redis's clock: the
	// claim left them in the due index. Only Claim reports them.
	NotDue []NotDue
}

// Corrupt is a claimed entry whose record cannot be decoded.
type Corrupt struct {
	// Claim holds the entry; release it once its rejection is recorded.
	Claim Claim
	// Record is the stored record as it is, for the rejection's payload.
	Record []byte
	// Err says what is wrong with it.
	Err error
}

// NotDue is an id that a claim found waiting but not due yet.
type NotDue struct {
	ID string
	// Wait is how long until it is due, by Redis's clock.
	Wait time.Duration
}

// Claim names a claimed entry and the token of the claim that holds it.
type Claim struct {
	ID    string
	Token string
	// home is the shard the claim was taken in while the stage moves (moving.go); nil
	// when settled, or for a claim not taken by this stage: then its id's shard.
	home *shard
}

// Claim returns the claim that holds e (e.ID and e.Token).
func (e Entry) Claim() Claim { return Claim{ID: e.ID, Token: e.Token, home: e.home} }

// Entry returns the bare entry c holds (its id and claim, nothing of its record), for a
// hand-off that has only the claim (a corrupt record's): giving it back or releasing it
// reaches the shard c was taken in.
func (c Claim) Entry() Entry { return Entry{ID: c.ID, Token: c.Token, home: c.home} }

// shardOfClaim returns the shard that holds c's entry.
func (w *WheelStage) shardOfClaim(c Claim) *shard {
	if c.home != nil {
		return c.home
	}
	return w.shardOf(c.ID)
}

// in notes, while the stage moves, that c's entries were claimed in shard s, so that
// what is done with their claims goes to s.
func (c Claimed) in(w *WheelStage, s *shard) Claimed {
	if w.moving == nil {
		return c
	}
	for i := range c.Entries {
		c.Entries[i].home = s
	}
	for i := range c.Corrupt {
		c.Corrupt[i].Claim.home = s
	}
	return c
}

// Outcome is how a hand-off ended, for Release.
type Outcome int

// The outcomes of a hand-off.
const (
	// Delivered means the channel delivered the alert (the platform accepted it, or the broker stored it).
	Delivered Outcome = iota + 1
	// Recorded means the alert's failure was recorded (the failed_sends table); the retry
	// job takes it from there.
	Recorded
	// Withheld means the alert was not sent on purpose and never will be: a step of an
	// escalation episode that ended (resolved, acknowledged) before it was due.
	Withheld
)

// recordedPrefix starts the done marker of an id whose hand-off ended in a recorded
// failure, withheldPrefix that of one withheld; a delivered id's marker is Redis now in
// Unix ms alone.
const (
	recordedPrefix = "recorded:"
	withheldPrefix = "withheld:"
)

// Due is an id of the wheel stage and when it is next due.
type Due struct {
	// ID is the entry's id.
	ID string
	// DueAt is the entry's score in the due index, at millisecond precision: its due
	// time, or the retry time GiveBack set.
	DueAt time.Time
}

// PutResult says what Put did.
type PutResult int

// The results of Put.
const (
	// PutStored means the entry is new and was stored.
	PutStored PutResult = iota + 1
	// PutDuplicate means an entry with this id is already waiting or in flight; nothing
	// changed.
	PutDuplicate
	// PutDone means the id was delivered already (its done marker exists); nothing changed.
	PutDone
	// PutCancelled means the id was cancelled (its tombstone exists); nothing was stored.
	// The tombstone is kept until it expires, so every further copy is refused too.
	PutCancelled
	// PutMoved means the id was rescheduled while it was hopping (Reschedule): its
	// reschedule record names another due time than the entry's, so nothing was stored.
	// The caller routes the alert by Rescheduled's due time instead (a hop, or a Put with
	// that due time).
	PutMoved
	// PutStale means the copy's generation (Entry.Gen) is not the alert's live one: a
	// reschedule sent the alert back to the broker as another copy, or refused this one.
	// Nothing was stored; the copy is dropped.
	PutStale
	// PutUndecided means the copy's generation is newer than every settled one: the
	// reschedule that made it has not settled it yet. Nothing was stored; the caller
	// settles it (SettleRequeue) and puts again if it became the live one.
	PutUndecided
)

// String returns the result's name, usable as a metric label: "stored", "duplicate",
// "done", "cancelled", "moved", "stale" or "undecided".
func (r PutResult) String() string {
	switch r {
	case PutStored:
		return "stored"
	case PutDuplicate:
		return "duplicate"
	case PutDone:
		return "done"
	case PutCancelled:
		return "cancelled"
	case PutMoved:
		return "moved"
	case PutStale:
		return "stale"
	case PutUndecided:
		return "undecided"
	}
	return "PutResult(" + strconv.Itoa(int(r)) + ")"
}

// CancelResult says what Cancel did.
type CancelResult int

// The results of Cancel.
const (
	// CancelRemoved means the entry was waiting and is gone. A tombstone is left as well,
	// so a redelivered copy of the alert's last hop is refused by Put.
	CancelRemoved CancelResult = iota + 1
	// CancelTooLate means the alert is being sent now: its entry is in flight (or the
	// failed-sends retry job confirmed a request of its row). Nothing changed.
	CancelTooLate
	// CancelAlreadyDelivered means the alert was delivered: its done marker says so (or
	// its failed_sends row does). Nothing changed.
	CancelAlreadyDelivered
	// CancelTombstoned means the id is not in Redis: the alert is still hopping through the
	// broker (or never existed). A tombstone now makes its arrival a no-op (Put returns
	// PutCancelled; IsCancelled reports true).
	CancelTombstoned
	// CancelRecorded means the alert's hand-off ended with its failure recorded in
	// failed_sends (its done marker says recorded): the wheel stage holds nothing of it,
	// and nothing changed. Whether it can still be cancelled is for its failed_sends row
	// to say (FailedSends.Cancel); only when it has none is this the answer: not sent,
	// and nothing is left to cancel.
	CancelRecorded
	// CancelRowCancelled means the alert's send had failed and its failed_sends row is
	// cancelled (FailedSends.Cancel): neither the retry job nor an operator's retry will
	// send it.
	CancelRowCancelled
	// CancelWithheld means the alert was withheld, never to be sent: a step of an
	// escalation episode that ended before it was due. Nothing changed.
	CancelWithheld
)

// Explain says what r means for the alert, in words for the person who cancelled it.
func (r CancelResult) Explain() string {
	switch r {
	case CancelRemoved:
		return "removed from the wheel stage"
	case CancelTombstoned:
		return "it will be dropped when it next arrives (still hopping through RocketMQ, or not published yet)"
	case CancelTooLate:
		return "too late, it is being sent right now"
	case CancelAlreadyDelivered:
		return "too late, it was already delivered"
	case CancelRecorded:
		return "nothing to cancel: its send failed, and its failed_sends row is gone (past its retention)"
	case CancelRowCancelled:
		return "its send had failed; its failed_sends row is cancelled, so it will not be retried"
	case CancelWithheld:
		return "it was withheld and will not be sent: its escalation episode ended before it was due"
	}
	return "unknown result"
}

// Cancelled reports whether r stopped the alert (removed, tombstoned, or its failed_sends
// row cancelled).
func (r CancelResult) Cancelled() bool {
	return r == CancelRemoved || r == CancelTombstoned || r == CancelRowCancelled || r == CancelWithheld
}

// String returns the result's name, usable as a metric label: "removed", "too_late",
// "already_delivered", "tombstoned", "recorded" or "cancelled".
func (r CancelResult) String() string {
	switch r {
	case CancelRemoved:
		return "removed"
	case CancelTooLate:
		return "too_late"
	case CancelAlreadyDelivered:
		return "already_delivered"
	case CancelTombstoned:
		return "tombstoned"
	case CancelRecorded:
		return "recorded"
	case CancelRowCancelled:
		return "cancelled"
	case CancelWithheld:
		return "withheld"
	}
	return "CancelResult(" + strconv.Itoa(int(r)) + ")"
}

var (
	wheelPutScript           = byIDScript("wheel_put.lua", "lib_pending.lua")
	wheelClaimScript         = scriptWith("wheel_claim.lua", "lib_holding.lua")
	wheelClaimOverdueScript  = scriptWith("wheel_claim_overdue.lua", "lib_holding.lua")
	wheelReleaseScript       = scriptWith("wheel_release.lua", "lib_holding.lua", "lib_pending.lua")
	wheelGiveBackScript      = scriptWith("wheel_give_back.lua", "lib_holding.lua")
	wheelDueWithinScript     = script("wheel_due_within.lua")
	wheelCancelScript        = byIDScript("wheel_cancel.lua", "lib_done.lua", "lib_pending.lua")
	wheelRescheduleScript    = byIDScript("wheel_reschedule.lua", "lib_done.lua", "lib_pending.lua", "lib_move.lua")
	wheelRequeueScript       = byIDScript("wheel_requeue.lua", "lib_done.lua", "lib_pending.lua", "lib_move.lua")
	wheelConfirmScript       = script("wheel_confirm.lua")
	wheelMarkFailedScript    = script("wheel_mark_failed.lua")
	wheelMarkDeliveredScript = script("wheel_mark_delivered.lua")
	wheelTimeScript          = script("wheel_time.lua")
)

// WheelStage is the Redis side of the scheduler's wheel stage: the payloads and due index
// of alerts about to be delivered, claims with leases, done markers and cancel
// tombstones. Every mutation is one Lua script, one round trip, atomic against every
// other replica; scripts take "now" from Redis TIME, so replicas share one clock.
//
// A WheelStage is safe for concurrent use. Errors caused by an unreachable or unready
// Redis also match ErrUnavailable; the caller retries them. go-redis may itself retry a
// script whose reply was lost; every script tolerates that (a repeated Put reports
// PutDuplicate; a repeated Claim, ClaimOverdue or Adopt with the same token returns what
// the first run took).
//
// With several shards (Options().Shards), a method that names ids runs one script per
// shard of its ids, and one that looks over the stage (ClaimOverdue, DueWithin, Stats)
// runs one per shard, at once, and merges the answers; each script is still atomic
// within its shard, not across shards. With one shard every method is one round trip as
// described.
type WheelStage struct {
	rdb  redis.UniversalClient
	opts WheelStageOptions
	// shards are the shards every scan looks at: the placed count's, in order, then
	// while the stage moves those of the old count the new one does not share.
	shards []*shard
	placed int          // the count ids are placed by: shardOf
	moving *movingStage // nil when settled
	// durableMu orders the changes of short and what OnDurability hears of them.
	durableMu sync.Mutex
	short     bool   // the last write fell short of opts.Replicas
	moves     string // the Pub/Sub channel of moves (reschedule.go)
}

// shard is one shard of the wheel stage: its keys, and the names of those every claim
// uses.
type shard struct {
	i                      int // its place in WheelStage.shards
	keys                   keys
	due, inflight, entries string
}

// NewWheelStage returns the wheel stage whose keys start with "{prefix}:" (prefix is the
// configured key prefix, config redis.keyPrefix), and, for shard i > 0 of
// opts.Shards, with "{prefix/i}:". It panics when prefix is empty, as the keys would then
// not share a hash tag.
func NewWheelStage(rdb redis.UniversalClient, prefix string, opts WheelStageOptions) *WheelStage {
	w := &WheelStage{rdb: rdb, opts: opts.withDefaults(), moves: "{" + prefix + "}:moves"}
	k := newKeys(prefix)
	w.placed = w.opts.Shards
	byTag := make(map[string]*shard)
	for i := range w.opts.Shards {
		w.shards = append(w.shards, newShard(i, k.shard(i, w.opts.Shards)))
		byTag[w.shards[i].keys.tag] = w.shards[i]
	}
	if from := w.opts.From; from > 0 && from != w.opts.Shards {
		w.moving = &movingStage{from: from}
		w.moving.phase.Store(int32(min(max(w.opts.Phase, 1), 2)))
		for i := range from {
			s := newShard(len(w.shards), k.shard(i, from))
			if shared := byTag[s.keys.tag]; shared != nil {
				s = shared
			} else {
				w.shards = append(w.shards, s)
			}
			w.moving.old = append(w.moving.old, s)
		}
	}
	return w
}

func newShard(i int, k keys) *shard {
	return &shard{i: i, keys: k, due: k.due(), inflight: k.inflight(), entries: k.entries()}
}

// shardIndex is the shard of id among n: FNV-1a-32 of id, mod n.
func shardIndex(id string, n int) int {
	if n <= 1 {
		return 0
	}
	h := uint32(2166136261)
	for i := 0; i < len(id); i++ {
		h ^= uint32(id[i])
		h *= 16777619
	}
	return int(h % uint32(n))
}

// shardOf returns the shard that holds id: while the stage moves, the shard of the new
// count (oldOf, the old).
func (w *WheelStage) shardOf(id string) *shard { return w.shards[shardIndex(id, w.placed)] }

// group returns, for each shard, the positions in 0…n-1 whose id (id(k)) it holds, in
// order.
func (w *WheelStage) group(n int, id func(k int) string) [][]int {
	out := make([][]int, len(w.shards))
	if len(w.shards) == 1 {
		out[0] = make([]int, n)
		for k := range n {
			out[0][k] = k
		}
		return out
	}
	for k := range n {
		i := shardIndex(id(k), w.placed)
		out[i] = append(out[i], k)
	}
	return out
}

// groupClaims returns, for each shard, the positions in 0…n-1 whose claim (claim(k))
// holds an entry of it, in order.
func (w *WheelStage) groupClaims(n int, claim func(k int) Claim) [][]int {
	if w.moving == nil {
		return w.group(n, func(k int) string { return claim(k).ID })
	}
	out := make([][]int, len(w.shards))
	for k := range n {
		i := w.shardOfClaim(claim(k)).i
		out[i] = append(out[i], k)
	}
	return out
}

// each runs f for every shard i, each in a goroutine of its own when there are several
// (on a Redis Cluster, each shard's calls go to its own primary), and returns the error
// of the first shard, in shard order, that failed. With one shard f runs in the caller's
// goroutine.
func (w *WheelStage) each(f func(i int, s *shard) error) error {
	if len(w.shards) == 1 {
		return f(0, w.shards[0])
	}
	errs := make([]error, len(w.shards))
	var wg sync.WaitGroup
	for i, s := range w.shards {
		wg.Go(func() { errs[i] = f(i, s) })
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return err
		}
	}
	return nil
}

// Options returns the options in effect, defaults filled in.
func (w *WheelStage) Options() WheelStageOptions { return w.opts }

// Lease is how long a claim lasts (Options().Lease).
func (w *WheelStage) Lease() time.Duration { return w.opts.Lease }

// Put stores e, atomically and idempotently, in one round trip: the entry is written and
// its id added to the due index with score e.DueAt. An id already waiting or in flight
// gives PutDuplicate, a delivered id PutDone, a cancelled id PutCancelled, a rescheduled
// id whose record names another due time than e.DueAt PutMoved, a copy of another
// generation than the live one PutStale (or PutUndecided, newer than every settled one);
// none of these change anything.
func (w *WheelStage) Put(ctx context.Context, e Entry) (PutResult, error) {
	if e.ID == "" {
		return 0, errors.New("store: put: empty id")
	}
	keys := func(s *shard) []string {
		return []string{s.due, s.inflight, s.entries, s.keys.done(e.ID), s.keys.cancel(e.ID), s.keys.trace(e.ID),
			s.keys.resched(e.ID), s.keys.gen(e.ID), s.keys.pending(), s.keys.pendingBy()}
	}
	code, err := w.onShard(ctx, e.ID, wheelPutScript, true, keys, e.ID, e.DueAt.UnixMilli(), encodeWheelEntry(e), e.Target, e.Hops,
		w.opts.CancelTTL.Milliseconds(), e.Gen, e.Priority, e.Principal).Int()
	if err != nil {
		return 0, w.fail("put", err)
	}
	r := PutResult(code)
	if r < PutStored || r > PutUndecided {
		return 0, fmt.Errorf("store: put: unexpected script result %d", code)
	}
	return r, nil
}

// Claim atomically claims, in one round trip, every id of ids that is in the due index
// and due by Redis's clock: it moves to in flight with a lease of Options().Lease from
// Redis now, held by token (a value unique to this claim), and its entry is returned
// with its claim state. An id that is waiting but not due yet by Redis's clock is left
// waiting and reported in NotDue, so a replica whose own clock runs fast never takes an
// entry early. Ids neither waiting nor held by token (claimed by another replica,
// cancelled, delivered) are left out, so len(ids) minus what was returned were lost.
// Claim can be repeated with the same token after an error (its reply may have been
// lost with the entries in flight): the ids token holds already come back again.
//
// The replica of token (the part before its first "/") becomes responsible for what it
// claims. With liveness on (Options().Liveness), a replica that is not live claims
// nothing: the error wraps ErrLapsed. The same holds for ClaimOverdue, Adopt and Park.
//
// With several shards, the ids of each shard are claimed by one script of that shard,
// the shards at once, and the answers merged in the order of ids. When one shard
// fails the call fails, though other shards may have claimed theirs: a repeat with the
// same token returns them, or their lease runs out. An id named twice is claimed once.
func (w *WheelStage) Claim(ctx context.Context, ids []string, token string) (Claimed, error) {
	return w.ClaimAhead(ctx, ids, token, 0)
}

// ClaimAhead is Claim, but takes an id up to ahead before its due time by Redis's clock
// too, so that the claim's round trip is over by the due instant: such an entry comes
// back with DueIn, the time from the claim's reply until it is due by the clock of the
// Redis that holds it, and may be handed off no sooner (the caller waits). Its lease
// runs from Redis now + ahead. An id due later than ahead is left waiting and reported
// in NotDue with the time until it is due.
func (w *WheelStage) ClaimAhead(ctx context.Context, ids []string, token string, ahead time.Duration) (Claimed, error) {
	if ahead < 0 {
		return Claimed{}, errors.New("store: claim: ahead must not be negative")
	}
	// Twice in one batch (the wheel fires a key again that was re-added while its first
	// firing waited to be received), an id would come back twice with the same token:
	// two hand-offs whose confirms both hold, and the alert sent twice.
	ids = distinct(ids)
	if len(ids) == 0 {
		return Claimed{}, nil
	}
	if len(ids) > maxScriptIDs {
		var parts []Claimed
		for chunk := range slices.Chunk(ids, maxScriptIDs) {
			c, err := w.ClaimAhead(ctx, chunk, token, ahead)
			if err != nil {
				return Claimed{}, err
			}
			parts = append(parts, c)
		}
		return mergeClaimed(parts), nil
	}
	groups := w.candidates(len(ids), func(k int) string { return ids[k] })
	parts := make([]Claimed, len(w.shards))
	err := w.each(func(i int, s *shard) error {
		if len(groups[i]) == 0 {
			return nil
		}
		var err error
		parts[i], err = w.claim(ctx, s, groups[i], ids, token, ahead)
		return err
	})
	if err != nil {
		return Claimed{}, err
	}
	c := mergeClaimed(parts)
	if len(parts) > 1 {
		// In the order of ids, as one script returns them.
		at := make(map[string]int, len(ids))
		for k, id := range ids {
			if _, ok := at[id]; !ok {
				at[id] = k
			}
		}
		slices.SortStableFunc(c.Entries, func(a, b Entry) int { return at[a.ID] - at[b.ID] })
		slices.SortStableFunc(c.Corrupt, func(a, b Corrupt) int { return at[a.Claim.ID] - at[b.Claim.ID] })
		slices.SortStableFunc(c.NotDue, func(a, b NotDue) int { return at[a.ID] - at[b.ID] })
	}
	return c, nil
}

// waitFrom sets the DueIn of c's entries from Redis now as a claim script read it (Unix
// ms, as text). Redis read it (to the millisecond, rounded down) before it replied: an
// entry waited for from the reply on is due by its clock once DueIn has passed.
func (c Claimed) waitFrom(now any) error {
	text, _ := now.(string)
	ms, err := strconv.ParseInt(text, 10, 64)
	if err != nil {
		return fmt.Errorf("Redis now %q: %w", text, err)
	}
	at := time.UnixMilli(ms)
	for i := range c.Entries {
		c.Entries[i].DueIn = max(c.Entries[i].DueAt.Sub(at), 0)
	}
	return nil
}

// mergeClaimed joins the claims of several shards, in shard order.
func mergeClaimed(parts []Claimed) Claimed {
	if len(parts) == 1 {
		return parts[0]
	}
	var c Claimed
	for _, p := range parts {
		c.Entries = append(c.Entries, p.Entries...)
		c.Corrupt = append(c.Corrupt, p.Corrupt...)
		c.NotDue = append(c.NotDue, p.NotDue...)
	}
	return c
}

// claim claims for token the ids at positions at of ids, all of shard s, up to ahead
// before their due time: ClaimAhead's script.
func (w *WheelStage) claim(ctx context.Context, s *shard, at []int, ids []string, token string, ahead time.Duration) (Claimed, error) {
	args := make([]any, 0, len(at)+4)
	args = append(args, w.opts.Lease.Milliseconds(), token, w.opts.Liveness.Milliseconds(), ahead.Milliseconds())
	for _, k := range at {
		args = append(args, ids[k])
	}
	res, err := w.write(ctx, wheelClaimScript, s.claimKeys(), args...).Slice()
	if err != nil {
		return Claimed{}, w.fail("claim", err)
	}
	if len(res) != 3 {
		return Claimed{}, fmt.Errorf("store: claim: reply of %d items, want 3", len(res))
	}
	claimed, _ := res[0].([]any)
	c, err := decodeClaimed(claimed, token)
	if err != nil {
		return Claimed{}, fmt.Errorf("store: claim: %w", err)
	}
	c = c.in(w, s)
	if err := c.waitFrom(res[2]); err != nil {
		return Claimed{}, fmt.Errorf("store: claim: %w", err)
	}
	early, _ := res[1].([]any)
	for i := 0; i+1 < len(early); i += 2 {
		id, _ := early[i].(string)
		ms, _ := early[i+1].(string)
		wait, err := strconv.ParseInt(ms, 10, 64)
		if err != nil {
			return Claimed{}, fmt.Errorf("store: claim: wait of %q: %w", id, err)
		}
		c.NotDue = append(c.NotDue, NotDue{ID: id, Wait: time.Duration(wait) * time.Millisecond})
	}
	return c, nil
}

// ClaimOverdue is the sweeper's claim, in one round trip: it atomically claims, for
// token, up to limit entries that nobody is taking care of, first those in flight whose
// lease expired, then those waiting whose due time is more than grace before Redis now,
// oldest first. Each gets a fresh lease, as in Claim; the claim it replaces can no longer
// extend, give back, confirm or mark it. A limit below 1 is an error. Like Claim it can
// be repeated with the same token after an error: a repeat returns what the first run
// took and still holds (for an hour, or a lease if longer), and takes nothing more.
//
// With liveness on it first takes over the holdings of a replica that lapsed (the one
// whose liveness ran out first), up to 5000 of them per call: their claims and parks end
// (the old claims get ErrNotHeld), and they are claimed as expired ones, those confirmed
// within the guard (see Confirm) once it ends. When the replica holds nothing more it is
// gone (LivenessView.Gone). No take-over starts while a quiet window is open (see
// Liveness). An expired claim of a live replica is renewed instead of taken.
//
// With several shards, every shard runs the sweeper's script at once, each with the
// whole limit, so that each shard's take-overs and overdue entries move at every call:
// limit is per shard, and a call claims up to Options().Shards × limit entries (a shard
// that returns limit may have more). The answers are merged in shard order; when one
// shard fails the call fails, and a repeat with the same token returns what the others
// took.
func (w *WheelStage) ClaimOverdue(ctx context.Context, grace time.Duration, limit int, token string) (Claimed, error) {
	if limit < 1 {
		return Claimed{}, fmt.Errorf("store: claim overdue: limit %d is not positive", limit)
	}
	grace = max(grace, 0)
	parts := make([]Claimed, len(w.shards))
	err := w.each(func(i int, s *shard) error {
		keys := append(s.claimKeys(), s.keys.sweep(token), s.keys.liveMeta(), s.keys.guard(), s.keys.gone())
		res, err := w.write(ctx, wheelClaimOverdueScript, keys,
			grace.Milliseconds(), limit, w.opts.Lease.Milliseconds(), token, w.opts.Liveness.Milliseconds()).Slice()
		if err != nil {
			return w.fail("claim overdue", err)
		}
		if len(res) != 2 {
			return fmt.Errorf("store: claim overdue: reply of %d items, want 2", len(res))
		}
		claimed, _ := res[0].([]any)
		if parts[i], err = decodeClaimed(claimed, token); err != nil {
			return fmt.Errorf("store: claim overdue: %w", err)
		}
		parts[i] = parts[i].in(w, s)
		if err := parts[i].waitFrom(res[1]); err != nil {
			return fmt.Errorf("store: claim overdue: %w", err)
		}
		return nil
	})
	if err != nil {
		return Claimed{}, err
	}
	return mergeClaimed(parts), nil
}

// holdKeys are the keys of an entry's claim state, and who holds it (lib_holding.lua).
func (s *shard) holdKeys() []string {
	return []string{s.due, s.inflight, s.entries, s.keys.owner(), s.keys.tries(), s.keys.failed(), s.keys.parts(),
		s.keys.by(), s.keys.held()}
}

// claimKeys are holdKeys and the replicas' liveness, which a claim checks.
func (s *shard) claimKeys() []string { return append(s.holdKeys(), s.keys.live()) }

// Release records that the hand-offs of claims are done (outcome), in one round trip:
// their entries and claim state are deleted, they leave the in-flight and due indexes,
// and each gets a done marker that lives Options().DoneTTL, so a later Put of the same id
// is PutDone (and, for Delivered, IsDelivered reports true). A release does not depend on
// still holding the claim: the alert is delivered or recorded, so nobody may send it
// again, including a replica that claimed it after this claim's lease ran out (its
// Confirm then fails). It returns how many of the claims had been lost that way. A done
// marker that says delivered is never downgraded by a Recorded release. Release can be
// repeated after an error: a repeat changes nothing but the markers' lifetimes. With
// several shards, the claims of each shard are released by one script of that shard, the
// shards at once.
func (w *WheelStage) Release(ctx context.Context, outcome Outcome, claims ...Claim) (lost int, err error) {
	return w.ReleaseReceipt(ctx, Receipt{Outcome: outcome}, claims...)
}

// Receipt is how a hand-off ended: its outcome and, for the alerts' traces, how they were
// delivered and by whom.
type Receipt struct {
	Outcome Outcome
	// Robot is the robot that accepted the alert; Merged is how many alerts its
	// message carried, Parts how many parts it was split into. Zero when unknown (a topic
	// target, a recorded failure).
	Robot         string
	Merged, Parts int
	// Replica names the replica that handed it off.
	Replica string
}

// ReleaseReceipt is Release, noting r in each alert's trace.
func (w *WheelStage) ReleaseReceipt(ctx context.Context, r Receipt, claims ...Claim) (lost int, err error) {
	rs := make([]Released, len(claims))
	for i, c := range claims {
		rs[i] = Released{Claim: c, Receipt: r}
	}
	lostEach, err := w.ReleaseAll(ctx, rs)
	for _, l := range lostEach {
		if l {
			lost++
		}
	}
	return lost, err
}

// Released is a claim whose hand-off is done, and how it ended.
type Released struct {
	Claim   Claim
	Receipt Receipt
	// Target and DueAt are the entry's (Entry.Target, Entry.DueAt), when the caller
	// holds it: the release then takes the alert's target (to unlist it from pending)
	// and due time (for its trace's lateness) from here instead of reading them from the
	// trace, one command fewer per alert. Zero: read from the trace.
	Target string
	DueAt  time.Time
}

// ReleaseAll is Release for hand-offs that each ended their own way, noting each receipt
// in its alert's trace, in one script call per shard (and per thousand claims): the
// release of many workers' hand-offs at once. lost[i] reports whether rs[i]'s claim had
// been lost. An error leaves it unknown which shards' calls landed; a repeat is harmless
// (it reports the claims released by the first call as lost).
func (w *WheelStage) ReleaseAll(ctx context.Context, rs []Released) (lost []bool, err error) {
	lost = make([]bool, len(rs))
	for start := 0; start < len(rs); start += maxScriptIDs {
		part := rs[start:min(start+maxScriptIDs, len(rs))]
		if err := w.releaseAll(ctx, part, lost[start:start+len(part)]); err != nil {
			return nil, err
		}
	}
	return lost, nil
}

// releaseAll is ReleaseAll of at most maxScriptIDs claims, noting in lost, one per claim,
// those that had been lost.
func (w *WheelStage) releaseAll(ctx context.Context, rs []Released, lost []bool) error {
	count := func(n int) string {
		if n <= 0 {
			return ""
		}
		return strconv.Itoa(n)
	}
	groups := w.groupClaims(len(rs), func(k int) Claim { return rs[k].Claim })
	return w.each(func(i int, s *shard) error {
		at := groups[i]
		if len(at) == 0 {
			return nil
		}
		keys := make([]string, 0, 2*len(at)+11)
		keys = append(keys, s.holdKeys()...)
		keys = append(keys, s.keys.pending(), s.keys.pendingBy())
		args := make([]any, 0, 9*len(at)+1)
		args = append(args, w.opts.DoneTTL.Milliseconds())
		for _, k := range at {
			c, r := rs[k].Claim, rs[k].Receipt
			keys = append(keys, s.keys.done(c.ID), s.keys.trace(c.ID))
			args = append(args, c.ID, c.Token, r.Outcome.markerPrefix(), r.Robot, count(r.Merged), count(r.Parts), r.Replica)
			if rs[k].Target == "" || rs[k].DueAt.IsZero() {
				args = append(args, "", "")
			} else {
				args = append(args, rs[k].DueAt.UnixMilli(), rs[k].Target)
			}
		}
		positions, err := w.write(ctx, wheelReleaseScript, keys, args...).Int64Slice()
		if err != nil {
			return w.fail("release", err)
		}
		for _, p := range positions {
			if p < 1 || int(p) > len(at) {
				return fmt.Errorf("store: release: reply names claim %d of %d", p, len(at))
			}
			lost[at[p-1]] = true // each shard's goroutine writes its own claims' places
		}
		return nil
	})
}

// maxScriptIDs bounds the ids of one script call that passes them to one variadic
// command (Lua's unpack takes some thousands at most).
const maxScriptIDs = 1000

// markerPrefix is the prefix of the done marker of a hand-off that ended with o.
func (o Outcome) markerPrefix() string {
	switch o {
	case Recorded:
		return recordedPrefix
	case Withheld:
		return withheldPrefix
	}
	return ""
}

// GiveBack returns an in-flight entry whose hand-off did not finish to the due index
// with score retryAt (millisecond precision), and counts the try (Entry.Tries); its entry,
// including DueAt, is kept. partsSent is how many leading parts of a split alert the
// hand-off delivered; they are noted whoever holds the entry (never lowered), so the
// next hand-off resumes after them. Only the claim that holds the entry can give it
// back: it reports false, changing nothing else, when c no longer holds it (released,
// cancelled, given back already, or claimed by another replica after c's lease ran out).
func (w *WheelStage) GiveBack(ctx context.Context, c Claim, retryAt time.Time, partsSent int) (bool, error) {
	s := w.shardOfClaim(c)
	n, err := w.write(ctx, wheelGiveBackScript, []string{s.due, s.inflight, s.keys.owner(), s.keys.tries(), s.keys.parts(),
		s.keys.by(), s.keys.held()},
		c.ID, c.Token, retryAt.UnixMilli(), max(partsSent, 0)).Int()
	if err != nil {
		return false, w.fail("give back", err)
	}
	return n == 1, nil
}

// Guard is how long after a Confirm its send may still start, G = T/3 of the liveness
// period T (0 with liveness off): a take-over leaves a confirmed entry alone until then,
// and not longer, so a sender must not start a request later (sender.Options.Fence).
func (w *WheelStage) Guard() time.Duration { return w.opts.Liveness / 3 }

// ErrNotHeld is returned by Confirm and MarkFailed when the claim no longer holds its
// entry: the caller must not send it, nor record it.
var ErrNotHeld = errors.New("the claim no longer holds the entry")

// Confirm checks, right before a send of the claimed entry, that c still holds it, and
// renews its lease so that the send has a whole lease to finish. partsSent is how many
// leading parts of a split alert were delivered before this send; they are noted
// whoever holds the entry (never lowered), so a later hand-off resumes after them. It
// returns an error wrapping ErrNotHeld when c does not hold it any more. With liveness on
// (Options().Liveness = T), the send must start within G = T/3 of the call: a take-over
// of c's replica leaves the entry alone until then, and not longer.
func (w *WheelStage) Confirm(ctx context.Context, c Claim, partsSent int) error {
	s := w.shardOfClaim(c)
	n, err := w.write(ctx, wheelConfirmScript, []string{s.inflight, s.keys.owner(), s.keys.parts(), s.keys.guard()},
		w.opts.Lease.Milliseconds(), c.ID, c.Token, max(partsSent, 0), w.Guard().Milliseconds()).Int()
	if err != nil {
		return w.fail("confirm", err)
	}
	if n != 1 {
		return fmt.Errorf("store: confirm %q: %w", c.ID, ErrNotHeld)
	}
	return nil
}

// MarkFailed notes that the send of the claimed entry failed for good, with failure (an
// encoding of the caller's choice, returned as Entry.Failure by later claims): whoever
// hands the entry off next only records the failure and never sends it again. It returns
// an error wrapping ErrNotHeld when c does not hold the entry any more.
func (w *WheelStage) MarkFailed(ctx context.Context, c Claim, failure []byte) error {
	s := w.shardOfClaim(c)
	n, err := w.write(ctx, wheelMarkFailedScript, []string{s.inflight, s.keys.owner(), s.keys.failed()},
		c.ID, c.Token, failure).Int()
	if err != nil {
		return w.fail("mark failed", err)
	}
	if n != 1 {
		return fmt.Errorf("store: mark %q failed: %w", c.ID, ErrNotHeld)
	}
	return nil
}

// MarkDelivered leaves the done marker of a delivered id, as Release does, for an alert
// delivered outside the wheel stage (by the failed-sends retry job).
func (w *WheelStage) MarkDelivered(ctx context.Context, id string) error {
	return w.MarkAllDelivered(ctx, []string{id})
}

// MarkAllDelivered leaves the done markers of ids delivered, as Release does, in one
// call per shard: for hand-offs whose release waits behind others, so that a replica
// that takes them over finds them done (Done) rather than sending them again. The
// entries stay in flight until they are released. While the stage moves, an id's
// marker is left in both its shards: the alert was delivered, whichever holds it.
func (w *WheelStage) MarkAllDelivered(ctx context.Context, ids []string) error {
	now := time.Now().UnixMilli()
	for chunk := range slices.Chunk(ids, maxScriptIDs) {
		groups := w.candidates(len(chunk), func(k int) string { return chunk[k] })
		err := w.each(func(i int, s *shard) error {
			if len(groups[i]) == 0 {
				return nil
			}
			if err := w.write(ctx, wheelMarkDeliveredScript, s.doneKeys(chunk, groups[i]), now, w.opts.DoneTTL.Milliseconds()).Err(); err != nil {
				return w.fail("mark delivered", err)
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	return nil
}

// doneKeys are the keys of the done markers, on shard s, of the ids at positions at.
func (s *shard) doneKeys(ids []string, at []int) []string {
	keys := make([]string, len(at))
	for n, k := range at {
		keys[n] = s.keys.done(ids[k])
	}
	return keys
}

// Done reads the done markers of ids, in one round trip per shard: for each id the
// outcome its marker records (Delivered, Recorded or Withheld), 0 for an id without one.
// A replica that takes over entries in flight asks it first: one whose marker is left
// was handed off by the replica that held it, and is released, not sent again.
func (w *WheelStage) Done(ctx context.Context, ids []string) ([]Outcome, error) {
	groups := w.candidates(len(ids), func(k int) string { return ids[k] })
	found := make([][]Outcome, len(w.shards)) // each shard's, merged below: while the stage moves an id is asked of two
	err := w.each(func(i int, s *shard) error {
		if len(groups[i]) == 0 {
			return nil
		}
		vs, err := w.rdb.MGet(ctx, s.doneKeys(ids, groups[i])...).Result()
		if err != nil {
			return w.fail("read done markers", err)
		}
		found[i] = make([]Outcome, len(vs))
		for n, v := range vs {
			marker, ok := v.(string)
			switch {
			case !ok:
			case strings.HasPrefix(marker, recordedPrefix):
				found[i][n] = Recorded
			case strings.HasPrefix(marker, withheldPrefix):
				found[i][n] = Withheld
			default:
				found[i][n] = Delivered
			}
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	out := make([]Outcome, len(ids))
	for i, at := range groups {
		for n, k := range at {
			if found[i][n] != 0 {
				out[k] = found[i][n]
			}
		}
	}
	return out, nil
}

// ErrNotReplicated is the error of a write that fewer Redis replicas than
// WheelStageOptions.Replicas took within WaitTimeout. It wraps ErrUnavailable: the
// write may be lost in a failover, so the caller keeps what it stored and retries.
var ErrNotReplicated = fmt.Errorf("not replicated in time: %w", ErrUnavailable)

// write runs a mutating script. With Options().Replicas above 0 the script and a WAIT run
// on one connection, in one round trip, and the script's reply is an error wrapping
// ErrNotReplicated unless enough replicas took it in time.
func (w *WheelStage) write(ctx context.Context, s *redis.Script, keys []string, args ...any) *redis.Cmd {
	if w.opts.Replicas <= 0 {
		return s.Run(ctx, w.rdb, keys, args...)
	}
	node := w.rdb
	if c, ok := w.rdb.(*redis.ClusterClient); ok {
		// WAIT names no key: it must run on the primary that holds the script's slot.
		primary, err := c.MasterForKey(ctx, keys[0])
		if err != nil {
			cmd := redis.NewCmd(ctx)
			cmd.SetErr(err)
			return cmd
		}
		node = primary
	}
	for attempt := 0; ; attempt++ {
		var cmd *redis.Cmd
		var wait *redis.IntCmd
		_, _ = node.Pipelined(ctx, func(p redis.Pipeliner) error {
			cmd = s.EvalSha(ctx, p, keys, args...)
			wait = redis.NewIntCmd(ctx, "wait", w.opts.Replicas, w.opts.WaitTimeout.Milliseconds())
			_ = p.Process(ctx, wait)
			return nil
		})
		if attempt == 0 && redis.HasErrorPrefix(cmd.Err(), "NOSCRIPT") {
			if err := s.Load(ctx, node).Err(); err != nil {
				cmd.SetErr(err)
				return cmd
			}
			continue
		}
		switch {
		case cmd.Err() != nil && !redis.HasErrorPrefix(cmd.Err(), errForwarded):
			// A script that failed is answered as it failed. The guard's answer that the
			// id moved may have marked it (lua/lib_route.lua): a write like any other.
		case wait.Err() != nil:
			cmd.SetErr(wait.Err())
		case wait.Val() < int64(w.opts.Replicas):
			cmd.SetErr(fmt.Errorf("%d of %d replicas took the write within %s: %w",
				wait.Val(), w.opts.Replicas, w.opts.WaitTimeout, ErrNotReplicated))
			w.durable(false, wait.Val())
		default:
			w.durable(true, wait.Val())
		}
		return cmd
	}
}

// durable notes whether the last write met the durability (took: the replicas that took
// it); OnDurability hears of a change.
// OnDurability is called under durableMu, so that writes landing at once cannot tell it
// of their changes in another order than they made them.
func (w *WheelStage) durable(met bool, took int64) {
	w.durableMu.Lock()
	defer w.durableMu.Unlock()
	if w.short == !met {
		return
	}
	w.short = !met
	if w.opts.OnDurability != nil {
		w.opts.OnDurability(met, fmt.Sprintf("%d of %d replicas took the last write within %s", took, w.opts.Replicas, w.opts.WaitTimeout))
	}
}

// Time reads Redis's clock, the one every wheel-stage script judges by (on a Redis
// Cluster, the clock of the primary that runs them: with several shards, that of shard
// 0's primary).
func (w *WheelStage) Time(ctx context.Context) (time.Time, error) {
	res, err := wheelTimeScript.Run(ctx, w.rdb, []string{w.shards[0].due}).Slice()
	if err != nil {
		return time.Time{}, w.fail("time", err)
	}
	if len(res) != 2 {
		return time.Time{}, fmt.Errorf("store: time: reply of %d items, want 2", len(res))
	}
	sec, err1 := strconv.ParseInt(fmt.Sprint(res[0]), 10, 64)
	usec, err2 := strconv.ParseInt(fmt.Sprint(res[1]), 10, 64)
	if err := errors.Join(err1, err2); err != nil {
		return time.Time{}, fmt.Errorf("store: time: %w", err)
	}
	return time.Unix(sec, usec*1000), nil
}

// IsDelivered reports whether id's done marker says it was delivered (by a hand-off, or
// by MarkDelivered), as opposed to recorded as failed or unknown.
func (w *WheelStage) IsDelivered(ctx context.Context, id string) (bool, error) {
	done, err := w.Done(ctx, []string{id})
	if err != nil {
		return false, err
	}
	return done[0] == Delivered, nil
}

// DueWithin lists, read only and earliest first, up to limit ids of the due index whose
// due time is at most Redis now + window, including those already overdue. A starting
// replica loads them into its wheel. A limit below 1 is an error. With several shards
// each shard lists up to limit at once (by its own primary's clock), and the lists are
// merged by due time, ties in shard order, to the first limit.
func (w *WheelStage) DueWithin(ctx context.Context, window time.Duration, limit int) ([]Due, error) {
	if limit < 1 {
		return nil, fmt.Errorf("store: due within: limit %d is not positive", limit)
	}
	parts := make([][]Due, len(w.shards))
	err := w.each(func(i int, s *shard) error {
		res, err := wheelDueWithinScript.Run(ctx, w.rdb, []string{s.due}, window.Milliseconds(), limit).StringSlice()
		if err != nil {
			return w.fail("due within", err)
		}
		if len(res)%2 != 0 {
			return errors.New("store: due within: odd reply length")
		}
		out := make([]Due, 0, len(res)/2)
		for i := 0; i < len(res); i += 2 {
			score, err := strconv.ParseFloat(res[i+1], 64)
			if err != nil {
				return fmt.Errorf("store: due within: score of %q: %w", res[i], err)
			}
			out = append(out, Due{ID: res[i], DueAt: time.UnixMilli(int64(score))})
		}
		parts[i] = out
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	out := slices.Concat(parts...)
	slices.SortStableFunc(out, func(a, b Due) int { return a.DueAt.Compare(b.DueAt) })
	return out[:min(len(out), limit)], nil
}

// Peek returns, read only, the entries of ids still in the wheel stage (an id claimed,
// released or cancelled meanwhile is left out), for operators: the console shows the
// targets of the entries due soonest.
func (w *WheelStage) Peek(ctx context.Context, ids []string) ([]Entry, error) {
	if len(ids) == 0 {
		return nil, nil
	}
	var recs []any
	if len(w.shards) == 1 {
		var err error
		if recs, err = w.rdb.HMGet(ctx, w.shards[0].entries, ids...).Result(); err != nil {
			return nil, w.fail("peek", err)
		}
	} else {
		// One pipeline: on a Redis Cluster, go-redis sends each shard's HMGET to its node.
		groups := w.candidates(len(ids), func(k int) string { return ids[k] })
		cmds := make([]*redis.SliceCmd, len(w.shards))
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, at := range groups {
				if len(at) == 0 {
					continue
				}
				fields := make([]string, len(at))
				for j, k := range at {
					fields[j] = ids[k]
				}
				cmds[i] = p.HMGet(ctx, w.shards[i].entries, fields...)
			}
			return nil
		})
		if err != nil {
			return nil, w.fail("peek", err)
		}
		recs = make([]any, len(ids))
		for i, at := range groups {
			for j, k := range at {
				if rec := cmds[i].Val()[j]; rec != nil {
					recs[k] = rec
				}
			}
		}
	}
	out := make([]Entry, 0, len(ids))
	for i, rec := range recs {
		s, ok := rec.(string)
		if !ok {
			continue
		}
		e, err := decodeWheelEntry(ids[i], []byte(s))
		if err != nil {
			return nil, fmt.Errorf("store: peek: %w", err)
		}
		out = append(out, e)
	}
	return out, nil
}

// Cancel cancels the alert id in the wheel stage, atomically: waiting in the due index
// (CancelRemoved), in flight (CancelTooLate), delivered (CancelAlreadyDelivered), handed
// off with its failure recorded in failed_sends (CancelRecorded: nothing changed),
// withheld as a step of an ended escalation episode (CancelWithheld: nothing changed), or
// not in Redis (CancelTombstoned). Removed and tombstoned ids get a tombstone that lives
// Options().CancelTTL. Only the wheel stage is looked at: an alert may also wait in
// failed_sends, so the service cancels through failed.Canceller, which asks both.
func (w *WheelStage) Cancel(ctx context.Context, id string) (CancelResult, error) {
	keys := func(s *shard) []string {
		return []string{s.due, s.inflight, s.entries, s.keys.done(id), s.keys.cancel(id), s.keys.tries(), s.keys.failed(), s.keys.parts(),
			s.keys.trace(id), s.keys.pending(), s.keys.pendingBy()}
	}
	code, err := w.onShard(ctx, id, wheelCancelScript, false, keys, id, w.opts.CancelTTL.Milliseconds()).Int()
	if err != nil {
		return 0, w.fail("cancel", err)
	}
	r := CancelResult(code)
	if r < CancelRemoved || r > CancelWithheld || r == CancelRowCancelled { // a row's answer, not the script's
		return 0, fmt.Errorf("store: cancel: unexpected script result %d", code)
	}
	return r, nil
}

// IsCancelled reports whether id has a cancel tombstone. The scheduler does not ask on
// hops (Put refuses a tombstoned id); operators and tests do.
func (w *WheelStage) IsCancelled(ctx context.Context, id string) (bool, error) {
	s, err := w.readShard(ctx, id)
	if err != nil {
		return false, err
	}
	n, err := w.rdb.Exists(ctx, s.keys.cancel(id)).Result()
	if err != nil {
		return false, w.fail("is cancelled", err)
	}
	return n == 1, nil
}

// Stats returns the number of entries waiting in the due indexes and in flight, in one
// pipeline (with several shards, the sums over the shards).
func (w *WheelStage) Stats(ctx context.Context) (waiting, inflight int64, err error) {
	dueCmds := make([]*redis.IntCmd, len(w.shards))
	inflightCmds := make([]*redis.IntCmd, len(w.shards))
	_, err = w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range w.shards {
			dueCmds[i] = p.ZCard(ctx, s.due)
			inflightCmds[i] = p.ZCard(ctx, s.inflight)
		}
		return nil
	})
	if err != nil {
		return 0, 0, w.fail("stats", err)
	}
	for i := range w.shards {
		waiting += dueCmds[i].Val()
		inflight += inflightCmds[i].Val()
	}
	return waiting, inflight, nil
}

// ErrLapsed is the error of Claim, ClaimOverdue, Adopt and Park by a replica that is not
// live (its liveness ran out, or it never beat) while liveness is on: no holding is ever
// created under a replica whose holdings others may be taking over. Nothing changed; the
// replica beats (Liveness.Beat) before it claims again.
var ErrLapsed = errors.New("the replica's liveness lapsed")

// fail wraps err for operation op; errors of an unreachable or unready Redis also wrap
// ErrUnavailable, a script's refusal of a lapsed replica ErrLapsed.
func (w *WheelStage) fail(op string, err error) error {
	if redis.HasErrorPrefix(err, "LAPSED") {
		return fmt.Errorf("store: %s: %w: %s", op, ErrLapsed, strings.TrimPrefix(err.Error(), "LAPSED "))
	}
	if redis.HasErrorPrefix(err, errFenced) {
		return fmt.Errorf("store: %s: %w: %w", op, ErrMovedOn, ErrUnavailable)
	}
	if errors.Is(err, ErrUnavailable) {
		return fmt.Errorf("store: %s: %w", op, err)
	}
	if wheelStageRetryable(err) {
		return fmt.Errorf("store: %s: %w: %w", op, err, ErrUnavailable)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}

// wheelStageRetryable reports whether err means Redis could not be reached or could not
// serve the command for now, as opposed to a reply that would not change on retry.
func wheelStageRetryable(err error) bool {
	switch {
	case errors.Is(err, context.Canceled):
		return false // the caller gave up; it knows
	case errors.Is(err, context.DeadlineExceeded), errors.Is(err, redis.ErrClosed),
		errors.Is(err, redis.ErrPoolTimeout), errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF):
		return true
	case redis.IsLoadingError(err), redis.IsReadOnlyError(err), redis.IsClusterDownError(err),
		redis.IsTryAgainError(err), redis.IsMasterDownError(err), redis.IsMaxClientsError(err),
		redis.HasErrorPrefix(err, "BUSY"):
		return true
	}
	var netErr net.Error
	return errors.As(err, &netErr)
}

// An entry is stored as one binary record (all integers are unsigned varints unless noted):
//
//	version (1 byte, 1) | due ms (signed varint) | hops | len(target) target |
//	property count, then per property in key order: len(key) key len(value) value |
//	body (the rest)
//
// The id is the hash field, not part of the record. A length-prefixed record, unlike
// JSON, carries arbitrary bytes in every field without escaping.
const wheelEntryV1 = 1

func encodeWheelEntry(e Entry) []byte {
	n := 1 + 3*binary.MaxVarintLen64 + len(e.Target) + len(e.Body)
	for k, v := range e.Props {
		n += 2*binary.MaxVarintLen64 + len(k) + len(v)
	}
	b := make([]byte, 0, n)
	b = append(b, wheelEntryV1)
	b = binary.AppendVarint(b, e.DueAt.UnixMilli())
	b = binary.AppendUvarint(b, uint64(max(e.Hops, 0)))
	b = appendWheelString(b, e.Target)
	b = binary.AppendUvarint(b, uint64(len(e.Props)))
	keys := make([]string, 0, len(e.Props))
	for k := range e.Props {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		b = appendWheelString(b, k)
		b = appendWheelString(b, e.Props[k])
	}
	return append(b, e.Body...)
}

func appendWheelString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errWheelEntryCorrupt = errors.New("corrupt entry record")

func decodeWheelEntry(id string, rec []byte) (Entry, error) {
	if len(rec) == 0 || rec[0] != wheelEntryV1 {
		return Entry{}, fmt.Errorf("entry %q: %w: unknown format", id, errWheelEntryCorrupt)
	}
	r := wheelRecordReader{b: rec[1:]}
	e := Entry{ID: id}
	e.DueAt = time.UnixMilli(r.varint())
	e.Hops = int(r.uvarint())
	e.Target = r.string()
	if n := r.uvarint(); n > 0 && !r.bad {
		if n > uint64(len(r.b)/2) { // a property takes at least two bytes
			r.bad = true
		} else {
			e.Props = make(map[string]string, n)
			for range n {
				k := r.string()
				e.Props[k] = r.string()
			}
		}
	}
	if r.bad {
		return Entry{}, fmt.Errorf("entry %q: %w: truncated", id, errWheelEntryCorrupt)
	}
	if len(r.b) > 0 {
		e.Body = r.b
	}
	return e, nil
}

// wheelRecordReader reads an entry record; after the first error every read returns zero
// and bad stays set.
type wheelRecordReader struct {
	b   []byte
	bad bool
}

func (r *wheelRecordReader) uvarint() uint64 {
	if r.bad {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wheelRecordReader) varint() int64 {
	if r.bad {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.bad = true
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *wheelRecordReader) string() string {
	n := r.uvarint()
	if r.bad || n > uint64(len(r.b)) {
		r.bad = true
		return ""
	}
	s := string(r.b[:n])
	r.b = r.b[n:]
	return s
}

// decodeClaimed decodes a claim script's flat reply id, record, tries, failure, parts,
// … of entries claimed by token. Each entry is decoded on its own: one whose fields
// cannot be read is Corrupt, and the others are still returned.
func decodeClaimed(res []any, token string) (Claimed, error) {
	const fields = 5
	if len(res)%fields != 0 {
		return Claimed{}, fmt.Errorf("reply length %d is not a multiple of %d", len(res), fields)
	}
	var out Claimed
	for i := 0; i < len(res); i += fields {
		var f [fields]string
		for k := range f {
			f[k], _ = res[i+k].(string) // scripts return strings; a missing one decodes as ""
		}
		e, err := decodeClaimedEntry(f, token)
		if err != nil {
			out.Corrupt = append(out.Corrupt, Corrupt{Claim: Claim{ID: f[0], Token: token}, Record: []byte(f[1]), Err: err})
			continue
		}
		out.Entries = append(out.Entries, e)
	}
	return out, nil
}

func decodeClaimedEntry(f [5]string, token string) (Entry, error) {
	e, err := decodeWheelEntry(f[0], []byte(f[1]))
	if err != nil {
		return Entry{}, err
	}
	e.Token = token
	if e.Tries, err = strconv.Atoi(f[2]); err != nil {
		return Entry{}, fmt.Errorf("entry %q: %w: tries %q", f[0], errWheelEntryCorrupt, f[2])
	}
	if f[3] != "" {
		e.Failure = []byte(f[3])
	}
	if e.PartsSent, err = strconv.Atoi(f[4]); err != nil || e.PartsSent < 0 {
		return Entry{}, fmt.Errorf("entry %q: %w: parts %q", f[0], errWheelEntryCorrupt, f[4])
	}
	return e, nil
}

// distinct is ids without repeats, in the order each first appears.
func distinct(ids []string) []string {
	seen := make(map[string]struct{}, len(ids))
	out := make([]string, 0, len(ids))
	for _, id := range ids {
		if _, ok := seen[id]; !ok {
			seen[id] = struct{}{}
			out = append(out, id)
		}
	}
	return out
}
