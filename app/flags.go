package app

import (
	"time"

	"github.com/spf13/pflag"

	"github.com/rocketdelay/rocketdelay/config"
)

// duration is the value of a duration flag, read by config.ParseDuration: a Go duration
// or days ("3d", "1d12h"), as in the configuration file.
type duration struct{ d *time.Duration }

func (v duration) String() string {
	if v.d == nil || *v.d == 0 {
		return "0" // pflag shows no default for it
	}
	return v.d.String()
}

// Set is pflag.Value's.
func (v duration) Set(s string) error {
	d, err := config.ParseDuration(s)
	if err != nil {
		return err
	}
	*v.d = d
	return nil
}

// Type is pflag.Value's.
func (v duration) Type() string { return "duration" }

// durationVar is pflag's DurationVar, with days.
func durationVar(f *pflag.FlagSet, p *time.Duration, name string, value time.Duration, usage string) {
	*p = value
	f.Var(duration{p}, name, usage)
}

// cliAuthor names the person at the command line, for what the command records as
// theirs (a cancel, a reschedule, a retry, a discard): "cli:$USER", or "cli".
func cliAuthor(stdio IO) string {
	if user := stdio.Getenv("USER"); user != "" {
		return "cli:" + user
	}
	return "cli"
}
