package store

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/redis/go-redis/v9"
)

// A key prefix is one deployment's (one topic and consumer group), and its replicas say
// in it which targets their configurations have:
//
//	{p}:deployment  string  "<topic>/<group>": the deployment the prefix belongs to
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

// Roster is what the replicas of a deployment say their configurations know: a target
// one replica has and another does not yet (a configuration rolled out replica by
// replica) is not unknown to the deployment.
type Roster struct {
	rdb redis.UniversalClient
	key string
}

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
