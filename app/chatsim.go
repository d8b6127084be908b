package app

import (
	"fmt"
	"net"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// newChatSimCmd is `rocketdelay chat-sim`: the robot simulator of every chat platform
// (platforms.All) as a program, for demos and for pointing a local rocketdelay at
// (config sender.baseURL, sender.KIND.baseURL).
func newChatSimCmd(stdio IO) *cobra.Command {
	var (
		addr, robots, file string
		opts               chatsim.Options
	)
	cmd := &cobra.Command{
		Use: "chat-sim [--addr HOST:PORT] (--robots [KIND:]TOKEN[=SECRET],… | --config FILE)",
		Example: `  rocketdelay chat-sim --robots t1=SEC1,wecom:k1,feishu:h1=fs1
  rocketdelay chat-sim -f sim.yaml --addr 127.0.0.1:18090 --throttle 30s`,
		Aliases: []string{"dingtalk-sim"},
		Short:   "Run a robot webhook simulator of every chat platform (rate limits, signatures, faults)",
		Long: `chat-sim serves simulated chat-robot webhooks on --addr, each platform at its own path,
with its documented behaviour:

` + simSummaries() + `

Robots come from --robots ([KIND:]TOKEN[=SECRET], comma-separated; KIND is one of
` + strings.Join(platforms.Kinds(), ", ") + `, default dingtalk; named robot1, robot2, …) or from a
YAML --config file:

  robots:
    - {name: r1, token: t1, secret: SEC1, keyword: alert}
    - {name: w1, kind: wecom, token: k1}
    - {name: f1, kind: feishu, token: h1, secret: fs1}
  window: 60s

Control endpoints: GET /_sim/messages (accepted messages), GET /_sim/stats,
POST /_sim/faults?token=T with {"kind":"errcode","errcode":-1,"count":3} (kinds: errcode,
status, slow, drop, malformed, throttle), DELETE /_sim/faults, POST /_sim/reset.`,
		Args: exactArgs(0),
		RunE: func(c *cobra.Command, _ []string) error {
			if file != "" {
				data, err := os.ReadFile(file)
				if err != nil {
					return fmt.Errorf("chat-sim: %w", err)
				}
				fromFile, err := chatsim.DecodeOptions(data)
				if err != nil {
					return fmt.Errorf("chat-sim: %s: %w", file, err)
				}
				for flag, v := range map[string]func(){"limit": func() { opts.Limit = fromFile.Limit },
					"window": func() { opts.Window = fromFile.Window }, "throttle": func() { opts.Throttle = fromFile.Throttle }} {
					if !c.Flags().Changed(flag) {
						v()
					}
				}
				opts.Robots = append(opts.Robots, fromFile.Robots...)
			}
			parsed, err := chatsim.ParseRobots(robots)
			if err != nil {
				return fmt.Errorf("%w: --robots: %v", ErrUsage, err)
			}
			opts.Robots = append(opts.Robots, parsed...)
			if err := opts.Validate(); err != nil {
				return fmt.Errorf("%w: chat-sim: %v (give --robots or --config)", ErrUsage, err)
			}
			opts.Logger = config.Log{Level: "info", Format: "text"}.Logger(stdio.Stderr)
			if opts.Window <= 0 {
				opts.Window = chatsim.DefaultWindow
			}
			sim := chatsim.New(opts)
			return sim.ListenAndServe(c.Context(), addr, func(a net.Addr) {
				// Tokens and secrets are not printed.
				root := "http://" + a.String()
				var where []string
				for _, p := range platforms.All {
					where = append(where, p.Config.Name+" "+sim.URL(root, p.Kind()))
				}
				fmt.Fprintf(c.OutOrStdout(), "chat-sim: %d robots, window %s; %s\n", len(opts.Robots), opts.Window, strings.Join(where, ", "))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:18090", "host:port to listen on")
	f.StringVar(&robots, "robots", "", "robots as [KIND:]TOKEN[=SECRET], comma-separated")
	f.StringVarP(&file, "config", "f", "", "YAML file with robots (name, kind, token, secret, keyword, limit), limit, window, throttle")
	f.IntVar(&opts.Limit, "limit", 0, "messages a robot accepts per window (default: each platform's)")
	durationVar(f, &opts.Window, "window", chatsim.DefaultWindow, "the rate limits' sliding window (the per-second limits count in a sixtieth of it)")
	durationVar(f, &opts.Throttle, "throttle", 0, "how long a robot over its limit stays throttled (default: each platform's: DingTalk 10m, none for the others)")
	return cmd
}

// simSummaries are the simulator's help lines of every platform, its kind first.
func simSummaries() string {
	var b strings.Builder
	for i, p := range platforms.All {
		if i > 0 {
			b.WriteString("\n")
		}
		fmt.Fprintf(&b, "  %-9s %s", p.Config.Name, p.Sim.Summary())
	}
	return b.String()
}
