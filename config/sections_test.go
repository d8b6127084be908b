package config_test

import (
	"errors"
	. "github.com/rocketdelay/rocketdelay/config"
	_ "github.com/rocketdelay/rocketdelay/sender/platforms"
	"os"
	"path/filepath"
	"testing"

	"github.com/stretchr/testify/require"
)

// keys lists the keys of the FieldErrors joined in err.
func keys(t *testing.T, err error) []string {
	t.Helper()
	var out []string
	for _, e := range err.(interface{ Unwrap() []error }).Unwrap() {
		var fe *FieldError
		require.True(t, errors.As(e, &fe), "%v", e)
		out = append(out, fe.Key)
	}
	return out
}

// A command validates the sections it uses, with the errors Validate gives them: a
// Postgres URL alone is a configuration for `migrate`, not for `serve`.
func TestLoadValidatesOnlyTheSectionsGiven(t *testing.T) {
	file := writeFile(t, "postgres: {url: \"postgres://u@127.0.0.1/db\"}\nsender: {limit: 99}\n")
	_, err := Load(file, noEnv)
	require.ErrorContains(t, err, "rocketmq.nameServers")
	require.ElementsMatch(t, []string{"rocketmq.nameServers", "redis.url", "sender.limit"}, keys(t, err))

	c, err := Load(file, noEnv, SectionLog, SectionPostgres)
	require.NoError(t, err)
	require.Equal(t, "postgres://u@127.0.0.1/db", c.Postgres.URL.Reveal())
	require.Equal(t, DefaultThreshold, c.Scheduler.Threshold, "defaults are filled in all the same")

	_, err = Load(file, noEnv, SectionRedis, SectionPostgres)
	require.EqualError(t, err, "config: redis.url: required (or redis.sentinel, or redis.cluster); set it in the file or in ROCKETDELAY_REDIS_URL",
		"the same words as the whole validation")

	// A bad value in a section the command does not use, from the file or the
	// environment, does not stop it; in one it uses, it does.
	env := func(k string) string {
		return map[string]string{"ROCKETDELAY_THRESHOLD": "soon", "ROCKETDELAY_REDIS_URL": "redis://127.0.0.1:1"}[k]
	}
	_, err = Load(file, env, SectionPostgres, SectionRedis)
	require.NoError(t, err)
	_, err = Load(file, env, SectionPostgres, SectionScheduler)
	require.ErrorContains(t, err, "config: scheduler.threshold: from ROCKETDELAY_THRESHOLD")
	bad := writeFile(t, "postgres: {url: \"mysql://x\"}\n")
	_, err = Load(bad, noEnv, SectionPostgres)
	require.EqualError(t, err, "config: postgres.url: must be a postgres:// URL")

	// A secret file that cannot be read is an error of its key's section only.
	secrets := writeFile(t, "postgres: {url: \"postgres://u@127.0.0.1/db\"}\nadmin: {token: \"file:/nonexistent/token\"}\n")
	_, err = Load(secrets, noEnv, SectionPostgres)
	require.NoError(t, err)
	_, err = Load(secrets, noEnv)
	require.ErrorContains(t, err, "admin.token")
}

// A command finds its configuration file without -f: $ROCKETDELAY_CONFIG, else
// ./rocketdelay.yaml, else /etc/rocketdelay/rocketdelay.yaml; -f wins over all.
func TestFile(t *testing.T) {
	dir := t.TempDir()
	t.Chdir(dir)
	etc := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	defaults := DefaultFiles
	t.Cleanup(func() { DefaultFiles = defaults })
	DefaultFiles = []string{"rocketdelay.yaml", etc}
	env := func(v string) func(string) string {
		return func(k string) string {
			if k == FileEnv {
				return v
			}
			return ""
		}
	}

	require.Equal(t, "", File("", noEnv), "no file: the environment alone")
	require.NoError(t, os.WriteFile(etc, []byte("{}"), 0o600))
	require.Equal(t, etc, File("", noEnv))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "rocketdelay.yaml"), []byte("{}"), 0o600))
	require.Equal(t, "rocketdelay.yaml", File("", noEnv), "the working directory's first")
	require.Equal(t, "/srv/rd.yaml", File("", env("/srv/rd.yaml")), "the variable over the defaults, even when missing (Load says so)")
	require.Equal(t, "mine.yaml", File("mine.yaml", env("/srv/rd.yaml")), "-f over everything")
	require.Equal(t, "/etc/rocketdelay/rocketdelay.yaml", defaults[len(defaults)-1])
}
