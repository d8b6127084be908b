package app

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/store"
)

// The exit codes of rocketdelay: cmd/rocketdelay exits with ExitCode of Run's error.
// A script tells the outcomes of a command apart by them; `rocketdelay --help` lists
// them (exitCodesHelp), and so does the README.
const (
	// ExitOK: the command did what it was asked.
	ExitOK = 0
	// ExitFailure: any failure without a code of its own.
	ExitFailure = 1
	// ExitUsage: the command line is wrong (an unknown command or flag, a missing or
	// malformed argument); nothing was done.
	ExitUsage = 2
	// ExitNotFound: what the command names does not exist (`cancel` of an id rocketdelay
	// has no trace of, `failed show` of an unknown row, `failed retry|discard` naming one,
	// an escalation key without an episode).
	ExitNotFound = 3
	// ExitTooLate: the command came too late to change anything (`cancel` or
	// `reschedule` of an alert being sent or delivered, `escalations ack` of an episode
	// that ended).
	ExitTooLate = 4
	// ExitUnavailable: Redis or Postgres (or RocketMQ, for a command that publishes)
	// could not be reached; trying again later may succeed.
	ExitUnavailable = 5
)

// exitCodesHelp is the exit codes as `rocketdelay --help` lists them.
const exitCodesHelp = `Exit codes: 0 ok, 1 failure, 2 usage (unknown command or flag, bad argument),
3 not found, 4 too late (cancel or reschedule of an alert being sent or delivered; an
episode that ended), 5 unavailable (Redis, Postgres or RocketMQ cannot be reached: try
again).`

// ErrUsage marks an error in how the command was called (unknown command or flag,
// missing argument): ExitUsage.
var ErrUsage = errors.New("usage")

// ErrNotFound marks an error saying that what the command names does not exist:
// ExitNotFound.
var ErrNotFound = errors.New("not found")

// ErrTooLate marks an error saying that the command came too late to change anything:
// ExitTooLate.
var ErrTooLate = errors.New("too late")

// ExitCode is the exit code of a command that returned err: ExitOK for nil, the code of
// err's class (ErrUsage, ErrNotFound or store.ErrNotFound, ErrTooLate,
// store.ErrUnavailable), ExitFailure for any other error.
func ExitCode(err error) int {
	switch {
	case err == nil:
		return ExitOK
	case errors.Is(err, ErrUsage):
		return ExitUsage
	case errors.Is(err, store.ErrUnavailable):
		return ExitUnavailable
	case errors.Is(err, ErrNotFound), errors.Is(err, store.ErrNotFound):
		return ExitNotFound
	case errors.Is(err, ErrTooLate):
		return ExitTooLate
	}
	return ExitFailure
}

// classed is an error of a class (ErrNotFound, ErrTooLate) with a message of its own.
type classed struct {
	class error
	msg   string
}

func (e *classed) Error() string        { return e.msg }
func (e *classed) Is(target error) bool { return target == e.class }

// classError is an error of class whose message is format with args.
func classError(class error, format string, args ...any) error {
	return &classed{class: class, msg: fmt.Sprintf(format, args...)}
}

// requireCommand is the RunE of a command that only groups others (`rocketdelay`,
// `rocketdelay failed`, …): called without one of them, or with one it does not have,
// it is a usage error, never help and success, so a mistyped `failed retyr 42` in a
// script fails.
func requireCommand(c *cobra.Command, args []string) error {
	var names []string
	for _, sub := range c.Commands() {
		if sub.IsAvailableCommand() {
			names = append(names, sub.Name())
		}
	}
	if len(args) == 0 {
		return usageError(c, "%s needs a command: %s", c.CommandPath(), strings.Join(names, ", "))
	}
	hint := ""
	if c.SuggestionsMinimumDistance <= 0 {
		c.SuggestionsMinimumDistance = 2
	}
	if s := c.SuggestionsFor(args[0]); len(s) > 0 {
		hint = fmt.Sprintf("; did you mean %q?", s[0])
	}
	return usageError(c, "unknown command %q for %q%s (commands: %s)", args[0], c.CommandPath(), hint, strings.Join(names, ", "))
}

// newHelpCmd is `rocketdelay help [command]`, cobra's own but with an unknown topic a
// usage error.
func newHelpCmd() *cobra.Command {
	return &cobra.Command{
		Use:     "help [command]",
		Short:   "Help about any command",
		Example: "  rocketdelay help failed retry",
		RunE: func(c *cobra.Command, args []string) error {
			cmd, rest, err := c.Root().Find(args)
			if err != nil || len(rest) > 0 {
				return usageError(c, "unknown help topic %q", strings.Join(args, " "))
			}
			return cmd.Help()
		},
		ValidArgsFunction: func(c *cobra.Command, args []string, _ string) ([]cobra.Completion, cobra.ShellCompDirective) {
			cmd, _, err := c.Root().Find(args)
			if err != nil {
				return nil, cobra.ShellCompDirectiveNoFileComp
			}
			var out []cobra.Completion
			for _, sub := range cmd.Commands() {
				if sub.IsAvailableCommand() {
					out = append(out, cobra.CompletionWithDesc(sub.Name(), sub.Short))
				}
			}
			return out, cobra.ShellCompDirectiveNoFileComp
		},
	}
}
