package store

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Escalations keep, in Redis, the state of each Alertmanager group whose notifications
// are delayed (an escalation): which alert is pending for it, due when, and whether the
// group resolved. They live under the wheel stage's hash tag {p} (see keys.go).

var escalationSetScript = script("escalation_set.lua")

// Escalation is the state of one group's delayed escalation.
type Escalation struct {
	// Version counts the alerts the group's escalations published; each has an id of its
	// own, so a new episode never meets an old one's done marker.
	Version int `json:"v"`
	// ID is the RD_ID of the group's current alert.
	ID string `json:"id"`
	// Due is when the current alert is due, millisecond precision.
	DueMs int64 `json:"due"`
	// Resolved reports that the group resolved: its alert was cancelled or delivered,
	// and the next firing notification starts a new escalation.
	Resolved bool `json:"resolved,omitempty"`
}

// Due returns e's due time.
func (e Escalation) Due() time.Time { return time.UnixMilli(e.DueMs) }

// Escalations reads and writes escalation records. It is safe for concurrent use.
type Escalations struct {
	rdb  redis.UniversalClient
	keys keys
	ttl  time.Duration
}

// NewEscalations returns the escalation records under key prefix prefix; a record lives
// ttl after its last write, which must exceed the done markers' life plus the longest
// delay, so that a version is never reused while its done marker lives.
func NewEscalations(rdb redis.UniversalClient, prefix string, ttl time.Duration) *Escalations {
	return &Escalations{rdb: rdb, keys: newKeys(prefix), ttl: ttl}
}

// Get returns group's record; ok is false when it has none.
func (s *Escalations) Get(ctx context.Context, group string) (e Escalation, ok bool, err error) {
	rec, err := s.rdb.HGet(ctx, s.keys.escalation(group), "rec").Result()
	if errors.Is(err, redis.Nil) {
		return Escalation{}, false, nil
	}
	if err != nil {
		return Escalation{}, false, redisFail("get escalation", err)
	}
	if err := json.Unmarshal([]byte(rec), &e); err != nil {
		return Escalation{}, false, fmt.Errorf("store: escalation of %s: %w", group, err)
	}
	return e, true, nil
}

// Set writes e as group's record if its version is still read (0: it had none); it
// reports false when another writer came first.
func (s *Escalations) Set(ctx context.Context, group string, read int, e Escalation) (bool, error) {
	b, _ := json.Marshal(e) // plain fields: cannot fail
	n, err := escalationSetScript.Run(ctx, s.rdb, []string{s.keys.escalation(group)}, read, e.Version, b,
		strconv.FormatInt(s.ttl.Milliseconds(), 10)).Int()
	if err != nil {
		return false, redisFail("set escalation", err)
	}
	return n == 1, nil
}
