package app

import (
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/spf13/cobra"
	"github.com/stretchr/testify/require"
)

// shellWords splits a command line as a POSIX shell would for the simple lines of the
// examples: words separated by blanks, '…' and "…" quoting; it stops at a redirection,
// a pipe or a list operator.
func shellWords(t *testing.T, line string) []string {
	t.Helper()
	var words []string
	var word strings.Builder
	inWord := false
	var quote rune
	for _, r := range line {
		switch {
		case quote != 0 && r == quote:
			quote = 0
		case quote != 0:
			word.WriteRune(r)
		case r == '\'' || r == '"':
			quote, inWord = r, true
		case r == ' ' || r == '\t':
			if inWord {
				words = append(words, word.String())
				word.Reset()
				inWord = false
			}
		case (r == '>' || r == '|' || r == ';' || r == '&' || r == '<') && !inWord:
			return words
		default:
			word.WriteRune(r)
			inWord = true
		}
	}
	require.Zero(t, quote, "unterminated quote in %q", line)
	if inWord {
		words = append(words, word.String())
	}
	return words
}

var envAssignment = regexp.MustCompile(`^[A-Z_][A-Z0-9_]*=`)

// Every command has an Example section, and every example command line is one the
// program accepts: its command exists and is not a group, its flags parse and its
// arguments are what the command takes.
func TestEveryCommandHasValidExamples(t *testing.T) {
	stdio := IO{Getenv: func(string) string { return "" }}
	root := newRoot(stdio)
	root.InitDefaultHelpCmd()
	checked := 0
	var walk func(c *cobra.Command)
	walk = func(c *cobra.Command) {
		if c.Hidden {
			return
		}
		require.NotEmpty(t, strings.TrimSpace(c.Example), "%s has no Example section", c.CommandPath())
		for _, line := range strings.Split(c.Example, "\n") {
			words := shellWords(t, strings.TrimSpace(line))
			for len(words) > 0 && envAssignment.MatchString(words[0]) {
				words = words[1:]
			}
			if len(words) == 0 || words[0] != "rocketdelay" {
				continue // a comment, or a shell line around the command (source <(…))
			}
			fresh := newRoot(stdio)
			fresh.InitDefaultHelpCmd()
			cmd, rest, err := fresh.Find(words[1:])
			require.NoError(t, err, "%s: %q", c.CommandPath(), line)
			require.False(t, cmd.HasSubCommands(), "%s: %q runs a group, not a command", c.CommandPath(), line)
			require.True(t, strings.HasPrefix(cmd.CommandPath(), c.CommandPath()), "%s shows %q, a command of another", c.CommandPath(), line)
			require.NoError(t, cmd.ParseFlags(rest), "%s: %q", c.CommandPath(), line)
			require.NoError(t, cmd.ValidateArgs(cmd.Flags().Args()), "%s: %q", c.CommandPath(), line)
			checked++
		}
		for _, sub := range c.Commands() {
			walk(sub)
		}
	}
	walk(root)
	require.Greater(t, checked, 60)
}

// completions asks the program for the completions of args, as a shell script does.
func completions(t *testing.T, env map[string]string, args ...string) []string {
	t.Helper()
	out, _, err := run(t, env, append([]string{"__complete"}, args...)...)
	require.NoError(t, err)
	var got []string
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		if strings.HasPrefix(line, ":") {
			break // the directive
		}
		name, _, _ := strings.Cut(line, "\t")
		got = append(got, name)
	}
	return got
}

// The completion scripts complete flag values: output formats, failed_sends statuses,
// the targets of the configuration file, the modes of plan.
func TestCompletionOfFlagValues(t *testing.T) {
	file := filepath.Join(t.TempDir(), "rd.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`targets:
  ops: {robots: [{name: r1, token: t1}]}
  orders: {topic: {name: biz}}
  chat-eu: {kind: wecom, robots: [{name: w1, token: k1}]}
`), 0o600))
	require.Equal(t, []string{"table", "json", "name"}, completions(t, nil, "cancel", "x", "-o", ""))
	require.Equal(t, []string{"table", "json"}, completions(t, nil, "failed", "list", "--output", ""))
	require.Equal(t, []string{"pending", "dead", "rejected", "discarded", "cancelled", "delivered"}, completions(t, nil, "failed", "list", "--status", ""))
	require.Equal(t, []string{"dead", "rejected", "discarded", "pending"}, completions(t, nil, "failed", "retry", "--status", ""))
	require.Equal(t, []string{"levels", "timer"}, completions(t, nil, "plan", "1h", "--mode", ""))
	targets := []string{"chat-eu", "ops", "orders"}
	require.Equal(t, targets, completions(t, nil, "publish", "-f", file, "--target", ""))
	require.Equal(t, targets, completions(t, nil, "failed", "list", "-f", file, "--target", ""))
	require.Equal(t, targets, completions(t, map[string]string{"ROCKETDELAY_CONFIG": file}, "failed", "retry", "--target", ""),
		"the file ROCKETDELAY_CONFIG names")
	require.Empty(t, completions(t, nil, "publish", "-f", filepath.Join(t.TempDir(), "none.yaml"), "--target", ""))
	require.Equal(t, []string{"bash", "fish", "powershell", "zsh"}, completions(t, nil, "completion", ""))

	out, _, err := run(t, nil, "completion", "bash")
	require.NoError(t, err)
	require.Contains(t, out, "bash completion V2 for rocketdelay")
	out, _, err = run(t, nil, "completion", "--help")
	require.NoError(t, err)
	require.Contains(t, out, "source <(rocketdelay completion bash)")
	require.Contains(t, out, "--target (the targets of the")
}
