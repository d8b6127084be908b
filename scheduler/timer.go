package scheduler

import (
	"context"
	"errors"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/wire"
)

// PropProbe marks the start-up probes the consumer drops: "route", which teaches the hop
// producer the topic's route (see learnRoute), and "timer", the probe of timer support,
// which every broker with timers refuses (a broker that stores it has none).
const PropProbe = "RD_PROBE"

// probeDelay is how far out the probe is due: beyond any broker's timerMaxDelaySec, so a
// broker with timers refuses it and names its maximum.
const probeDelay = 100 * 365 * 24 * time.Hour

// TimerSupport is what the probe found out about the brokers' timer messages.
type TimerSupport struct {
	// Supported: the brokers accept timer messages (RocketMQ 5, timerWheelEnable=true).
	Supported bool
	// Max is the brokers' timerMaxDelaySec, when Supported.
	Max time.Duration
	// Answer is the broker's answer to the probe, or why timers are not usable.
	Answer string
}

var maxDelayRE = regexp.MustCompile(`max delay (\d+)ms`)

// ProbeTimer publishes a timer message due in a century to topicName through p and reads the
// broker's answer: "beyond the max delay of N ms" means timers work, up to N ms; "not
// enabled" means the broker has them switched off (timerWheelEnable=false); a stored
// probe means the broker ignores the timer property (RocketMQ 4), and the consumer drops
// it. Any other error (the broker unreachable) is returned: nothing was learnt.
func ProbeTimer(ctx context.Context, p rocketmq.Producer, topicName string) (TimerSupport, error) {
	m := primitive.NewMessage(topicName, []byte("rocketdelay timer probe"))
	m.WithProperty(PropProbe, "timer")
	m.WithProperty(primitive.PropertyTimerDeliverMS, strconv.FormatInt(time.Now().Add(probeDelay).UnixMilli(), 10))
	res, err := p.SendSync(ctx, m)
	if err == nil {
		return TimerSupport{Answer: fmt.Sprintf("the broker stored a timer message due in a century (%s): it ignores timers",
			wire.SendStatus(res.Status))}, nil
	}
	answer := err.Error()
	switch {
	case strings.Contains(answer, "timer message illegal"):
		sub := maxDelayRE.FindStringSubmatch(answer)
		if sub == nil {
			return TimerSupport{}, fmt.Errorf("scheduler: timer probe: the broker's answer names no maximum: %s", answer)
		}
		ms, err := strconv.ParseInt(sub[1], 10, 64)
		if err != nil || ms <= 0 {
			return TimerSupport{}, fmt.Errorf("scheduler: timer probe: bad maximum in the broker's answer: %s", answer)
		}
		return TimerSupport{Supported: true, Max: time.Duration(ms) * time.Millisecond, Answer: answer}, nil
	case strings.Contains(answer, "timer message is not enabled") || strings.Contains(answer, "timerWheelEnable is false"):
		return TimerSupport{Answer: answer}, nil
	}
	return TimerSupport{}, fmt.Errorf("scheduler: timer probe: %w", err)
}

// defaultTimerPrecision is RocketMQ's default timerPrecisionMs, assumed when the brokers'
// configuration cannot be read.
const defaultTimerPrecision = time.Second

// timerPrecision is the coarsest timerPrecisionMs of the brokers in rocketmq.brokers,
// read from their configuration, and whether it was read; without broker addresses, or
// when none answers, RocketMQ's default is assumed.
func (s *Scheduler) timerPrecision(ctx context.Context) (time.Duration, bool) {
	var precision time.Duration
	for _, b := range s.opts.Brokers {
		bctx, cancel := context.WithTimeout(ctx, s.opts.SendTimeout)
		cfg, err := BrokerConfig(bctx, b)
		cancel()
		if err != nil {
			s.logger.Warn("cannot read a broker's configuration for its timer precision", "broker", b, "err", err)
			continue
		}
		ms, err := strconv.ParseInt(cfg["timerPrecisionMs"], 10, 64)
		if err != nil || ms <= 0 {
			s.logger.Warn("a broker's configuration has no timerPrecisionMs", "broker", b)
			continue
		}
		precision = max(precision, time.Duration(ms)*time.Millisecond)
	}
	if precision == 0 {
		return defaultTimerPrecision, false
	}
	return precision, true
}

// ErrNoTimers is returned by Start in timer mode when the brokers do not accept timer
// messages.
var ErrNoTimers = errors.New("the brokers do not accept timer messages")

// resolveRoute settles the decomposition rule at start: levels as configured, or, in
// timer and auto mode, what the probe finds, with the brokers' own maximum.
func (s *Scheduler) resolveRoute(ctx context.Context) (Route, error) {
	r := Route{Levels: s.opts.Levels, Threshold: s.opts.Threshold}
	if s.opts.Mode == config.ModeLevels {
		s.metrics.setMode(config.ModeLevels)
		return r, nil
	}
	pctx, cancel := context.WithTimeout(ctx, 3*s.opts.SendTimeout)
	sup, err := ProbeTimer(pctx, s.broker.producer, s.opts.Topic)
	cancel()
	switch {
	case err != nil && s.opts.Mode == config.ModeTimer:
		return Route{}, fmt.Errorf("scheduler: scheduler.mode timer: cannot find out whether the brokers accept timer messages: %w", err)
	case err != nil:
		s.logger.Warn("scheduler.mode auto: the timer probe failed; using delay levels", "err", err)
		s.metrics.setMode(config.ModeLevels)
		return r, nil
	case !sup.Supported && s.opts.Mode == config.ModeTimer:
		return Route{}, fmt.Errorf("scheduler: scheduler.mode timer: %w (%s); enable timerWheelEnable on RocketMQ 5 brokers, or use mode levels or auto",
			ErrNoTimers, sup.Answer)
	case !sup.Supported:
		s.logger.Info("scheduler.mode auto: the brokers do not accept timer messages; using delay levels", "answer", sup.Answer)
		s.metrics.setMode(config.ModeLevels)
		return r, nil
	}
	precision, known := s.timerPrecision(ctx)
	if s.opts.TimerMargin < precision {
		why := fmt.Sprintf("scheduler.timerMargin %s is below the brokers' timer precision %s (timerPrecisionMs): a timer hop could land after the due time",
			s.opts.TimerMargin, precision)
		if s.opts.Mode == config.ModeTimer {
			return Route{}, fmt.Errorf("scheduler: scheduler.mode timer: %s; raise scheduler.timerMargin", why)
		}
		s.logger.Warn("scheduler.mode auto: using delay levels; "+why, "raise", "scheduler.timerMargin")
		s.metrics.setMode(config.ModeLevels)
		return r, nil
	}
	// A hop stays 2% below the broker's maximum: the broker measures it by its own clock.
	r.Timer = &Timer{Margin: s.opts.TimerMargin, Max: sup.Max - sup.Max/50}
	s.metrics.setMode(config.ModeTimer)
	s.logger.Info("the brokers accept timer messages; hops are timer messages", "mode", s.opts.Mode,
		"broker_max", sup.Max.String(), "precision", precision.String(), "precision_read", known,
		"margin", s.opts.TimerMargin.String())
	return r, nil
}

// Mode is how hops cross the broker, as settled at Start: "levels" or "timer"; "" before.
func (s *Scheduler) Mode() string {
	if m := s.broker.mode.Load(); m != nil {
		return *m
	}
	return ""
}
