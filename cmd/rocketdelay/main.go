// Command rocketdelay is the rocketdelay service and its operator tools. main only turns
// SIGINT/SIGTERM into a cancelled context and the result of app.Run into an exit code,
// app.ExitCode's: 0 success, 1 failure, 2 wrong usage, 3 not found, 4 too late, 5 a
// store unavailable.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"
	// The time zone database, embedded (about 450 KB) as a fallback: on-call rotations
	// hand off at a local hour in an IANA zone (rotations.NAME.timezone), and without a
	// zoneinfo on the host every zone but UTC fails to load. The distroless base image
	// carries one today; a scratch image or a bare host need not.
	_ "time/tzdata"

	"github.com/rocketdelay/rocketdelay/app"
)

func main() {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	err := app.Run(ctx, os.Args[1:], app.IO{Stdin: os.Stdin, Stdout: os.Stdout, Stderr: os.Stderr, Getenv: os.Getenv})
	stop()
	if err == nil {
		return
	}
	fmt.Fprintln(os.Stderr, "rocketdelay:", err)
	os.Exit(app.ExitCode(err))
}
