package store

import (
	"context"
	"fmt"
	"slices"
	"time"

	"github.com/redis/go-redis/v9"
)

// Parking: when a target's robots are busy, the alerts a replica holds for it are parked
// in Redis instead of waiting in that replica's queue, so that whichever replica gets the
// target's next send adopts every parked alert of the target and merges them into that
// one message (see sender's share.go). A parked entry stays in flight, owned by the
// park's token instead of a claim, in the target's park {p}:park:<g> by due time, of the
// entry's shard (a target has a park in every shard).

var (
	wheelParkScript  = scriptWith("wheel_park.lua", "lib_holding.lua")
	wheelAdoptScript = scriptWith("wheel_adopt.lua", "lib_holding.lua")
)

func (k keys) park(target string) string { return k.stage() + "park:" + target }

// turns holds the next turn of each share of target's park (wheel_park.lua).
func (k keys) turns(target string) string { return k.stage() + "turn:" + target }

// adopted is the sorted set of the ids one adopt took, under its token (an hour, or a
// lease if longer).
func (k keys) adopted(token string) string { return k.stage() + "adopt:" + token }

// parkToken is the owner of a target's parked entries; claim tokens are random hex, so
// no claim ever has it.
func parkToken(target string) string { return "parked:" + target }

// Park ends the claims of entries of target (each named by its claim and due time) and
// parks them, in one round trip: each is in flight, owned by the park, until Adopt
// claims it, or until lease (the park's lease) runs out and the sweeper of any replica
// claims it as an expired claim, so a parked entry whose adopters all died is still
// delivered. Only the claim that holds an entry can park it; it returns the ids parked
// (the others had been lost by their claims). A parked entry's former claim can no
// longer confirm, extend, give back or mark it; the claim's replica stays responsible
// for it (a take-over of the replica moves its parked entries too). With several shards,
// the entries of each shard are parked by one script of that shard, the shards at once,
// and the ids parked are returned in shard order.
func (w *WheelStage) Park(ctx context.Context, target string, lease time.Duration, parked ...Parked) ([]string, error) {
	if len(parked) == 0 {
		return nil, nil
	}
	if lease < time.Millisecond {
		return nil, fmt.Errorf("store: park: lease %s is below 1ms", lease)
	}
	groups := w.groupClaims(len(parked), func(k int) Claim { return parked[k].Claim })
	parts := make([][]string, len(w.shards))
	err := w.each(func(i int, s *shard) error {
		if len(groups[i]) == 0 {
			return nil
		}
		args := make([]any, 0, 4*len(groups[i])+3)
		args = append(args, lease.Milliseconds(), parkToken(target), w.opts.Liveness.Milliseconds())
		for _, k := range groups[i] {
			p := parked[k]
			args = append(args, p.Claim.ID, p.Claim.Token, p.DueAt.UnixMilli(), p.Share)
		}
		keys := []string{s.inflight, s.keys.owner(), s.keys.park(target), s.keys.by(), s.keys.held(), s.keys.live(),
			s.keys.turns(target)}
		ids, err := w.write(ctx, wheelParkScript, keys, args...).StringSlice()
		if err != nil {
			return w.fail("park", err)
		}
		parts[i] = ids
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(parts) == 1 {
		return parts[0], nil
	}
	return slices.Concat(parts...), nil
}

// Parked names an entry to park: its claim, its due time, and the share of the target's
// robots it waits in (its principal's; "" is a share too). The park takes its shares in
// turns, each in the order it parked (wheel_park.lua): adopts take every share's next
// entry before any share's second.
type Parked struct {
	Claim Claim
	DueAt time.Time
	Share string
}

// Adopt claims for token, in one round trip, up to limit of target's parked entries,
// in their turns (Parked), with a lease of Options().Lease as Claim's claims get, and
// reports how many stay parked. Like Claim, an entry whose record cannot be decoded is
// in Corrupt. A limit below 1 only reports how many are parked. Like ClaimOverdue it can
// be repeated with the same token after an error (its reply may have been lost with the
// entries adopted): a repeat returns what the first run took and token still holds (for
// an hour, or a lease if longer), and takes nothing more.
//
// With several shards, Adopt visits the target's parks one shard after another, one
// round trip each, with what is left of limit, until limit entries are adopted; the
// shards it did not need are counted in one more round trip. The first shard visited is
// picked by a hash of token, so every shard comes first as often as the others over many
// adopts (and a repeat with the same token visits them in the same order); the turns
// hold within a shard, not across shards.
func (w *WheelStage) Adopt(ctx context.Context, target string, limit int, token string) (Claimed, int, error) {
	n := len(w.shards)
	if n == 1 {
		return w.adopt(ctx, w.shards[0], target, limit, token)
	}
	var out Claimed
	left, want := 0, max(limit, 0)
	first := shardIndex(token, n)
	var rest []*shard
	for k := range n {
		s := w.shards[(first+k)%n]
		if k > 0 && want == 0 {
			rest = append(rest, s)
			continue
		}
		c, l, err := w.adopt(ctx, s, target, want, token)
		if err != nil {
			return Claimed{}, 0, err
		}
		out.Entries = append(out.Entries, c.Entries...)
		out.Corrupt = append(out.Corrupt, c.Corrupt...)
		want = max(want-len(c.Entries)-len(c.Corrupt), 0)
		left += l
	}
	if len(rest) > 0 {
		cmds := make([]*redis.IntCmd, len(rest))
		_, err := w.rdb.Pipelined(ctx, func(p redis.Pipeliner) error {
			for i, s := range rest {
				cmds[i] = p.ZCard(ctx, s.keys.park(target))
			}
			return nil
		})
		if err != nil {
			return Claimed{}, 0, w.fail("adopt", err)
		}
		for _, c := range cmds {
			left += int(c.Val())
		}
	}
	return out, left, nil
}

// adopt is Adopt in shard s.
func (w *WheelStage) adopt(ctx context.Context, s *shard, target string, limit int, token string) (Claimed, int, error) {
	res, err := w.write(ctx, wheelAdoptScript, append(s.claimKeys(), s.keys.park(target), s.keys.adopted(token)),
		w.opts.Lease.Milliseconds(), token, parkToken(target), max(limit, 0), w.opts.Liveness.Milliseconds()).Slice()
	if err != nil {
		return Claimed{}, 0, w.fail("adopt", err)
	}
	if len(res) != 2 {
		return Claimed{}, 0, fmt.Errorf("store: adopt: reply of %d items, want 2", len(res))
	}
	claimed, _ := res[0].([]any)
	c, err := decodeClaimed(claimed, token)
	if err != nil {
		return Claimed{}, 0, fmt.Errorf("store: adopt: %w", err)
	}
	left, _ := res[1].(int64)
	return c.in(w, s), int(left), nil
}
