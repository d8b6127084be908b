package ingress

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// dedupeWindow: two notifications with the same content within it (Alertmanager
// retrying a send it thinks failed, or two Alertmanagers of a cluster sending the same
// one) get the same RD_ID, so one is delivered. A repeat_interval re-send comes later,
// and is delivered.
const dedupeWindow = time.Minute

// resolutionLag is how long after the cancel of an escalation that was already being
// sent its resolution is due, so that the two rarely cross.
const resolutionLag = 2 * time.Second

// receiverOptions are a receiver URL's query parameters.
type receiverOptions struct {
	// delay, when above 0, escalates: a firing group is delivered only if it is still
	// firing delay after its first notification.
	delay time.Duration
	// sendResolved forwards resolved notifications: at once without delay; with a delay,
	// only when the group's escalation was delivered. Default true.
	sendResolved bool
}

func parseReceiverOptions(r *http.Request) (receiverOptions, error) {
	o := receiverOptions{sendResolved: true}
	q := r.URL.Query()
	for k := range q {
		if k != "delay" && k != "sendResolved" {
			return o, fmt.Errorf("unknown query parameter %q (known: delay, sendResolved)", k)
		}
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

// alertmanager serves POST /api/v1/alertmanager/{target}: Alertmanager's webhook. It
// answers 200 once what the notification asks for is stored (published to RocketMQ,
// cancelled in Redis), 5xx when it could not be (Alertmanager sends it again), 4xx for a
// notification that can never be delivered.
func (in *Ingress) alertmanager(w http.ResponseWriter, r *http.Request) {
	target := r.PathValue("target")
	rd, ok := in.renderers[target]
	if !ok {
		reason, msg := "unknown_target", fmt.Sprintf("%q is not a robot group of the configuration", target)
		if t, known := in.cfg.Targets[target]; known {
			reason, msg = "not_a_robot_group", fmt.Sprintf("%q is a %s target: Alertmanager notifications go to robot groups", target, t.Channel())
		}
		in.metrics.requests.WithLabelValues("alertmanager", reason).Inc()
		writeError(w, http.StatusNotFound, reason, msg)
		return
	}
	opts, err := parseReceiverOptions(r)
	if err != nil {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_request", err.Error())
		return
	}
	if opts.delay > 0 {
		// Every escalation of this URL is due delay after a notification: one the
		// consumer would reject is refused now, with its reason.
		now := in.deps.Now()
		if rej := in.limits.Check(now.Add(opts.delay), now); rej != nil {
			in.metrics.requests.WithLabelValues("alertmanager", string(rej.Reason)).Inc()
			writeError(w, http.StatusBadRequest, string(rej.Reason), fmt.Sprintf("delay=%s: %s", opts.delay, rej.Detail))
			return
		}
	}
	var n Notification
	if !decodeJSON(w, r, &n, false) {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_json").Inc()
		return
	}
	if n.Version != "4" || (n.Status != "firing" && n.Status != "resolved") || n.GroupKey == "" {
		in.metrics.requests.WithLabelValues("alertmanager", "bad_payload").Inc()
		writeError(w, http.StatusBadRequest, "bad_payload",
			fmt.Sprintf("not an Alertmanager webhook payload of version 4 (version %q, status %q, groupKey %q)", n.Version, n.Status, n.GroupKey))
		return
	}
	msg, err := rd.render(n)
	var body []byte
	if err == nil {
		body, err = in.deps.Chat.Body(target, msg)
	}
	if err != nil {
		in.metrics.requests.WithLabelValues("alertmanager", "template").Inc()
		in.deps.Logger.Error("cannot render an Alertmanager notification", "target", target, "err", err)
		writeError(w, http.StatusUnprocessableEntity, "template", fmt.Sprintf("the template of target %q failed on this notification: %v", target, err))
		return
	}
	g := group{target: target, receiver: n.Receiver, key: n.GroupKey}
	var outcome string
	priority := in.priority(n.Alerts.Firing())
	switch {
	case opts.delay > 0 && n.Status == "firing":
		outcome, err = in.escalate(r.Context(), g, body, opts.delay, priority)
	case opts.delay > 0:
		outcome, err = in.resolve(r.Context(), g, body, opts.sendResolved)
	case n.Status == "resolved" && !opts.sendResolved:
		outcome = "resolved_not_sent"
	default:
		outcome, err = "published", in.publishNow(r.Context(), target, immediateID(g, n, in.deps.Now()), body, in.deps.Now(), priority)
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
	writeJSON(w, http.StatusOK, map[string]string{"outcome": outcome})
}

// group is an Alertmanager group as one receiver URL sees it.
type group struct{ target, receiver, key string }

// base names the group's escalations: "am-" and a hash of the target, the receiver and
// Alertmanager's group key.
func (g group) base() string { return "am-" + hashHex(g.target, g.receiver, g.key) }

// immediateID is the RD_ID of a notification delivered at once: the same notification
// within dedupeWindow gets the same id.
func immediateID(g group, n Notification, now time.Time) string {
	parts := []string{g.target, g.receiver, g.key, n.Status, strconv.FormatInt(now.Unix()/int64(dedupeWindow/time.Second), 10)}
	alerts := make([]string, 0, len(n.Alerts))
	for _, a := range n.Alerts {
		alerts = append(alerts, a.Fingerprint+"/"+a.Status+"/"+a.StartsAt.UTC().Format(time.RFC3339Nano)+"/"+a.EndsAt.UTC().Format(time.RFC3339Nano))
	}
	slices.Sort(alerts)
	return "am-" + hashHex(append(parts, alerts...)...)
}

func hashHex(parts ...string) string {
	h := sha256.Sum256([]byte(strings.Join(parts, "\x00")))
	return hex.EncodeToString(h[:12])
}

// publishNow publishes body for target with id and priority, due at at.
func (in *Ingress) publishNow(ctx context.Context, target, id string, body []byte, at time.Time, priority string) error {
	_, err := in.deps.Publisher.Publish(ctx, wire.Publication{Target: target, ID: id, At: at, Body: body, Priority: priority})
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

// escalate handles a firing notification of a delayed group. The first one of an
// episode publishes the group's alert due delay later; a later one, while that alert is
// pending, replaces it (same due time, the newer content): the old one is cancelled
// first, then the new one published, so the two are never both sent. Once the alert was
// sent, later firing notifications of the episode are absorbed: the escalation happened.
func (in *Ingress) escalate(ctx context.Context, g group, body []byte, delay time.Duration, priority string) (string, error) {
	base := g.base()
	rec, ok, err := in.deps.Escalations.Get(ctx, base)
	if err != nil {
		return "", err
	}
	next := store.Escalation{Version: rec.Version + 1}
	next.ID = base + "-" + strconv.Itoa(next.Version)
	outcome := "escalation_scheduled"
	if !ok || rec.Resolved {
		next.DueMs = in.deps.Now().Add(delay).UnixMilli()
	} else {
		res, err := in.deps.Wheel.Cancel(ctx, rec.ID)
		if err != nil {
			return "", err
		}
		if !res.Cancelled() {
			// Being sent, or sent: the escalation happened; this notification adds nothing.
			return "escalation_sent", nil
		}
		next.DueMs, outcome = rec.DueMs, "escalation_replaced"
	}
	if err := in.publishNow(ctx, g.target, next.ID, body, next.Due(), priority); err != nil {
		return "", err
	}
	if _, err := in.deps.Escalations.Set(ctx, base, rec.Version, next); err != nil {
		// Published but not recorded: Alertmanager sends the notification again, which
		// publishes the same id again (a duplicate the wheel stage drops) and records it.
		return "", err
	}
	return outcome, nil
}

// resolve handles a resolved notification of a delayed group: the pending alert is
// cancelled; if it was already sent (or being sent) and sendResolved, the resolution is
// published, a moment later.
func (in *Ingress) resolve(ctx context.Context, g group, body []byte, sendResolved bool) (string, error) {
	base := g.base()
	rec, ok, err := in.deps.Escalations.Get(ctx, base)
	if err != nil {
		return "", err
	}
	if !ok || rec.Resolved {
		return "resolved_nothing_pending", nil
	}
	res, err := in.deps.Wheel.Cancel(ctx, rec.ID)
	if err != nil {
		return "", err
	}
	outcome := "escalation_cancelled"
	if !res.Cancelled() {
		outcome = "resolved_after_escalation"
		if sendResolved {
			if err := in.publishNow(ctx, g.target, rec.ID+"-resolved", body, in.deps.Now().Add(resolutionLag), ""); err != nil {
				return "", err
			}
			outcome = "resolution_published"
		}
	}
	rec.Resolved = true
	if _, err := in.deps.Escalations.Set(ctx, base, rec.Version, rec); err != nil {
		return "", err
	}
	return outcome, nil
}
