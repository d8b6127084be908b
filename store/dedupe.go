package store

import (
	"context"
	"time"

	"github.com/redis/go-redis/v9"
)

var dedupeOnceScript = script("dedupe_once.lua")

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

// Once returns the id of the event key: id when no copy of it came within window before
// now, else the id its first copy picked. The window is judged by now (the caller's
// clock, the service's reference clock), so a clock the caller injects decides it. It is
// one script, so two callers at once get the same answer.
func (d *Dedupe) Once(ctx context.Context, key, id string, now time.Time, window time.Duration) (string, error) {
	got, err := dedupeOnceScript.Run(ctx, d.rdb, []string{d.keys.once(key)}, id, now.UnixMilli(), window.Milliseconds()).Text()
	if err != nil {
		return "", redisFail("dedupe", err)
	}
	return got, nil
}
