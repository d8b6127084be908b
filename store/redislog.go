package store

import (
	"context"
	"fmt"
	"log/slog"
	"strings"

	"github.com/redis/go-redis/v9"
)

// RouteRedisLog sends go-redis's own log lines — a pool that cannot dial, Sentinel naming
// the primary, a Cluster reloading its slots — into logger with component=go-redis, in
// the service's format, instead of the standard library's logger on stderr. Lines about
// failures are warnings; the line the Sentinel client writes for every connection it
// opens ("sentinel: selected addr") is debug; the rest are info. go-redis's logger is a
// process-wide global, so call this once, from main's side of the program.
func RouteRedisLog(logger *slog.Logger) {
	redis.SetLogger(redisLog{l: logger.With("component", "go-redis")})
}

type redisLog struct{ l *slog.Logger }

func (r redisLog) Printf(ctx context.Context, format string, v ...any) {
	if ctx == nil {
		ctx = context.Background()
	}
	msg := strings.TrimPrefix(strings.TrimSpace(fmt.Sprintf(format, v...)), "redis: ")
	if level := redisLogLevel(msg); r.l.Enabled(ctx, level) {
		r.l.Log(ctx, level, msg)
	}
}

// redisLogLevel is the level of one of go-redis's log lines (see RouteRedisLog).
func redisLogLevel(msg string) slog.Level {
	lower := strings.ToLower(msg)
	switch {
	case strings.HasPrefix(lower, "sentinel: selected addr"):
		return slog.LevelDebug
	case strings.Contains(lower, "fail"), strings.Contains(lower, "error"),
		strings.Contains(lower, "panic"), strings.Contains(lower, "refused"),
		strings.Contains(lower, "unable"), strings.Contains(lower, "timeout"):
		return slog.LevelWarn
	default:
		return slog.LevelInfo
	}
}
