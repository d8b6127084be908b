package sender_test

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/sender/slack"
	"github.com/rocketdelay/rocketdelay/sender/wecom"
	"github.com/rocketdelay/rocketdelay/store"
)

// platform is one chat platform as the tests drive it: its descriptor, and the limits
// rocketdelay applies by default.
type platform struct {
	kind      string
	desc      sender.Platform
	limit     int
	perSecond int
}

// platformsUnderTest are the registry's platforms but DingTalk, whose own tests are the
// core's (sender_test.go), in the registry's order: WeCom, Feishu, ….
var platformsUnderTest = func() []platform {
	var out []platform
	for _, p := range platforms.All {
		if p.Kind() != dingtalk.Kind {
			out = append(out, platform{kind: p.Kind(), desc: p, limit: p.Config.Defaults.Limit, perSecond: p.Config.Defaults.LimitPerSecond})
		}
	}
	return out
}()

// platformOf returns the platform under test of kind.
func platformOf(t *testing.T, kind string) platform {
	for _, p := range platformsUnderTest {
		if p.kind == kind {
			return p
		}
	}
	t.Fatalf("no platform %q", kind)
	return platform{}
}

// chatWorld is a simulator of one platform, a robot pool on the local Redis, and the
// robots of target "ops".
type chatWorld struct {
	p      platform
	sim    *chatsim.Server
	base   string
	pool   *store.RobotPool
	robots []sender.Robot
}

func newChatWorld(t *testing.T, p platform, window time.Duration, sim chatsim.Options, robots ...sender.Robot) *chatWorld {
	t.Helper()
	rdb, prefix := testenv.Redis(t)
	sim.Window = window
	for _, r := range robots {
		sim.Robots = append(sim.Robots, chatsim.Robot{Name: r.Name, Kind: p.kind, Token: r.Token.Reveal(), Secret: r.SigningSecret.Reveal(), Keyword: r.Keyword})
	}
	s, root := testenv.ChatSim(t, []sender.Platform{p.desc}, sim)
	for i := range robots {
		robots[i].Limit, robots[i].LimitPerSecond = p.limit, p.perSecond
	}
	return &chatWorld{p: p, sim: s, base: s.URL(root, p.kind), pool: store.NewRobotPool(rdb, prefix, window), robots: robots}
}

// sender is a sender of the world's target with options o (its targets replaced).
func (w *chatWorld) sender(t *testing.T, o sender.Options, target sender.Target, reg prometheus.Registerer) *sender.Chat {
	t.Helper()
	target.Protocol, target.Robots = w.p.desc.New(w.base), w.robots
	o.Targets = map[string]sender.Target{"ops": target}
	logger := slog.New(slog.DiscardHandler)
	if testing.Verbose() {
		logger = testenv.Logger()
	}
	s, err := sender.NewChat(o, w.pool, logger, sender.NewMetrics(reg), nil)
	require.NoError(t, err)
	t.Cleanup(s.Close)
	return s
}

func fastOptions() sender.Options {
	return sender.Options{HTTPTimeout: 2 * time.Second, Cooldown: time.Minute, Attempts: 5,
		BackoffBase: 10 * time.Millisecond, BackoffMax: 100 * time.Millisecond, MaxInFlight: 16}
}

// A burst far past the budget of three robots, from two senders sharing the pool, on
// every platform but DingTalk (WeCom, Feishu, Slack): every alert arrives exactly once, merged under each platform's
// size rule, and no robot goes over either of its platform's limits (judged at the
// simulator, whose per-second window is a sixtieth of its window).
func TestBurstsStayUnderEveryPlatformsLimits(t *testing.T) {
	for _, p := range platformsUnderTest {
		t.Run(p.kind, func(t *testing.T) {
			t.Parallel()
			const alerts = 400
			// A window of 12s: the simulator's second is then 200ms, wider than the jitter of a
			// request's way under -race on a loaded machine (at 3s, 50ms, it failed 3 runs in 60).
			w := newChatWorld(t, p, 12*time.Second, chatsim.Options{},
				sender.Robot{Name: "r1", Token: config.Secret("tok-1-" + p.kind), SigningSecret: "sec-1"},
				sender.Robot{Name: "r2", Token: config.Secret("tok-2-" + p.kind)},
				sender.Robot{Name: "r3", Token: config.Secret("tok-3-" + p.kind)})
			if !p.desc.Config.Signs {
				w.robots[0].SigningSecret = "" // WeCom and Slack do not sign
			}
			senders := []*sender.Chat{w.sender(t, fastOptions(), sender.Target{}, nil), w.sender(t, fastOptions(), sender.Target{}, nil)}
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			var wg sync.WaitGroup
			errs := make([]error, alerts)
			for i := range alerts {
				wg.Go(func() {
					_, errs[i] = senders[i%2].Send(ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i)})
				})
			}
			wg.Wait()
			for i, err := range errs {
				require.NoError(t, err, "alert %d", i)
			}
			seen := map[string]int{}
			for _, m := range w.sim.Accepted() {
				in := map[string]bool{} // a merged message's title names its first alert again
				for _, id := range alertID.FindAllString(m.Text, -1) {
					in[id] = true
				}
				for id := range in {
					seen[id]++
				}
			}
			require.Len(t, seen, alerts, "every alert arrives")
			for id, n := range seen {
				require.Equal(t, 1, n, "%s arrived %d times", id, n)
			}
			st := w.sim.Stats()
			require.Zero(t, st.OverLimit, "no robot over its limits")
			require.Zero(t, st.Rejected, "every message within the platform's rules")
			require.Less(t, st.Accepted, alerts/4, "merged into far fewer messages")
		})
	}
}

// A robot that the platform keeps refusing after its rest (a lock-out the platform does
// not document, learned here: WeCom's and Feishu's) rests twice as long each time, until
// a request goes through; a fixed rest would knock at every rest's end.
func TestAnUndocumentedLockOutIsLearned(t *testing.T) {
	for _, p := range platformsUnderTest {
		t.Run(p.kind, func(t *testing.T) {
			t.Parallel()
			const window = 2 * time.Second
			lockout := 4 * window
			w := newChatWorld(t, p, window, chatsim.Options{Throttle: lockout}, sender.Robot{Name: "r1", Token: config.Secret("tok-lock-" + p.kind)})
			// The simulator knows the robot shares its budget: 3 per window are left.
			w.sim = nil
			rdb, prefix := testenv.Redis(t)
			sim, root := testenv.ChatSim(t, []sender.Platform{p.desc}, chatsim.Options{Window: window, Throttle: lockout,
				Robots: []chatsim.Robot{{Name: "r1", Kind: p.kind, Token: "tok-lock-" + p.kind, Limit: 3}}})
			w.sim, w.base, w.pool = sim, sim.URL(root, p.kind), store.NewRobotPool(rdb, prefix, window)
			rest := window / 10
			o := fastOptions()
			o.Coalesce = config.CoalesceOff // one message per alert: the robot is refused many times
			s := w.sender(t, o, sender.Target{Cooldown: rest, CooldownMax: 10 * window}, nil)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			// One alert after the other: every refusal after the first is a probe.
			for i := range 8 {
				_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i)})
				require.NoError(t, err)
			}
			st := sim.Stats()
			refused := st.ByRobot["r1"].TooFast + st.ByRobot["r1"].Redirects
			// A probe at every rest's end would be about lockout/rest = 40 refusals; with the
			// rest doubling it is the first refusal and about log2(40) probes.
			require.LessOrEqual(t, refused, 8, "refusals: %d (%+v)", refused, st.ByRobot["r1"])
			require.Positive(t, st.ByRobot["r1"].TooFast, "the robot was throttled")
		})
	}
}

// A webhook that Slack answers 429 with Retry-After: 40 rests those 40 s, not the
// target's first rest (5 s, doubling): every request before then would be another 429.
func TestARetryAfterIsTheLeastRest(t *testing.T) {
	t.Parallel()
	const window = 6 * time.Second // the simulator's second is 100ms: the test waits little for Slack's 1/s
	w := newChatWorld(t, platformOf(t, slack.Kind), window, chatsim.Options{},
		sender.Robot{Name: "s1", Token: "T1/B1/tok-after-1"}, sender.Robot{Name: "s2", Token: "T1/B1/tok-after-2"})
	require.NoError(t, w.sim.Inject("T1/B1/tok-after-1", chatsim.Fault{Kind: chatsim.FaultStatus, Status: 429, RetryAfter: 40 * time.Second, Count: 1}))
	o := fastOptions()
	o.Coalesce = config.CoalesceOff
	// As app configures a Slack target: sender.slack.cooldown, doubling up to sender.cooldown.
	s := w.sender(t, o, sender.Target{Cooldown: 5 * time.Second, CooldownMax: 10 * time.Minute}, nil)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	before := time.Now().Truncate(time.Millisecond) // Redis TIME runs on this machine's clock
	for i := 0; w.sim.Stats().Faults == 0; i++ {
		require.Less(t, i, 3, "s1 is picked within two alerts")
		_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i)})
		require.NoError(t, err)
	}
	_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: []byte("after the 429")})
	require.NoError(t, err)
	for _, m := range w.sim.Accepted() {
		require.Equal(t, "s2", m.Robot)
	}
	st, err := w.pool.State(ctx, "ops", []string{"s1"})
	require.NoError(t, err)
	require.False(t, st[0].CoolingUntil.Before(before.Add(40*time.Second)),
		"s1 cools until %s, less than 40s after %s", st[0].CoolingUntil, before)
	// The pool keeps every request from s1 until then.
	pick, err := w.pool.Pick(ctx, "ops", []store.PoolRobot{{Name: "s1", Limit: w.robots[0].Limit}}, store.PickOptions{})
	require.NoError(t, err)
	require.Empty(t, pick.Robot)
	require.True(t, pick.At.Add(pick.Wait).Equal(st[0].CoolingUntil), "the pool's wait ends with the cool-down")
}

// A robot whose credential the platform refuses (WeCom's 93000, Feishu's 19001 "token
// invalid") is taken out of rotation; the alert goes through another robot.
func TestABrokenCredentialTakesTheRobotOut(t *testing.T) {
	for _, p := range platformsUnderTest {
		t.Run(p.kind, func(t *testing.T) {
			t.Parallel()
			w := newChatWorld(t, p, time.Minute, chatsim.Options{}, sender.Robot{Name: "good", Token: config.Secret("tok-good-" + p.kind)})
			w.robots = append([]sender.Robot{{Name: "bad", Token: "tok-unknown", Limit: p.limit, LimitPerSecond: p.perSecond}}, w.robots...)
			reg := prometheus.NewRegistry()
			s := w.sender(t, fastOptions(), sender.Target{}, reg)
			for i := range 3 {
				_, err := s.Send(context.Background(), sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i)})
				require.NoError(t, err)
			}
			require.Len(t, w.sim.Accepted(), 3)
			for _, m := range w.sim.Accepted() {
				require.Equal(t, "good", m.Robot)
			}
			metrics, err := reg.Gather()
			require.NoError(t, err)
			disabled := 0.0
			for _, mf := range metrics {
				if mf.GetName() == "rocketdelay_sender_robots_disabled_total" {
					for _, m := range mf.GetMetric() {
						disabled += m.GetCounter().GetValue()
					}
				}
			}
			require.Equal(t, 1.0, disabled, "the broken robot is taken out once")
			require.Equal(t, 1.0, testutil.ToFloat64(targetInfo(t, reg, p.kind)))
		})
	}
}

// targetInfo is the rocketdelay_target_info series of target ops of kind.
func targetInfo(t *testing.T, reg *prometheus.Registry, kind string) prometheus.Collector {
	t.Helper()
	g := prometheus.NewGaugeVec(prometheus.GaugeOpts{Name: "x"}, []string{"k"})
	metrics, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range metrics {
		if mf.GetName() != "rocketdelay_target_info" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["target"] == "ops" && labels["kind"] == kind {
				g.WithLabelValues(kind).Set(m.GetGauge().GetValue())
			}
		}
	}
	return g.WithLabelValues(kind)
}

// Mentions and signing reach the platform in its own syntax: a signed Feishu bot with a
// keyword gets a card whose markdown mentions by <at id>; a WeCom markdown message that
// mentions everyone goes as text with WeCom's mention list; a Slack webhook gets mrkdwn
// text that ends with <!channel> and <@U…>.
func TestMentionsInEachPlatformsSyntax(t *testing.T) {
	fs := newChatWorld(t, platformOf(t, feishu.Kind), time.Minute, chatsim.Options{},
		sender.Robot{Name: "f1", Token: "tok-f1", SigningSecret: "fs-secret", Keyword: "告警"})
	s := fs.sender(t, fastOptions(), sender.Target{}, nil)
	require.NoError(t, s.SendMessage(context.Background(), "ops", sender.Message{Format: sender.FormatMarkdown, Title: "CPU",
		Text: "**high** on db-1", Mentions: sender.Mentions{Users: []string{"ou_7"}}}, time.Time{}))
	got := fs.sim.Accepted()
	require.Len(t, got, 1)
	require.Equal(t, "interactive", got[0].MsgType)
	require.Contains(t, got[0].Text, "<at id=ou_7></at>")
	require.Contains(t, got[0].Text, "告警", "the keyword is added")

	wc := newChatWorld(t, platformOf(t, wecom.Kind), time.Minute, chatsim.Options{}, sender.Robot{Name: "w1", Token: "tok-w1"})
	s = wc.sender(t, fastOptions(), sender.Target{}, nil)
	require.NoError(t, s.SendMessage(context.Background(), "ops", sender.Message{Format: sender.FormatMarkdown, Title: "CPU",
		Text: "**high**", Mentions: sender.Mentions{All: true}}, time.Time{}))
	got = wc.sim.Accepted()
	require.Len(t, got, 1)
	require.Equal(t, "text", got[0].MsgType)
	require.Contains(t, string(got[0].Body), `"mentioned_list":["@all"]`)

	sl := newChatWorld(t, platformOf(t, slack.Kind), time.Minute, chatsim.Options{}, sender.Robot{Name: "s1", Token: "T1/B1/tok-s1"})
	s = sl.sender(t, fastOptions(), sender.Target{}, nil)
	require.NoError(t, s.SendMessage(context.Background(), "ops", sender.Message{Format: sender.FormatMarkdown, Title: "CPU",
		Text: "*high*", Mentions: sender.Mentions{All: true, Users: []string{"U7"}}}, time.Time{}))
	got = sl.sim.Accepted()
	require.Len(t, got, 1)
	require.Equal(t, "*CPU*\n*high*\n<!channel> <@U7>", got[0].Text)
}

// Feishu's 11232 is the platform busy at its busy moments (the top and the half of the
// hour), not the bot over its budget: the bot rests, and keeps its configured limit —
// learning a limit from it would hold a healthy bot at one message per window.
func TestFeishuBusyMomentTeachesNoLimit(t *testing.T) {
	t.Parallel()
	p := platformOf(t, feishu.Kind)
	w := newChatWorld(t, p, 2*time.Second, chatsim.Options{}, sender.Robot{Name: "r1", Token: "tok-busy-moment"})
	require.NoError(t, w.sim.Inject("tok-busy-moment", chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: feishu.CodeFreqLimited, Count: 1}))
	reg := prometheus.NewRegistry()
	o := fastOptions()
	s := w.sender(t, o, sender.Target{Cooldown: 50 * time.Millisecond}, reg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: []byte("after a busy moment")})
	require.NoError(t, err)
	require.Equal(t, 1, w.sim.Stats().Accepted)
	require.Equal(t, 1, w.sim.Stats().Faults, "the busy moment was met")
	require.Equal(t, float64(p.limit), effectiveLimit(t, reg, "ops", "r1"), "the configured limit stays")
}

// A Feishu image or share_chat message cannot carry a keyword, and a bot with one
// refuses it with 19024, the answer of a broken bot: such a message for a target whose
// bots have a keyword is refused as a bad body, by the check of the ways in and by Send,
// before any request, so that no bot leaves the rotation for it. Without a keyword it
// goes.
func TestAMessageThatCannotCarryTheKeywordDisablesNoBot(t *testing.T) {
	t.Parallel()
	p := platformOf(t, feishu.Kind)
	w := newChatWorld(t, p, time.Minute, chatsim.Options{},
		sender.Robot{Name: "f1", Token: "tok-kw-1", Keyword: "告警"}, sender.Robot{Name: "f2", Token: "tok-kw-2", Keyword: "告警"})
	reg := prometheus.NewRegistry()
	s := w.sender(t, fastOptions(), sender.Target{}, reg)
	for _, body := range []string{
		`{"msg_type":"image","content":{"image_key":"img_v2_1"}}`,
		`{"msg_type":"share_chat","content":{"share_chat_id":"oc_1"}}`,
	} {
		err := s.Check("ops", []byte(body))
		require.ErrorIs(t, err, sender.ErrInvalidBody, body)
		require.ErrorContains(t, err, "keyword")
		_, err = s.Send(context.Background(), sender.Alert{Target: "ops", Body: []byte(body)})
		var f *sender.Failure
		require.ErrorAs(t, err, &f, body)
		require.Equal(t, sender.ClassPermanent, f.Class, f.Reason)
		require.ErrorIs(t, err, sender.ErrInvalidBody)
	}
	require.Zero(t, w.sim.Stats().Requests, "nothing was sent")
	require.Zero(t, counterSum(t, reg, "rocketdelay_sender_robots_disabled_total"), "no bot left the rotation")
	_, err := s.Send(context.Background(), sender.Alert{Target: "ops", Body: []byte("disk full")})
	require.NoError(t, err)
	require.Len(t, w.sim.Accepted(), 1)

	plain := newChatWorld(t, p, time.Minute, chatsim.Options{}, sender.Robot{Name: "f3", Token: "tok-no-kw"})
	s = plain.sender(t, fastOptions(), sender.Target{}, nil)
	image := []byte(`{"msg_type":"image","content":{"image_key":"img_v2_1"}}`)
	require.NoError(t, s.Check("ops", image))
	_, err = s.Send(context.Background(), sender.Alert{Target: "ops", Body: image})
	require.NoError(t, err)
	require.Len(t, plain.sim.Accepted(), 1)
}

// counterSum is the sum of the counter name's series in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// effectiveLimit reads rocketdelay_sender_robot_effective_limit{target,robot} from reg.
func effectiveLimit(t *testing.T, reg *prometheus.Registry, target, robot string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	require.NoError(t, err)
	for _, mf := range mfs {
		if mf.GetName() != "rocketdelay_sender_robot_effective_limit" {
			continue
		}
		for _, m := range mf.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			if labels["target"] == target && labels["robot"] == robot {
				return m.GetGauge().GetValue()
			}
		}
	}
	t.Fatalf("no effective limit recorded for %s/%s", target, robot)
	return 0
}

// A burst larger than one message's worth, right after a lone alert, its alerts arriving
// over a while, through one robot of each platform goes in as many messages as the platform's size rule needs for its
// sections (WeCom: 4096 bytes of markdown; Feishu: 20 KB of body, so coalesceMax), each
// full but the last, with no robot over either of its platform's limits.
func TestABurstGoesInTheFewestMessagesBySize(t *testing.T) {
	for _, p := range platformsUnderTest {
		t.Run(p.kind, func(t *testing.T) {
			t.Parallel()
			w := newChatWorld(t, p, time.Minute, chatsim.Options{}, sender.Robot{Name: "r1", Token: config.Secret("tok-burst-" + p.kind)})
			s := w.sender(t, fastOptions(), sender.Target{}, nil)
			// In the markup of the built-in Alertmanager templates: quotes and angle brackets
			// take more room in JSON than in WeCom's markdown.
			body := func(i int) []byte {
				return fmt.Appendf(nil, "<font color=\"warning\">alert-%04d</font> DataCheck: row %d of table <b>\"orders\"</b> "+
					"is dirty; scenario <i>full-history-scan</i>, owner <i>data-platform</i>, runbook <https://runbook.example/dc>", i, i)
			}
			// k: the most of these one merged message carries on this platform
			proto := p.desc.New(w.base)
			var ms []sender.Message
			for i := range config.DefaultSenderCoalesceMax {
				m, err := proto.Parse(body(i + 1))
				require.NoError(t, err)
				ms = append(ms, m)
			}
			k := 1
			for k < len(ms) && proto.Room(sender.Merge(proto.Style(), ms[:k+1])) >= 0 {
				k++
			}
			burst := 2*k + k/2
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: body(0)})
			require.NoError(t, err)
			for _, err := range trickle(burst, func(i int) error {
				_, err := s.Send(ctx, sender.Alert{Target: "ops", Body: body(i + 1)})
				return err
			}) {
				require.NoError(t, err)
			}
			var sizes []int
			for _, m := range w.sim.Accepted() {
				in := map[string]bool{}
				for _, id := range alertID.FindAllString(m.Text, -1) {
					in[id] = true
				}
				sizes = append(sizes, len(in))
			}
			require.Equal(t, []int{1, k, k, k / 2}, sizes, "the lone alert, then %d alerts in ⌈%d/%d⌉ messages", burst, burst, k)
			st := w.sim.Stats()
			require.Zero(t, st.OverLimit)
			require.Zero(t, st.Rejected)
		})
	}
}
