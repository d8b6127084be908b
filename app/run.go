// Package app is the rocketdelay program: its subcommands, and the serve loop that wires
// the scheduler, the sender and the stores together. cmd/rocketdelay only turns signals
// into a cancelled context and an error into an exit code; everything else is here, so
// tests can run the whole program in-process.
//
// Like every package below cmd, it never calls os.Exit, reads os.Args or installs signal
// handlers.
package app

import (
	"context"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"
	"strings"

	"github.com/jackc/pgx/v5/pgxpool"
	"github.com/redis/go-redis/v9"
	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/ingress"
	"github.com/rocketdelay/rocketdelay/store"
)

// Version is the program's version, set at build time with
// -ldflags "-X github.com/rocketdelay/rocketdelay/app.Version=…".
var Version = "dev"

// IO is where a command reads and writes.
type IO struct {
	Stdin          io.Reader
	Stdout, Stderr io.Writer
	// Getenv reads the environment; os.Getenv in the real program.
	Getenv func(string) string
}

// Run runs the rocketdelay command line args (without the program name) until it
// finishes or ctx is cancelled.
func Run(ctx context.Context, args []string, stdio IO) error {
	root := newRoot(stdio)
	root.SetArgs(args)
	return root.ExecuteContext(ctx)
}

func newRoot(stdio IO) *cobra.Command {
	root := &cobra.Command{
		Use: "rocketdelay",
		Example: `  # The service, with ./rocketdelay.yaml (or $ROCKETDELAY_CONFIG, or -f FILE)
  rocketdelay serve
  # An alert due in 3h25m17s; its id is the answer, to cancel it by
  rocketdelay publish --target ops --in 3h25m17s --text "order 42 still unpaid" -o name
  rocketdelay cancel order-42-recheck`,
		Short: "Delayed alert delivery on RocketMQ delay levels, to DingTalk robots",
		Long: `rocketdelay delivers alerts published to a RocketMQ topic at an exact future moment,
at any delay, and sends them to DingTalk, WeCom and Feishu group robots without tripping
their rate limits, or to RocketMQ business topics.

` + exitCodesHelp,
		SilenceUsage:  true,
		SilenceErrors: true,
	}
	root.SetFlagErrorFunc(func(c *cobra.Command, err error) error {
		return fmt.Errorf("%w: %v (see '%s --help')", ErrUsage, err, c.CommandPath())
	})
	root.AddCommand(
		newVersionCmd(),
		newConfigCmd(stdio),
		newMigrateCmd(stdio),
		newServeCmd(stdio),
		newPlanCmd(),
		newPublishCmd(stdio),
		newCancelCmd(stdio),
		newRescheduleCmd(stdio),
		newInspectCmd(stdio),
		newAlertsCmd(stdio),
		newBenchCmd(stdio),
		newFailedCmd(stdio),
		newChatSimCmd(stdio),
		newRobotsCmd(stdio),
		newEscalationsCmd(stdio),
		newTemplateCmd(stdio),
	)
	root.SetIn(stdio.Stdin)
	root.SetOut(stdio.Stdout) // before the completion command, which keeps its writer
	root.SetErr(stdio.Stderr)
	root.SetHelpCommand(newHelpCmd())
	root.InitDefaultCompletionCmd()
	documentCompletion(root)
	groupsRequireCommand(root)
	return root
}

// groupsRequireCommand makes every command of the tree under c that groups others fail
// with a usage error when its command is missing or unknown (requireCommand).
func groupsRequireCommand(c *cobra.Command) {
	if c.HasSubCommands() && c.Run == nil && c.RunE == nil {
		c.Args = cobra.ArbitraryArgs
		c.RunE = requireCommand
	}
	for _, sub := range c.Commands() {
		groupsRequireCommand(sub)
	}
}

// exactArgs is cobra.ExactArgs with errors marked as usage errors.
func exactArgs(n int) cobra.PositionalArgs {
	return func(cmd *cobra.Command, args []string) error {
		if err := cobra.ExactArgs(n)(cmd, args); err != nil {
			return fmt.Errorf("%w: %v (see '%s --help')", ErrUsage, err, cmd.CommandPath())
		}
		return nil
	}
}

// configFlag registers the -f/--config flag every command that needs a config takes.
func configFlag(cmd *cobra.Command, path *string) {
	cmd.Flags().StringVarP(path, "config", "f", "", "YAML config file (default: $"+config.FileEnv+", else the first of "+
		strings.Join(config.DefaultFiles, ", ")+" that exists); environment variables ROCKETDELAY_* override it")
	_ = cmd.MarkFlagFilename("config", "yaml", "yml")
}

// loadConfig reads a command's configuration: the file path names (config.File: -f,
// else ROCKETDELAY_CONFIG, else a default file), then the environment. It validates
// only sections, the ones the command uses, every section when none is given.
func loadConfig(path string, stdio IO, sections ...config.Section) (config.Config, error) {
	return config.Load(config.File(path, stdio.Getenv), stdio.Getenv, sections...)
}

// withConfig is the RunE of a command that needs only the configuration (-f path), of
// which it validates sections (every section when none is given).
func withConfig(stdio IO, path *string, sections []config.Section, run func(*cobra.Command, config.Config) error) func(*cobra.Command, []string) error {
	return func(c *cobra.Command, _ []string) error {
		cfg, err := loadConfig(*path, stdio, sections...)
		if err != nil {
			return err
		}
		return run(c, cfg)
	}
}

// withPostgres connects to cfg's Postgres, runs do and closes the connection: the shape
// of every command that works on the database.
func withPostgres(c *cobra.Command, cfg config.Config, do func(*pgxpool.Pool) error) error {
	pg, err := store.OpenPostgres(c.Context(), cfg.Postgres.URL.Reveal())
	if err != nil {
		return err
	}
	defer pg.Close()
	return do(pg)
}

// withRedis is withPostgres for the commands that work on Redis.
func withRedis(c *cobra.Command, stdio IO, cfg config.Config, do func(redis.UniversalClient) error) error {
	// A command's output is its answer: only go-redis's warnings join it, on stderr.
	store.RouteRedisLog(config.Log{Level: "warn", Format: cfg.Log.Format}.Logger(stdio.Stderr))
	rdb, err := store.OpenRedisConfig(c.Context(), cfg.Redis)
	if err != nil {
		return err
	}
	defer rdb.Close()
	return do(rdb)
}

func newVersionCmd() *cobra.Command {
	cmd := &cobra.Command{
		Use: "version",
		Example: `  rocketdelay version
  rocketdelay version -o json`,
		Short: "Print the version, the commit it was built from and the Go version",
		Long: `version prints the program's version: the one set at build time with -ldflags (make
build sets git describe's), else the module's from the build information (a tag with go
install …@v1.2.3; a pseudo-version naming the commit with a plain go build of a git
checkout, +dirty with uncommitted changes), else "dev". Then the commit, whether the
checkout had uncommitted changes and the commit's time, as a plain go build of a git
checkout records them, and the Go version and platform it was built with.`,
		Args: exactArgs(0),
	}
	out := outputFlag(cmd, outTable, outJSON)
	cmd.RunE = func(c *cobra.Command, _ []string) error {
		v := versionOf(debug.ReadBuildInfo())
		if out.is(outJSON) {
			return writeJSON(c.OutOrStdout(), v)
		}
		return v.write(c.OutOrStdout())
	}
	return cmd
}

// versionView is what the binary knows of its build, `rocketdelay version -o json`.
type versionView struct {
	Version string `json:"version"`
	// Commit, CommitTime and Modified are the git commit of a plain go build's checkout
	// (vcs.revision, vcs.time, vcs.modified: uncommitted changes); "" when the build
	// recorded none (-buildvcs=false, no checkout, a test binary).
	Commit     string `json:"commit,omitempty"`
	CommitTime string `json:"commit_time,omitempty"`
	Modified   bool   `json:"modified"`
	GoVersion  string `json:"go_version"`
	Platform   string `json:"platform"`
}

// versionOf reads the build information bi (ok false: none).
func versionOf(bi *debug.BuildInfo, ok bool) versionView {
	v := versionView{Version: Version, GoVersion: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if !ok {
		return v
	}
	if m := bi.Main.Version; Version == "dev" && m != "" && m != "(devel)" {
		v.Version = m // go install …@v1.2.3
	}
	if bi.GoVersion != "" {
		v.GoVersion = bi.GoVersion
	}
	for _, s := range bi.Settings {
		switch s.Key {
		case "vcs.revision":
			v.Commit = s.Value
		case "vcs.time":
			v.CommitTime = s.Value
		case "vcs.modified":
			v.Modified = s.Value == "true"
		}
	}
	return v
}

// write prints v for a person.
func (v versionView) write(w io.Writer) error {
	commit := "unknown (the build recorded none)"
	if v.Commit != "" {
		commit = v.Commit
		if v.Modified {
			commit += " (modified: built with uncommitted changes)"
		}
		if v.CommitTime != "" {
			commit += ", committed " + v.CommitTime
		}
	}
	_, err := fmt.Fprintf(w, "rocketdelay %s\ncommit: %s\ngo:     %s %s\n", v.Version, commit, v.GoVersion, v.Platform)
	return err
}

func newConfigCmd(stdio IO) *cobra.Command {
	cmd := &cobra.Command{Use: "config", Short: "Inspect the configuration",
		Example: `  rocketdelay config check -f deploy/local/rocketdelay.yaml`}
	var path string
	check := &cobra.Command{
		Use: "check [-f FILE] [-o table|json]",
		Example: `  rocketdelay config check -f deploy/local/rocketdelay.yaml
  ROCKETDELAY_CONFIG=/etc/rocketdelay/prod.yaml rocketdelay config check -o json`,
		Short: "Validate a config file and print the effective configuration, secrets redacted",
		Long: `check validates the configuration (the file, then the ROCKETDELAY_* environment
variables over it) and prints the effective configuration, every secret as <secret>: as
YAML, or with -o json as JSON with the same keys. It fails naming every bad key.`,
		Args: exactArgs(0),
	}
	out := outputFlag(check, outTable, outJSON)
	check.RunE = withConfig(stdio, &path, nil, func(c *cobra.Command, cfg config.Config) error {
		// The Alertmanager templates are files the configuration names: parse them too.
		if err := ingress.CheckTemplates(cfg); err != nil {
			return err
		}
		if out.is(outJSON) {
			js, err := cfg.RedactedJSON()
			if err != nil {
				return err
			}
			_, err = c.OutOrStdout().Write(js)
			return err
		}
		_, err := fmt.Fprint(c.OutOrStdout(), cfg.Redacted())
		return err
	})
	configFlag(check, &path)
	cmd.AddCommand(check)
	return cmd
}
