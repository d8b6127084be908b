package store

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"math"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
	"github.com/rocketdelay/rocketdelay/config"
)

// The robot pool keeps, in Redis, the rate-limit state of the chat robots of every
// target group, under one hash tag per group, {p:g} (see keys.go).

var (
	robotPickScript    = script("robot_pick.lua")
	robotSuspendScript = script("robot_suspend.lua")
	robotSettleScript  = redis.NewScript(asFunction("touch", "robot_touch.lua") + asFunction("throttled", "robot_throttled.lua") +
		asFunction("suspend", "robot_suspend.lua") + mustRead("lua/robot_settle.lua"))
)

// ErrNoRobot is returned by RobotPool.Pick when every robot of the group is disabled (or
// the group has none): waiting does not help.
var ErrNoRobot = errors.New("no robot in rotation")

// PoolRobot is one robot as the pool sees it: a name and its limits.
type PoolRobot struct {
	// Name identifies the robot within its group; never its token.
	Name string
	// Limit is how many sends the robot may make per window, at least 1.
	Limit int
	// LimitPerSecond, when above 0, is how many sends it may make per sixtieth of the
	// window (a second of a one-minute window) too: Feishu's second limit.
	LimitPerSecond int
}

// Pick is the answer of RobotPool.Pick: either a robot (Robot is set) whose send was
// recorded, or how long until one is free (Wait).
type Pick struct {
	// Robot is the picked robot's name; "" when none is free.
	Robot string
	// InWindow counts the picked robot's sends in the window, this one included.
	InWindow int
	// Wait is how long until a robot is free, when none is; at least 1ms.
	Wait time.Duration
	// Reserved reports, with Wait, that a Paced pick found the bucket empty and reserved
	// its next token, due after Wait: the caller then picks with Burst.
	Reserved bool
	// At is Redis's clock at the pick, millisecond precision; a picked robot's send is
	// recorded in its window in flight until At + PickOptions.Hold.
	At time.Time
	// Member identifies the recorded send in the robot's window, for Settle.
	Member string
	// Limit is the picked robot's limit in effect: its configured limit, or the lower one
	// learned from the platform's throttles (PickOptions.Learn).
	Limit int
	// Probe reports that the picked robot is in doubt (out of a cool-down, not answered
	// since) and this request is the one probe allowed to it; the answer, through Settle,
	// settles the doubt.
	Probe bool
}

// RobotState is one robot's state in the pool, for operators and tests.
type RobotState struct {
	// Name is the robot's name.
	Name string
	// InWindow counts its sends in the current window.
	InWindow int
	// CoolingUntil is the end of its cool-down; zero when it is not cooling down.
	CoolingUntil time.Time
	// Disabled reports whether it is out of rotation; DisabledUntil is when it comes
	// back, zero when only Enable brings it back.
	Disabled      bool
	DisabledUntil time.Time
	// LearnedLimit is the lower limit learned from the platform's throttles, as of the last
	// pick; 0 when the robot runs at its configured limit.
	LearnedLimit int
	// InDoubt reports that the robot was throttled and has not answered a request since:
	// only one probe at a time goes to it.
	InDoubt bool
	// Proven reports that the robot took its configured limit in one window within the
	// last 60 windows without a throttle: its limit is known. A robot neither proven nor
	// with a learned limit is approached as a scout (robot_pick.lua).
	Proven bool
}

// RobotPool is the Redis side of the sender's robot groups: one sliding rate-limit
// window per robot, cool-downs and disables, shared by every replica. Pick is one Lua
// script, one round trip, atomic against every other replica, with Redis TIME as the
// clock, so the robots' limits hold across replicas without any clock agreement between
// hosts.
//
// A RobotPool is safe for concurrent use. Errors caused by an unreachable or unready
// Redis also match ErrUnavailable.
type RobotPool struct {
	rdb    redis.UniversalClient
	keys   keys
	window time.Duration
	guard  time.Duration
}

// NewRobotPool returns the pool whose keys start with "{prefix:" (prefix is the
// configured key prefix, config redis.keyPrefix) and whose windows last window (config
// sender.window). It panics when prefix is empty or window is below 1ms.
func NewRobotPool(rdb redis.UniversalClient, prefix string, window time.Duration) *RobotPool {
	if window < time.Millisecond {
		panic("store: NewRobotPool: window below 1ms")
	}
	return &RobotPool{rdb: rdb, keys: newKeys(prefix), window: window}
}

// RobotPoolFor returns the pool the sender settings s configure: NewRobotPool with
// s.Window, WithGuard with the guard in effect (s.Guard).
func RobotPoolFor(rdb redis.UniversalClient, prefix string, s config.Sender) *RobotPool {
	return NewRobotPool(rdb, prefix, s.Window).WithGuard(s.Guard())
}

// WithGuard makes every send count in its robot's window for window + guard from its
// answer (or its hold's end, PickOptions.Hold), and returns p (config sender.windowGuard):
// the bytes of a request given up on may still be on their way to the platform, and its
// clock ticks apart from Redis's. Call it before the first Pick.
func (p *RobotPool) WithGuard(guard time.Duration) *RobotPool {
	p.guard = max(guard, 0)
	return p
}

// Window returns the length of the sliding window.
func (p *RobotPool) Window() time.Duration { return p.window }

// secondWindow is the window of PoolRobot.LimitPerSecond: a sixtieth of the window, a
// second of a one-minute window, at least 1ms.
func (p *RobotPool) secondWindow() time.Duration { return max(p.window/60, time.Millisecond) }

// Pick atomically picks, among robots of the group target, a robot that is not
// disabled, not cooling down and under its limits in the sliding window — the most used
// known one with PickOptions.Learn, the least used without (robot_pick.lua) — and records
// a send for it, in flight until PickOptions.Hold ends (move it to the answer's time
// with Settle). pacing says
// whether the target's token bucket gates the pick (see Pacing). When none is
// free, Pick records nothing and says in Wait how long until one is: the caller waits
// exactly that long and picks again. Disabled robots are not waited for: when every
// robot is disabled the error is ErrNoRobot.
func (p *RobotPool) Pick(ctx context.Context, target string, robots []PoolRobot, opts PickOptions) (Pick, error) {
	if len(robots) == 0 {
		return Pick{}, fmt.Errorf("store: pick robot of %q: %w", target, ErrNoRobot)
	}
	keys := make([]string, 0, len(robots)+4)
	keys = append(keys, p.keys.cool(target), p.keys.disabled(target), p.keys.pace(target), p.keys.learn(target))
	args := make([]any, 0, 3*len(robots)+12)
	args = append(args, p.window.Milliseconds(), nonce(), int(opts.Pacing), BucketShare, p.secondWindow().Milliseconds(),
		boolArg(opts.Learn), max(opts.ProbeTimeout, DefaultProbeTimeout).Milliseconds(),
		opts.Busy.Every.Milliseconds(), opts.Busy.For.Milliseconds(), max(opts.Busy.PerSecond, 0), p.guard.Milliseconds(),
		max(opts.Hold, 0).Milliseconds())
	for _, r := range robots {
		if r.Name == "" || r.Limit < 1 || r.LimitPerSecond < 0 {
			return Pick{}, fmt.Errorf("store: pick robot of %q: robot %q needs a name and a limit of at least 1", target, r.Name)
		}
		keys = append(keys, p.keys.window(target, r.Name))
		args = append(args, r.Name, r.Limit, r.LimitPerSecond)
	}
	res, err := robotPickScript.Run(ctx, p.rdb, keys, args...).Slice()
	if err != nil {
		return Pick{}, redisFail("pick robot", err)
	}
	bad := fmt.Errorf("store: pick robot of %q: unexpected script result %v", target, res)
	if len(res) < 2 || (res[0] == int64(1) && len(res) < 7) {
		return Pick{}, bad
	}
	code, _ := res[0].(int64)
	switch code {
	case 1:
		name, _ := res[1].(string)
		count, _ := res[2].(int64)
		at, _ := res[3].(int64)
		member, _ := res[4].(string)
		limit, _ := res[5].(int64)
		probe, _ := res[6].(int64)
		return Pick{Robot: name, InWindow: int(count), At: time.UnixMilli(at), Member: member,
			Limit: int(limit), Probe: probe == 1}, nil
	case 0:
		wait, _ := res[1].(int64)
		at, _ := res[2].(int64)
		reserved := len(res) > 3 && res[3] == int64(1)
		return Pick{Wait: time.Duration(max(wait, 1)) * time.Millisecond, At: time.UnixMilli(at), Reserved: reserved}, nil
	case -1:
		return Pick{}, fmt.Errorf("store: pick robot of %q: every robot is disabled: %w", target, ErrNoRobot)
	}
	return Pick{}, bad
}

// Settle records in the pool what one attempt through the robot of pick did, in one
// call (one script): how says which. Every attempt ends in exactly one Settle:
//
//   - SettleReturned: no request was made after all (a circuit breaker refused it, the
//     alert may no longer be sent): the slot is free again at once, and a probe that
//     was not made lets another go.
//   - SettleAnswered: the request was answered, or failed, and the platform did not
//     throttle the robot: the send moves to Redis now (the platform counts a send at
//     some moment between the pick and the answer, so the window never ends before the
//     platform's does, however long the request took); Open says the robot is open
//     again (its doubt and strikes are over), else only its probe is over.
//   - SettleThrottled: the platform throttled the robot (DingTalk 130101, WeCom 45009,
//     Feishu 9499, Slack 429, a redirect): the refused send leaves the window, the robot
//     cools down (Throttle options: at least the platform's Retry-After, up to the
//     longest cool-down) and is in doubt after it; with Learn, a throttle
//     while the window held fewer than its configured limit (someone else sends through
//     the robot too) lowers its limit to three quarters of its current limit, but no
//     more than the count that went through, and the first such throttle of an episode
//     gives the count to the target's other robots (robots, with their configured
//     limits) without a learned limit as well. Pick raises a learned limit again by one
//     per window without a throttle, up to the count that went through, and past it by
//     one per ten such windows.
//   - SettleDisabled: the robot is broken, or out of its quota: the send moves to now,
//     and the robot leaves the rotation for DisableFor.
func (p *RobotPool) Settle(ctx context.Context, target string, pick Pick, robots []PoolRobot, s Settlement) (Settled, error) {
	if pick.Robot == "" || pick.Member == "" {
		return Settled{}, nil
	}
	args := []any{string(s.How), pick.Robot, pick.Member, (p.window + p.guard).Milliseconds()}
	switch s.How {
	case SettleReturned:
		args = append(args, boolArg(pick.Probe))
	case SettleAnswered:
		args = append(args, boolArg(s.Open))
	case SettleThrottled:
		if s.Throttle.Cooldown <= 0 {
			return Settled{}, fmt.Errorf("store: throttled %q: cool-down %s is not positive", pick.Robot, s.Throttle.Cooldown)
		}
		configured := 0
		var others []any
		for _, r := range robots {
			if r.Name == pick.Robot {
				configured = r.Limit
				continue
			}
			others = append(others, r.Name, r.Limit)
		}
		if configured == 0 {
			return Settled{}, fmt.Errorf("store: throttled %q: not one of the target's robots", pick.Robot)
		}
		o := s.Throttle
		args = append(args, "", configured, o.Cooldown.Milliseconds(), p.window.Milliseconds(), boolArg(o.Learn),
			max(o.CooldownMax, o.Cooldown).Milliseconds(), max(o.RetryAfter, 0).Milliseconds())
		args = append(args, others...)
	case SettleDisabled:
		ms := s.DisableFor.Milliseconds()
		if ms <= 0 {
			return Settled{}, fmt.Errorf("store: disable robot: duration %s is not positive", s.DisableFor)
		}
		args = append(args, "", ms)
	default:
		return Settled{}, fmt.Errorf("store: settle %q: unknown how %q", pick.Robot, s.How)
	}
	keys := []string{p.keys.window(target, pick.Robot), p.keys.learn(target), p.keys.cool(target), p.keys.pace(target), p.keys.disabled(target)}
	res, err := robotSettleScript.Run(ctx, p.rdb, keys, args...).Slice()
	if err != nil {
		return Settled{}, redisFail("settle a robot's send", err)
	}
	return settled(s.How, pick.Robot, res)
}

// settled reads the result of robot_settle.lua.
func settled(how SettleHow, robot string, res []any) (Settled, error) {
	num := func(i int) int64 {
		if i < len(res) {
			if n, ok := res[i].(int64); ok {
				return n
			}
		}
		return -1
	}
	switch {
	case how == SettleThrottled && len(res) == 4:
		return Settled{InWindow: num(3) >= 0, Throttle: Throttle{Limit: int(num(0)), Started: num(1) == 1,
			CoolingUntil: time.UnixMilli(num(2)), InWindow: int(num(3))}}, nil
	case how == SettleDisabled && len(res) == 2:
		out := Settled{InWindow: num(0) == 1}
		if v, ok := res[1].(string); ok && v != "inf" {
			ms, err := strconv.ParseInt(v, 10, 64)
			if err != nil {
				return Settled{}, fmt.Errorf("store: settle %q: unexpected deadline %q", robot, v)
			}
			out.DisabledUntil = time.UnixMilli(ms)
		}
		return out, nil
	case (how == SettleReturned || how == SettleAnswered) && len(res) == 1:
		return Settled{InWindow: num(0) == 1}, nil
	}
	return Settled{}, fmt.Errorf("store: settle %q: unexpected script result %v", robot, res)
}

// SettleHow says how an attempt through a robot went (Settle).
type SettleHow string

// The ways an attempt goes.
const (
	SettleReturned  SettleHow = "returned"
	SettleAnswered  SettleHow = "answered"
	SettleThrottled SettleHow = "throttled"
	SettleDisabled  SettleHow = "disabled"
)

// Settlement is what Settle records.
type Settlement struct {
	How SettleHow
	// Open, with SettleAnswered, says the robot is open: the platform accepted the
	// message, or refused the message itself (not the robot).
	Open bool
	// Throttle, with SettleThrottled, says how the robot cools down and whether it learns.
	Throttle ThrottleOptions
	// DisableFor, with SettleDisabled, is how long the robot leaves the rotation.
	DisableFor time.Duration
}

// Settled is what Settle did.
type Settled struct {
	// InWindow reports that the send was still in the robot's window (returned,
	// answered, disabled).
	InWindow bool
	// Throttle is what a throttle learned (SettleThrottled).
	Throttle Throttle
	// DisabledUntil is the end of the robot's disable (SettleDisabled); zero: until it
	// is enabled again.
	DisabledUntil time.Time
}

// PickOptions say how Pick spends a target's budget and whether it learns.
type PickOptions struct {
	// Pacing gates the pick by the target's token bucket (config sender.pacing).
	Pacing Pacing
	// Learn uses the robots' learned limits and lets only one request at a time into a
	// robot in doubt (config sender.learnLimits). Throttled learns them.
	Learn bool
	// ProbeTimeout is how long a probe may be in flight before another may go; at least
	// DefaultProbeTimeout.
	ProbeTimeout time.Duration
	// Busy are the platform's busy moments, when its robots' per-second limit is lower.
	// Zero: none.
	Busy Busy
	// Hold is how long the picked send may be in flight: its request starts and ends (is
	// answered, or given up) within Hold of the pick. The send counts in its robot's
	// window from the pick until Settle says it ended, or else until Hold ends, and from
	// then for a window: the platform counted it at some moment in between, so a slot
	// never frees while the platform may still count it, however late the request
	// arrived and even if the replica died. Zero counts it from the pick, as if the
	// request arrived at once.
	Hold time.Duration
}

// Busy are a platform's busy moments (Feishu asks senders to avoid :00 and :30): they
// recur Every, from the epoch on, and last For, during which a robot sends at most
// PerSecond per second window.
type Busy struct {
	Every, For time.Duration
	PerSecond  int
}

// DefaultProbeTimeout is the shortest time a probe of a robot in doubt holds the robot.
const DefaultProbeTimeout = time.Second

// Pacing says how a pick spends a target's budget (config sender.pacing).
type Pacing int

// The pacings of Pick.
const (
	// Burst picks whenever a robot has room in its window: the budget of a window can be
	// spent at its start (sender.pacing burst).
	Burst Pacing = iota
	// Paced picks only when the target's token bucket holds a token, so that under load
	// the pool's budget is spent evenly over the window (sender.pacing auto); otherwise it
	// reserves the next token and says how long until it is due (Pick.Reserved). The
	// bucket's size is the burst that goes out at once while the recent rate is
	// sustainable.
	Paced
	// Full is a pick for a full message: it takes a token when the bucket holds one, like
	// Paced; when it holds none, it goes if a robot has room in its window now, without a
	// token (a message that can carry no more gains nothing by waiting), and reserves the
	// next token like Paced if no robot has: the target is busy, and its alerts park.
	Full
)

// BucketShare is the part of a target's capacity per window (the sum of the limits in
// effect of its robots not disabled, learned ones included) that its token bucket holds
// (at least one token); the bucket refills at the rest of the capacity per window (at
// least capacity/BucketShare), so bursts and even spending together stay within the
// windows.
const BucketShare = 6

// Throttle is what Throttled learned.
type Throttle struct {
	// Limit is the robot's limit in effect now.
	Limit int
	// Started reports that this throttle began an episode: the robot was at its
	// configured limit and now has a lower, learned one. Log it once, here.
	Started bool
	// CoolingUntil is the end of the robot's cool-down.
	CoolingUntil time.Time
	// InWindow counts the robot's sends in the window when the platform throttled it (the
	// refused one left out).
	InWindow int
}

// ThrottleOptions say how Throttled cools a robot down and whether it learns.
type ThrottleOptions struct {
	// Cooldown is how long the robot rests after a throttle.
	Cooldown time.Duration
	// CooldownMax, when above Cooldown, lets the rest grow: a robot throttled while in
	// doubt (the first request after its rest was throttled again: the platform's
	// lock-out is longer than the rest) rests twice as long as the last time, up to
	// CooldownMax, until a request goes through (Settle, answered and open).
	CooldownMax time.Duration
	// RetryAfter is the platform's Retry-After with the throttle (Slack's 429), 0 when it
	// said none: the robot rests at least this long, but no longer than the longer of
	// Cooldown and CooldownMax. A request before it ends would be throttled again.
	RetryAfter time.Duration
	// Learn lowers the limits of robots throttled below their configured limit (config
	// sender.robotLimits learn).
	Learn bool
}

func boolArg(b bool) string {
	if b {
		return "1"
	}
	return "0"
}

// Cool takes robot of target out of rotation for d from Redis now (DingTalk throttled
// it); a later deadline already set is kept. It returns the end of the cool-down.
func (p *RobotPool) Cool(ctx context.Context, target, robot string, d time.Duration) (time.Time, error) {
	if d <= 0 {
		return time.Time{}, fmt.Errorf("store: cool robot: duration %s is not positive", d)
	}
	return p.suspend(ctx, "cool robot", p.keys.cool(target), robot, d)
}

// Disable takes robot of target out of rotation (it is broken: bad token, signature or
// keyword, removed from its group) for d from Redis now, or until Enable when d is 0 or
// less. A later deadline already set is kept. It returns the end of the disable, zero
// when it lasts until Enable.
func (p *RobotPool) Disable(ctx context.Context, target, robot string, d time.Duration) (time.Time, error) {
	return p.suspend(ctx, "disable robot", p.keys.disabled(target), robot, max(d, 0))
}

func (p *RobotPool) suspend(ctx context.Context, op, key, robot string, d time.Duration) (time.Time, error) {
	if robot == "" {
		return time.Time{}, fmt.Errorf("store: %s: empty robot name", op)
	}
	ms := d.Milliseconds()
	if d > 0 && ms == 0 {
		ms = 1
	}
	score, err := robotSuspendScript.Run(ctx, p.rdb, []string{key}, robot, ms).Text()
	if err != nil {
		return time.Time{}, redisFail(op, err)
	}
	return parseUntil(score)
}

// Enable puts robot of target back into rotation: its disable and cool-down end now.
func (p *RobotPool) Enable(ctx context.Context, target, robot string) error {
	_, err := p.rdb.TxPipelined(ctx, func(pipe redis.Pipeliner) error {
		pipe.ZRem(ctx, p.keys.disabled(target), robot)
		pipe.ZRem(ctx, p.keys.cool(target), robot)
		return nil
	})
	if err != nil {
		return redisFail("enable robot", err)
	}
	return nil
}

// State reads the state of robots of target, in order, as of Redis now. It is for
// operators and tests and takes no lock: the answer may be stale at once.
func (p *RobotPool) State(ctx context.Context, target string, robots []string) ([]RobotState, error) {
	now, err := p.rdb.Time(ctx).Result()
	if err != nil {
		return nil, redisFail("robot state", err)
	}
	nowMs := now.UnixMilli()
	type cmds struct {
		count          *redis.IntCmd
		cool, disabled *redis.FloatCmd
		learned        *redis.SliceCmd
	}
	cs := make([]cmds, len(robots))
	_, err = p.rdb.Pipelined(ctx, func(pipe redis.Pipeliner) error {
		for i, r := range robots {
			cs[i].count = pipe.ZCount(ctx, p.keys.window(target, r), "("+strconv.FormatInt(nowMs-p.window.Milliseconds(), 10), "+inf")
			cs[i].cool = pipe.ZScore(ctx, p.keys.cool(target), r)
			cs[i].disabled = pipe.ZScore(ctx, p.keys.disabled(target), r)
			cs[i].learned = pipe.HMGet(ctx, p.keys.learn(target), "lim:"+r, "doubt:"+r, "proven:"+r)
		}
		return nil
	})
	if err != nil && !errors.Is(err, redis.Nil) {
		return nil, redisFail("robot state", err)
	}
	out := make([]RobotState, len(robots))
	for i, r := range robots {
		st := RobotState{Name: r, InWindow: int(cs[i].count.Val())}
		if v, err := cs[i].cool.Result(); err == nil && int64(v) > nowMs {
			st.CoolingUntil = time.UnixMilli(int64(v))
		}
		if v, err := cs[i].learned.Result(); err == nil && len(v) == 3 {
			if s, ok := v[0].(string); ok {
				st.LearnedLimit, _ = strconv.Atoi(s)
			}
			st.InDoubt = v[1] != nil
			if s, ok := v[2].(string); ok {
				at, _ := strconv.ParseInt(s, 10, 64)
				st.Proven = at > nowMs-60*p.window.Milliseconds()
			}
		}
		if v, err := cs[i].disabled.Result(); err == nil && v > float64(nowMs) {
			st.Disabled = true
			if !math.IsInf(v, 1) {
				st.DisabledUntil = time.UnixMilli(int64(v))
			}
		}
		out[i] = st
	}
	return out, nil
}

func parseUntil(score string) (time.Time, error) {
	if score == "inf" || score == "+inf" {
		return time.Time{}, nil
	}
	v, err := strconv.ParseFloat(score, 64)
	if err != nil {
		return time.Time{}, fmt.Errorf("store: unexpected deadline %q", score)
	}
	return time.UnixMilli(int64(v)), nil
}

// nonce makes a window member unique even when two picks share a millisecond.
func nonce() string {
	b := make([]byte, 8)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

// redisFail wraps the error of a Redis call of the robot pool or the topic rate; an
// error of an unreachable Redis also matches ErrUnavailable.
func redisFail(op string, err error) error {
	if wheelStageRetryable(err) {
		return fmt.Errorf("store: %s: %w: %w", op, err, ErrUnavailable)
	}
	return fmt.Errorf("store: %s: %w", op, err)
}
