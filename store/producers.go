package store

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/redis/go-redis/v9"
)

// Producers keeps, in Redis, what the HTTP ways in know of their principals (the
// producers, config.Principal), for every replica:
//
//	{p}:principal:alert:<id>  string  the principal that published the alert id
//	{p}:principal:ep:<key>    string  the principal that started the escalation episode key
//	{p}:rate:principal:<n>    string  principal n's request rate (GCRA, topic_rate.lua)
//	{p}:principal:eps:<n>     set     the escalation episodes principal n opened, while
//	                                  they are open (principal_episodes.lua)
//
// An owner is recorded before the alert is published (or the episode started), with
// SET NX: the first principal to use an id owns it until the record expires, and no other
// principal's request with the same id is taken. A scoped alert id (@<principal>:<name>,
// wire.Scope) is its principal's by its name: the ways in record none for it.
type Producers struct {
	rdb    redis.UniversalClient
	keys   keys
	shards int
	stage  *WheelStage // when set (Beside), its layout, not shards, places the traces
}

// NewProducers returns the producers' records in rdb under prefix, beside a wheel stage
// of shards shards (redis.shards), whose traces say whose an alert id is.
func NewProducers(rdb redis.UniversalClient, prefix string, shards int) *Producers {
	return &Producers{rdb: rdb, keys: newKeys(prefix), shards: max(shards, 1)}
}

// Beside returns the producers' records beside the wheel stage w: an alert's trace is
// found where w's layout places it, in both its shards while w moves (moving.go).
func (p *Producers) Beside(w *WheelStage) *Producers {
	out := *p
	out.stage = w
	return &out
}

// traces returns the keys id's trace may be under.
func (p *Producers) traces(id string) []string {
	if p.stage != nil {
		return p.stage.TraceKeys(id)
	}
	return []string{p.keys.shard(shardIndex(id, p.shards), p.shards).trace(id)}
}

// Kinds of what a principal owns.
const (
	OwnAlert   = "alert"
	OwnEpisode = "ep"
)

// Own records principal as the owner of kind's id for ttl, unless another owns it; it
// returns the owner (principal when it is now theirs). A record of principal's own is
// kept at least ttl from now.
func (p *Producers) Own(ctx context.Context, kind, id, principal string, ttl time.Duration) (string, error) {
	prev, err := p.rdb.SetArgs(ctx, p.keys.ownerOf(kind, id), principal, redis.SetArgs{Mode: "NX", Get: true, TTL: ttl}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return principal, nil
	case err != nil:
		return "", redisFail("record an owner", err)
	case prev == principal: // a longer use of one's own id
		if _, err := p.Extend(ctx, kind, id, ttl); err != nil {
			return "", err
		}
	}
	return prev, nil
}

var principalExtendScript = script("principal_extend.lua")

// Extend keeps the owner record of kind's id, whoever's it is, at least ttl from now,
// and returns its owner; it records none ("" when the id has no owner).
func (p *Producers) Extend(ctx context.Context, kind, id string, ttl time.Duration) (string, error) {
	owner, err := principalExtendScript.Run(ctx, p.rdb, []string{p.keys.ownerOf(kind, id)}, max(ttl.Milliseconds(), 1)).Text()
	if err != nil {
		return "", redisFail("extend an owner", err)
	}
	return owner, nil
}

// Owner is the principal that owns kind's id; "" when none does (published to the topic
// directly, or the record expired).
func (p *Producers) Owner(ctx context.Context, kind, id string) (string, error) {
	v, err := p.rdb.Get(ctx, p.keys.ownerOf(kind, id)).Result()
	if errors.Is(err, redis.Nil) {
		return "", nil
	}
	if err != nil {
		return "", redisFail("read an owner", err)
	}
	return v, nil
}

// Take takes up to want requests of principal's rate (perSecond, bursts of burst), for
// all replicas together, on Redis's clock: granted is how many it took (at least one
// when any may go now), and when none, wait is how long until one may.
func (p *Producers) Take(ctx context.Context, principal string, perSecond float64, burst, want int) (granted int, wait time.Duration, err error) {
	if perSecond <= 0 || burst < 1 || want < 1 {
		return 0, 0, errors.New("store: take a principal's rate: perSecond, burst and want must be positive")
	}
	v, err := topicRateScript.Run(ctx, p.rdb, []string{p.keys.principalRate(principal)}, want, perSecond, burst).Int64Slice()
	if err != nil {
		return 0, 0, redisFail("take a principal's rate", err)
	}
	if len(v) != 2 {
		return 0, 0, errors.New("store: take a principal's rate: unexpected reply")
	}
	if v[0] > 0 {
		return int(v[0]), 0, nil
	}
	return 0, time.Duration(max(v[1], 1)) * time.Microsecond, nil
}

var principalPublishScript = scriptWith("principal_publish.lua", "lib_rate.lua")

// Publish takes what principal's publish of the unscoped alert id asks of Redis in one
// round trip: up to want requests of its rate (perSecond, bursts of burst; perSecond 0:
// none, when its replica holds one), then, unless it is over the rate (granted 0 and
// wait > 0, nothing recorded), the ownership of id for ttl, as Own: owner is the id's
// owner, principal when it is now theirs. An id with no owner record that the wheel
// stage holds as another's (its trace's principal; "" for an alert published to the
// topic directly) is not taken: owner is that other. With several shards the trace is
// in another slot than the record: it is read first, another round trip (two while the
// stage moves, when it may be in either of two shards).
func (p *Producers) Publish(ctx context.Context, principal string, perSecond float64, burst, want int, id string, ttl time.Duration) (granted int, wait time.Duration, owner string, err error) {
	if perSecond > 0 && (burst < 1 || want < 1) {
		return 0, 0, "", errors.New("store: a principal's publish: burst and want must be positive")
	}
	keys := []string{p.keys.principalRate(principal), p.keys.ownerOf(OwnAlert, id)}
	args := []any{max(perSecond, 0), burst, max(want, 1), principal, max(ttl.Milliseconds(), 1)}
	traces := p.traces(id)
	if len(traces) == 1 && strings.HasPrefix(traces[0], p.keys.tag) {
		keys = append(keys, traces[0])
	} else {
		for _, trace := range traces {
			if who, held, err := p.heldAs(ctx, trace); err != nil {
				return 0, 0, "", err
			} else if held && who != principal {
				args = append(args, who) // the script weighs it against the owner record, after the rate
				break
			}
		}
	}
	v, err := principalPublishScript.Run(ctx, p.rdb, keys, args...).Slice()
	if err != nil {
		return 0, 0, "", redisFail("a principal's publish", err)
	}
	switch {
	case len(v) == 2 && v[0] == int64(0):
		us, _ := v[1].(int64)
		return 0, time.Duration(max(us, 1)) * time.Microsecond, "", nil
	case len(v) == 3:
		n, _ := v[0].(int64)
		owner, _ = v[2].(string)
		return int(n), 0, owner, nil
	}
	return 0, 0, "", errors.New("store: a principal's publish: unexpected reply")
}

// heldAs reads whose the wheel stage holds an alert as, by its trace: held is false when
// there is no trace.
func (p *Producers) heldAs(ctx context.Context, trace string) (who string, held bool, err error) {
	v, err := p.rdb.HMGet(ctx, trace, "st", "who").Result()
	if err != nil {
		return "", false, redisFail("read a trace's principal", err)
	}
	who, _ = v[1].(string)
	return who, v[0] != nil, nil
}

// AlertOwnerTTL is how long an alert's owner is kept: until the alert is due and its
// id's done marker (doneTTL) has passed, so that the id is its owner's while anything
// can still be done with it.
func AlertOwnerTTL(due, now time.Time, doneTTL time.Duration) time.Duration {
	return max(due.Sub(now), 0) + doneTTL
}

var principalEpisodesScript = script("principal_episodes.lua")

// episodeStarting is how long an episode recorded by OpenEpisode counts while it is not
// live yet: the start that follows the record (a request's next step) lands well within
// it.
const episodeStarting = time.Minute

// OpenEpisode records that principal opens the escalation episode key, unless it has max
// open already (ok false); an episode of its own that is open is no new one. open is how
// many it has open, key included when ok. Episodes that ended are forgotten here.
func (p *Producers) OpenEpisode(ctx context.Context, principal, key string, max int) (ok bool, open int, err error) {
	v, err := principalEpisodesScript.Run(ctx, p.rdb, []string{p.keys.principalEpisodes(principal), p.keys.episodesLive(),
		p.keys.principalEpisodesAt(principal)}, key, max, episodeStarting.Milliseconds()).Int64Slice()
	if err != nil {
		return false, 0, redisFail("open a principal's episode", err)
	}
	if len(v) != 2 {
		return false, 0, errors.New("store: open a principal's episode: unexpected reply")
	}
	return v[0] == 1, int(v[1]), nil
}
