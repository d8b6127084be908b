package store

import (
	"log/slog"
	"testing"

	"github.com/stretchr/testify/require"
)

func TestRedisLogLevel(t *testing.T) {
	for msg, want := range map[string]slog.Level{
		`sentinel: selected addr=127.0.0.1:26380 masterAddr=127.0.0.1:16380`:                 slog.LevelDebug,
		`sentinel: new master="rdprimary" addr="127.0.0.1:16381"`:                            slog.LevelInfo,
		`cluster: slots [[0 5460]] migrated to 127.0.0.1:17002, reloading cluster state`:     slog.LevelInfo,
		`connection pool: failed to dial after 5 attempts: dial tcp 127.0.0.1:1: refused`:    slog.LevelWarn,
		`sentinel: GetMasterAddrByName master="rdprimary" failed: context deadline exceeded`: slog.LevelWarn,
	} {
		require.Equal(t, want, redisLogLevel(msg), msg)
	}
}
