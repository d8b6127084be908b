package app

import (
	"fmt"
	"log/slog"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/delivery"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
)

// chatOptions builds the chat sender's options from the configuration: every target
// of kind dingtalk, wecom or feishu, with its platform, its robots' credentials and
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
		kind := t.Channel()
		target := sender.Target{Cooldown: s.Cooldown}
		limit, perSecond := s.Limit, 0
		switch kind {
		case config.KindWeCom:
			target.Protocol = wecom.New(s.WeCom.BaseURL)
			target.Cooldown, target.CooldownMax = s.WeCom.Cooldown, s.Cooldown
			limit = s.WeCom.Limit
		case config.KindFeishu:
			target.Protocol = feishu.New(s.Feishu.BaseURL)
			target.Cooldown, target.CooldownMax = s.Feishu.Cooldown, s.Cooldown
			limit, perSecond = s.Feishu.Limit, s.Feishu.LimitPerSecond
		default:
			target.Protocol = dingtalk.New(s.BaseURL)
		}
		for i, r := range t.Robots {
			tok, err := r.Credential(kind)
			if err != nil {
				return sender.Options{}, fmt.Errorf("targets.%s.robots[%d].token: %w", name, i, err)
			}
			robot := sender.Robot{Name: r.Name, Token: tok, SigningSecret: r.SigningSecret, Keyword: r.Keyword,
				Limit: r.Limit, LimitPerSecond: perSecond}
			if robot.Limit == 0 {
				robot.Limit = limit
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
