package store

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// ConsoleAccess keeps the operators' console sessions and counts its failed logins in
// Redis under the key prefix (keys.go), so that every replica honours a logout and
// counts every failure:
//
//	{p}:console:session:<hash>   string   a session that is open, expiring with it
//	{p}:console:fails:<client>   counter  failed logins from a client in the window
//	{p}:console:fails            counter  failed logins from anyone in the window
//
// A session is kept by the hash of its cookie value, never the value itself.
type ConsoleAccess struct {
	rdb  redis.UniversalClient
	keys keys
}

// NewConsoleAccess returns the console's access records in rdb under prefix.
func NewConsoleAccess(rdb redis.UniversalClient, prefix string) *ConsoleAccess {
	return &ConsoleAccess{rdb: rdb, keys: newKeys(prefix)}
}

func sessionHash(session string) string {
	h := sha256.Sum256([]byte(session))
	return hex.EncodeToString(h[:])
}

// Open records session as open for ttl.
func (a *ConsoleAccess) Open(ctx context.Context, session string, ttl time.Duration) error {
	return consoleFail("open a console session", a.rdb.Set(ctx, a.keys.consoleSession(sessionHash(session)), 1, ttl).Err())
}

// Alive reports whether session is open: opened, not ended, not expired.
func (a *ConsoleAccess) Alive(ctx context.Context, session string) (bool, error) {
	n, err := a.rdb.Exists(ctx, a.keys.consoleSession(sessionHash(session))).Result()
	return n == 1, consoleFail("check a console session", err)
}

// End closes session (a logout): no replica accepts it again.
func (a *ConsoleAccess) End(ctx context.Context, session string) error {
	return consoleFail("end a console session", a.rdb.Del(ctx, a.keys.consoleSession(sessionHash(session))).Err())
}

// LoginLimits bound failed logins: a client that failed PerClient times, or everyone
// together Total times, within Window waits until that window ends.
type LoginLimits struct {
	PerClient, Total int
	Window           time.Duration
}

// LoginWait is how long client must wait before a login of its is tried, by the
// failures counted so far (none is counted): 0 when it may be tried now. For a login
// whose token is known right before the count (the admin token on the API's routes),
// which takes nothing of the budget but must not be confirmed past it.
func (a *ConsoleAccess) LoginWait(ctx context.Context, client string, l LoginLimits) (time.Duration, error) {
	mine, all := a.keys.consoleFails(client), a.keys.consoleFails("")
	p := a.rdb.Pipeline()
	counts := p.MGet(ctx, mine, all)
	mineTTL, allTTL := p.PTTL(ctx, mine), p.PTTL(ctx, all)
	if _, err := p.Exec(ctx); err != nil {
		return 0, redisFail("count failed console logins", err)
	}
	n := counts.Val()
	switch {
	case count(n[0]) >= l.PerClient:
		return max(mineTTL.Val(), time.Millisecond), nil
	case count(n[1]) >= l.Total:
		return max(allTTL.Val(), time.Millisecond), nil
	}
	return 0, nil
}

// count is a counter's value as MGET returns it (nil when absent).
func count(v any) int {
	s, _ := v.(string)
	n, _ := strconv.Atoi(s)
	return n
}

var consoleLoginScript = script("console_login.lua")

// LoginAttempt counts a login client is about to try as a failure, for client and for
// everyone, before it is tried: 0 when it may be tried now, else how long client must
// wait (the attempt is not counted then). A login that succeeds is taken back
// (LoginSucceeded). Counting first, in one script, is what keeps logins sent at once
// from all being tried.
func (a *ConsoleAccess) LoginAttempt(ctx context.Context, client string, l LoginLimits) (time.Duration, error) {
	ms, err := consoleLoginScript.Run(ctx, a.rdb, []string{a.keys.consoleFails(client), a.keys.consoleFails("")},
		l.PerClient, l.Total, max(l.Window.Milliseconds(), 1)).Int64()
	if err != nil {
		return 0, redisFail("count a console login", err)
	}
	return time.Duration(ms) * time.Millisecond, nil
}

var consoleLoginOKScript = script("console_login_ok.lua")

// LoginSucceeded takes back the attempt LoginAttempt counted for client: it was no
// failure.
func (a *ConsoleAccess) LoginSucceeded(ctx context.Context, client string) error {
	err := consoleLoginOKScript.Run(ctx, a.rdb, []string{a.keys.consoleFails(client), a.keys.consoleFails("")}).Err()
	return consoleFail("take back a console login", err)
}

// consoleFail is err, when there is one, as the failure to op.
func consoleFail(op string, err error) error {
	if err == nil {
		return nil
	}
	return redisFail(op, err)
}
