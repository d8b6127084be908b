package app

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/dingtalksim"
)

// newDingtalkSimCmd is `rocketdelay dingtalk-sim`: the DingTalk robot simulator as a
// program, for demos and for pointing a local rocketdelay at (config sender.baseURL).
func newDingtalkSimCmd(stdio IO) *cobra.Command {
	var (
		addr, robots, file string
		opts               dingtalksim.Options
	)
	cmd := &cobra.Command{
		Use:   "dingtalk-sim [--addr HOST:PORT] (--robots TOKEN[=SECRET],… | --config FILE)",
		Short: "Run a DingTalk robot webhook simulator (rate limit, signatures, faults)",
		Long: `dingtalk-sim serves a simulated DingTalk custom-robot webhook on --addr, at /robot/send.
It checks access_token, the signature and its timestamp (robots with a secret), keywords
and the 20000-byte limit; a robot over --limit messages per --window answers errcode
130101 once and then, for --throttle, HTTP 302 to a page that is not JSON.

Robots come from --robots (TOKEN or TOKEN=SECRET, comma-separated; named robot1, robot2, …)
or from a YAML --config file:

  robots:
    - {name: r1, token: t1, secret: SEC1, keyword: alert}
  limit: 20
  window: 60s
  throttle: 10m

Control endpoints: GET /_sim/messages (accepted messages), GET /_sim/stats,
POST /_sim/faults?token=T with {"kind":"errcode","errcode":-1,"count":3} (kinds: errcode,
status, slow, drop, malformed, throttle), DELETE /_sim/faults, POST /_sim/reset.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("dingtalk-sim: %w", err)
				}
				fromFile, err := dingtalksim.DecodeOptions(data)
				if err != nil {
					return fmt.Errorf("dingtalk-sim: %s: %w", file, err)
				}
				for flag, v := range map[string]func(){"limit": func() { opts.Limit = fromFile.Limit },
					"window": func() { opts.Window = fromFile.Window }, "throttle": func() { opts.Throttle = fromFile.Throttle }} {
					if !c.Flags().Changed(flag) {
						v()
					}
				}
				opts.Robots = append(opts.Robots, fromFile.Robots...)
			}
			parsed, err := dingtalksim.ParseRobots(robots)
			if err != nil {
				return fmt.Errorf("%w: --robots: %v", ErrUsage, err)
			}
			opts.Robots = append(opts.Robots, parsed...)
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: dingtalk-sim: %v (give --robots or --config)", ErrUsage, err)
			}
			opts.Logger = config.Log{Level: "info", Format: "text"}.Logger(stdio.Stderr)
			if opts.Limit <= 0 {
				opts.Limit = dingtalksim.DefaultLimit
			}
			if opts.Window <= 0 {
				opts.Window = dingtalksim.DefaultWindow
			}
			sim := dingtalksim.New(opts)
			return sim.ListenAndServe(c.Context(), addr, func(a net.Addr) {
				// Tokens and secrets are not printed.
				fmt.Fprintf(c.OutOrStdout(), "dingtalk-sim: %d robots, limit %d per %s; webhook http://%s%s\n",
					len(opts.Robots), opts.Limit, opts.Window, a, dingtalksim.Path)
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:18090", "host:port to listen on")
	f.StringVar(&robots, "robots", "", "robots as TOKEN or TOKEN=SECRET, comma-separated")
	f.StringVarP(&file, "config", "f", "", "YAML file with robots (name, token, secret, keyword), limit, window, throttle")
	f.IntVar(&opts.Limit, "limit", dingtalksim.DefaultLimit, "messages a robot accepts per window")
	f.DurationVar(&opts.Window, "window", dingtalksim.DefaultWindow, "the rate limit's sliding window")
	f.DurationVar(&opts.Throttle, "throttle", dingtalksim.DefaultThrottle, "how long a robot over its limit stays throttled")
	return cmd
}
