package ingress

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// notify posts n as Alertmanager would, to the receiver URL path?query.
func (s *site) notify(path string, n Notification) (int, map[string]any) {
	s.t.Helper()
	b, err := json.Marshal(n)
	require.NoError(s.t, err)
	return s.do("POST", AlertmanagerPath+path, b)
}

func notification(t *testing.T, status, groupKey string) Notification {
	n := sample(t, "firing.json")
	n.Status, n.GroupKey = status, groupKey
	for i := range n.Alerts {
		n.Alerts[i].Status = status
	}
	return n
}

func (s *site) dueOf(id string) time.Time {
	s.t.Helper()
	props, _ := s.published(id)
	ms, err := strconv.ParseInt(props[wire.PropDeliverAt], 10, 64)
	require.NoError(s.t, err)
	return time.UnixMilli(ms)
}

// stepDue makes the step the alert id is falls due, through the escalation's gate, as the
// wheel stage's hand-off does; it returns whether the step is sent, and its body.
func (s *site) stepDue(id string) (bool, []byte) {
	s.t.Helper()
	props, body := s.published(id)
	require.NotEmpty(s.t, props[wire.PropEpisode], "%s is a step of an escalation", id)
	due, err := strconv.ParseInt(props[wire.PropDeliverAt], 10, 64)
	require.NoError(s.t, err)
	a, send, err := s.esc.Due(context.Background(), sender.Alert{ID: id, Target: props[wire.PropTarget], Body: body,
		Due:   time.UnixMilli(due),
		Props: map[string]string{wire.PropEpisode: props[wire.PropEpisode], wire.PropEpisodeSig: props[wire.PropEpisodeSig]}})
	require.NoError(s.t, err)
	return send, a.Body
}

// A delayed group is an episode of a one-step policy: the first firing notification
// publishes its step, due delay later; a second one updates what the step will say (the
// same step, the same due time); a resolve before the step cancels it and sends nothing;
// a late copy of the firing (the same alerts with the same starts, from the other member
// of an HA pair) is absorbed; the next firing (a new start) starts a new episode, due
// delay after its own start, which late copies of the first episode's firing and resolve
// leave alone. Once the step was sent, further firings update nothing that pages, and the
// resolve is sent a moment later; a step that falls due after its episode resolved is
// withheld.
func TestAlertmanagerDelayedEscalation(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	g := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"DiskFull\"}"}
	key := g.episode(escalation.DelayPolicy("ops", 10*time.Minute))

	code, out := s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_started", out["outcome"])
	require.Equal(t, key, out["episode"])
	ep, err := s.episodes.Get(ctx, key)
	require.NoError(t, err)
	first := escalation.StepID(key, ep.Seq, 0)
	require.True(t, ep.Started.Add(10*time.Minute).Equal(s.dueOf(first)), "due %s, started %s", s.dueOf(first), ep.Started)
	props, _ := s.published(first)
	require.Equal(t, "critical", props[wire.PropPriority], "a critical group pages at its priority (it paged at normal)")

	n := notification(t, "firing", g.key)
	n.Alerts[0].Annotations["summary"] = "disk full now"
	code, out = s.notify("/ops?delay=10m", n)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_updated", out["outcome"])
	ep, err = s.episodes.Get(ctx, key)
	require.NoError(t, err)
	require.Contains(t, string(ep.Content), "disk full now", "the step will say the latest notification")

	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_cancelled", out["outcome"])
	cancelled, err := s.ws.IsCancelled(ctx, first)
	require.NoError(t, err)
	require.True(t, cancelled, "the step is cancelled")
	send, _ := s.stepDue(first)
	require.False(t, send, "a step of a resolved episode is withheld, cancelled or not")
	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, "resolved_nothing_pending", out["outcome"], "a repeated resolve: %d", code)

	// The other member of an HA pair whose gossip failed sends its copy of the firing
	// late: the same alerts with the same starts are the resolved episode's, and start
	// nothing.
	code, out = s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_already_resolved", out["outcome"], "a late copy")
	late, err := s.episodes.Get(ctx, key)
	require.NoError(t, err)
	require.Equal(t, ep.Seq, late.Seq)
	require.Equal(t, "resolved", late.State)

	// The alerts fire again: Prometheus gives them a new start.
	again := notification(t, "firing", g.key)
	for i := range again.Alerts {
		again.Alerts[i].StartsAt = again.Alerts[i].StartsAt.Add(time.Hour)
	}
	code, out = s.notify("/ops?delay=10m", again)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_started", out["outcome"], "a new episode")
	ep2, err := s.episodes.Get(ctx, key)
	require.NoError(t, err)
	require.Greater(t, ep2.Seq, ep.Seq)
	second := escalation.StepID(key, ep2.Seq, 0)
	require.NotEqual(t, first, second, "a new episode's step never meets the old one's marks")
	require.True(t, s.dueOf(second).Equal(ep2.Started.Add(10*time.Minute)), "a new episode is due delay after its own start")

	send, body := s.stepDue(second) // the step goes out
	require.True(t, send)
	require.Contains(t, string(body), "DiskFull")
	code, out = s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_stale_copy", out["outcome"], "a late copy of the first episode's firing")
	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "resolve_stale_copy", out["outcome"], "a late copy of the first episode's resolve")
	code, out = s.notify("/ops?delay=10m", again)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_updated", out["outcome"], "a repeat after the step")
	resolved := notification(t, "resolved", g.key)
	for i := range resolved.Alerts {
		resolved.Alerts[i].StartsAt = again.Alerts[i].StartsAt
	}
	code, out = s.notify("/ops?delay=10m", resolved)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "resolution_published", out["outcome"])
	resolution := escalation.ResolutionID(key, ep2.Seq)
	require.True(t, s.clock.Now().Add(2*time.Second).Equal(s.dueOf(resolution)), "resolution due %s", s.dueOf(resolution))
	_, body = s.published(resolution)
	require.Contains(t, string(body), "[RESOLVED] DiskFull")

	// sendResolved=false: a resolve after the step sends nothing (escalation's tests
	// check that no resolution is published).
	g2 := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"Other\"}"}
	key2 := g2.episode(escalation.DelayPolicy("ops", time.Minute))
	s.notify("/ops?delay=1m&sendResolved=false", notification(t, "firing", g2.key))
	ep, err = s.episodes.Get(ctx, key2)
	require.NoError(t, err)
	send, _ = s.stepDue(escalation.StepID(key2, ep.Seq, 0))
	require.True(t, send)
	_, out = s.notify("/ops?delay=1m&sendResolved=false", notification(t, "resolved", g2.key))
	require.Equal(t, "resolved_after_escalation", out["outcome"])

	code, out = s.notify("/ops?policy=nope", notification(t, "firing", g2.key))
	require.Equal(t, http.StatusNotFound, code, out)
	require.Equal(t, "unknown_policy", out["reason"])
}

// Without a delay every notification is published at once; the same notification sent
// twice (a retry, or two Alertmanagers: the same alerts with the same starts) gets the
// same RD_ID, so the wheel stage keeps one; an alert that fired again (a new start) is a
// new notification with an id of its own, within the window too; resolves are forwarded
// unless sendResolved=false.
func TestAlertmanagerImmediate(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	n := notification(t, "firing", "{}:{alertname=\"Now\"}")
	var id string
	for i := range 2 {
		code, out := s.notify("/ops", n)
		require.Equal(t, http.StatusOK, code, out)
		require.Equal(t, "published", out["outcome"])
		if i == 0 {
			id = out["id"].(string)
		}
		require.Equal(t, id, out["id"], "a copy of the notification gets the first one's id")
	}
	again := n
	again.Alerts = slices.Clone(n.Alerts)
	again.Alerts[0].StartsAt = again.Alerts[0].StartsAt.Add(time.Minute) // fired again
	code, out := s.notify("/ops", again)
	require.Equal(t, http.StatusOK, code, out)
	require.NotEqual(t, id, out["id"], "an alert that fired again is a new notification")
	props, body := s.published(id)
	due, _ := strconv.ParseInt(props[wire.PropDeliverAt], 10, 64)
	require.Equal(t, s.clock.Now().UnixMilli(), due)
	require.Contains(t, string(body), "[FIRING:2] DiskFull")
	require.Eventually(t, func() bool { return s.stored.Copies(id) == 2 }, 10*time.Second, 10*time.Millisecond,
		"both sends of the notification carry the same RD_ID")

	_, out = s.notify("/ops?sendResolved=false", notification(t, "resolved", n.GroupKey))
	require.Equal(t, "resolved_not_sent", out["outcome"])
	_, out = s.notify("/ops", notification(t, "resolved", n.GroupKey))
	require.Equal(t, "published", out["outcome"])

	for path, want := range map[string]int{
		"/nobody":          http.StatusNotFound,
		"/orders":          http.StatusNotFound,
		"/ops?delay=soon":  http.StatusBadRequest,
		"/ops?colour=blue": http.StatusBadRequest,
	} {
		code, out := s.notify(path, n)
		require.Equal(t, want, code, "%s: %v", path, out)
	}
	code, out = s.do("POST", AlertmanagerPath+"/ops", []byte(`{"version":"3","status":"firing","groupKey":"x"}`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "bad_payload", out["reason"])
}

// What a way in publishes names its principal, signed by the service (RD_PRINCIPAL and
// RD_PRINCIPAL_SIG), so that a busy target's alerts wait in their principal's share: the
// signature proves the name for that id and target only.
func TestPublishedAlertsNameTheirPrincipal(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "90m", "id": "api-principal-1", "text": "disk full"})
	require.Equal(t, http.StatusAccepted, code, out)
	api, _ := s.published("api-principal-1")
	code, out = s.notify("/ops", notification(t, "firing", "{}:{alertname=\"Principal\"}"))
	require.Equal(t, http.StatusOK, code, out)
	am, _ := s.published(out["id"].(string))
	for id, props := range map[string]map[string]string{"api-principal-1": api, out["id"].(string): am} {
		require.Equal(t, config.LegacyPrincipal, props[wire.PropPrincipal], id)
		sig := props[wire.PropPrincipalSig]
		require.Equal(t, config.LegacyPrincipal, s.signer.ProvenPrincipal(id, "ops", config.LegacyPrincipal, sig), id)
		require.Empty(t, s.signer.ProvenPrincipal(id, "orders", config.LegacyPrincipal, sig), "another target")
		require.Empty(t, s.signer.ProvenPrincipal(id+"x", "ops", config.LegacyPrincipal, sig), "another id")
		require.Empty(t, s.signer.ProvenPrincipal(id, "ops", "team-b", sig), "another name")
	}
}

// A notification's priority is the highest its firing alerts' severities map to
// (ingress.priorities): the sample has a critical alert, so critical; without severities,
// normal (no property).
func TestAlertmanagerPriorityFromSeverity(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	n := notification(t, "firing", "{}:{alertname=\"Prio\"}")
	code, out := s.notify("/ops", n)
	require.Equal(t, http.StatusOK, code, out)
	props, _ := s.published(out["id"].(string))
	require.Equal(t, "critical", props[wire.PropPriority])

	for i := range n.Alerts {
		delete(n.Alerts[i].Labels, "severity")
	}
	n.GroupKey = "{}:{alertname=\"PrioNone\"}"
	code, out = s.notify("/ops", n)
	require.Equal(t, http.StatusOK, code, out)
	props, _ = s.published(out["id"].(string))
	require.NotContains(t, props, wire.PropPriority)
}

// A resolve for a policy a reload removed since its episode started ends the episode
// (it runs on the terms it started with): it was answered 404 unknown_policy, which
// Alertmanager drops, and the episode paged on unended. A firing for it is still 404.
func TestAResolveEndsAnEpisodeWhosePolicyIsGone(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	g := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"Gone\"}"}
	code, out := s.notify("/ops?policy=db", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	ep, err := s.episodes.Get(t.Context(), g.episode("db"))
	require.NoError(t, err)
	require.Equal(t, store.EpisodePending, ep.State)

	reloaded := s.cfg
	reloaded.Escalations = nil // the policy removed
	in, err := New(reloaded, s.in.deps, NewMetrics(nil))
	require.NoError(t, err)
	onReloaded := *s // the same stores, through the replica whose configuration lacks db
	onReloaded.srv = httptest.NewServer(in.Handler())
	defer onReloaded.srv.Close()
	post := func(n Notification) (int, map[string]any) { return onReloaded.notify("/ops?policy=db", n) }
	code, out = post(notification(t, "firing", "{}:{alertname=\"Other\"}"))
	require.Equal(t, http.StatusNotFound, code, out)
	require.Equal(t, "unknown_policy", out["reason"])
	code, out = post(notification(t, "resolved", g.key))
	require.Equal(t, http.StatusOK, code, out)
	ep, err = s.episodes.Get(t.Context(), g.episode("db"))
	require.NoError(t, err)
	require.Equal(t, store.EpisodeResolved, ep.State)
}

// A notification over ingress.maxBody (here 64 KiB) is taken, up to AlertmanagerMaxBody,
// and sent with the alerts that fit: it was answered 413, which Alertmanager drops.
func TestALargeNotificationIsFittedNotRefused(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	n := notification(t, "firing", "{}:{alertname=\"Many\"}")
	first := n.Alerts[0]
	n.Alerts = nil
	for i := range 400 {
		a := first
		a.Labels = KV{"alertname": "Many", "instance": fmt.Sprintf("db-%03d", i), "severity": "warning"}
		a.Annotations = KV{"summary": strings.Repeat("disk almost full ", 20)}
		a.Fingerprint = fmt.Sprintf("f%03d", i)
		n.Alerts = append(n.Alerts, a)
	}
	b, err := json.Marshal(n)
	require.NoError(t, err)
	require.Greater(t, int64(len(b)), s.cfg.Ingress.MaxBody)
	code, out := s.notify("/ops", n)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "published", out["outcome"])
}
