package store

import (
	"context"
	"errors"
	"time"

	"github.com/redis/go-redis/v9"
)

// Dedupe tells the copies of one event apart from the next event: the first of them to
// ask picks the id every copy gets for a window. It is safe for concurrent use.
type Dedupe struct {
	rdb  redis.UniversalClient
	keys keys
}

// NewDedupe returns the dedupe records under key prefix prefix.
func NewDedupe(rdb redis.UniversalClient, prefix string) *Dedupe {
	return &Dedupe{rdb: rdb, keys: newKeys(prefix)}
}

// Once returns the id of the event key: id when this is its first copy within window
// (the record is set, to live window), else the id its first copy picked. It is one
// SET NX GET, so two callers at once get the same answer.
func (d *Dedupe) Once(ctx context.Context, key, id string, window time.Duration) (string, error) {
	prev, err := d.rdb.SetArgs(ctx, d.keys.once(key), id, redis.SetArgs{Mode: "NX", Get: true, TTL: window}).Result()
	switch {
	case errors.Is(err, redis.Nil):
		return id, nil
	case err != nil:
		return "", redisFail("dedupe", err)
	}
	return prev, nil
}
