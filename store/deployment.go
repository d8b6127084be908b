package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key prefix is one deployment's (one topic and consumer group), and its replicas say
// in it which targets their configurations have:
//
//	{p}:deployment  string  "<topic>/<group>": the deployment the prefix belongs to
//	{p}:shards      string  the layout of its wheel stage: its number of shards
//	                        (redis.shards), or the move from one to another (moving.go)
//	{p}:targets     hash    target → when a replica last said it knows it, Unix ms by the
//	                        Redis clock (roster_affirm.lua)

// ErrPrefixTaken is returned by ClaimPrefix when the key prefix belongs to another
// deployment.
var ErrPrefixTaken = errors.New("store: the Redis key prefix belongs to another deployment")

// ClaimPrefix makes prefix deployment's ("<topic>/<group>"), unless another deployment's
// it already is: then the error wraps ErrPrefixTaken and names the owner. Two
// deployments on one prefix would take each other's alerts (each claims, and rejects,
// what the other scheduled), so the second must not start.
func ClaimPrefix(ctx context.Context, rdb redis.UniversalClient, prefix, deployment string) error {
	key := newKeys(prefix).deployment()
	prev, err := rdb.SetArgs(ctx, key, deployment, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil), err == nil && prev == deployment:
		return nil
	case err != nil:
		return redisFail("claim the key prefix", err)
	}
	return fmt.Errorf("%w: redis.keyPrefix %q is the deployment %q's (topic/group), not %q's; give each "+
		"deployment a prefix of its own (to move a drained deployment to another topic or group, delete the key %s)",
		ErrPrefixTaken, prefix, prev, deployment, key)
}

// ErrShardsChanged is returned by ClaimShards and AckLayout when a replica may not act
// in the layout it would: the count changed while the stage is not drained and moves
// cannot be followed (liveness off), or the deployment's layout moved on while the
// replica started.
var ErrShardsChanged = errors.New("store: redis.shards is not the deployment's")

// ClaimShards records that the deployment under prefix lays its wheel stage out in n
// shards, or finds how it does, and returns the layout this replica acts in. An alert's
// shard depends on the count:
//
//   - nothing recorded, or n already: n;
//   - another count m, and the stage drained (nothing waits, is in flight or parked,
//     nothing is listed as pending, no replica is live): n at once;
//   - another count m, not drained, and online (liveness on, so that the replicas that
//     act in a layout are known): the stage starts moving from m to n (moving.go), in
//     phase 1;
//   - a move under way: that move, whatever n is (the caller says so when n differs);
//
// and refused otherwise, the error wrapping ErrShardsChanged and naming what is left.
func ClaimShards(ctx context.Context, rdb redis.UniversalClient, prefix string, n int, online bool) (Layout, error) {
	key := newKeys(prefix).shardCount()
	want := strconv.Itoa(n)
	prev, err := rdb.SetArgs(ctx, key, want, redis.SetArgs{Mode: "NX", Get: true}).Result()
	switch {
	case errors.Is(err, redis.Nil), err == nil && prev == want:
		return Layout{Shards: n}, nil
	case err != nil:
		return Layout{}, redisFail("claim the shard count", err)
	}
	rec, err := ParseLayout(prev)
	if err != nil {
		return Layout{}, fmt.Errorf("%w: the key %s holds %w", ErrShardsChanged, key, err)
	}
	if rec.Moving() {
		return rec, nil
	}
	m := rec.Shards
	old := NewWheelStage(rdb, prefix, WheelStageOptions{Shards: m})
	left, err := old.drainLeft(ctx)
	if err != nil {
		return Layout{}, err
	}
	if left != "" {
		if !online {
			return Layout{}, fmt.Errorf("%w: it is %d, and the deployment's wheel stage has %d shards and is not drained (%s). "+
				"A count changes under load only with scheduler.liveness on; without it, drain first (docs/design.md, Shards), "+
				"or start this one with redis.shards: %d", ErrShardsChanged, n, m, left, m)
		}
		moving := Layout{Shards: n, From: m, Phase: 1}
		got, ok, err := casLayout(ctx, rdb, prefix, rec, moving)
		if err != nil || ok || got.Moving() {
			return got, err // started, or another replica started a move first: followed
		}
		return Layout{}, fmt.Errorf("%w: another replica changed it to %s meanwhile; start again", ErrShardsChanged, got)
	}
	set, err := rdb.SetArgs(ctx, key, want, redis.SetArgs{Mode: "XX", Get: true}).Result()
	if err != nil {
		return Layout{}, redisFail("claim the shard count", err)
	}
	if set != prev {
		return Layout{}, fmt.Errorf("%w: another replica changed it to %s meanwhile; start again", ErrShardsChanged, set)
	}
	// A replica of the old count that passed its own claim before this one's change may
	// have beaten since: then the change is taken back. One that beats later sees the new
	// count when it acks its layout (AckLayout) and does not start.
	view, err := old.Liveness(nil).View(ctx)
	if err != nil {
		return Layout{}, err
	}
	if len(view.Live) > 0 {
		if err := rdb.SetArgs(ctx, key, prev, redis.SetArgs{Mode: "XX"}).Err(); err != nil {
			return Layout{}, redisFail("claim the shard count", err)
		}
		return Layout{}, fmt.Errorf("%w: a replica of the deployment's count %d went live meanwhile (%s); the count stays %d",
			ErrShardsChanged, m, strings.Join(view.Live, ", "), m)
	}
	return Layout{Shards: n}, nil
}

// drainLeft says what the wheel stage holds that a change of its shard count would lose
// (entries, pending alerts, live replicas; a lapsed replica's holdings are entries), ""
// when nothing.
func (w *WheelStage) drainLeft(ctx context.Context) (string, error) {
	entryCmds := make([]*redis.IntCmd, len(w.shards))
	pendingCmds := make([]*redis.IntCmd, len(w.shards))
	_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
		for i, s := range w.shards {
			entryCmds[i] = p.HLen(ctx, s.entries)
			pendingCmds[i] = p.ZCard(ctx, s.keys.pending())
		}
		return nil
	})
	if err != nil {
		return "", w.fail("drain check", err)
	}
	var entries, pending int64
	for i := range w.shards {
		entries += entryCmds[i].Val()
		pending += pendingCmds[i].Val()
	}
	view, err := w.Liveness(nil).View(ctx)
	if err != nil {
		return "", err
	}
	var left []string
	if entries > 0 {
		left = append(left, fmt.Sprintf("%d alerts in the wheel stage", entries))
	}
	if pending > 0 {
		left = append(left, fmt.Sprintf("%d listed as pending", pending))
	}
	if len(view.Live) > 0 {
		left = append(left, fmt.Sprintf("replicas live in it: %s", strings.Join(view.Live, ", ")))
	}
	return strings.Join(left, "; "), nil
}

// Roster is what the replicas of a deployment say their configurations know: a target
// one replica has and another does not yet (a configuration rolled out replica by
// replica) is not unknown to the deployment.
type Roster struct {
	rdb redis.UniversalClient
	key string
}

// RosterPolicy is the name under which the roster holds the escalation policy name
// (target names hold no ":", so the two never meet): a replica says which policies its
// configuration has with its targets.
func RosterPolicy(name string) string { return "policy:" + name }

// NewRoster returns the roster in rdb under prefix.
func NewRoster(rdb redis.UniversalClient, prefix string) *Roster {
	return &Roster{rdb: rdb, key: newKeys(prefix).roster()}
}

var (
	rosterAffirmScript = script("roster_affirm.lua")
	rosterKnownScript  = script("roster_known.lua")
)

// Affirm records that a replica's configuration has targets, now by the Redis clock.
func (r *Roster) Affirm(ctx context.Context, targets []string) error {
	if len(targets) == 0 {
		return nil
	}
	args := make([]any, len(targets))
	for i, t := range targets {
		args[i] = t
	}
	if err := rosterAffirmScript.Run(ctx, r.rdb, []string{r.key}, args...).Err(); err != nil {
		return redisFail("affirm the targets", err)
	}
	return nil
}

// Known is how long ago, by the Redis clock, a replica last said its configuration has
// target; ok is false when none ever did.
func (r *Roster) Known(ctx context.Context, target string) (ago time.Duration, ok bool, err error) {
	ms, err := rosterKnownScript.Run(ctx, r.rdb, []string{r.key}, target).Int64()
	if err != nil {
		return 0, false, redisFail("read the roster", err)
	}
	if ms < 0 {
		return 0, false, nil
	}
	return time.Duration(ms) * time.Millisecond, true, nil
}
