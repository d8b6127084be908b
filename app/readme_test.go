package app

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/store"
)

// checkedMarker precedes each README block TestReadmeCommands runs.
const checkedMarker = "<!-- checked: TestReadmeCommands -->"

// A shownCommand is one "$ " line of a checked README block and the output shown under it.
type shownCommand struct {
	line, output string
}

// checkedCommands returns the commands of the README's checked console blocks, in order.
func checkedCommands(t *testing.T) []shownCommand {
	t.Helper()
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	var cmds []shownCommand
	parts := strings.Split(string(b), checkedMarker+"\n")
	for _, part := range parts[1:] {
		require.True(t, strings.HasPrefix(part, "```console\n"), "a checked block must follow the marker directly: %.60q", part)
		body := strings.TrimPrefix(part, "```console\n")
		body = body[:strings.Index(body, "```")]
		for l := range strings.Lines(body) {
			if line, ok := strings.CutPrefix(l, "$ "); ok {
				cmds = append(cmds, shownCommand{line: strings.TrimSuffix(line, "\n")})
				continue
			}
			require.NotEmpty(t, cmds, "a checked block starts with output")
			cmds[len(cmds)-1].output += l
		}
	}
	require.GreaterOrEqual(t, len(cmds), 8, "the README's checked commands were not found")
	return cmds
}

// The normalization both the README's output and the real one go through before they
// are compared: an RFC 3339 time becomes TIME, the replica that handed an alert off
// becomes REPLICA, and in the output of a command that reports time left or taken
// (publish, cancel, inspect) every Go duration becomes DUR. Everything else must match
// exactly.
var (
	shownTime     = regexp.MustCompile(`\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)`)
	shownReplica  = regexp.MustCompile(`handed off by \S+`)
	shownDuration = regexp.MustCompile(`\b(\d+(\.\d+)?(ns|µs|ms|h|m|s))+\b`)
)

func normalize(output string, timed bool) string {
	output = shownTime.ReplaceAllString(output, "TIME")
	output = shownReplica.ReplaceAllString(output, "handed off by REPLICA")
	if timed {
		output = shownDuration.ReplaceAllString(output, "DUR")
	}
	return output
}

// TestReadmeCommands runs the commands of the README's blocks marked checked (the
// quickstart and the operators' questions) against a real serve with the local stack's
// configuration, deploy/local/rocketdelay.yaml, and the simulator's robots,
// deploy/local/chat-sim.yaml, and compares what each prints with what the README shows
// under it, after the normalization above. Isolation: the stack's addresses, a topic,
// group and Redis key prefix of the test's own and a migrated Postgres schema come from
// the environment, which overrides the file as it does for make run; the service listens
// on a free port and the simulator runs in-process, standing for 127.0.0.1:18080 and
// :18090. A command that only reads (curl, inspect, failed) is repeated until its output
// matches, for at most 30 s, as what a running service shows lags (a "sleep N;" before it
// in the README says so to a reader); a command that changes something (publish, cancel)
// runs once. "eval $(deploy/local/env)" is the environment the test already set.
// published is the id a publish command's output names ("published ID to TARGET, …").
func published(out string) (string, bool) {
	rest, ok := strings.CutPrefix(out, "published ")
	if !ok {
		return "", false
	}
	id, _, ok := strings.Cut(rest, " to ")
	return id, ok
}

func TestReadmeCommands(t *testing.T) {
	const file = "../deploy/local/rocketdelay.yaml"
	simFile, err := os.ReadFile("../deploy/local/chat-sim.yaml")
	require.NoError(t, err)
	simOpts, err := chatsim.DecodeOptions(simFile)
	require.NoError(t, err)
	sim, simRoot := testenv.ChatSim(t, platforms.All, simOpts)

	rdb, prefix := testenv.Redis(t)
	env := map[string]string{
		"ROCKETDELAY_NAMESRV":          testenv.NameServer(t),
		"ROCKETDELAY_BROKERS":          testenv.Brokers(t),
		"ROCKETDELAY_REDIS_URL":        testenv.RedisURL(t),
		"ROCKETDELAY_POSTGRES_URL":     testenv.MigratedPostgres(t),
		"ROCKETDELAY_LEVELS":           testenv.Levels(t).String(),
		"ROCKETDELAY_TOPIC":            testenv.Unique("rd_readme_"),
		"ROCKETDELAY_GROUP":            testenv.Unique("rd_readme_"),
		"ROCKETDELAY_REDIS_KEY_PREFIX": prefix,
		"ROCKETDELAY_SENDER_BASE_URL":  sim.URL(simRoot, config.KindDingTalk),
	}
	getenv := func(k string) string { return env[k] }
	cfg, err := config.Load(file, getenv)
	require.NoError(t, err)
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	base := "http://" + ln.Addr().String()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- Serve(ctx, cfg, ServeOptions{Logger: slog.New(slog.NewTextHandler(io.Discard, nil)), Listener: ln})
	}()
	t.Cleanup(func() { cancel(); require.NoError(t, <-done) })
	require.Eventually(t, func() bool { code, _ := get(t, base+"/readyz"); return code == http.StatusOK }, 30*time.Second, 50*time.Millisecond)

	urls := map[string]string{"localhost:18080": base, "localhost:18090": simRoot}
	for _, c := range checkedCommands(t) {
		line := c.line
		if line == `eval "$(deploy/local/env)"` {
			require.Empty(t, c.output, "%s prints nothing", line)
			continue
		}
		line = strings.TrimPrefix(regexp.MustCompile(`^sleep \d+; `).ReplaceAllString(line, ""), "bin/")
		words := shellWords(t, line)
		var run func() (string, error)
		reads, timed := false, false
		switch words[0] {
		case "curl":
			require.Len(t, words, 3, "%s: only curl -s URL is supported", c.line)
			host, path, _ := strings.Cut(words[2], "/")
			root, ok := urls[host]
			require.True(t, ok, "%s: an address the test does not stand for", c.line)
			reads = true
			run = func() (string, error) {
				resp, err := http.Get(root + "/" + path)
				if err != nil {
					return "", err
				}
				defer resp.Body.Close()
				b, err := io.ReadAll(resp.Body)
				return string(b), err
			}
		case "rocketdelay":
			args := words[1:]
			for i, a := range args {
				if a == "deploy/local/rocketdelay.yaml" {
					args[i] = file
				}
			}
			reads = args[0] == "inspect" || args[0] == "failed"
			timed = args[0] == "publish" || args[0] == "cancel" || args[0] == "inspect"
			run = func() (string, error) {
				var out, errOut bytes.Buffer
				err := Run(context.Background(), args, IO{Stdin: strings.NewReader(""), Stdout: &out, Stderr: &errOut, Getenv: getenv})
				if err != nil {
					return out.String() + errOut.String(), err
				}
				return out.String(), nil
			}
		default:
			t.Fatalf("%s: the test cannot run %s; keep checked blocks to curl and rocketdelay", c.line, words[0])
		}
		want := normalize(c.output, timed)
		if !reads {
			got, err := run()
			require.NoError(t, err, "%s: %s", c.line, got)
			require.Equal(t, want, normalize(strings.TrimSuffix(got, "\n")+"\n", timed), "%s", c.line)
			if id, ok := published(got); ok {
				// The next command is the reader's, who types it after serve received the
				// alert (until then, cancel rightly answers that no alert of the id is known).
				stage := store.NewWheelStage(rdb, prefix, store.WheelStageOptionsFromConfig(cfg))
				require.Eventually(t, func() bool {
					s, err := stage.Inspect(ctx, id)
					return err == nil && s.Traced
				}, 30*time.Second, 20*time.Millisecond, "%s: serve never received %s", c.line, id)
			}
			continue
		}
		var got string
		deadline := time.Now().Add(30 * time.Second)
		for {
			out, err := run()
			got = normalize(strings.TrimSuffix(out, "\n")+"\n", timed)
			if err == nil && got == want || time.Now().After(deadline) {
				require.NoError(t, err, "%s: %s", c.line, out)
				break
			}
			time.Sleep(100 * time.Millisecond) // polling a running service's state
		}
		require.Equal(t, want, got, "%s", c.line)
	}
}
