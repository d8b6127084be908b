package app

import (
	"fmt"
	"net"
	"os"

	"github.com/spf13/cobra"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// simPlatforms are the platforms `rocketdelay chat-sim` serves, DingTalk first (the kind
// of a robot that names none).
var simPlatforms = []chatsim.Rules{dingtalk.SimRules{}, wecom.SimRules{}, feishu.SimRules{}}

// newChatSimCmd is `rocketdelay chat-sim`: the DingTalk, WeCom and Feishu robot
// simulator as a program, for demos and for pointing a local rocketdelay at (config
// sender.baseURL, sender.wecom.baseURL, sender.feishu.baseURL).
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
		Short:   "Run a DingTalk, WeCom and Feishu robot webhook simulator (rate limits, signatures, faults)",
		Long: `chat-sim serves simulated chat-robot webhooks on --addr, each platform at its own path,
with its documented behaviour:

  DingTalk  /robot/send?access_token=T       signature (timestamp ms, within 1h), keyword,
            20000-byte body; 20 per minute, then errcode 130101 once and, for --throttle
            (default 10m), HTTP 302 to a page that is not JSON
  WeCom     /cgi-bin/webhook/send?key=K       text ≤ 2048 bytes, markdown ≤ 4096; 20 per
            minute, errcode 45009 over it, no lock-out
  Feishu    /open-apis/bot/v2/hook/T          signature in the body (timestamp s, within 1h),
            keyword, 20 KB body; 100 per minute and 5 per second, HTTP 400 code 9499 over
            them; code 11232 past 3 per second in the 10 s after :00 and :30

Robots come from --robots ([KIND:]TOKEN[=SECRET], comma-separated; KIND is dingtalk,
wecom or feishu, default dingtalk; named robot1, robot2, …) or from a YAML --config file:

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
			opts.Platforms = simPlatforms
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
				fmt.Fprintf(c.OutOrStdout(), "chat-sim: %d robots, window %s; DingTalk %s, WeCom %s, Feishu %s\n",
					len(opts.Robots), opts.Window, sim.URL(root, config.KindDingTalk), sim.URL(root, config.KindWeCom),
					sim.URL(root, config.KindFeishu))
			})
		},
	}
	f := cmd.Flags()
	f.StringVar(&addr, "addr", "127.0.0.1:18090", "host:port to listen on")
	f.StringVar(&robots, "robots", "", "robots as [KIND:]TOKEN[=SECRET], comma-separated")
	f.StringVarP(&file, "config", "f", "", "YAML file with robots (name, kind, token, secret, keyword, limit), limit, window, throttle")
	f.IntVar(&opts.Limit, "limit", 0, "messages a robot accepts per window (default: each platform's: 20, 20, 100)")
	durationVar(f, &opts.Window, "window", chatsim.DefaultWindow, "the rate limits' sliding window (the per-second limits count in a sixtieth of it)")
	durationVar(f, &opts.Throttle, "throttle", 0, "how long a robot over its limit stays throttled (default: each platform's: DingTalk 10m, none for WeCom and Feishu)")
	return cmd
}
