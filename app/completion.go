package app

import (
	"bytes"
	"maps"
	"os"
	"slices"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
)

// completionHelp is added to the help of cobra's `rocketdelay completion`.
const completionHelp = `
Besides commands and flags, the scripts complete the values of -o/--output (the
command's formats), --status (failed_sends statuses), --target (the targets of the
configuration file the command would read: -f, $ROCKETDELAY_CONFIG or a default file),
--mode of plan, and -f with YAML files.`

// documentCompletion gives cobra's `completion` command and its shells examples.
func documentCompletion(root *cobra.Command) {
	for _, c := range root.Commands() {
		if c.Name() != "completion" {
			continue
		}
		c.Long += completionHelp
		c.Example = `  # bash, in this shell; for every session, write it to a completions directory
  source <(rocketdelay completion bash)
  rocketdelay completion bash > /etc/bash_completion.d/rocketdelay
  # zsh (compinit enabled)
  rocketdelay completion zsh > "${fpath[1]}/_rocketdelay"
  rocketdelay completion fish > ~/.config/fish/completions/rocketdelay.fish`
		for _, shell := range c.Commands() {
			shell.Example = "  rocketdelay completion " + shell.Name() + " > rocketdelay." + shell.Name()
		}
	}
}

// completeTargets completes a --target flag with the targets of the configuration file
// the command would read (-f path, or config.File's choice), sorted; none when there is
// no such file or it does not decode.
func completeTargets(stdio IO, path *string) cobra.CompletionFunc {
	return func(*cobra.Command, []string, string) ([]cobra.Completion, cobra.ShellCompDirective) {
		file := config.File(*path, stdio.Getenv)
		if file == "" {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		data, err := os.ReadFile(file)
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		cfg, err := config.Decode(bytes.NewReader(data))
		if err != nil {
			return nil, cobra.ShellCompDirectiveNoFileComp
		}
		var out []cobra.Completion
		for _, name := range slices.Sorted(maps.Keys(cfg.Targets)) {
			out = append(out, cobra.CompletionWithDesc(name, cfg.Targets[name].Channel()))
		}
		return out, cobra.ShellCompDirectiveNoFileComp
	}
}

// completeValues completes a flag with values.
func completeValues[S ~string](values ...S) cobra.CompletionFunc {
	out := make([]cobra.Completion, len(values))
	for i, v := range values {
		out[i] = string(v)
	}
	return cobra.FixedCompletions(out, cobra.ShellCompDirectiveNoFileComp)
}
