package ingress

import (
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

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

// A delayed group: the first firing notification schedules its escalation delay later;
// a second one replaces it (the first cancelled, the same due time, the newer content);
// a resolve cancels it and sends nothing, since nothing was sent; the next firing starts
// a new episode. Once an escalation was sent, further firing notifications are absorbed,
// and the resolve is sent (a moment later).
func TestAlertmanagerDelayedEscalation(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	ctx := context.Background()
	g := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"DiskFull\"}"}
	base := g.base()

	code, out := s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_scheduled", out["outcome"])
	first := s.dueOf(base + "-1")
	require.True(t, s.clock.Now().Add(10*time.Minute).Equal(first), "due %s", first)

	n := notification(t, "firing", g.key)
	n.Alerts[0].Annotations["summary"] = "disk full now"
	code, out = s.notify("/ops?delay=10m", n)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_replaced", out["outcome"])
	require.Equal(t, first, s.dueOf(base+"-2"), "a replacement keeps the escalation's due time")
	_, body := s.published(base + "-2")
	require.Contains(t, string(body), "disk full now")
	cancelled, err := s.ws.IsCancelled(ctx, base+"-1")
	require.NoError(t, err)
	require.True(t, cancelled, "the replaced alert is cancelled")

	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_cancelled", out["outcome"])
	cancelled, err = s.ws.IsCancelled(ctx, base+"-2")
	require.NoError(t, err)
	require.True(t, cancelled)
	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, "resolved_nothing_pending", out["outcome"], "a repeated resolve: %d", code)

	s.clock.advance(time.Second)
	code, out = s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_scheduled", out["outcome"], "a new episode")
	require.True(t, s.dueOf(base+"-3").Equal(first.Add(time.Second)), "a new episode is due delay after its own start")

	require.NoError(t, s.ws.MarkDelivered(ctx, base+"-3")) // the escalation went out
	code, out = s.notify("/ops?delay=10m", notification(t, "firing", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "escalation_sent", out["outcome"], "a repeat after the escalation is absorbed")
	code, out = s.notify("/ops?delay=10m", notification(t, "resolved", g.key))
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "resolution_published", out["outcome"])
	resolvedAt := s.dueOf(base + "-3-resolved")
	require.True(t, s.clock.Now().Add(resolutionLag).Equal(resolvedAt), "resolution due %s", resolvedAt)
	_, body = s.published(base + "-3-resolved")
	require.Contains(t, string(body), "[RESOLVED] DiskFull")
	rec, ok, err := s.escalate.Get(ctx, base)
	require.NoError(t, err)
	require.True(t, ok)
	require.Equal(t, store.Escalation{Version: 3, ID: base + "-3", DueMs: rec.DueMs, Resolved: true}, rec)

	// sendResolved=false: a resolve after the escalation cancels nothing and sends nothing.
	g2 := group{target: "ops", receiver: "dingtalk-ops", key: "{}:{alertname=\"Other\"}"}
	s.notify("/ops?delay=1m&sendResolved=false", notification(t, "firing", g2.key))
	require.NoError(t, s.ws.MarkDelivered(ctx, g2.base()+"-1"))
	_, out = s.notify("/ops?delay=1m&sendResolved=false", notification(t, "resolved", g2.key))
	require.Equal(t, "resolved_after_escalation", out["outcome"])
}

// Without a delay every notification is published at once; the same notification sent
// twice (a retry, or two Alertmanagers) gets the same RD_ID, so the wheel stage keeps
// one; resolves are forwarded unless sendResolved=false.
func TestAlertmanagerImmediate(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	n := notification(t, "firing", "{}:{alertname=\"Now\"}")
	g := group{target: "ops", receiver: n.Receiver, key: n.GroupKey}
	for range 2 {
		code, out := s.notify("/ops", n)
		require.Equal(t, http.StatusOK, code, out)
		require.Equal(t, "published", out["outcome"])
	}
	id := immediateID(g, n, s.clock.Now())
	props, body := s.published(id)
	due, _ := strconv.ParseInt(props[wire.PropDeliverAt], 10, 64)
	require.Equal(t, s.clock.Now().UnixMilli(), due)
	require.Contains(t, string(body), "[FIRING:2] DiskFull")
	require.Eventually(t, func() bool { return s.stored.Copies(id) == 2 }, 10*time.Second, 10*time.Millisecond,
		"both sends of the notification carry the same RD_ID")

	_, out := s.notify("/ops?sendResolved=false", notification(t, "resolved", n.GroupKey))
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
	code, out := s.do("POST", AlertmanagerPath+"/ops", []byte(`{"version":"3","status":"firing","groupKey":"x"}`))
	require.Equal(t, http.StatusBadRequest, code)
	require.Equal(t, "bad_payload", out["reason"])
}

// A notification's priority is the highest its firing alerts' severities map to
// (ingress.priorities): the sample has a critical alert, so critical; without severities,
// normal (no property).
func TestAlertmanagerPriorityFromSeverity(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken)
	n := notification(t, "firing", "{}:{alertname=\"Prio\"}")
	g := group{target: "ops", receiver: n.Receiver, key: n.GroupKey}
	code, out := s.notify("/ops", n)
	require.Equal(t, http.StatusOK, code, out)
	props, _ := s.published(immediateID(g, n, s.clock.Now()))
	require.Equal(t, "critical", props[wire.PropPriority])

	for i := range n.Alerts {
		delete(n.Alerts[i].Labels, "severity")
	}
	n.GroupKey = "{}:{alertname=\"PrioNone\"}"
	g.key = n.GroupKey
	code, out = s.notify("/ops", n)
	require.Equal(t, http.StatusOK, code, out)
	props, _ = s.published(immediateID(g, n, s.clock.Now()))
	require.NotContains(t, props, wire.PropPriority)
}
