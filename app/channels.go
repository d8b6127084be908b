package app

import (
	"fmt"
	"log/slog"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
)

// chatOptions builds the chat core's options from the configuration: every robot group,
// with its platform (from the registry, platforms.Of), its robots' credentials and
// limits, and its cool-downs.
func chatOptions(c config.Config) (sender.Options, error) {
	s := c.Sender
	o := sender.Options{
		Targets:     map[string]sender.Target{},
		Limit:       s.Limit,
		HTTPTimeout: s.HTTPTimeout,
		Cooldown:    s.Cooldown,
		DisableFor:  s.DisableFor,
		Attempts:    s.Attempts,
		BackoffBase: s.BackoffBase,
		BackoffMax:  s.BackoffMax,
		MaxInFlight: s.MaxInFlight,
		MaxWait:     s.MaxWait,

		BreakerFailures: uint32(max(s.BreakerFailures, 0)),
		BreakerOpen:     s.BreakerOpen,
		Coalesce:        s.Coalesce,
		CoalesceMax:     s.CoalesceMax,
		Pacing:          s.Pacing,
		RobotLimits:     s.RobotLimits,
		PriorityMaxWait: s.PriorityMaxWait,
	}
	for name, t := range c.Targets {
		if !t.Chat() {
			continue
		}
		p, ok := platforms.Of(t.Channel())
		if !ok {
			return sender.Options{}, fmt.Errorf("targets.%s.kind: %q is not a chat platform", name, t.Channel())
		}
		settings := s.Settings(p.Config)
		target := sender.Target{Protocol: p.New(settings.BaseURL), Cooldown: settings.Cooldown}
		if p.Config.Section != "" {
			// A platform that documents no lock-out: its robots rest settings.Cooldown
			// at first, doubling up to sender.cooldown while they stay refused.
			target.CooldownMax = s.Cooldown
		}
		for i, r := range t.Robots {
			tok, err := r.Credential(p.Kind())
			if err != nil {
				return sender.Options{}, fmt.Errorf("targets.%s.robots[%d].token: %w", name, i, err)
			}
			robot := sender.Robot{Name: r.Name, Token: tok, SigningSecret: r.SigningSecret, Keyword: r.Keyword,
				Limit: r.Limit, LimitPerSecond: settings.LimitPerSecond}
			if robot.Limit == 0 {
				robot.Limit = settings.Limit
			}
			target.Robots = append(target.Robots, robot)
		}
		o.Targets[name] = target
	}
	return o, nil
}

// channels routes every target of the configuration to its channel: chat targets to
// the chat sender, topic targets to the topic relay.
func channels(c config.Config, chat, topics sender.Channel) delivery.Channels {
	out := delivery.Channels{}
	for name, t := range c.Targets {
		if t.Chat() {
			out[name] = chat
		} else if topics != nil {
			out[name] = topics
		}
	}
	return out
}

// bodyChecker is a chat sender without a pool, for the commands that check and render
// bodies of the configuration's chat targets without sending them.
func bodyChecker(c config.Config) (*sender.Chat, error) {
	opts, err := chatOptions(c)
	if err != nil {
		return nil, err
	}
	return sender.NewChat(opts, nil, slog.New(slog.DiscardHandler), nil, nil)
}
