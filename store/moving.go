package store

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/redis/go-redis/v9"
)

// Online resharding. A deployment changes redis.shards replica by replica, under load,
// by moving its wheel stage from the old count m to the new count n in two phases that
// the record {p}:shards names (Layout):
//
//	"m"          settled: every id in its shard of m
//	"m>n"        phase 1: every replica scans the shards of both counts; an id's records
//	             stay in its shard of m, unless it moved (below)
//	"m>n+@<ms>"  phase 2, since ms: an id with no record in its shard of m moves to its
//	             shard of n, the move marked in the old shard ({p}:fwd:<id>); an id with
//	             records there stays until they end
//
// The first replica started with n while the stage is laid out in m (and not drained)
// begins phase 1; every replica that starts during a move follows the record, whatever
// its own redis.shards. Phase 2 begins once every replica in the liveness set has said
// (AckLayout) that it scans both counts (AdvanceLayout), so no replica that looks only
// at the shards of m is live while an id moves; the shards of m are fenced first, so one
// that comes back (paused, cut off) writes nothing there, and its next ack stops it. The
// move settles at n (SettleLayout) once no shard of m holds an alert placed the old way
// that is still to be handed off, and has held none for the longest life of a record of
// an alert that is over (a done marker's, a tombstone's); the fences are then lifted
// (LiftFences).
//
// Every script of an id (Put, Cancel, Reschedule, SettleRequeue, TraceHop, Unlist) runs
// first, while the stage moves, on the id's old shard, behind lib_route.lua: the script
// either does its work there, atomically with the check, or answers that the id is in
// its new shard, where it then runs. A claim carries the shard it was taken from, so a
// hand-off's confirm, give back and release go to that shard; reads of an id look at the
// old shard's mark. Scans (the fire loop, the sweeper, pending, liveness) run on the
// shards of both counts.

// Layout is how a deployment lays its wheel stage out over shards (the record
// {p}:shards).
type Layout struct {
	// Shards is the count ids are placed by once they move; From, while the stage moves
	// to Shards, the count it moves from (0 when settled).
	Shards, From int
	// Phase is 1 or 2 while moving (0 when settled); Since, in phase 2, when it began by
	// the Redis clock.
	Phase int
	Since time.Time
}

// Moving reports whether the stage moves from one count to another.
func (l Layout) Moving() bool { return l.From > 0 }

// String is the layout as the record holds it: "3", "1>3" or "1>3+@<Unix ms>".
func (l Layout) String() string {
	switch {
	case !l.Moving():
		return strconv.Itoa(l.Shards)
	case l.Phase < 2:
		return fmt.Sprintf("%d>%d", l.From, l.Shards)
	}
	return fmt.Sprintf("%d>%d+@%d", l.From, l.Shards, l.Since.UnixMilli())
}

// move is the part of String that names the move, without its phase: "1>3".
func (l Layout) move() string { return fmt.Sprintf("%d>%d", l.From, l.Shards) }

// ParseLayout reads a layout as Layout.String writes it.
func ParseLayout(s string) (Layout, error) {
	bad := fmt.Errorf("%q is not a shard layout (\"3\", \"1>3\" or \"1>3+@<ms>\")", s)
	from, to, moving := strings.Cut(s, ">")
	if !moving {
		n, err := strconv.Atoi(s)
		if err != nil || n < 1 {
			return Layout{}, bad
		}
		return Layout{Shards: n}, nil
	}
	l := Layout{Phase: 1}
	if count, since, ok := strings.Cut(to, "+@"); ok {
		ms, err := strconv.ParseInt(since, 10, 64)
		if err != nil || ms <= 0 {
			return Layout{}, bad
		}
		to, l.Phase, l.Since = count, 2, time.UnixMilli(ms)
	}
	var err1, err2 error
	l.From, err1 = strconv.Atoi(from)
	l.Shards, err2 = strconv.Atoi(to)
	if err1 != nil || err2 != nil || l.From < 1 || l.Shards < 1 || l.From == l.Shards {
		return Layout{}, bad
	}
	return l, nil
}

// Compatible reports whether a replica acting in layout l may run while the record says
// rec: the phases next to each other, of one move, or a settled count and the move that
// starts from it (phase 1 keeps every id where the settled count puts it), or phase 2
// and the count it settled at (phase 2 places every id as that count does, as its old
// shards hold nothing more).
func (l Layout) Compatible(rec Layout) bool {
	switch {
	case l == rec, l.Moving() && rec.Moving() && l.move() == rec.move():
		return true
	case !l.Moving():
		return rec.Moving() && rec.Phase == 1 && rec.From == l.Shards
	case l.Phase == 2:
		return !rec.Moving() && rec.Shards == l.Shards
	}
	return false
}

// movingStage is what a WheelStage that moves from one count to another knows of it.
type movingStage struct {
	from  int      // the old count
	old   []*shard // the old count's shards, in order: those the new count shares are the new count's own
	phase atomic.Int32
}

// Layout returns the layout the stage acts in now.
func (w *WheelStage) Layout() Layout {
	l := Layout{Shards: w.placed}
	if w.moving != nil {
		l.From, l.Phase = w.moving.from, int(w.moving.phase.Load())
	}
	return l
}

// PlaceNew moves a stage in phase 1 to phase 2 (the record said so, AdvanceLayout):
// ids with no record in their old shard move to their new one from now on.
func (w *WheelStage) PlaceNew() {
	if w.moving != nil {
		w.moving.phase.Store(2)
	}
}

// oldOf returns id's shard of the old count while the stage moves, nil when it does not
// or when the two counts put id in the same shard.
func (w *WheelStage) oldOf(id string) *shard {
	if w.moving == nil {
		return nil
	}
	old := w.moving.old[shardIndex(id, w.moving.from)]
	if old == w.shardOf(id) {
		return nil
	}
	return old
}

// candidates returns, for each shard, the positions in 0…n-1 of the ids (id(k)) whose
// entry it may hold: its shard, and while the stage moves its old shard too. An entry is
// in one of them only; a done marker may be in both (MarkAllDelivered), which is no harm.
func (w *WheelStage) candidates(n int, id func(k int) string) [][]int {
	out := w.group(n, id)
	if w.moving == nil {
		return out
	}
	for k := range n {
		if old := w.oldOf(id(k)); old != nil {
			out[old.i] = append(out[old.i], k)
		}
	}
	return out
}

// idScript is a script of one id in two forms: as it is, and behind lib_route.lua's
// guard (its last key fwd, its last two arguments the phase and fwd's lifetime): on the
// id's old shard while the stage moves, and on its shard while the stage is settled,
// where the guard only checks the stage was not moved away from.
type idScript struct {
	plain, guarded *redis.Script
}

// errForwarded is the guard's answer when the id lives in its new shard; errFenced when
// the stage is settled in a count that a move left (phase 2): the replica must start
// again to follow it.
const (
	errForwarded = "RDFWD"
	errFenced    = "RDLAYOUT"
)

// ErrMovedOn wraps the error of a write of a replica that acts in a settled count the
// deployment's wheel stage moves away from (phase 2 began while it was paused, or cut
// off): it changes nothing, and the replica starts again to follow the move. It also
// wraps ErrUnavailable: what it was storing is kept and tried again.
var ErrMovedOn = errors.New("store: the deployment's wheel stage moved on to another shard count")

func byIDScript(name string, libs ...string) idScript {
	var src strings.Builder
	for _, lib := range libs {
		src.WriteString(mustRead("lua/" + lib))
	}
	return newIDScript(src.String(), mustRead("lua/"+name))
}

// newIDScript is the idScript of the script body after the functions of libs.
func newIDScript(libs, body string) idScript {
	guarded := libs + mustRead("lua/lib_route.lua") + "local function run(KEYS, ARGV)\n" + body + "\nend\n" +
		"local ttl = table.remove(ARGV)\nlocal phase = table.remove(ARGV)\n" +
		"local to = route(table.remove(KEYS), phase, ttl)\n" +
		"if to == 'moved' then\n  return redis.error_reply('" + errForwarded + " the id is in its new shard')\nend\n" +
		"if to == 'fenced' then\n  return redis.error_reply('" + errFenced + " the wheel stage moved on to another shard count; this replica acts in the old one alone')\nend\n" +
		"return run(KEYS, ARGV)\n"
	return idScript{plain: redis.NewScript(libs + body), guarded: redis.NewScript(guarded)}
}

// onShard runs sc for id on the shard that holds id's records (keys builds the script's
// keys on a shard), by write when write is set, else by a plain run: on id's shard,
// or, while the stage moves, on its old shard behind the guard first.
func (w *WheelStage) onShard(ctx context.Context, id string, sc idScript, write bool, keys func(s *shard) []string, args ...any) *redis.Cmd {
	run := func(s *redis.Script, keys []string, args ...any) *redis.Cmd {
		if write {
			return w.write(ctx, s, keys, args...)
		}
		return s.Run(ctx, w.rdb, keys, args...)
	}
	s := w.shardOf(id)
	if w.moving == nil {
		settled := append(append([]any{}, args...), "0:"+strconv.Itoa(w.placed), 0)
		return run(sc.guarded, append(keys(s), s.keys.fwd(id)), settled...)
	}
	if old := w.oldOf(id); old != nil {
		guarded := append(append([]any{}, args...), w.moving.phase.Load(), w.fwdTTL().Milliseconds())
		cmd := run(sc.guarded, append(keys(old), old.keys.fwd(id)), guarded...)
		if !redis.HasErrorPrefix(cmd.Err(), errForwarded) {
			return cmd
		}
	}
	return run(sc.plain, keys(s), args...)
}

// fwdTTL is how long the mark of a moved id lives in its old shard: longer than any
// record of the id in its new one.
func (w *WheelStage) fwdTTL() time.Duration { return w.opts.CancelTTL + w.opts.DoneTTL }

// readShard returns the shard whose records of id a read looks at: its old shard while
// the stage moves, unless the id moved.
func (w *WheelStage) readShard(ctx context.Context, id string) (*shard, error) {
	old := w.oldOf(id)
	if old == nil {
		return w.shardOf(id), nil
	}
	n, err := w.rdb.Exists(ctx, old.keys.fwd(id)).Result()
	if err != nil {
		return nil, w.fail("find the shard of an id", err)
	}
	if n == 1 {
		return w.shardOf(id), nil
	}
	return old, nil
}

// TraceKeys returns the keys id's trace may be under: its shard's, and while the stage
// moves its old shard's.
func (w *WheelStage) TraceKeys(id string) []string {
	keys := []string{w.shardOf(id).keys.trace(id)}
	if old := w.oldOf(id); old != nil {
		keys = append(keys, old.keys.trace(id))
	}
	return keys
}

// ErrMoving wraps the error of a change of redis.shards while the stage still moves.
var ErrMoving = errors.New("store: the wheel stage still moves to another shard count")

var (
	layoutCASScript     = script("layout_cas.lua")
	layoutAckScript     = script("layout_ack.lua")
	layoutAdvanceScript = script("layout_advance.lua")
)

// ReadLayout reads the deployment's layout; ok is false when none is recorded.
func ReadLayout(ctx context.Context, rdb redis.UniversalClient, prefix string) (l Layout, ok bool, err error) {
	s, err := rdb.Get(ctx, newKeys(prefix).shardCount()).Result()
	if errors.Is(err, redis.Nil) {
		return Layout{}, false, nil
	}
	if err != nil {
		return Layout{}, false, redisFail("read the shard layout", err)
	}
	l, err = ParseLayout(s)
	if err != nil {
		return Layout{}, false, fmt.Errorf("%w: the key %s holds %w", ErrShardsChanged, newKeys(prefix).shardCount(), err)
	}
	return l, true, nil
}

// casLayout changes the record from prev to next, unless it holds something else: then
// it returns that.
func casLayout(ctx context.Context, rdb redis.UniversalClient, prefix string, prev, next Layout) (Layout, bool, error) {
	lift := "" // a move that settles leaves its fences to be lifted
	if prev.Moving() && !next.Moving() {
		lift = strconv.Itoa(prev.From)
	}
	k := newKeys(prefix)
	got, err := layoutCASScript.Run(ctx, rdb, []string{k.shardCount(), k.fenceLift()}, prev.String(), next.String(), lift).Text()
	if err != nil {
		return Layout{}, false, redisFail("change the shard layout", err)
	}
	if got == next.String() {
		return next, true, nil
	}
	l, err := ParseLayout(got)
	return l, false, err
}

// AckLayout says, for replica, that it acts in layout l, and checks that the record
// allows it (Layout.Compatible), atomically: a move's phase 2 never begins while a
// replica that looks only at the old count is live (AdvanceLayout), and one that would
// start after it refuses. A replica acks before its first beat's work begins, and again
// each time its layout changes. The error wraps ErrShardsChanged when it may not run.
func AckLayout(ctx context.Context, rdb redis.UniversalClient, prefix, replica string, l Layout) error {
	k := newKeys(prefix)
	got, err := layoutAckScript.Run(ctx, rdb, []string{k.shardCount(), k.layoutAcks(), k.fence()}, replica, l.String()).StringSlice()
	if err != nil || len(got) != 2 {
		return redisFail("say the shard layout", cmp.Or(err, errors.New("unexpected reply")))
	}
	rec, err := ParseLayout(got[0])
	if err != nil {
		return fmt.Errorf("%w: %w", ErrShardsChanged, err)
	}
	if !l.Compatible(rec) || (!l.Moving() && got[1] == strconv.Itoa(l.Shards)) {
		return fmt.Errorf("%w: this replica acts in the layout %s, and the deployment's is %s now (moving on from %s); start it again to follow",
			ErrShardsChanged, l, rec, cmp.Or(got[1], "nothing"))
	}
	return nil
}

// AdvanceLayout moves a move in phase 1 to phase 2 once every replica live in the
// stage (the liveness of shard 0, which every replica beats in) has acked the move, and
// returns the record's layout: the caller's stage follows it (WheelStage.PlaceNew).
//
// Before it advances, it fences every shard of the old count ({p}:fence holds the old
// count): a replica that acts in the old count alone and was not live when the acks were
// counted (paused past its liveness, cut off) can no longer write an id there
// (lua/lib_route.lua's guard fails, ErrMovedOn), and its AckLayout tells it to start
// again. The fence stays until the move settles.
func AdvanceLayout(ctx context.Context, rdb redis.UniversalClient, prefix string, l Layout) (Layout, error) {
	k := newKeys(prefix)
	advance := func(mode string) (string, error) {
		got, err := layoutAdvanceScript.Run(ctx, rdb, []string{k.shardCount(), k.layoutAcks(), k.live()}, l.String(), l.move(), mode).Text()
		if err != nil {
			return "", redisFail("advance the shard move", err)
		}
		return got, nil
	}
	got, err := advance("check")
	if err == nil && got == "ready" {
		if _, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i := range l.From {
				p.Set(ctx, k.shard(i, l.From).fence(), strconv.Itoa(l.From), 0)
			}
			return nil
		}); err != nil {
			return Layout{}, redisFail("fence the old shard count", err)
		}
		got, err = advance("set")
	}
	if err != nil {
		return Layout{}, err
	}
	rec, err := ParseLayout(got)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: %w", ErrShardsChanged, err)
	}
	return rec, nil
}

// SettleLayout ends a move in phase 2 whose old count's records have all ended, and
// returns the record's layout, settled or not. The old count's shards (those the new
// count shares too) must hold nothing still to be handed off of an alert placed the old
// way: no entry and no pending alert (hopping ones are listed too) whose new shard is
// another. From the first look that finds them so, no record is written there again but
// for alerts that are over (a done marker, a tombstone), so once settleAfter has passed
// since (the longest life of a done marker or a tombstone) every record of the old count
// has ended. The record then names the new count alone, the fences go, and replicas that
// start act in the new count; those in phase 2 go on as they are. The look scans the old
// shards' entries and pending alerts: callers make it now and then, not at every beat.
func SettleLayout(ctx context.Context, rdb redis.UniversalClient, prefix string, l Layout, settleAfter time.Duration, now time.Time) (Layout, error) {
	if l.Phase != 2 {
		return l, nil
	}
	k := newKeys(prefix)
	left, err := NewWheelStage(rdb, prefix, WheelStageOptions{Shards: l.Shards, From: l.From, Phase: 2}).oldLeft(ctx)
	if err != nil {
		return l, err
	}
	if left {
		if err := rdb.Del(ctx, k.moveClear()).Err(); err != nil {
			return l, redisFail("note the shard move's progress", err)
		}
		return l, nil
	}
	clear := fmt.Sprintf("%s|%d", l.move(), now.UnixMilli())
	prev, err := rdb.SetArgs(ctx, k.moveClear(), clear, redis.SetArgs{Mode: "NX", Get: true}).Result()
	if err != nil && !errors.Is(err, redis.Nil) {
		return l, redisFail("note the shard move's progress", err)
	}
	if move, ms, ok := strings.Cut(prev, "|"); ok && move == l.move() {
		if since, err := strconv.ParseInt(ms, 10, 64); err == nil && now.Sub(time.UnixMilli(since)) < settleAfter {
			return l, nil
		}
	} else {
		if prev != "" { // another move's: this one's starts now
			if err := rdb.Set(ctx, k.moveClear(), clear, 0).Err(); err != nil {
				return l, redisFail("note the shard move's progress", err)
			}
		}
		if settleAfter > 0 {
			return l, nil
		}
	}
	rec, ok, err := casLayout(ctx, rdb, prefix, l, Layout{Shards: l.Shards})
	if err != nil || !ok {
		return rec, err
	}
	if err := rdb.Del(ctx, k.moveClear()).Err(); err != nil {
		return rec, redisFail("note the shard move's progress", err)
	}
	return rec, LiftFences(ctx, rdb, prefix)
}

// LiftFences lifts the fences of a move that settled (AdvanceLayout wrote them; the
// settle noted which count's shards hold them): a replica settled in that count later
// (the count moved back to it) must not find them. Every replica calls it every
// liveness period, so a settle cut off before it lifted them is finished by another;
// with nothing to lift it is one read.
func LiftFences(ctx context.Context, rdb redis.UniversalClient, prefix string) error {
	k := newKeys(prefix)
	count, err := rdb.Get(ctx, k.fenceLift()).Result()
	if errors.Is(err, redis.Nil) {
		return nil
	}
	if err != nil {
		return redisFail("read the fences to lift", err)
	}
	n, err := strconv.Atoi(count)
	if err != nil || n < 1 || n > 1<<16 {
		return rdb.Del(ctx, k.fenceLift()).Err()
	}
	_, err = rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i := range n {
			p.Del(ctx, k.shard(i, n).fence())
		}
		return nil
	})
	if err == nil {
		err = rdb.Del(ctx, k.fenceLift()).Err()
	}
	if err != nil {
		return redisFail("lift the old shard count's fences", err)
	}
	return nil
}

// oldLeft reports whether a shard of the old count holds an entry or a pending alert
// placed the old way: one whose shard of the new count is another. It reads the ids of
// the due, in-flight and pending indexes (a parked entry is pending too), not the
// entries' records.
func (w *WheelStage) oldLeft(ctx context.Context) (bool, error) {
	if w.moving == nil {
		return false, nil
	}
	placedOld := func(s *shard, ids []string) bool {
		for _, id := range ids {
			if w.oldOf(id) == s {
				return true
			}
		}
		return false
	}
	seen := make(map[*shard]bool)
	for _, s := range w.moving.old {
		if seen[s] {
			continue
		}
		seen[s] = true
		for _, set := range []string{s.due, s.inflight, s.keys.pending()} { // ids with their scores, no records
			for cursor := uint64(0); ; {
				pairs, next, err := w.rdb.ZScan(ctx, set, cursor, "", 1000).Result()
				if err != nil {
					return false, w.fail("look at the old shards", err)
				}
				ids := make([]string, 0, len(pairs)/2)
				for i := 0; i+1 < len(pairs); i += 2 {
					ids = append(ids, pairs[i])
				}
				if placedOld(s, ids) {
					return true, nil
				}
				if cursor = next; cursor == 0 {
					break
				}
			}
		}
	}
	return false, nil
}

// In returns o laid out as l: its count, and the move l names.
func (o WheelStageOptions) In(l Layout) WheelStageOptions {
	o.Shards, o.From, o.Phase = l.Shards, l.From, l.Phase
	return o
}

// OpenWheelStage returns the wheel stage under prefix laid out as its deployment's record
// says (ReadLayout), or as opts says when nothing is recorded: for operators' commands,
// which look at a stage without acting in it.
func OpenWheelStage(ctx context.Context, rdb redis.UniversalClient, prefix string, opts WheelStageOptions) (*WheelStage, error) {
	l, ok, err := ReadLayout(ctx, rdb, prefix)
	if err != nil {
		return nil, err
	}
	if ok {
		opts = opts.In(l)
	}
	return NewWheelStage(rdb, prefix, opts), nil
}

// SettleTurn reports whether this replica takes the deployment's next look at whether a
// move settles (SettleLayout scans the old shards): one replica in every period.
func SettleTurn(ctx context.Context, rdb redis.UniversalClient, prefix string, period time.Duration) (bool, error) {
	ok, err := rdb.SetArgs(ctx, newKeys(prefix).settleTurn(), "1", redis.SetArgs{Mode: "NX", TTL: period}).Result()
	if errors.Is(err, redis.Nil) {
		return false, nil
	}
	if err != nil {
		return false, redisFail("take the settle look's turn", err)
	}
	return ok == "OK", nil
}
