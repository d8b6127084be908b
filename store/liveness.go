package store

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Liveness: each replica sharing a wheel stage beats (Liveness.Beat) every fraction of
// the liveness period T (WheelStageOptions.Liveness), and stays live until Redis now + T.
// One beat renews the replica, not each of its holdings, so its cost does not grow with
// what the replica holds; expiry is judged on Redis's clock alone. The scripts that
// change who holds an id keep an index of each replica's holdings (lua/lib_holding.lua)
// and refuse to create one for a replica that is not live (ErrLapsed). The sweeper's
// ClaimOverdue takes over the holdings of a replica that lapsed at once, rather than
// after each one's lease. A gap in everyone's beats longer than T/2 (Redis was down,
// restarted, failed over, or cut off from every replica) opens a quiet window of T from
// the first beat after it, in which nothing is taken over: a blip of Redis, however long,
// moves nothing of the replicas that beat again within T of its end.
//
// With several shards (WheelStageOptions.Shards) every shard keeps its own liveness keys,
// as each script checks liveness in its own slot: a beat renews the replica in every
// shard, a take-over or a leave runs in each shard on that shard's holdings, and a
// replica is gone in each shard once it holds nothing there.

var (
	liveBeatScript     = script("live_beat.lua")
	liveViewScript     = script("live_view.lua")
	liveTakeGoneScript = script("live_take_gone.lua")
	liveLeaveScript    = scriptWith("live_leave.lua", "lib_holding.lua")
)

// Liveness is the heartbeat of the replicas that share a wheel stage. It is safe for
// concurrent use.
type Liveness struct {
	w   *WheelStage
	rdb redis.UniversalClient
}

// Liveness returns the stage's heartbeat, with the stage's Options().Liveness as period,
// sending its calls through rdb: a client of its own, so that a beat never waits behind
// the hand-offs for a connection. A nil rdb uses the stage's client.
func (w *WheelStage) Liveness(rdb redis.UniversalClient) *Liveness {
	if rdb == nil {
		rdb = w.rdb
	}
	return &Liveness{w: w, rdb: rdb}
}

// errLivenessOff is the error of a beat of a stage whose liveness is off.
var errLivenessOff = errors.New("liveness is off (WheelStageOptions.Liveness is 0)")

// Period is the liveness period T: a replica that has not beaten for T has lapsed.
func (l *Liveness) Period() time.Duration { return l.w.opts.Liveness }

// BeatResult is what a beat found.
type BeatResult struct {
	// Lapsed reports that the replica had lapsed before this beat: other replicas may have
	// taken over some or all of what it held (it keeps the rest), and its claims of those
	// fail from now on (ErrNotHeld).
	Lapsed bool
	// Gone counts the replicas whose holdings were all taken over, or that left, and whose
	// wheels' entries no survivor has loaded yet (TakeGone).
	Gone int
	// Absent are the replicas not live: lapsed, gone, or departed (taken by TakeGone)
	// within DepartedFor; up to 64 of each kind. Their RocketMQ consumers may still look
	// connected to the broker (a paused process, a lost host: up to two minutes), so the
	// scheduler leaves their queues to the live consumers.
	Absent []string
}

// DepartedFor is how long a beat reports a departed replica absent: past the broker's
// expiry of a consumer connection that was not closed (channelExpiredTimeout 120 s, by a
// scan every 10 s), after which the broker no longer lists it.
const DepartedFor = 150 * time.Second

// Beat renews the liveness of replica (its id: no "/", as a claim token is the replica's
// id, "/", and more) until Redis now + the period, in one round trip whatever the replica
// holds, and tells whether it had lapsed and whether replicas are gone. With several
// shards it beats in every shard at once, one round trip each: the replica had lapsed
// when it had in any shard, Gone is the most any shard counts, and Absent joins the
// shards' lists. When a shard's beat fails the call fails, and the replica may have
// lapsed in that shard: the caller beats again.
func (l *Liveness) Beat(ctx context.Context, replica string) (BeatResult, error) {
	if err := checkReplica(replica); err != nil {
		return BeatResult{}, fmt.Errorf("store: beat: %w", err)
	}
	period := l.w.opts.Liveness
	if period == 0 {
		return BeatResult{}, fmt.Errorf("store: beat: %w", errLivenessOff)
	}
	parts := make([]BeatResult, len(l.w.shards))
	err := l.w.each(func(i int, s *shard) error {
		keys := []string{s.keys.live(), s.keys.liveMeta(), s.keys.gone(), s.keys.departed()}
		res, err := liveBeatScript.Run(ctx, l.rdb, keys, replica, period.Milliseconds(), DepartedFor.Milliseconds()).Slice()
		if err != nil {
			return l.w.fail("beat", err)
		}
		if len(res) != 3 {
			return fmt.Errorf("store: beat: reply of %d items, want 3", len(res))
		}
		lapsed, _ := res[0].(int64)
		gone, _ := res[1].(int64)
		b := BeatResult{Lapsed: lapsed == 1, Gone: int(gone)}
		absent, _ := res[2].([]any)
		for _, a := range absent {
			if r, ok := a.(string); ok && !slices.Contains(b.Absent, r) {
				b.Absent = append(b.Absent, r)
			}
		}
		parts[i] = b
		return nil
	})
	if err != nil {
		return BeatResult{}, err
	}
	b := parts[0]
	for _, p := range parts[1:] {
		b.Lapsed = b.Lapsed || p.Lapsed
		b.Gone = max(b.Gone, p.Gone)
		for _, r := range p.Absent {
			if !slices.Contains(b.Absent, r) {
				b.Absent = append(b.Absent, r)
			}
		}
	}
	return b, nil
}

// TakeGone takes the replica that became gone first (its holdings were all taken over,
// or it left), for this replica to load the entries the departed one's wheel held:
// nobody else fires them before they are overdue. It returns "" when none is gone. Each
// gone replica is taken once, by one survivor.
//
// With several shards a replica becomes gone in each shard on its own, and shard 0's
// departed set records which replicas a survivor took. TakeGone looks at the shards in
// order until one has a gone replica not taken yet (shard 0 first, one round trip each);
// a replica found in another shard is taken only if shard 0 says nobody took it yet (one
// more round trip), and is then taken from the other shards too (one round trip each, at
// once). So concurrent survivors take a replica once. A shard whose take-over of the
// replica ends after a survivor took it drops it from its gone set, unless that was so
// long after (DepartedFor) that shard 0 forgot: then it is taken again, and loading the
// due entries and taking over its failed-sends rows again is harmless.
func (l *Liveness) TakeGone(ctx context.Context) (string, error) {
	shards := l.w.shards
	if len(shards) == 1 {
		return l.takeGone(ctx, shards[0], "", false)
	}
	for i, s := range shards {
		for {
			replica, err := l.takeGone(ctx, s, "", i == 0)
			if err != nil || replica == "" {
				if err != nil {
					return "", err
				}
				break
			}
			if i > 0 {
				first, err := l.takeGone(ctx, shards[0], replica, true)
				if err != nil {
					return "", err
				}
				if first == "" {
					continue // another survivor took it
				}
			}
			err = l.w.each(func(j int, s *shard) error {
				if j == 0 || j == i {
					return nil
				}
				_, err := l.takeGone(ctx, s, replica, false)
				return err
			})
			return replica, err
		}
	}
	return "", nil
}

// takeGone takes from shard s the replica gone first, or replica when it is gone there
// (live_take_gone.lua); with once, not a replica taken before, and replica even when it
// is not gone there.
func (l *Liveness) takeGone(ctx context.Context, s *shard, replica string, once bool) (string, error) {
	var args []any
	if replica != "" || once {
		args = append(args, replica)
	}
	if once {
		args = append(args, "once")
	}
	replica, err := liveTakeGoneScript.Run(ctx, l.rdb, []string{s.keys.gone(), s.keys.departed()}, args...).Text()
	switch {
	case errors.Is(err, redis.Nil):
		return "", nil
	case err != nil:
		return "", l.w.fail("take gone", err)
	}
	return replica, nil
}

// leaveBatch bounds the holdings one run of Leave's script ends, so that a replica
// holding many does not stall Redis.
const leaveBatch = 5000

// Leave hands back everything replica holds, but the ids in keep (hand-offs that still
// run: a request on the wire), as a take-over of it would: its claims and parks end, and
// the sweeper of any replica claims them at its next run, those confirmed within the
// guard (see WheelStage.Confirm) once it ends. It returns how many holdings it ended and
// how many replica still holds (the kept ones). Once it holds nothing, replica is no
// longer live, and gone (TakeGone): the others load its wheel's due-soon entries. A
// replica that stops calls it once with the ids of its hand-offs still running, and
// again, with none, after they ended (or at its deadline). With several shards it leaves
// every shard at once, each with the kept ids of that shard, and sums what they report;
// the replica is gone in each shard where it holds nothing.
func (l *Liveness) Leave(ctx context.Context, replica string, keep ...string) (ended, left int, err error) {
	if err := checkReplica(replica); err != nil {
		return 0, 0, fmt.Errorf("store: leave: %w", err)
	}
	groups := l.w.candidates(len(keep), func(k int) string { return keep[k] }) // both shards while the stage moves
	endeds := make([]int, len(l.w.shards))
	lefts := make([]int, len(l.w.shards))
	err = l.w.each(func(i int, s *shard) error {
		kept := make([]string, len(groups[i]))
		for j, k := range groups[i] {
			kept[j] = keep[k]
		}
		var err error
		endeds[i], lefts[i], err = l.leave(ctx, s, replica, kept)
		return err
	})
	for i := range endeds {
		ended += endeds[i]
		left += lefts[i]
	}
	return ended, left, err
}

// leave is Leave in shard s.
func (l *Liveness) leave(ctx context.Context, s *shard, replica string, keep []string) (ended, left int, err error) {
	keys := []string{s.inflight, s.keys.owner(), s.keys.by(), s.keys.held(), s.keys.live(), s.keys.guard(),
		s.keys.gone()}
	args := make([]any, 0, len(keep)+2)
	args = append(args, replica, leaveBatch)
	for _, id := range keep {
		args = append(args, id)
	}
	for {
		res, err := l.w.write(ctx, liveLeaveScript, keys, args...).Int64Slice()
		if err != nil {
			return ended, left, l.w.fail("leave", err)
		}
		if len(res) != 2 {
			return ended, left, fmt.Errorf("store: leave: reply of %d items, want 2", len(res))
		}
		ended += int(res[0])
		left = int(res[1])
		if res[0] < leaveBatch {
			return ended, left, nil
		}
	}
}

func checkReplica(replica string) error {
	if replica == "" || strings.Contains(replica, "/") {
		return fmt.Errorf("replica id %q: want a non-empty id without \"/\"", replica)
	}
	return nil
}

// LivenessView is what the liveness keys say at one moment of Redis's clock.
type LivenessView struct {
	// Now is Redis's clock when the view was read.
	Now time.Time
	// Live are the replicas live at Now; Lapsed those whose liveness ran out before Now
	// and whose holdings are not all taken over yet. Both are sorted by the end of their
	// liveness, earliest first.
	Live, Lapsed []string
	// LastBeat is the last beat of any replica; zero when none ever beat.
	LastBeat time.Time
	// QuietUntil is the end of the last quiet window (no take-over before it); zero when
	// there was none.
	QuietUntil time.Time
	// Gone are the replicas whose holdings were all taken over, in the order the
	// take-overs finished.
	Gone []string
}

// View reads the liveness keys, in one round trip and read only, for metrics, the
// console and tests. With several shards it reads every shard at once and merges the
// views: Now is shard 0's; a replica is lapsed when it is in any shard, and live when it
// is live in every shard that lists it; LastBeat and QuietUntil are the latest; Gone joins
// the shards' lists, shard 0's first.
func (l *Liveness) View(ctx context.Context) (LivenessView, error) {
	parts := make([]LivenessView, len(l.w.shards))
	err := l.w.each(func(i int, s *shard) error {
		res, err := liveViewScript.Run(ctx, l.rdb, []string{s.keys.live(), s.keys.liveMeta(), s.keys.gone()}).Slice()
		if err != nil {
			return l.w.fail("liveness view", err)
		}
		if parts[i], err = decodeLivenessView(res); err != nil {
			return fmt.Errorf("store: liveness view: %w", err)
		}
		return nil
	})
	if err != nil {
		return LivenessView{}, err
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return mergeLivenessViews(parts), nil
}

// mergeLivenessViews merges the views of several shards (see View).
func mergeLivenessViews(parts []LivenessView) LivenessView {
	v := LivenessView{Now: parts[0].Now}
	lapsed := map[string]bool{}
	var listed []string
	for _, p := range parts {
		for _, r := range p.Lapsed {
			lapsed[r] = true
		}
		for _, r := range slices.Concat(p.Live, p.Lapsed) {
			if !slices.Contains(listed, r) {
				listed = append(listed, r)
			}
		}
		if p.LastBeat.After(v.LastBeat) {
			v.LastBeat = p.LastBeat
		}
		if p.QuietUntil.After(v.QuietUntil) {
			v.QuietUntil = p.QuietUntil
		}
		for _, r := range p.Gone {
			if !slices.Contains(v.Gone, r) {
				v.Gone = append(v.Gone, r)
			}
		}
	}
	for _, r := range listed {
		if lapsed[r] {
			v.Lapsed = append(v.Lapsed, r)
		} else {
			v.Live = append(v.Live, r)
		}
	}
	return v
}

func decodeLivenessView(res []any) (LivenessView, error) {
	if len(res) != 5 {
		return LivenessView{}, fmt.Errorf("reply of %d items, want 5", len(res))
	}
	var v LivenessView
	var err error
	if v.Now, err = unixMilli(res[0], false); err != nil {
		return LivenessView{}, fmt.Errorf("now: %w", err)
	}
	replicas, _ := res[1].([]any)
	for i := 0; i+1 < len(replicas); i += 2 {
		id, _ := replicas[i].(string)
		until, err := unixMilli(replicas[i+1], false)
		if err != nil {
			return LivenessView{}, fmt.Errorf("liveness of %q: %w", id, err)
		}
		if until.Before(v.Now) {
			v.Lapsed = append(v.Lapsed, id)
		} else {
			v.Live = append(v.Live, id)
		}
	}
	if v.LastBeat, err = unixMilli(res[2], true); err != nil {
		return LivenessView{}, fmt.Errorf("last beat: %w", err)
	}
	if v.QuietUntil, err = unixMilli(res[3], true); err != nil {
		return LivenessView{}, fmt.Errorf("quiet window: %w", err)
	}
	gone, _ := res[4].([]any)
	for _, g := range gone {
		id, _ := g.(string)
		v.Gone = append(v.Gone, id)
	}
	return v, nil
}

// unixMilli reads a script's Unix ms reply; "" is the zero time when empty is allowed.
func unixMilli(v any, empty bool) (time.Time, error) {
	s, _ := v.(string)
	if s == "" && empty {
		return time.Time{}, nil
	}
	ms, err := strconv.ParseFloat(s, 64) // a sorted set's score may come as a float
	if err != nil {
		return time.Time{}, fmt.Errorf("Unix ms %q: %w", s, err)
	}
	return time.UnixMilli(int64(ms)), nil
}
