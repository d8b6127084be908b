package escalation_test

import (
	"context"
	"encoding/json"
	"errors"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/redis/go-redis/v9"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/oncall"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/sender/feishu"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// recorder is the publisher of the tests: it records every publication, in order, and
// hands it to a real producer (the broker stores it; nothing consumes the topic).
type recorder struct {
	p  *wire.Producer
	mu sync.Mutex
	by map[string][]wire.Publication
}

func (r *recorder) Publish(ctx context.Context, pub wire.Publication) (wire.Published, error) {
	out, err := r.p.Publish(ctx, pub)
	if err == nil {
		r.mu.Lock()
		r.by[pub.ID] = append(r.by[pub.ID], pub)
		r.mu.Unlock()
	}
	return out, err
}

// get returns the publications of id.
func (r *recorder) get(id string) []wire.Publication {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.by[id]
}

// clock is a settable clock.
type clock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *clock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *clock) set(t time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.now = t
}

// world is an escalation runtime on the local Redis, Postgres and broker: episodes in
// Redis, cancels through the wheel stage and failed_sends, publications recorded; robot
// groups "ops" (DingTalk) and "ops-feishu".
type world struct {
	rdb      redis.UniversalClient
	prefix   string
	episodes *store.Episodes
	ws       *store.WheelStage
	pub      *recorder
	cancels  failed.Canceller
	bodies   *sender.Chat
	clock    *clock
	opts     escalation.Options
}

func newWorld(t *testing.T, policies map[string]config.Policy, rotations map[string]config.Rotation) *world {
	t.Helper()
	if testing.Short() {
		t.Skip("needs Redis, Postgres and RocketMQ")
	}
	rdb, prefix := testenv.Redis(t)
	p, err := wire.NewProducer(wire.ProducerOptions{NameServers: []string{testenv.NameServer(t)}, Topic: testenv.Unique("rd_esc_")})
	require.NoError(t, err)
	t.Cleanup(func() { _ = p.Close() })
	_, fs := testenv.FailedSends(t)
	ws := store.NewWheelStage(rdb, prefix, store.WheelStageOptions{})
	bodies, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops":        {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}},
		"ops-feishu": {Protocol: feishu.New(""), Robots: []sender.Robot{{Name: "f1", Token: "t"}}},
	}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	rots, err := oncall.NewRotations(rotations)
	require.NoError(t, err)
	for name, pol := range policies {
		policies[name] = pol.WithDefaults()
	}
	return &world{rdb: rdb, prefix: prefix, episodes: store.NewEpisodes(rdb, prefix, time.Hour), ws: ws,
		pub: &recorder{p: p, by: map[string][]wire.Publication{}}, bodies: bodies,
		cancels: failed.Canceller{Stage: ws, Rows: fs, Note: store.CancelNote{By: "escalation"}},
		clock:   &clock{now: time.Now()}, opts: escalation.Options{Policies: policies, Rotations: rots,
			Signer: mustSigner(t, "the-worlds-key-0123456789-0123456789"), MovedTo: ws.MovedTo}}
}

// escalator returns an escalator of the world (a replica) with opts' changes applied.
func (w *world) escalator(reg prometheus.Registerer, change ...func(*escalation.Options)) *escalation.Escalator {
	o := w.opts
	for _, f := range change {
		f(&o)
	}
	return escalation.New(o, w.episodes, w.pub, w.cancels, w.bodies, testenv.Logger(), escalation.NewMetrics(reg), w.clock.Now)
}

// due makes the step published as id fall due through e's gate; it returns whether it
// is sent, and its body.
func due(t *testing.T, e *escalation.Escalator, pub wire.Publication) (bool, []byte) {
	t.Helper()
	a, send, err := e.Due(context.Background(), alertOf(pub))
	require.NoError(t, err)
	return send, a.Body
}

// alertOf is pub as the hand-off gives it to the gate: its id, target, body, due time
// and the mark with its signature.
func alertOf(pub wire.Publication) sender.Alert {
	return sender.Alert{ID: pub.ID, Target: pub.Target, Body: pub.Body, Due: pub.At.Truncate(time.Millisecond),
		Props: map[string]string{wire.PropEpisode: pub.Episode, wire.PropEpisodeSig: pub.EpisodeSig}}
}

// only returns the one publication of id.
func (w *world) only(t *testing.T, id string) wire.Publication {
	t.Helper()
	pubs := w.pub.get(id)
	require.Len(t, pubs, 1, "publications of %s", id)
	return pubs[0]
}

// A policy of two steps (DingTalk, then Feishu) and two repeats of the last, each step
// mentioning the rotation's member on duty when it is sent: each step is published when
// the one before it is sent, due at the episode's start plus its offset; the rotation
// hands off at 09:00 Asia/Shanghai between step 0 and step 1, so step 0 mentions ana (by
// mobile on DingTalk) and step 1 bo (by open_id on Feishu); after the last repeat
// nothing more is published.
func TestStepsFollowThePolicyAndTheRotation(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {
		Steps: []config.EscalationStep{
			{Target: "ops", Mention: config.StepMention{Rotation: "primary"}},
			{After: 5 * time.Minute, Target: "ops-feishu", Mention: config.StepMention{Rotation: "primary"}},
		},
		Repeat: &config.Repeat{Every: 10 * time.Minute, Growth: 2, Limit: 2},
	}}, map[string]config.Rotation{"primary": {
		Members: []config.Member{
			{Name: "ana", Mobile: "13800000001", IDs: map[string]string{"feishuOpenId": "ou_ana"}},
			{Name: "bo", Mobile: "13800000002", IDs: map[string]string{"feishuOpenId": "ou_bo"}},
		},
		Timezone: "Asia/Shanghai", Start: "2026-12-01", Handoff: "09:00", PeriodDays: 1,
	}})
	shanghai, err := time.LoadLocation("Asia/Shanghai")
	require.NoError(t, err)
	// 2026-12-01 ana, 12-02 bo, 12-03 ana, 12-04 from 09:00 bo.
	w.clock.set(time.Date(2026, 12, 4, 8, 59, 30, 0, shanghai))
	reg := prometheus.NewRegistry()
	e := w.escalator(reg)
	ctx := context.Background()
	key := testenv.Unique("db-")

	// A text rendered for another target (escaped for its platform) goes to that target.
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: "primary unreachable",
		ByTarget: map[string]string{"ops-feishu": "primary unreachable, as Feishu shows it"}})
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
	ep, err := w.episodes.Get(ctx, key)
	require.NoError(t, err)

	step0 := w.only(t, escalation.StepID(key, f.Seq, 0))
	send, body := due(t, e, step0)
	require.True(t, send)
	var dt struct {
		Markdown struct{ Text string }
		At       struct{ AtMobiles []string }
	}
	require.NoError(t, json.Unmarshal(body, &dt))
	require.Equal(t, []string{"13800000001"}, dt.At.AtMobiles, "before the hand-off: ana")
	require.Contains(t, dt.Markdown.Text, "on duty: ana")
	require.Contains(t, dt.Markdown.Text, "primary unreachable")

	// A replica whose configuration no longer has the rotation (a reload renamed it while
	// the episode ran on the policy it started with) says so, rather than naming nobody
	// with an empty name and a false reason.
	reloaded := w.escalator(prometheus.NewRegistry(), func(o *escalation.Options) { o.Rotations = nil })
	send, body = due(t, reloaded, step0)
	require.True(t, send)
	require.NoError(t, json.Unmarshal(body, &dt))
	require.Contains(t, dt.Markdown.Text, `on duty: nobody named (rotation "primary" is no longer configured)`)

	w.clock.set(time.Date(2026, 12, 4, 9, 0, 30, 0, shanghai))
	step1 := w.only(t, escalation.StepID(key, f.Seq, 1))
	require.Equal(t, ep.Started.Add(5*time.Minute), step1.At)
	require.Equal(t, "ops-feishu", step1.Target)
	send, body = due(t, e, step1)
	require.True(t, send)
	require.Contains(t, string(body), "<at id=ou_bo></at>", "after the hand-off: bo, by open_id")
	require.NotContains(t, string(body), "ou_ana")
	require.Contains(t, string(body), "primary unreachable, as Feishu shows it", "its own target's text")

	// Repeats of the last step: 10m after it, then 20m after that (growth 2).
	step2 := w.only(t, escalation.StepID(key, f.Seq, 2))
	require.Equal(t, ep.Started.Add(15*time.Minute), step2.At)
	send, _ = due(t, e, step2)
	require.True(t, send)
	step3 := w.only(t, escalation.StepID(key, f.Seq, 3))
	require.Equal(t, ep.Started.Add(35*time.Minute), step3.At)
	send, _ = due(t, e, step3)
	require.True(t, send)
	require.Empty(t, w.pub.get(escalation.StepID(key, f.Seq, 4)), "nothing after the last repeat")

	send, _ = due(t, e, step1)
	require.True(t, send, "a step granted before is sent again when it is handed off again (the wheel stage dedupes it)")
	require.Equal(t, 5.0, testenv.Metric(t, reg, "rocketdelay_escalation_steps_total"))
	st, err := e.Status(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 4, st.Sent)
	require.Zero(t, st.Next, "no step left")
}

// A policy changed on one replica before the other (a configuration rolled out replica
// by replica): an episode runs the steps its policy had when it started, whichever
// replica judges and carries them. A, whose db pages ops and then ops again an hour
// later, starts an episode; B, whose db has one step, to ops-feishu, judges A's steps:
// each is sent, and B publishes step 1 as A's policy has it. On the code before, B
// refused step 0 as paging another target than its own step 0. An episode started by
// a release that kept no terms is judged by the replica's own policy, as before.
func TestAnEpisodeRunsThePolicyItStartedWith(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{Target: "ops"}, {After: time.Hour, Target: "ops"}}}}, nil)
	a := w.escalator(nil)
	b := w.escalator(nil, func(o *escalation.Options) {
		o.Policies = map[string]config.Policy{"db": config.Policy{Steps: []config.EscalationStep{{Target: "ops-feishu"}}}.WithDefaults()}
	})
	ctx := context.Background()
	key := testenv.Unique("db-")
	f, err := a.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: "primary unreachable"})
	require.NoError(t, err)
	ep, err := w.episodes.Get(ctx, key)
	require.NoError(t, err)

	send, _ := due(t, b, w.only(t, escalation.StepID(key, f.Seq, 0)))
	require.True(t, send, "B sends A's step 0, to ops")
	step1 := w.only(t, escalation.StepID(key, f.Seq, 1))
	require.Equal(t, "ops", step1.Target, "B publishes step 1 as the episode's policy has it")
	require.Equal(t, ep.Started.Add(time.Hour), step1.At)
	send, _ = due(t, b, step1)
	require.True(t, send, "B sends step 1, which its own policy does not have")
	st, err := b.Status(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 2, st.Sent)

	// An episode of a release that kept no terms: B's own policy judges it.
	old := testenv.Unique("db-old-")
	f, err = a.Fire(ctx, old, "db", escalation.Content{Title: "DB down", Text: "primary unreachable"})
	require.NoError(t, err)
	require.NoError(t, w.rdb.HDel(ctx, "{"+w.prefix+"}:ep:"+old, "terms").Err())
	_, _, err = b.Due(ctx, alertOf(w.only(t, escalation.StepID(old, f.Seq, 0))))
	require.ErrorContains(t, err, "forged_mark", "B's step 0 pages ops-feishu: A's, to ops, is not its own")
}

// failingPublisher refuses every publication, as a broker that cannot be reached.
type failingPublisher struct{}

func (failingPublisher) Publish(context.Context, wire.Publication) (wire.Published, error) {
	return wire.Published{}, errors.New("broker unreachable")
}

// An acknowledgement whose announcement cannot be published now is still an
// acknowledgement: it is answered as done (not "try again": a retry would be answered
// "acknowledged before"), and the announcement stays in the episode's outbox, which a
// replica carries out. On the code before, the ack was recorded and answered with the
// broker's error.
func TestAnAckIsDoneWhenItsAnnouncementMustWait(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{{Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	key := testenv.Unique("db-")
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: "primary unreachable"})
	require.NoError(t, err)
	send, _ := due(t, e, w.only(t, escalation.StepID(key, f.Seq, 0)))
	require.True(t, send)

	cut := escalation.New(w.opts, w.episodes, failingPublisher{}, w.cancels, w.bodies, testenv.Logger(), nil, w.clock.Now)
	end, err := cut.Ack(ctx, key, f.Seq, "ana")
	require.NoError(t, err, "the ack is recorded: it is done")
	require.Equal(t, "acknowledged", end.Result)
	require.Empty(t, w.pub.get(escalation.AckID(key, f.Seq)), "not announced yet")
	require.NoError(t, e.Carry(ctx, key), "a replica carries the outbox out")
	require.Len(t, w.pub.get(escalation.AckID(key, f.Seq)), 1, "announced once")
	end, err = e.Ack(ctx, key, f.Seq, "bo")
	require.NoError(t, err)
	require.Equal(t, "already", end.Result)
	require.Equal(t, "ana", end.By)
}

// A step granted before the episode ended, whose send failed and comes back later (the
// retry job's row, a hand-off repeated after a crash), is not sent once the episode was
// acknowledged or resolved: nobody is paged after "no more steps" was said. While the
// episode runs it is sent again (the wheel stage dedupes a delivered one). On the code
// before, the grant stood and the page went out after the acknowledgement.
func TestAGrantedStepIsNotSentAfterTheEpisodeEnded(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{Target: "ops"}, {After: time.Hour, Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	for _, end := range []string{"ack", "resolve"} {
		key := testenv.Unique("db-" + end + "-")
		f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: "primary unreachable"})
		require.NoError(t, err)
		step0 := w.only(t, escalation.StepID(key, f.Seq, 0))
		send, _ := due(t, e, step0)
		require.True(t, send, "granted")
		send, _ = due(t, e, step0)
		require.True(t, send, "while the episode runs, a granted step handed off again is sent again")
		if end == "ack" {
			_, err = e.Ack(ctx, key, f.Seq, "ana")
		} else {
			_, err = e.Resolve(ctx, key, escalation.Content{Title: "fine", Text: "fine"})
		}
		require.NoError(t, err)
		send, _ = due(t, e, step0)
		require.False(t, send, "%s: the failed send of step 0, retried after the end, is withheld", end)
	}
}

// An episode acknowledged before any step was sent, then resolved, names nothing to do
// (no announcement, no resolution, no cancel), and so does one whose hash expired: the
// sweeper forgets such a key in the list of outboxes. It kept it for good before: the
// oldest entries, the sweeper's first hundred were soon all such keys, and what a dead
// replica left (a next step, a resolution) was never carried out.
func TestAnEmptyOutboxIsForgotten(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{{After: time.Hour, Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	outbox := "{" + w.prefix + "}:ep-outbox"
	listed := func(key string) bool {
		_, err := w.rdb.ZScore(ctx, outbox, key).Result()
		return err == nil
	}
	key := testenv.Unique("db-")
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: "primary unreachable"})
	require.NoError(t, err)
	_, err = e.Ack(ctx, key, f.Seq, "ana")
	require.NoError(t, err)
	_, err = e.Resolve(ctx, key, escalation.Content{Title: "fine", Text: "fine"})
	require.NoError(t, err)
	require.NoError(t, e.Carry(ctx, key))
	require.False(t, listed(key), "nothing left to do: not listed")

	gone := testenv.Unique("db-gone-")
	require.NoError(t, w.rdb.ZAdd(ctx, outbox, redis.Z{Score: 1, Member: gone}).Err()) // its hash expired
	require.NoError(t, e.Carry(ctx, gone))
	require.False(t, listed(gone), "an episode gone: not listed")
}

// An episode whose content is longer than its step's target takes even in parts (an
// Alertmanager group fitted to the receiver's platform, paging another; or the step's
// own lines on top) is paged with its text cut, and so is its resolution: a step the
// platform refuses would stay in the outbox for ever, its page lost. On the code before,
// the step's body was over DingTalk's limit (the service's producer refuses it).
func TestAStepTooLongForItsTargetIsCut(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{{Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	key := testenv.Unique("db-")
	long := strings.Repeat("db-1 refuses connections; replica lag 40 s; disk 97 %\n", 5000) // 270 KB, over DingTalk's 200 KB in parts
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "DB down", Text: long})
	require.NoError(t, err)
	step0 := w.only(t, escalation.StepID(key, f.Seq, 0))
	require.NoError(t, w.bodies.Check("ops", step0.Body), "the step's body is one DingTalk takes")
	send, body := due(t, e, step0)
	require.True(t, send)
	require.NoError(t, w.bodies.Check("ops", body), "and so is the body rendered when it falls due")
	require.Contains(t, string(body), "cut: too long for this chat")
	require.Contains(t, string(body), "db-1 refuses connections", "its beginning kept")
	require.Contains(t, string(body), "**Escalation**, step 1", "and the step's own lines")

	_, err = e.Resolve(ctx, key, escalation.Content{Title: "DB fine", Text: long})
	require.NoError(t, err)
	res := w.only(t, escalation.ResolutionID(key, f.Seq))
	require.NoError(t, w.bodies.Check("ops", res.Body), "the resolution too")
}

// A replica that made a transition and died before carrying it out (CarryLater stands
// for it) leaves its outbox; another replica's sweeper publishes the step it named, and
// later cancels the next step and publishes the resolution of a resolve it named.
func TestTheSweeperCarriesOutWhatADeadReplicaLeft(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"two": {Steps: []config.EscalationStep{
		{Target: "ops"}, {After: time.Hour, Target: "ops"}}}}, nil)
	dead := w.escalator(nil, func(o *escalation.Options) { o.CarryLater = true })
	live := w.escalator(nil, func(o *escalation.Options) { o.OutboxAge = time.Millisecond })
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	key := testenv.Unique("dead-")

	f, err := dead.Fire(ctx, key, "two", escalation.Content{Title: "T", Text: "x"})
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
	require.Empty(t, w.pub.get(escalation.StepID(key, f.Seq, 0)), "the dead replica published nothing")

	done := make(chan struct{})
	go func() { defer close(done); live.Run(ctx) }()
	defer func() { cancel(); <-done }()
	require.Eventually(t, func() bool { return len(w.pub.get(escalation.StepID(key, f.Seq, 0))) == 1 }, 10*time.Second, 10*time.Millisecond)

	send, _ := due(t, dead, w.only(t, escalation.StepID(key, f.Seq, 0))) // granted; the next is left too
	require.True(t, send)
	require.Eventually(t, func() bool { return len(w.pub.get(escalation.StepID(key, f.Seq, 1))) == 1 }, 10*time.Second, 10*time.Millisecond)

	end, err := dead.Resolve(ctx, key, escalation.Content{Title: "[RESOLVED] T", Text: "fine again"})
	require.NoError(t, err)
	require.Equal(t, "resolved", end.Result)
	require.Equal(t, 1, end.Sent)
	require.Eventually(t, func() bool { return len(w.pub.get(escalation.ResolutionID(key, f.Seq))) == 1 }, 10*time.Second, 10*time.Millisecond)
	cancelled, err := w.ws.IsCancelled(ctx, escalation.StepID(key, f.Seq, 1))
	require.NoError(t, err)
	require.True(t, cancelled, "the next step was cancelled")
	ep, err := w.episodes.Get(ctx, key)
	require.NoError(t, err)
	require.True(t, ep.Outbox.Empty(), "%+v", ep.Outbox)
}

// A resolve with no content (a receiver with sendResolved=false) ends the episode and
// publishes no resolution, though a step was sent; a resolve with content publishes one.
func TestAResolveWithoutContentSendsNoResolution(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"one": {Steps: []config.EscalationStep{{Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	for _, c := range []struct {
		content escalation.Content
		want    int
	}{{escalation.Content{}, 0}, {escalation.Content{Title: "[RESOLVED] x", Text: "x"}, 1}} {
		key := testenv.Unique("quiet-")
		f, err := e.Fire(ctx, key, "one", escalation.Content{Title: "x", Text: "x"})
		require.NoError(t, err)
		send, _ := due(t, e, w.only(t, escalation.StepID(key, f.Seq, 0)))
		require.True(t, send)
		end, err := e.Resolve(ctx, key, c.content)
		require.NoError(t, err)
		require.Equal(t, "resolved", end.Result)
		require.Len(t, w.pub.get(escalation.ResolutionID(key, f.Seq)), c.want, "%+v", c.content)
		ep, err := w.episodes.Get(ctx, key)
		require.NoError(t, err)
		require.True(t, ep.Outbox.Empty())
	}
}

// An acknowledged episode absorbs firings (someone is on it) until the policy's
// reackAfter has passed since the acknowledgement; a firing after that starts a new
// episode from its first step.
func TestAnAcknowledgedEpisodeAbsorbsFiringsUntilReackAfter(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"re": {ReackAfter: 300 * time.Millisecond,
		Steps: []config.EscalationStep{{Target: "ops"}, {After: time.Hour, Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	key := testenv.Unique("ack-")
	f, err := e.Fire(ctx, key, "re", escalation.Content{Title: "x", Text: "x"})
	require.NoError(t, err)
	send, _ := due(t, e, w.only(t, escalation.StepID(key, f.Seq, 0)))
	require.True(t, send)
	end, err := e.Ack(ctx, key, f.Seq, "ana")
	require.NoError(t, err)
	require.Equal(t, "acknowledged", end.Result)
	require.Len(t, w.pub.get(escalation.AckID(key, f.Seq)), 1, "the acknowledgement is announced")
	again, err := e.Fire(ctx, key, "re", escalation.Content{Title: "x", Text: "still"})
	require.NoError(t, err)
	require.Equal(t, "acknowledged", again.Result, "absorbed")
	send, _ = due(t, e, w.only(t, escalation.StepID(key, f.Seq, 1)))
	require.False(t, send, "no step after the acknowledgement")

	var next escalation.Fired
	require.Eventually(t, func() bool {
		next, err = e.Fire(ctx, key, "re", escalation.Content{Title: "x", Text: "still"})
		return err == nil && next.Result == "started"
	}, 10*time.Second, 20*time.Millisecond)
	require.Greater(t, next.Seq, f.Seq)
	require.Len(t, w.pub.get(escalation.StepID(key, next.Seq, 0)), 1, "the new episode starts from its first step")
}

// Only the service makes a step's mark: a copy of the genuine step 0 with any one thing
// changed — its signature removed, changed, or made with another deployment's key; its
// id, its target; due before the step's time — is refused with forged_mark, and the
// episode is untouched (still at step 0, nothing sent, no next step published). The
// genuine step is sent after the forgeries, and a copy of it is sent again (a redelivery
// of the same id, which the wheel stage's done marker makes once). A mark of an episode
// an earlier release started (not signed) is judged by the rest alone.
func TestForgedMarksAreRefused(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{After: time.Minute, Target: "ops"}, {After: time.Hour, Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	key := testenv.Unique("forged-")
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "T", Text: "x"})
	require.NoError(t, err)
	genuine := alertOf(w.only(t, escalation.StepID(key, f.Seq, 0)))
	other := mustSigner(t, "another-deployments-key-0123456789")

	forgeries := map[string]func(a *sender.Alert){
		"no signature":  func(a *sender.Alert) { delete(a.Props, wire.PropEpisodeSig) },
		"a changed one": func(a *sender.Alert) { a.Props[wire.PropEpisodeSig] = flip(a.Props[wire.PropEpisodeSig]) },
		"another key's": func(a *sender.Alert) {
			a.Props[wire.PropEpisodeSig] = escalation.SignMark(other, a.ID, a.Target, a.Props[wire.PropEpisode])
		},
		"another id":          func(a *sender.Alert) { a.ID = "my-own-id" },
		"another target":      func(a *sender.Alert) { a.Target = "ops-feishu" },
		"due before its time": func(a *sender.Alert) { a.Due = a.Due.Add(-time.Second) },
		"another step": func(a *sender.Alert) {
			a.Props[wire.PropEpisode] = strings.Replace(a.Props[wire.PropEpisode], ":0:", ":1:", 1)
		},
		"another episode": func(a *sender.Alert) {
			a.Props[wire.PropEpisode] = strings.Replace(a.Props[wire.PropEpisode], key, key+"x", 1)
		},
	}
	for name, forge := range forgeries {
		a := genuine
		a.Props = maps.Clone(genuine.Props)
		forge(&a)
		_, send, err := e.Due(ctx, a)
		require.False(t, send, name)
		if name == "another episode" {
			require.NoError(t, err, "a mark of no episode is withheld: there is nothing to page")
			continue
		}
		var rej *wire.Rejection
		require.ErrorAs(t, err, &rej, name)
		require.Equal(t, wire.RejectForgedMark, rej.Reason, name)
	}
	ep, err := w.episodes.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, 0, ep.Step, "the forgeries moved nothing")
	require.Zero(t, ep.Sent)
	require.Empty(t, w.pub.get(escalation.StepID(key, f.Seq, 1)), "nor published the next step")

	send, body := due(t, e, w.only(t, genuine.ID))
	require.True(t, send, "the genuine step")
	require.Contains(t, string(body), "**Escalation**, step 1")
	send, _ = due(t, e, w.only(t, genuine.ID))
	require.True(t, send, "the same step again: a redelivery of its id")

	// A rolling upgrade: a step a replica of an earlier release published (no signature)
	// for an episode it started, or that it granted the step before, is judged by the
	// rest of its mark; an unsigned mark of a step the service signed is not.
	old := testenv.Unique("unsigned-")
	f, err = e.Fire(ctx, old, "db", escalation.Content{Title: "T", Text: "x"})
	require.NoError(t, err)
	epKey := "{" + w.prefix + "}:ep:" + old
	require.NoError(t, w.rdb.HDel(ctx, epKey, "signed").Err()) // as an earlier release starts it
	unsigned := alertOf(w.only(t, escalation.StepID(old, f.Seq, 0)))
	delete(unsigned.Props, wire.PropEpisodeSig)
	wrong := unsigned
	wrong.Target = "ops-feishu"
	_, _, err = e.Due(ctx, wrong)
	require.ErrorContains(t, err, "forged_mark", "an unsigned mark for another target")
	_, send, err = e.Due(ctx, unsigned)
	require.NoError(t, err)
	require.True(t, send, "the unsigned mark of an episode an earlier release started")
	ep, err = w.episodes.Get(ctx, old)
	require.NoError(t, err)
	require.Equal(t, 1, ep.SignedThrough, "this release granted step 0: it signs step 1")
	_, _, err = e.Due(ctx, unsigned)
	require.ErrorContains(t, err, "forged_mark",
		"a step up to the last signed one is refused unsigned, even one granted before (security.md)")

	step1 := alertOf(w.only(t, escalation.StepID(old, f.Seq, 1)))
	require.NotEmpty(t, step1.Props[wire.PropEpisodeSig])
	delete(step1.Props, wire.PropEpisodeSig)
	_, _, err = e.Due(ctx, step1)
	require.ErrorContains(t, err, "forged_mark", "step 1 was signed: an unsigned copy is forged")
	require.NoError(t, w.rdb.HSet(ctx, epKey, "signed", 0).Err()) // as an earlier release grants step 0
	_, send, err = e.Due(ctx, step1)
	require.NoError(t, err)
	require.True(t, send, "step 1 as an earlier release published it")
}

// A step that a reschedule moved earlier than its time (an operator's "page this now")
// is the service's own: its record of the move names the due time it carries and who
// moved it, so it is sent. A copy due at any other early time, one due early whose id's
// trace records no move, or one whose move names no one, is still refused as forged.
func TestAStepMovedEarlierIsSent(t *testing.T) {
	t.Parallel()
	w := newWorld(t, map[string]config.Policy{"db": {Steps: []config.EscalationStep{
		{After: time.Hour, Target: "ops"}, {After: 2 * time.Hour, Target: "ops"}}}}, nil)
	e := w.escalator(nil)
	ctx := context.Background()
	key := testenv.Unique("moved-")
	f, err := e.Fire(ctx, key, "db", escalation.Content{Title: "T", Text: "x"})
	require.NoError(t, err)
	step := alertOf(w.only(t, escalation.StepID(key, f.Seq, 0)))

	// Not moved: due early is forged.
	early := step
	early.Due = time.Now().Truncate(time.Millisecond)
	_, _, err = e.Due(ctx, early)
	require.ErrorContains(t, err, "forged_mark")

	// Moved there, but by no one named (as a copy that settles itself on arrival records
	// it): not trusted.
	_, err = w.ws.Put(ctx, store.Entry{ID: step.ID, Target: step.Target, DueAt: time.Now().Add(30 * time.Second), Body: []byte("x")})
	require.NoError(t, err)
	anon, err := w.ws.Reschedule(ctx, step.ID, time.Now().Add(2*time.Second), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleMoved, anon.Result)
	early.Due = anon.DueAt
	_, _, err = e.Due(ctx, early)
	require.ErrorContains(t, err, "forged_mark", "a move that names no one")

	// Moved there by a reschedule of someone allowed to (in the wheel stage, as the step
	// waits there within the threshold of its time).
	moved, err := w.ws.Reschedule(store.WithAuthor(ctx, "ana"), step.ID, time.Now().Add(time.Second), time.Minute)
	require.NoError(t, err)
	require.Equal(t, store.RescheduleMoved, moved.Result)
	other := step
	other.Due = moved.DueAt.Add(-time.Second)
	_, _, err = e.Due(ctx, other)
	require.ErrorContains(t, err, "forged_mark", "early, but not at the time it was moved to")
	step.Due = moved.DueAt
	a, send, err := e.Due(ctx, step)
	require.NoError(t, err)
	require.True(t, send, "the step moved earlier")
	require.Contains(t, string(a.Body), "**Escalation**, step 1")
}

// flip changes the first character of a signature to another of its alphabet.
func flip(sig string) string {
	if sig[0] == 'A' {
		return "B" + sig[1:]
	}
	return "A" + sig[1:]
}
