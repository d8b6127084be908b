package app

import (
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/failed"
)

// The output formats of -o/--output: a table or lines for a person, JSON for scripts
// (stable keys, snake_case, times in RFC 3339, durations as Go durations and in ms), and
// the bare id where an id is the answer, as kubectl's -o name.
const (
	outTable = string(failed.FormatTable)
	outJSON  = string(failed.FormatJSON)
	outName  = "name"
)

// output is the value of a command's -o/--output flag: one of its formats. A value it
// does not have is a flag error, so a usage error.
type output struct {
	value   string
	formats []string
}

func (o *output) String() string { return o.value }

// Set is pflag.Value's.
func (o *output) Set(s string) error {
	if !slices.Contains(o.formats, s) {
		return fmt.Errorf("want %s", strings.Join(o.formats, " or "))
	}
	o.value = s
	return nil
}

// Type is pflag.Value's.
func (o *output) Type() string { return "format" }

// is reports whether the format asked for is format.
func (o *output) is(format string) bool { return o.value == format }

// failedFormat is the format as the failed package's writers take it (table or json).
func (o *output) failedFormat() failed.Format { return failed.Format(o.value) }

// outputFlag registers -o/--output on cmd with formats, the first the default, and
// completes its values.
func outputFlag(cmd *cobra.Command, formats ...string) *output {
	o := &output{value: formats[0], formats: formats}
	cmd.Flags().VarP(o, "output", "o", "output format: "+strings.Join(formats, ", "))
	_ = cmd.RegisterFlagCompletionFunc("output", completeValues(formats...))
	return o
}

// writeJSON writes v as indented JSON, the -o json of every command.
func writeJSON(w io.Writer, v any) error { return failed.WriteJSON(w, v) }
