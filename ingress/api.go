package ingress

import (
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/topic"
	"github.com/rocketdelay/rocketdelay/wire"
)

// PublishRequest is the body of POST /api/v1/alerts.
type PublishRequest struct {
	// Target names a robot group or a topic target. Required.
	Target string `json:"target"`
	// In is a delay from now, a Go duration such as "3h25m17s"; or
	In string `json:"in,omitempty"`
	// At is the due time, RFC 3339.
	At string `json:"at,omitempty"`
	// ID is the idempotency key (RD_ID). Default a new random id.
	ID string `json:"id,omitempty"`
	// Priority is the alert's priority (RD_PRIORITY): critical, high, normal or low.
	// Default normal.
	Priority string `json:"priority,omitempty"`
	// Text is a plain text alert (for a topic target: the body, as UTF-8).
	Text string `json:"text,omitempty"`
	// Markdown is a markdown alert (robot groups), in the markdown of the group's
	// platform.
	Markdown *Markdown `json:"markdown,omitempty"`
	// Body is a message object of the group's platform (DingTalk, WeCom, Feishu, Slack) for a
	// robot group; for a topic target any JSON value, delivered as its bytes.
	Body json.RawMessage `json:"body,omitempty"`
	// BodyBase64 is a topic target's body as base64, for bytes that are not JSON.
	BodyBase64 string `json:"bodyBase64,omitempty"`
	// Tag, Keys, Properties and Topic are a topic target's destination (see docs/channels.md,
	// Topic targets).
	Tag        string            `json:"tag,omitempty"`
	Keys       []string          `json:"keys,omitempty"`
	Properties map[string]string `json:"properties,omitempty"`
	Topic      string            `json:"topic,omitempty"`
}

// Markdown is a markdown alert: a title (DingTalk's notification text, a Feishu card's
// header; WeCom shows none) and its text.
type Markdown struct {
	Title string `json:"title"`
	Text  string `json:"text"`
}

// PublishResponse is the answer of a publish the broker stored.
type PublishResponse struct {
	ID     string    `json:"id"`
	Target string    `json:"target"`
	Due    time.Time `json:"due"`
}

// CancelResponse is the answer of DELETE /api/v1/alerts/{id}.
type CancelResponse struct {
	ID string `json:"id"`
	// Result is removed, tombstoned, too_late or already_delivered.
	Result string `json:"result"`
	// Detail says what it means for the alert.
	Detail string `json:"detail"`
}

// publish serves POST /api/v1/alerts: the alert is checked as the producer and the
// consumer would check it (400 with their reason), stored in RocketMQ, and answered 202
// with its id and due time.
func (in *Ingress) publish(w http.ResponseWriter, r *http.Request) {
	var req PublishRequest
	if !decodeJSON(w, r, &req, true) {
		return
	}
	pub, reason, err := in.publication(req)
	if reason == string(wire.RejectUnknownTarget) && in.elsewhere(w, r, "publish", req.Target) {
		return
	}
	if err != nil {
		in.metrics.requests.WithLabelValues("publish", reason).Inc()
		writeError(w, http.StatusBadRequest, reason, err.Error())
		return
	}
	p := principalOf(r)
	if reason, why := mayPublish(p, req, in.cfg.Targets[req.Target].Chat()); reason != "" {
		in.forbid(w, "publish", p, reason, "%s", why)
		return
	}
	if principal, ok := wire.Scope(pub.ID); ok && principal != p.Name {
		in.forbid(w, "publish", p, "foreign_id", "id %q is in principal %q's scope: a principal publishes scoped ids "+
			"(@<principal>:<name>) in its own only, @%s:…", pub.ID, principal, p.Name)
		return
	}
	if pub.ID == "" {
		pub.ID = in.newID(p)
	}
	if !in.ownAlert(w, r, "publish", p, pub.ID, pub.At) {
		return
	}
	in.stamp(&pub, p)
	res, err := in.deps.Publisher.Publish(r.Context(), pub)
	if err != nil {
		in.metrics.requests.WithLabelValues("publish", "broker").Inc()
		in.deps.Logger.Warn("publish API: the broker did not store the alert", "rd_id", pub.ID, "target", pub.Target, "err", err)
		writeError(w, http.StatusServiceUnavailable, "broker", "the broker did not store the alert; send it again: "+err.Error())
		return
	}
	in.metrics.requests.WithLabelValues("publish", "ok").Inc()
	writeJSON(w, http.StatusAccepted, PublishResponse{ID: res.ID, Target: pub.Target, Due: res.DeliverAt.UTC()})
}

// publication turns req into a publication, or says why the producer or the consumer
// would refuse it: its reason (a wire.RejectReason) and what is wrong.
func (in *Ingress) publication(req PublishRequest) (wire.Publication, string, error) {
	bad := func(reason wire.RejectReason, format string, args ...any) (wire.Publication, string, error) {
		return wire.Publication{}, string(reason), fmt.Errorf(format, args...)
	}
	if req.Target == "" {
		return bad(wire.RejectMissingTarget, "target is required")
	}
	t, ok := in.cfg.Targets[req.Target]
	if !ok {
		return bad(wire.RejectUnknownTarget, "target %q is not a target of the configuration (known: %s)", req.Target,
			strings.Join(slices.Sorted(maps.Keys(in.cfg.Targets)), ", "))
	}
	switch prefix, principal, ok := wire.ReservedID(req.ID); {
	case ok && prefix == wire.ScopePrefix && !config.PrincipalName(principal):
		return bad(wire.RejectBadID, "id %q is not a scoped id: a scoped id is @<principal>:<name>, the principal's name of "+
			"letters, digits, '-', '_' and '.'", req.ID)
	case ok && prefix != wire.ScopePrefix:
		return bad(wire.RejectBadID, "id %q begins with %q: ids beginning so are the service's own (escalation steps, "+
			"Alertmanager notifications), which a producer's alert would stand in for", req.ID, prefix)
	}
	pub := wire.Publication{Target: req.Target, ID: req.ID, Priority: req.Priority}
	now := in.deps.Now()
	switch {
	case req.In != "" && req.At != "":
		return bad(wire.RejectBadDue, "give in or at, not both")
	case req.In != "":
		d, err := time.ParseDuration(req.In)
		if err != nil || d < 0 {
			return bad(wire.RejectBadDue, "in %q is not a non-negative duration such as 3h25m17s", req.In)
		}
		pub.At = now.Add(d)
	case req.At != "":
		at, err := time.Parse(time.RFC3339Nano, req.At)
		if err != nil {
			return bad(wire.RejectBadDue, "at %q is not an RFC 3339 time such as 2026-12-02T15:04:05+08:00", req.At)
		}
		if at.IsZero() { // the year 1 would read as no due time at all: due now
			return bad(wire.RejectBadDue, "at %q is outside the years 1970–9999", req.At)
		}
		pub.At = at
	default:
		return bad(wire.RejectMissingDue, "give in (a delay) or at (a due time)")
	}
	if t.Channel() == config.KindTopic {
		return in.topicPublication(pub, req, topic.Target{TopicTarget: *t.Topic, Target: req.Target}, now)
	}
	if req.Tag != "" || len(req.Keys) > 0 || len(req.Properties) > 0 || req.Topic != "" || req.BodyBase64 != "" {
		return bad(wire.RejectBadBody, "tag, keys, properties, topic and bodyBase64 are for topic targets; %q is a robot group", req.Target)
	}
	switch given(req.Text != "", req.Markdown != nil, len(req.Body) > 0) {
	case 0, 2, 3:
		return bad(wire.RejectBadBody, "give exactly one of text, markdown, body")
	}
	switch {
	case req.Text != "":
		pub.Body = []byte(req.Text)
		if strings.HasPrefix(strings.TrimSpace(req.Text), "{") {
			// Text is text: one that looks like a platform's message object (a mention
			// of everyone, a card), which the platform would read as that object, goes
			// as the platform's text message, shown as written. The object itself takes
			// body, and the right raw.
			var err error
			if pub.Body, err = in.deps.Chat.Body(req.Target, sender.Message{Format: sender.FormatText, Text: req.Text}); err != nil {
				return bad(wire.RejectBadBody, "%v", err)
			}
		}
	case req.Markdown != nil:
		if req.Markdown.Title == "" || strings.TrimSpace(req.Markdown.Text) == "" {
			return bad(wire.RejectBadBody, "a markdown alert needs markdown.title and markdown.text")
		}
		var err error
		if pub.Body, err = in.deps.Chat.Body(req.Target, sender.Message{Format: sender.FormatMarkdown,
			Title: req.Markdown.Title, Text: req.Markdown.Text}); err != nil {
			return bad(wire.RejectBadBody, "%v", err)
		}
	default:
		pub.Body = req.Body
	}
	if err := in.deps.Chat.Check(req.Target, pub.Body); err != nil {
		return bad(wire.RejectBadBody, "%v", err)
	}
	return in.check(pub, now)
}

// check refuses pub as the producer and the consumer would (wire.Publication.Check,
// with the configuration's horizon and dedupe window), in their reasons and words. A
// scoped id is checked as its principal's: publish refuses another principal's scope,
// and stamps the principal (in.stamp) before the publish; without a signer (tests) it is
// refused, as nothing would prove it.
func (in *Ingress) check(pub wire.Publication, now time.Time) (wire.Publication, string, error) {
	c := pub
	if principal, scoped := wire.Scope(pub.ID); scoped && c.PrincipalSig == "" && in.deps.Signer != nil {
		c.Principal, c.PrincipalSig = principal, "stamped before the publish"
	}
	if rej := c.Check(now, in.limits); rej != nil {
		return wire.Publication{}, string(rej.Reason), errors.New(rej.Detail)
	}
	return pub, "", nil
}

// topicPublication completes pub for the topic target t.
func (in *Ingress) topicPublication(pub wire.Publication, req PublishRequest, t topic.Target, now time.Time) (wire.Publication, string, error) {
	bad := func(reason wire.RejectReason, format string, args ...any) (wire.Publication, string, error) {
		return wire.Publication{}, string(reason), fmt.Errorf(format, args...)
	}
	if req.Markdown != nil {
		return bad(wire.RejectBadBody, "markdown is for robot groups; %q is a topic target", req.Target)
	}
	switch given(req.Text != "", len(req.Body) > 0, req.BodyBase64 != "") {
	case 0, 2, 3:
		return bad(wire.RejectBadBody, "give exactly one of text, body, bodyBase64")
	}
	switch {
	case req.Text != "":
		pub.Body = []byte(req.Text)
	case len(req.Body) > 0:
		pub.Body = req.Body
	default:
		b, err := base64.StdEncoding.DecodeString(req.BodyBase64)
		if err != nil {
			return bad(wire.RejectBadBody, "bodyBase64 is not standard base64: %v", err)
		}
		pub.Body = b
	}
	pub.Raw, pub.Tag, pub.Keys, pub.Properties, pub.Topic = true, req.Tag, req.Keys, req.Properties, req.Topic
	props := map[string]string{}
	if req.Topic != "" {
		props[wire.PropTopic] = req.Topic
	}
	if _, err := t.Resolve(pub.ID, props); err != nil {
		return bad(wire.RejectDestination, "%v", err)
	}
	return in.check(pub, now)
}

// given counts the true ones.
func given(bs ...bool) int {
	n := 0
	for _, b := range bs {
		if b {
			n++
		}
	}
	return n
}

// cancel serves DELETE /api/v1/alerts/{id}: 200 when the alert was stopped, 409 when it
// is being sent or was sent already.
func (in *Ingress) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := wire.CheckID(id); err != nil {
		writeError(w, http.StatusBadRequest, string(wire.RejectBadID), err.Error())
		return
	}
	if !in.alertOwnedBy(w, r, "cancel", principalOf(r), id) {
		return
	}
	res, err := in.deps.Wheel.Cancel(r.Context(), id)
	if err != nil {
		in.metrics.requests.WithLabelValues("cancel", "redis").Inc()
		in.deps.Logger.Warn("cancel API: Redis did not answer", "rd_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "redis", "the cancel was not recorded; send it again")
		return
	}
	in.metrics.requests.WithLabelValues("cancel", res.String()).Inc()
	code := http.StatusOK
	if !res.Cancelled() {
		code = http.StatusConflict
	}
	writeJSON(w, code, CancelResponse{ID: id, Result: res.String(), Detail: res.Explain()})
}
