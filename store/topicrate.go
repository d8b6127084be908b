package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// The topic rate keeps, in Redis, the pace of each topic target that has a
// ratePerSecond, under the target's hash tag {p:g} (see keys.go), so that all replicas
// together deliver at most that many messages per second to it.

var topicRateScript = scriptWith("topic_rate.lua", "lib_rate.lua")

// TopicRate paces deliveries to topic targets, for all replicas together, on Redis's
// clock. It is safe for concurrent use.
type TopicRate struct {
	rdb  redis.UniversalClient
	keys keys
}

// NewTopicRate returns the topic rates kept under key prefix prefix.
func NewTopicRate(rdb redis.UniversalClient, prefix string) *TopicRate {
	return &TopicRate{rdb: rdb, keys: newKeys(prefix)}
}

// Take takes up to n of target's tokens at perSecond tokens a second, with bursts of at
// most a tenth of a second's worth (at least 1). It returns how many it took (0 to n)
// and, when none, how long until one is free. Errors of an unreachable Redis match
// ErrUnavailable.
func (r *TopicRate) Take(ctx context.Context, target string, n, perSecond int) (int, time.Duration, error) {
	if n < 1 || perSecond < 1 {
		return 0, 0, errors.New("store: take topic rate: n and perSecond must be positive")
	}
	burst := max(1, perSecond/10)
	v, err := topicRateScript.Run(ctx, r.rdb, []string{r.keys.rate(target)}, n, perSecond, burst).Int64Slice()
	if err != nil {
		return 0, 0, redisFail("take topic rate", err)
	}
	if len(v) != 2 {
		return 0, 0, errors.New("store: take topic rate: unexpected reply")
	}
	return int(v[0]), time.Duration(v[1]) * time.Microsecond, nil
}
