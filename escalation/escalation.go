// Package escalation runs on-call escalation episodes: an Alertmanager group (or a key
// given through the API) that fires starts an episode that follows a policy (package
// oncall computes its schedule and whom each step mentions); every step is a delayed
// alert with a deterministic id, published through the wire like any alert; the episode
// ends when it is acknowledged (from the signed link its messages carry, the API or the
// command) or resolved.
//
// Every event is one atomic transition in Redis (store.Episodes): a firing, a resolve,
// an acknowledgement, and a step falling due — the hand-off of a step asks Due, which
// sends it only if its episode still runs at that step, and renders it then (the
// rotation's person on duty at that moment). What a transition names to publish or
// cancel waits in the episode's outbox until it is carried out: at once by the replica
// that made the transition, or by any replica's sweeper (Run) when that one died.
//
// It must not send to a chat platform itself: steps, resolutions and announcements are
// alerts, delivered by the wheel stage like every other.
package escalation

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/oncall"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Episodes is the episodes' state; *store.Episodes implements it.
type Episodes interface {
	FireCopies(ctx context.Context, key, policy string, terms, content []byte, reackAfter time.Duration, copies store.Copies) (store.Fire, error)
	StepDue(ctx context.Context, key string, seq int64, k int, target string, next int) (bool, string, error)
	ResolveCopies(ctx context.Context, key string, resolution []byte, copies store.Copies) (store.Ended, error)
	Ack(ctx context.Context, key string, seq int64, by string) (store.Ended, error)
	Done(ctx context.Context, key string, seq int64, action string, step int) (bool, error)
	Tidy(ctx context.Context, key string) error
	Get(ctx context.Context, key string) (store.Episode, error)
	Outbox(ctx context.Context, olderThan time.Duration, limit int) ([]string, error)
	Live(ctx context.Context, limit int) ([]string, error)
}

// Publisher publishes alerts; *wire.Producer implements it.
type Publisher interface {
	Publish(ctx context.Context, pub wire.Publication) (wire.Published, error)
}

// Canceller cancels an alert wherever it is; failed.Canceller implements it.
type Canceller interface {
	Cancel(ctx context.Context, id string) (store.CancelResult, error)
}

// Bodies render a message as the body a chat target's platform takes; *sender.Chat
// implements it.
type Bodies interface {
	Body(target string, m sender.Message) ([]byte, error)
	Kind(target string) string
	// Check checks a body as the target's platform would, when it is published.
	Check(target string, body []byte) error
}

// Content is what an episode's steps say: the latest firing notification, rendered.
type Content struct {
	Title string `json:"title"`
	Text  string `json:"text"`
	// ByTarget is Text as rendered for other targets the episode may page, escaped for
	// their platforms (an Alertmanager notification's labels are escaped for the
	// platform they are shown on: one platform's escaping lets another's markup
	// through); a target it does not name gets Text.
	ByTarget map[string]string `json:"byTarget,omitempty"`
	// Priority is the steps' RD_PRIORITY: an Alertmanager group's, from its severity.
	Priority string `json:"priority,omitempty"`
}

// textFor is what c says on target.
func (c Content) textFor(target string) string {
	if t, ok := c.ByTarget[target]; ok {
		return t
	}
	return c.Text
}

// Options configure an Escalator.
type Options struct {
	// Policies and Rotations are the configuration's (escalations, rotations).
	Policies  map[string]config.Policy
	Rotations map[string]oncall.Rotation
	// Links signs the acknowledgement links the steps carry; nil: no link.
	Links *Links
	// Signer signs the marks of the steps (RD_EPISODE_SIG) and checks them when a step
	// falls due: the deployment's keys, the same on every replica. Default a key of this
	// process alone, for tests and tools that publish no steps another process delivers.
	Signer *Signer
	// ResolutionLag is how long after a resolve its resolution is due, so that it follows
	// a step granted a moment before. Default 2s.
	ResolutionLag time.Duration
	// OutboxAge is how old an outbox must be before the sweeper carries it out (the
	// replica that named it does so at once). Default 3s.
	OutboxAge time.Duration
	// CarryLater leaves what a transition names to publish or cancel to the replicas'
	// sweepers: for the command line, which publishes nothing itself.
	CarryLater bool
	// MovedTo is the due time a reschedule moved the alert id to, as the service's own
	// record of its moves says (store.WheelStage.MovedTo); zero when it was never moved.
	// A step due before its time is refused as forged unless a reschedule moved it there:
	// only the service writes that record, and only for a caller allowed to move the id.
	// nil: a step due early is always refused.
	MovedTo func(ctx context.Context, id string) (time.Time, error)
}

// Escalator runs escalation episodes. It is safe for concurrent use.
type Escalator struct {
	opts      Options
	episodes  Episodes
	publisher Publisher
	cancels   Canceller
	bodies    Bodies
	logger    *slog.Logger
	metrics   *Metrics
	now       func() time.Time
}

// New returns an Escalator. metrics may be nil; now is the clock of the rendered
// messages and the rotations.
func New(opts Options, episodes Episodes, publisher Publisher, cancels Canceller, bodies Bodies, logger *slog.Logger,
	metrics *Metrics, now func() time.Time) *Escalator {
	config.Default(&opts.ResolutionLag, 2*time.Second)
	config.Default(&opts.OutboxAge, 3*time.Second)
	if opts.Signer == nil {
		var k [32]byte
		_, _ = rand.Read(k[:]) // never fails (crypto/rand)
		opts.Signer, _ = NewSigner(string(k[:]))
	}
	if metrics == nil {
		metrics = NewMetrics(nil)
	}
	return &Escalator{opts: opts, episodes: episodes, publisher: publisher, cancels: cancels, bodies: bodies,
		logger: logger.With("component", "escalation"), metrics: metrics, now: now}
}

// ErrUnknownPolicy is Fire's answer for a policy that is not configured.
var ErrUnknownPolicy = errors.New("escalation: no such policy")

// policy returns the policy named name: a configured one, or the one step of a
// receiver's ?delay= (DelayPolicy).
func (e *Escalator) policy(name string) (config.Policy, bool) {
	if p, ok := e.opts.Policies[name]; ok {
		return p.WithDefaults(), true
	}
	if target, delay, ok := parseDelayPolicy(name); ok {
		return config.Policy{Steps: []config.EscalationStep{{After: delay, Target: target}}}.WithDefaults(), true
	}
	return config.Policy{}, false
}

// policyOf is the policy episode ep runs: the terms it started with, so that every
// replica judges its steps alike while their configurations differ (a policy changed on
// one replica first); for an episode started by a release that kept no terms, the policy
// of this replica's configuration by its name.
func (e *Escalator) policyOf(ep store.Episode) (config.Policy, bool) {
	if len(ep.Terms) > 0 {
		var p config.Policy
		if err := json.Unmarshal(ep.Terms, &p); err == nil && len(p.Steps) > 0 {
			return p.WithDefaults(), true
		}
		e.logger.Warn("an episode's terms cannot be read; judged by the configuration's policy", "episode", ep.Key, "policy", ep.Policy)
	}
	return e.policy(ep.Policy)
}

// DelayPolicy names the one-step policy of an Alertmanager receiver's ?delay=D for
// target: a step D after the episode's start, to target, mentioning nobody.
func DelayPolicy(target string, delay time.Duration) string {
	return "delay:" + strconv.FormatInt(delay.Milliseconds(), 10) + ":" + target
}

func parseDelayPolicy(name string) (target string, delay time.Duration, ok bool) {
	rest, ok := strings.CutPrefix(name, "delay:")
	if !ok {
		return "", 0, false
	}
	ms, target, ok := strings.Cut(rest, ":")
	n, err := strconv.ParseInt(ms, 10, 64)
	if !ok || err != nil || n < 0 || target == "" {
		return "", 0, false
	}
	return target, time.Duration(n) * time.Millisecond, true
}

// Fired is what a firing did.
type Fired struct {
	// Result is "started", "updated" (the episode runs: its content is the new one),
	// "acknowledged" (absorbed: someone is on it), "already_resolved" (absorbed: a late
	// copy of a firing of the episode, which resolved since; FireCopies), "stale_copy"
	// (absorbed: a late copy of a firing of an earlier episode; FireCopies) or "busy" (the
	// last episode of the key is still being wound up by another replica: try again in a
	// moment).
	Result string
	Seq    int64
}

// Fire is a firing notification of episode key under policy: it starts an episode, or
// updates the content of the one that runs. The episode's next step is published before
// it answers (a step already published is published again: its id makes that a no-op).
func (e *Escalator) Fire(ctx context.Context, key, policy string, c Content) (Fired, error) {
	return e.FireCopies(ctx, key, policy, c, store.Copies{})
}

// FireCopies is Fire for a firing that may be a late copy of one the episode had
// (store.Copies: an Alertmanager notification names its alerts): a late copy of a
// firing of the episode, which resolved since, is absorbed ("already_resolved"), never
// a new episode that pages again.
func (e *Escalator) FireCopies(ctx context.Context, key, policy string, c Content, copies store.Copies) (Fired, error) {
	p, ok := e.policy(policy)
	if !ok {
		return Fired{}, fmt.Errorf("%w: %q", ErrUnknownPolicy, policy)
	}
	content, _ := json.Marshal(c) // plain fields: cannot fail
	terms, _ := json.Marshal(p)   // likewise
	f, err := e.episodes.FireCopies(ctx, key, policy, terms, content, p.ReackAfter, copies)
	if err == nil && f.Result == "busy" {
		// The last episode's resolution or cancel is not carried out yet (its replica
		// died, or is at it now): carry it out, then fire again.
		if err := e.Carry(ctx, key); err != nil {
			return Fired{}, err
		}
		f, err = e.episodes.FireCopies(ctx, key, policy, terms, content, p.ReackAfter, copies)
	}
	if err != nil {
		return Fired{}, err
	}
	out := Fired{Result: f.Result, Seq: f.Seq}
	switch f.Result {
	case "started":
		e.metrics.episodes.WithLabelValues("started").Inc()
	case "pending":
		out.Result = "updated"
	case "acked":
		out.Result = "acknowledged"
	case "resolved":
		out.Result = "already_resolved"
	case "stale":
		out.Result = "stale_copy"
	}
	if f.Publish >= 0 {
		if err := e.Carry(ctx, key); err != nil {
			return Fired{}, err
		}
	}
	return out, nil
}

// Ended is what a resolve or an acknowledgement did.
type Ended struct {
	// Result is "resolved" or "acknowledged" (this call ended the episode), "already"
	// (it had ended so; By is who acknowledged), "none" (no such episode runs),
	// "resolved_before" (an acknowledgement of an episode that had resolved) or
	// "stale_copy" (ResolveCopies: a late copy of an earlier episode's resolve).
	Result string
	Seq    int64
	// Sent counts the steps that were sent: a resolution or an announcement follows
	// when it is above 0.
	Sent int
	By   string
}

// Resolve resolves episode key: its next step is cancelled, and when a step was sent
// the resolution (c, to the last step's target; none when c is empty) is published.
// Both are carried out before it answers, or, when they cannot be now, by a replica's
// sweeper (the episode's outbox keeps them).
func (e *Escalator) Resolve(ctx context.Context, key string, c Content) (Ended, error) {
	return e.ResolveCopies(ctx, key, c, store.Copies{})
}

// ResolveCopies is Resolve for a resolve that names its alerts (store.Copies: an
// Alertmanager notification does): a late copy of the resolve of an earlier episode of
// key ends nothing ("stale_copy").
func (e *Escalator) ResolveCopies(ctx context.Context, key string, c Content, copies store.Copies) (Ended, error) {
	resolution, _ := json.Marshal(c) // plain fields: cannot fail
	end, err := e.episodes.ResolveCopies(ctx, key, resolution, copies)
	if err != nil {
		return Ended{}, err
	}
	return e.ended(ctx, key, end, "resolved")
}

// Ack acknowledges episode number seq of key for by: its next step is cancelled, and
// when a step was sent "acknowledged by" is announced to the last step's target.
func (e *Escalator) Ack(ctx context.Context, key string, seq int64, by string) (Ended, error) {
	if err := CheckName(by); err != nil {
		return Ended{}, err
	}
	end, err := e.episodes.Ack(ctx, key, seq, by)
	if err != nil {
		return Ended{}, err
	}
	return e.ended(ctx, key, end, "acknowledged")
}

func (e *Escalator) ended(ctx context.Context, key string, end store.Ended, what string) (Ended, error) {
	out := Ended{Result: end.Result, Seq: end.Seq, Sent: end.Sent, By: end.By}
	switch end.Result {
	case "resolved", "acked":
		out.Result = what
		e.metrics.episodes.WithLabelValues(what).Inc()
		if what == "acknowledged" {
			if ep, err := e.episodes.Get(ctx, key); err == nil {
				e.metrics.timeToAck.Observe(max(ep.AckedAt.Sub(ep.Started), 0).Seconds())
			}
		}
		// The episode has ended: that is done, whatever follows. What it named (the next
		// step's cancel, the resolution or the announcement) stays in its outbox when it
		// cannot be carried out now, and a replica's sweeper carries it out (Run); the
		// gate withholds the step meanwhile. So the answer is the ending's, never "try
		// again", which would be answered "ended before".
		if err := e.Carry(ctx, key); err != nil {
			e.logger.Warn("an episode ended; what it names is left to the sweeper", "episode", key, "ended", what, "err", err)
		}
	case "other":
		out.Result = "resolved_before"
	case "stale":
		out.Result = "stale_copy"
	}
	return out, nil
}

// StepID is the RD_ID of step k of episode number seq of key; ResolutionID and AckID
// those of its resolution and its announcement. They never repeat: the number is the
// deployment's.
func StepID(key string, seq int64, k int) string {
	return fmt.Sprintf("esc-%s-%d-%d", keyHash(key), seq, k)
}

// ResolutionID is the RD_ID of the resolution of episode number seq of key.
func ResolutionID(key string, seq int64) string {
	return fmt.Sprintf("esc-%s-%d-resolved", keyHash(key), seq)
}

// AckID is the RD_ID of the announcement of the acknowledgement of episode seq of key.
func AckID(key string, seq int64) string { return fmt.Sprintf("esc-%s-%d-ack", keyHash(key), seq) }

func keyHash(key string) string {
	h := sha256.Sum256([]byte(key))
	return hex.EncodeToString(h[:8])
}

// episodeMark is the RD_EPISODE of step k of episode number seq of key.
func episodeMark(key string, seq int64, k int) string {
	return strconv.FormatInt(seq, 10) + ":" + strconv.Itoa(k) + ":" + key
}

// markPayload is what a step's signature proves: its id, its target and its mark (the
// episode's key and number, the step's).
func markPayload(id, target, mark string) string {
	return id + "\x00" + target + "\x00" + mark
}

func parseMark(v string) (key string, seq int64, k int, ok bool) {
	s, rest, ok1 := strings.Cut(v, ":")
	ks, key, ok2 := strings.Cut(rest, ":")
	seq, err1 := strconv.ParseInt(s, 10, 64)
	k, err2 := strconv.Atoi(ks)
	return key, seq, k, ok1 && ok2 && err1 == nil && err2 == nil && key != ""
}

// Carry carries out the outbox of episode key: it publishes the step it names (or the
// resolution, the announcement) and cancels the step it names, and clears each action
// once done. An action that fails stays in the outbox for the next Carry or the sweeper.
func (e *Escalator) Carry(ctx context.Context, key string) error {
	if e.opts.CarryLater {
		return nil
	}
	ep, err := e.episodes.Get(ctx, key)
	if errors.Is(err, store.ErrNoEpisode) {
		return e.episodes.Tidy(ctx, key)
	}
	if err != nil {
		return err
	}
	ob := ep.Outbox
	if ob.Publish < 0 && ob.Cancel < 0 && !ob.Resolution && !ob.Ack {
		// Nothing to do (an ending that named nothing: no step was sent).
		return e.episodes.Tidy(ctx, key)
	}
	p, ok := e.policyOf(ep)
	if !ok {
		return fmt.Errorf("%w: %q (episode %s)", ErrUnknownPolicy, ep.Policy, key)
	}
	sched := oncall.NewSchedule(p)
	if ob.Cancel >= 0 {
		if _, err := e.cancels.Cancel(ctx, StepID(key, ep.Seq, ob.Cancel)); err != nil {
			return fmt.Errorf("escalation: cancel step %d of %s: %w", ob.Cancel, key, err)
		}
		if err := e.done(ctx, key, ep.Seq, store.ActionCancel, ob.Cancel); err != nil {
			return err
		}
	}
	if ob.Publish >= 0 {
		offset, step, ok := sched.At(ob.Publish)
		if ok {
			// The step is rendered again when it falls due (Due): this body is what it
			// would say now, a valid one for its target however it is checked.
			body, err := e.stepBody(ep, ep.Seq, ob.Publish, step)
			if err != nil {
				return fmt.Errorf("escalation: render step %d of %s: %w", ob.Publish, key, err)
			}
			id := StepID(key, ep.Seq, ob.Publish)
			var c Content
			_ = json.Unmarshal(ep.Content, &c)
			pub := wire.Publication{Target: step.Target, ID: id, At: ep.Started.Add(offset),
				Episode: episodeMark(key, ep.Seq, ob.Publish), Body: body, Priority: c.Priority}
			pub.EpisodeSig = e.opts.Signer.sign(purposeMark, markPayload(id, step.Target, pub.Episode))
			pub.Principal, pub.PrincipalSig = StepsPrincipal, e.opts.Signer.SignPrincipal(id, step.Target, StepsPrincipal)
			if at := e.now(); pub.At.Before(at) {
				pub.At = at
			}
			if _, err := e.publisher.Publish(ctx, pub); err != nil {
				return fmt.Errorf("escalation: publish step %d of %s: %w", ob.Publish, key, err)
			}
		}
		if err := e.done(ctx, key, ep.Seq, store.ActionPublish, ob.Publish); err != nil {
			return err
		}
	}
	if ob.Resolution {
		var c Content
		_ = json.Unmarshal(ep.Resolution, &c)
		if c.Title != "" || c.Text != "" { // empty: the receiver does not send resolved notifications
			if err := e.announce(ctx, ep, ResolutionID(key, ep.Seq), c, e.now().Add(e.opts.ResolutionLag)); err != nil {
				return err
			}
		}
		if err := e.done(ctx, key, ep.Seq, store.ActionResolution, 0); err != nil {
			return err
		}
	}
	if ob.Ack {
		var c Content
		_ = json.Unmarshal(ep.Content, &c)
		msg := Content{Title: "Acknowledged by " + ep.AckedBy + ": " + c.Title,
			Text: fmt.Sprintf("**Acknowledged** by %s: %s\n\nNo more steps of this escalation.", ep.AckedBy, c.Title)}
		if err := e.announce(ctx, ep, AckID(key, ep.Seq), msg, e.now()); err != nil {
			return err
		}
		if err := e.done(ctx, key, ep.Seq, store.ActionAck, 0); err != nil {
			return err
		}
	}
	return nil
}

func (e *Escalator) done(ctx context.Context, key string, seq int64, action string, step int) error {
	if _, err := e.episodes.Done(ctx, key, seq, action, step); err != nil {
		return fmt.Errorf("escalation: clear the %s of %s: %w", action, key, err)
	}
	return nil
}

// announce publishes c, due at at, to the last target episode ep sent a step to.
func (e *Escalator) announce(ctx context.Context, ep store.Episode, id string, c Content, at time.Time) error {
	if ep.LastTarget == "" {
		return nil
	}
	body, err := e.fitted(ep.LastTarget, c.textFor(ep.LastTarget), func(text string) sender.Message {
		return sender.Message{Format: sender.FormatMarkdown, Title: c.Title, Text: text}
	})
	if err != nil {
		return fmt.Errorf("escalation: render %s: %w", id, err)
	}
	pub := wire.Publication{Target: ep.LastTarget, ID: id, At: at, Body: body,
		Principal: StepsPrincipal, PrincipalSig: e.opts.Signer.SignPrincipal(id, ep.LastTarget, StepsPrincipal)}
	if _, err := e.publisher.Publish(ctx, pub); err != nil {
		return fmt.Errorf("escalation: publish %s: %w", id, err)
	}
	return nil
}

// render is m as the body target takes: its chat platform's message, or m as JSON for a
// topic target.
func (e *Escalator) render(target string, m sender.Message) ([]byte, error) {
	if e.bodies.Kind(target) == "" {
		return json.Marshal(struct {
			Title    string          `json:"title"`
			Text     string          `json:"text"`
			Mentions sender.Mentions `json:"mentions,omitzero"`
		}{m.Title, m.Text, m.Mentions})
	}
	return e.bodies.Body(target, m)
}

// Due is a due alert's gate: an alert that is not a step of an escalation (no
// RD_EPISODE) goes as it is; a step is sent only if its episode still runs at that step
// (or granted it before), rendered now: the episode's latest content, the step's
// mentions (a rotation's person on duty now) and its acknowledgement link. The next step
// is named for publishing, and published before Due answers. send false means the step is
// withheld: its episode ended.
//
// Only the service makes a mark: a step of the running episode must carry the
// service's signature of its mark (forged), be the step's own id for its own target
// (forged), and not be due before the step's time in the episode (early). A step that is
// none of these is refused with a *wire.Rejection (wire.RejectForgedMark), before the
// episode's state is touched: it is never rendered, never sent, and gets no link.
func (e *Escalator) Due(ctx context.Context, a sender.Alert) (sender.Alert, bool, error) {
	mark := a.Props[wire.PropEpisode]
	if mark == "" {
		return a, true, nil
	}
	key, seq, k, ok := parseMark(mark)
	if !ok {
		return a, false, e.refuse(a, "", "its mark is not one of the service's")
	}
	ep, err := e.episodes.Get(ctx, key)
	if errors.Is(err, store.ErrNoEpisode) {
		e.metrics.steps.WithLabelValues("withheld").Inc()
		return a, false, nil
	}
	if err != nil {
		return a, false, err
	}
	p, ok := e.policyOf(ep)
	if !ok {
		return a, false, fmt.Errorf("%w: %q (episode %s)", ErrUnknownPolicy, ep.Policy, key)
	}
	sched := oncall.NewSchedule(p)
	offset, step, ok := sched.At(k)
	if !ok {
		return a, false, nil // its policy has no such step (any more): withheld
	}
	var movedTo time.Time // read only for a step due before its time: a move, or a forgery
	if early := ep.Started.Add(offset).Truncate(time.Millisecond); e.opts.MovedTo != nil && !a.Due.IsZero() && a.Due.Before(early) {
		if movedTo, err = e.opts.MovedTo(ctx, a.ID); err != nil {
			return a, false, fmt.Errorf("escalation: read the moves of step %s: %w", a.ID, err)
		}
	}
	if why := e.forged(a, ep, seq, k, offset, step.Target, movedTo); why != "" {
		return a, false, e.refuse(a, key, why)
	}
	next := -1
	if _, _, more := sched.At(k + 1); more {
		next = k + 1
	}
	send, why, err := e.episodes.StepDue(ctx, key, seq, k, step.Target, next)
	if err != nil {
		return a, false, err
	}
	if !send {
		e.metrics.steps.WithLabelValues("withheld").Inc()
		e.logger.Info("escalation step withheld: its episode ended", "rd_id", a.ID, "episode", key, "step", k, "why", why)
		return a, false, nil
	}
	if next >= 0 && why == "granted" {
		if err := e.Carry(ctx, key); err != nil {
			// The next step stays in the outbox: the sweeper publishes it.
			e.logger.Warn("could not publish the next escalation step now; the sweeper will", "episode", key, "err", err)
		}
	}
	body, err := e.stepBody(ep, seq, k, step)
	if err != nil {
		return a, false, err
	}
	a.Body = body
	e.metrics.steps.WithLabelValues("sent").Inc()
	return a, true, nil
}

// forged says why a, marked as step k of episode number seq of ep (due offset after the
// episode's start, to target), is not the service's own step; "" when it is. A step of an
// earlier episode is not judged here: the episode's state withholds it. A step due before
// its time is forged unless movedTo, the due time a reschedule moved it to by the
// service's record (Options.MovedTo), is its due time.
func (e *Escalator) forged(a sender.Alert, ep store.Episode, seq int64, k int, offset time.Duration, target string, movedTo time.Time) string {
	if seq != ep.Seq {
		return ""
	}
	mark := a.Props[wire.PropEpisode]
	id := StepID(ep.Key, seq, k)
	switch sig := a.Props[wire.PropEpisodeSig]; {
	case a.ID != id:
		return fmt.Sprintf("its id %q is not the step's (%s)", a.ID, id)
	case a.Target != target:
		return fmt.Sprintf("its target %q is not the step's (%s)", a.Target, target)
	case sig == "" && k <= ep.SignedThrough:
		return "its mark carries no signature"
	case sig != "" && !e.opts.Signer.verify(purposeMark, markPayload(a.ID, a.Target, mark), sig):
		return "its mark's signature is not the service's"
	case !a.Due.IsZero() && a.Due.Before(ep.Started.Add(offset).Truncate(time.Millisecond)) && movedTo.UnixMilli() != a.Due.UnixMilli():
		return fmt.Sprintf("it is due %s before the step's time", ep.Started.Add(offset).Sub(a.Due))
	}
	return ""
}

// refuse is the refusal of a, which carries a mark the service did not make for it
// (a step of episode key, when the mark could be read): counted, logged, and returned as
// a *wire.Rejection, which delivery records as the alert's rejection.
func (e *Escalator) refuse(a sender.Alert, key, why string) error {
	e.metrics.steps.WithLabelValues("refused").Inc()
	e.logger.Warn("an alert with a forged escalation mark is refused: not rendered, not sent",
		"rd_id", a.ID, "target", a.Target, "episode", key, "why", why)
	return wire.Reject(wire.RejectForgedMark, "a step's mark the service did not make for this alert: %s", why)
}

// stepBody renders step k of episode ep (number seq) for its target.
func (e *Escalator) stepBody(ep store.Episode, seq int64, k int, step config.EscalationStep) ([]byte, error) {
	var c Content
	_ = json.Unmarshal(ep.Content, &c)
	now := e.now()
	kind := e.bodies.Kind(step.Target)
	mentions, duty := oncall.Mentions(step.Mention, kind, e.opts.Rotations, now)
	var footer strings.Builder
	fmt.Fprintf(&footer, "\n\n**Escalation**, step %d (policy %s)", k+1, ep.Policy)
	switch _, known := e.opts.Rotations[step.Mention.Rotation]; {
	case step.Mention.Rotation == "":
	case !known:
		// The episode keeps the policy it started with; a reload since removed or renamed
		// the rotation its step names. The page still goes, saying who it could not name.
		fmt.Fprintf(&footer, "; on duty: nobody named (rotation %q is no longer configured)", step.Mention.Rotation)
		e.logger.Warn("an escalation step names a rotation that is no longer configured: nobody on duty is mentioned",
			"episode", ep.Key, "policy", ep.Policy, "step", k, "rotation", step.Mention.Rotation)
	default:
		fmt.Fprintf(&footer, "; on duty: %s", duty.Member.Name)
		if !duty.Mentioned {
			footer.WriteString(" (no id on this platform to mention)")
		}
	}
	if e.opts.Links != nil {
		fmt.Fprintf(&footer, "\n\n[Acknowledge](%s)", e.opts.Links.URL(ep.Key, seq, now))
	}
	title := fmt.Sprintf("[ESCALATION %d] %s", k+1, c.Title)
	return e.fitted(step.Target, c.textFor(step.Target), func(text string) sender.Message {
		return sender.Message{Format: sender.FormatMarkdown, Title: title, Text: text + footer.String(), Mentions: mentions}
	})
}

// cutNote ends a text fitted shorter for its target (fitted).
const cutNote = "\n\n… (cut: too long for this chat)"

// fitted renders message(text) for target. When the target's platform would refuse it
// (too long even in parts: an Alertmanager group fitted to another target's platform, or
// a step's own lines on top), text is cut, its beginning kept and cutNote after it, to
// the longest that the platform takes: a page that goes, rather than one refused for
// ever. A body no cut makes acceptable is returned as it is, for the platform's refusal
// to be recorded where it is sent.
func (e *Escalator) fitted(target, text string, message func(text string) sender.Message) ([]byte, error) {
	body, err := e.render(target, message(text))
	if err != nil || e.bodies.Kind(target) == "" {
		return body, err
	}
	refused := e.bodies.Check(target, body)
	if refused == nil {
		return body, nil
	}
	runes := []rune(text)
	best := []byte(nil)
	for lo, hi := 0, len(runes)-1; lo <= hi; { // the longest cut that goes
		mid := (lo + hi) / 2
		b, err := e.render(target, message(string(runes[:mid])+cutNote))
		if err == nil && e.bodies.Check(target, b) == nil {
			best, lo = b, mid+1
		} else {
			hi = mid - 1
		}
	}
	if best == nil {
		// Its own lines alone are too long: it goes as it is, and the platform's refusal
		// is recorded as the failure it is (the producer refuses to publish it).
		e.logger.Warn("an escalation's message is too long for its target even cut", "target", target, "err", refused)
		return body, nil
	}
	e.logger.Warn("an escalation's text was cut to fit its target", "target", target, "runes", len(runes), "err", refused)
	return best, nil
}

// Run carries out, every second until ctx ends, the outboxes a replica named and left
// (it died, or Redis was cut off before it cleared them), and counts the live episodes
// every 30 seconds for rocketdelay_escalation_episodes.
func (e *Escalator) Run(ctx context.Context) {
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		if i%30 == 0 {
			e.count(ctx)
		}
		keys, err := e.episodes.Outbox(ctx, e.opts.OutboxAge, 100)
		if err != nil {
			e.logger.Warn("cannot read the escalation outboxes; trying again", "err", err)
			continue
		}
		for _, key := range keys {
			if err := e.Carry(ctx, key); err != nil {
				e.logger.Warn("cannot carry out an escalation's outbox; trying again", "episode", key, "err", err)
			}
		}
	}
}

// stuckAfter is how long an episode may run past its last step before it counts as stuck.
const stuckAfter = 10 * time.Minute

// count sets rocketdelay_escalation_episodes from the live episodes (at most 1000 read).
func (e *Escalator) count(ctx context.Context) {
	keys, err := e.episodes.Live(ctx, 1000)
	if err != nil {
		return
	}
	counts := map[string]float64{store.EpisodePending: 0, store.EpisodeAcked: 0, "stuck": 0}
	for _, key := range keys {
		ep, err := e.episodes.Get(ctx, key)
		if err != nil {
			continue
		}
		counts[ep.State]++
		if p, ok := e.policyOf(ep); ok && ep.State == store.EpisodePending && ep.Step >= oncall.NewSchedule(p).Len() &&
			e.now().Sub(ep.LastAt) > stuckAfter {
			counts["stuck"]++
		}
	}
	for state, n := range counts {
		e.metrics.live.WithLabelValues(state).Set(n)
	}
}
