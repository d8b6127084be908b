package ingress

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// receiverOptions are a receiver URL's query parameters.
type receiverOptions struct {
	// policy escalates by the policy of that name (escalations.NAME).
	policy string
	// delay, when above 0, escalates by a one-step policy: a firing group is delivered
	// only if it is still firing delay after its first notification.
	delay time.Duration
	// sendResolved forwards resolved notifications: at once without delay; with a delay,
	// only when the group's escalation was delivered. Default true.
	sendResolved bool
	// policyGone is a policy this replica's configuration does not have: only a
	// resolve is taken for it (its episode runs on the terms it started with).
	policyGone bool
}

func parseReceiverOptions(r *http.Request) (receiverOptions, error) {
	o := receiverOptions{sendResolved: true}
	q := r.URL.Query()
	for k := range q {
		if k != "delay" && k != "sendResolved" && k != "policy" {
			return o, fmt.Errorf("unknown query parameter %q (known: policy, delay, sendResolved)", k)
		}
	}
	o.policy = q.Get("policy")
	if o.policy != "" && q.Get("delay") != "" {
		return o, fmt.Errorf("give policy or delay, not both")
	}
	if v := q.Get("delay"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil || d < 0 {
			return o, fmt.Errorf("delay=%q is not a non-negative duration such as 10m", v)
		}
		o.delay = d
	}
	if v := q.Get("sendResolved"); v != "" {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return o, fmt.Errorf("sendResolved=%q is not true or false", v)
		}
		o.sendResolved = b
	}
	return o, nil
}

// receiver reads a receiver URL of target: its renderer and its options, checked, and
// the principal's rights to them. It has answered when it reports false.
func (in *Ingress) receiver(w http.ResponseWriter, r *http.Request, target string) (*renderer, receiverOptions, bool) {
	fail := func(code int, reason, msg string) (*renderer, receiverOptions, bool) {
		in.metrics.requests.WithLabelValues("alertmanager", reason).Inc()
		writeError(w, code, reason, msg)
		return nil, receiverOptions{}, false
	}
	rd, ok := in.renderers[target]
	if !ok {
		if t, known := in.cfg.Targets[target]; known {
			return fail(http.StatusNotFound, "not_a_robot_group", fmt.Sprintf("%q is a %s target: Alertmanager notifications go to robot groups", target, t.Channel()))
		}
		if in.elsewhere(w, r, "alertmanager", target) {
			return nil, receiverOptions{}, false
		}
		return fail(http.StatusNotFound, "unknown_target", fmt.Sprintf("%q is not a robot group of the configuration", target))
	}
	opts, err := parseReceiverOptions(r)
	if err != nil {
		return fail(http.StatusBadRequest, "bad_request", err.Error())
	}
	if _, ok := in.cfg.Escalations[opts.policy]; opts.policy != "" && !ok {
		opts.policyGone = true // judged once the notification is read: a resolve still ends its episode
	}
	p := principalOf(r)
	if !p.MayTarget(target) {
		in.forbid(w, "alertmanager", p, "forbidden_target", "may not post notifications for target %q (its targets: %s)", target, strings.Join(p.Targets, ", "))
		return nil, receiverOptions{}, false
	}
	if opts.policy != "" || opts.delay > 0 { // the delay's policy pages target alone
		if reason, why := in.mayEscalate(p, opts.policy); reason != "" {
			in.forbid(w, "alertmanager", p, reason, "%s", why)
			return nil, receiverOptions{}, false
		}
	}
	if opts.delay > 0 {
		// Every escalation of this URL is due delay after a notification: one the
		// consumer would reject is refused now, with its reason.
		now := in.deps.Now()
		if rej := in.limits.Check(now.Add(opts.delay), now); rej != nil {
			return fail(http.StatusBadRequest, string(rej.Reason), fmt.Sprintf("delay=%s: %s", opts.delay, rej.Detail))
		}
	}
	return rd, opts, true
}

// alertmanager serves POST /api/v1/alertmanager/{target}: Alertmanager's webhook. It
// answers 200 once what the notification asks for is stored (published to RocketMQ,
// cancelled in Redis), 5xx when it could not be (Alertmanager sends it again), 4xx for a
// notification that can never be delivered.
func (in *Ingress) alertmanager(w http.ResponseWriter, r *http.Request) {
	target := r.PathValue("target")
	rd, opts, ok := in.receiver(w, r, target)
	if !ok {
		return
	}
	p := principalOf(r)
	var n Notification
	if !decodeJSON(w, r, &n, false) {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_json").Inc()
		return
	}
	if err := n.Check(); err != nil {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_payload").Inc()
		writeError(w, http.StatusBadRequest, "bad_payload", err.Error())
		return
	}
	if opts.policyGone && n.Status != "resolved" {
		// A firing needs the policy's steps; a resolve ends an episode that started on a
		// policy a reload removed since (it would page on, unended, otherwise).
		if in.policyElsewhere(w, r, "alertmanager", opts.policy) {
			return
		}
		in.metrics.requests.WithLabelValues("alertmanager", "unknown_policy").Inc()
		writeError(w, http.StatusNotFound, "unknown_policy", fmt.Sprintf("policy=%q is not an escalation policy of the configuration (escalations)", opts.policy))
		return
	}
	msg, body, err := in.renderFitting(rd, target, n)
	if errors.Is(err, sender.ErrInvalidBody) {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_body").Inc()
		writeError(w, http.StatusUnprocessableEntity, "bad_body", fmt.Sprintf("the notification cannot be sent to target %q: %v", target, err))
		return
	}
	if err != nil {
		in.metrics.requests.WithLabelValues("alertmanager", "template").Inc()
		in.deps.Logger.Error("cannot render an Alertmanager notification", "target", target, "err", err)
		writeError(w, http.StatusUnprocessableEntity, "template", fmt.Sprintf("the template of target %q failed on this notification: %v", target, err))
		return
	}
	g := group{target: target, receiver: n.Receiver, key: n.GroupKey}
	var outcome, id string
	priority := lowerTo(in.priority(n.Alerts.Firing()), p.MaxPriority)
	policy := opts.policy
	if opts.delay > 0 {
		policy = escalation.DelayPolicy(target, opts.delay)
	}
	now := in.deps.Now()
	switch {
	case policy != "":
		var mine bool
		if mine, err = in.recordOwner(r.Context(), store.OwnEpisode, g.episode(policy), p, episodeOwnerTTL); err != nil {
			break
		}
		if !mine {
			in.forbid(w, "alertmanager", p, "foreign_key", "episode %q (receiver %q, group %q) is another principal's", g.episode(policy), n.Receiver, n.GroupKey)
			return
		}
		if n.Status == "firing" && !in.mayOpenEpisode(w, r, "alertmanager", p, g.episode(policy)) {
			return
		}
		outcome, err = in.escalate(r.Context(), g, policy, n, msg, priority, opts.sendResolved)
	case n.Status == "resolved" && !opts.sendResolved:
		outcome = "resolved_not_sent"
	default:
		var mine bool
		if id, err = in.immediateID(r.Context(), g, n); err == nil {
			mine, err = in.recordOwner(r.Context(), store.OwnAlert, id, p, store.AlertOwnerTTL(now, now, in.cfg.Scheduler.DoneTTL))
		}
		if err == nil && !mine {
			in.forbid(w, "alertmanager", p, "foreign_id", "id %q (receiver %q, group %q) is another principal's", id, n.Receiver, n.GroupKey)
			return
		}
		if err == nil {
			outcome, err = "published", in.publishNow(r.Context(), p, target, id, body, now, priority)
		}
	}
	if errors.Is(err, errBusy) {
		in.metrics.requests.WithLabelValues("alertmanager", "busy").Inc()
		writeError(w, http.StatusServiceUnavailable, "busy", "the group's last escalation is still being wound up; send it again")
		return
	}
	if err != nil {
		in.metrics.requests.WithLabelValues("alertmanager", "unavailable").Inc()
		in.deps.Logger.Warn("Alertmanager notification not stored; Alertmanager will send it again", "target", target,
			"group", n.GroupKey, "status", n.Status, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "not stored; send it again: "+err.Error())
		return
	}
	in.metrics.requests.WithLabelValues("alertmanager", outcome).Inc()
	in.deps.Logger.Debug("Alertmanager notification", "target", target, "group", n.GroupKey, "status", n.Status, "outcome", outcome)
	answer := map[string]string{"outcome": outcome}
	if policy != "" {
		answer["episode"] = g.episode(policy) // for rocketdelay escalations show
	}
	if id != "" {
		answer["id"] = id // for rocketdelay alerts show
	}
	writeJSON(w, http.StatusOK, answer)
}

// group is an Alertmanager group as one receiver URL sees it.
type group struct{ target, receiver, key string }

// episode names the group's escalation episodes under policy: a hash of the policy, the
// receiver and Alertmanager's group key.
func (g group) episode(policy string) string {
	return amEpisodePrefix + hashHex(policy, g.receiver, g.key)
}

// amEpisodePrefix starts the key of every episode an Alertmanager receiver starts; the
// API starts none with it.
const amEpisodePrefix = "am-"

// immediateID is the RD_ID of a notification delivered at once. Alertmanager tells one
// notification of a group from the next by what its alerts are (its DedupStage and
// notification log); an alert is its fingerprint and its episode, the start Prometheus
// gave it, the same at both members of an HA pair. So is this: the group, the receiver,
// and each firing and each resolved alert as fingerprint@start name the notification. A
// copy of it (the HA peer's, a retry, a second replica's) names the same, and the first
// copy picks the id that every copy within ingress.dedupeWindow gets, which the wheel
// stage delivers once; an alert that resolves and fires again starts a new episode, and
// so a new notification, whatever the window. Only a repeat (Alertmanager's
// repeat_interval) names what an earlier notification named: it is delivered again once
// the window, judged by the service's clock, has passed since the first copy.
func (in *Ingress) immediateID(ctx context.Context, g group, n Notification) (string, error) {
	var firing, resolved []string
	for _, a := range n.Alerts {
		if a.Status == "resolved" {
			resolved = append(resolved, a.named())
		} else {
			firing = append(firing, a.named())
		}
	}
	slices.Sort(firing)
	slices.Sort(resolved)
	key := hashHex(g.target, g.receiver, g.key, strings.Join(firing, ","), "|", strings.Join(resolved, ","))
	id := wire.AlertmanagerIDPrefix + key
	return in.deps.Dedupe.Once(ctx, id, id+"-"+randomHex(4), in.deps.Now(), in.cfg.Ingress.DedupeWindow)
}

func hashHex(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:12])
}

// publishNow publishes body for target with id and priority, due at at, from p.
func (in *Ingress) publishNow(ctx context.Context, p config.Principal, target, id string, body []byte, at time.Time, priority string) error {
	pub := wire.Publication{Target: target, ID: id, At: at, Body: body, Priority: priority}
	in.stamp(&pub, p)
	_, err := in.deps.Publisher.Publish(ctx, pub)
	return err
}

// priority is the highest priority the severity labels of alerts map to
// (ingress.priorities); "" (normal) when none maps.
func (in *Ingress) priority(alerts Alerts) string {
	best, name := 0, ""
	for _, a := range alerts {
		p, ok := in.cfg.Ingress.Priorities[a.Labels["severity"]]
		if !ok {
			continue
		}
		if v, err := wire.ParsePriority(p); err == nil && (name == "" || v > best) {
			best, name = v, p
		}
	}
	return name
}

// errBusy is escalate's answer when the group's last episode is not wound up yet (its
// cancel or resolution not yet carried out): Alertmanager sends the notification again.
var errBusy = errors.New("busy")

// escalate hands a notification of a group whose receiver escalates (?policy=, ?delay=)
// to its episode: a firing one starts it or updates what its steps say, a resolved one
// resolves it (its resolution is sent only if a step was, and sendResolved). An alert
// that resolves and fires again has a new start, so its firing starts a new episode; a
// late copy of an earlier episode's firing or resolve (the slow member of an HA pair
// whose gossip failed) changes nothing: escalation_already_resolved or
// escalation_stale_copy for a firing, resolve_stale_copy for a resolve.
func (in *Ingress) escalate(ctx context.Context, g group, policy string, n Notification, m sender.Message, priority string, sendResolved bool) (string, error) {
	key := g.episode(policy)
	c := escalation.Content{Title: m.Title, Text: m.Text, ByTarget: in.renderedFor(policy, g.target, n), Priority: priority}
	if n.Status == "firing" {
		// The second member of an Alertmanager HA pair whose gossip failed sends each
		// notification late: within the window of the copies of a notification, one
		// that only repeats what the episode saw firing after it resolved is a copy.
		copies := store.Copies{Alerts: namedAlerts(n.Alerts.Firing()), Window: in.cfg.Ingress.DedupeWindow}
		f, err := in.deps.Escalations.FireCopies(ctx, key, policy, c, copies)
		switch {
		case err != nil:
			return "", err
		case f.Result == "busy":
			return "", errBusy
		}
		return "escalation_" + f.Result, nil
	}
	if !sendResolved {
		c = escalation.Content{}
	}
	end, err := in.deps.Escalations.ResolveCopies(ctx, key, c, store.Copies{Alerts: namedAlerts(n.Alerts.Resolved())})
	if err != nil {
		return "", err
	}
	switch {
	case end.Result == "stale_copy":
		return "resolve_stale_copy", nil
	case end.Result != "resolved":
		return "resolved_nothing_pending", nil
	case end.Sent == 0:
		return "escalation_cancelled", nil
	case !sendResolved:
		return "resolved_after_escalation", nil
	}
	return "resolution_published", nil
}

// renderedFor renders n for every robot group policy pages other than target (whose
// text the caller has), each with its own template and its platform's escaping: a label
// escaped for one platform is not escaped for another. A target whose rendering fails
// is left out (it gets target's text, as before).
func (in *Ingress) renderedFor(policy, target string, n Notification) map[string]string {
	var out map[string]string
	for _, step := range in.cfg.Escalations[policy].Steps {
		rd, ok := in.renderers[step.Target]
		if !ok || step.Target == target {
			continue
		}
		if _, done := out[step.Target]; done {
			continue
		}
		msg, _, err := in.renderFitting(rd, step.Target, n)
		if err != nil {
			in.deps.Logger.Warn("cannot render an Alertmanager notification for a target its policy pages; it gets the receiver's text",
				"policy", policy, "target", step.Target, "err", err)
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[step.Target] = msg.Text
	}
	return out
}

// namedAlerts names each alert once for good (Alert.named). None when an alert lacks its
// fingerprint or its start: such a firing or resolve is never taken for a late copy.
func namedAlerts(as Alerts) []string {
	var out []string
	for _, a := range as {
		if a.Fingerprint == "" || a.StartsAt.IsZero() {
			return nil
		}
		out = append(out, a.named())
	}
	return out
}

// named names the alert once for good, as both members of an Alertmanager HA pair name
// it: its fingerprint (its labels) and its start (Prometheus's, the episode of the
// alert), fingerprint@start in Unix ms.
func (a Alert) named() string {
	return a.Fingerprint + "@" + strconv.FormatInt(a.StartsAt.UnixMilli(), 10)
}

// randomHex is n random bytes, in hex.
func randomHex(n int) string {
	b := make([]byte, n)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	return hex.EncodeToString(b)
}

// renderFitting renders n for target and returns the message and its body, within the
// platform's limits: a notification too large for them (a group of hundreds of alerts;
// a platform splits a long text into a few messages at most) is rendered with as many of
// its alerts as fit, firing ones first, and says how many more it has, so it is
// delivered rather than refused. An error wrapping sender.ErrInvalidBody means not even
// one alert fits.
func (in *Ingress) renderFitting(rd *renderer, target string, n Notification) (sender.Message, []byte, error) {
	try := func(k int) (sender.Message, []byte, error) {
		part := n
		if k < len(n.Alerts) {
			part.Alerts = slices.Concat(n.Alerts.Firing(), n.Alerts.Resolved())[:k]
			part.TruncatedAlerts = n.TruncatedAlerts + len(n.Alerts) - k
		}
		msg, err := rd.render(part)
		if err != nil {
			return sender.Message{}, nil, err
		}
		if k < len(n.Alerts) {
			msg.Text += fmt.Sprintf("\n\n… and %d more alerts, not shown: the message would pass the platform's size limit", len(n.Alerts)-k)
			if n.Status == "firing" { // whom the whole group's alerts call, shown or not
				msg.Mentions = rd.mentionsOf(n.Alerts.Firing())
			}
		}
		body, err := in.deps.Chat.Body(target, msg)
		if err == nil {
			err = in.deps.Chat.Check(target, body)
		}
		return msg, body, err
	}
	msg, body, err := try(len(n.Alerts))
	if !errors.Is(err, sender.ErrInvalidBody) || len(n.Alerts) <= 1 {
		return msg, body, err
	}
	// The most alerts that fit: fits(lo) holds, fits(hi) does not.
	lo, hi := 0, len(n.Alerts)
	for hi-lo > 1 {
		mid := (lo + hi) / 2
		if _, _, err := try(mid); err == nil {
			lo = mid
		} else if !errors.Is(err, sender.ErrInvalidBody) {
			return sender.Message{}, nil, err
		} else {
			hi = mid
		}
	}
	if lo == 0 {
		return msg, body, err
	}
	return try(lo)
}
