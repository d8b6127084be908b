package app

import (
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
)

// A command finds its configuration without -f ($ROCKETDELAY_CONFIG, else
// ./rocketdelay.yaml) and validates only the sections it uses: migrate and failed run
// with a Postgres URL alone, even next to a broken section they do not use; cancel,
// which uses Redis too, names the key it misses; config check validates everything.
func TestCommandsFindTheirConfigAndValidateWhatTheyUse(t *testing.T) {
	dsn := testenv.MigratedPostgres(t)
	dir := t.TempDir()
	content := []byte("postgres: {url: \"" + dsn + "\"}\nsender: {limit: 99}\n")
	file := filepath.Join(dir, "pg-only.yaml")
	require.NoError(t, os.WriteFile(file, content, 0o600))

	out, _, err := run(t, nil, "migrate", "status", "-f", file)
	require.NoError(t, err)
	require.Contains(t, out, "applied")
	out, _, err = run(t, nil, "failed", "list", "-f", file)
	require.NoError(t, err)
	require.Contains(t, out, "no failed sends")

	out, _, err = run(t, map[string]string{config.FileEnv: file}, "migrate", "status")
	require.NoError(t, err, "ROCKETDELAY_CONFIG names the file")
	require.Contains(t, out, "applied")

	_, _, err = run(t, map[string]string{config.FileEnv: filepath.Join(dir, "missing.yaml")}, "migrate", "status")
	require.ErrorContains(t, err, "missing.yaml", "a file the variable names must exist")

	t.Chdir(dir)
	_, _, err = run(t, nil, "migrate", "status")
	require.ErrorContains(t, err, "config: postgres.url: required", "no file here yet: the environment alone")
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rocketdelay.yaml"), content, 0o600))
	out, _, err = run(t, nil, "migrate", "status")
	require.NoError(t, err, "./rocketdelay.yaml is read without -f")
	require.Contains(t, out, "applied")

	_, _, err = run(t, nil, "cancel", "order-1")
	require.EqualError(t, err, "config: redis.url: required (or redis.sentinel, or redis.cluster); set it in the file or in ROCKETDELAY_REDIS_URL")
	require.Equal(t, ExitFailure, ExitCode(err))

	_, _, err = run(t, nil, "config", "check")
	require.ErrorContains(t, err, "config: rocketmq.nameServers: at least one name server")
	require.ErrorContains(t, err, "config: sender.limit: must be between 1 and 20")
}
