package ingress

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

const (
	shopToken = "Bearer shop-token-0123456789abc"
	teamToken = "Bearer team-token-0123456789abc"
)

// withPrincipals adds two principals: shop publishes to the topic target orders, up to
// normal priority, and cancels its own; team publishes to the robot group ops, cancels
// and escalates its own. ingress.token stays, with every right.
func withPrincipals(c *config.Config) {
	c.Ingress.Principals = []config.Principal{
		{Name: "shop", Token: config.Secret(shopToken[7:]), Targets: []string{"orders"}, Rights: []string{config.RightCancel}, MaxPriority: "normal"},
		{Name: "team", Token: config.Secret(teamToken[7:]), Targets: []string{"ops"}, Rights: []string{config.RightCancel, config.RightEscalate}},
	}
}

// A principal acts on its own alerts only: another's cancel and reschedule of its id
// are refused (403) and change nothing (its own cancel then stops the alert, at the
// broker where it waits); nor may another publish under its id.
func TestPrincipalsCannotTouchAnothersAlerts(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)

	code, out := s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "90m", "id": "shop-1", "text": "order 1 unpaid"}, shopToken)
	require.Equal(t, http.StatusAccepted, code, out)
	s.published("shop-1")
	rep, err := failed.Inspector{Wheel: s.ws, Rows: s.fs, Config: s.cfg, Owners: s.owners}.Inspect(t.Context(), "shop-1")
	require.NoError(t, err)
	require.Equal(t, "shop", rep.Principal, "inspect names the alert's principal")

	code, out = s.do("DELETE", AlertsPath+"/shop-1", nil, teamToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "foreign_id", out["reason"])
	code, out = s.do("POST", AlertsPath+"/shop-1/reschedule", map[string]any{"in": "1m"}, teamToken)
	require.Equal(t, http.StatusForbidden, code, out)
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": "shop-1", "text": "mine now"}, teamToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "foreign_id", out["reason"], "an id is its first publisher's")

	code, out = s.do("DELETE", AlertsPath+"/shop-1", nil, shopToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "tombstoned", out["result"], "the owner's cancel is the first: the refused ones changed nothing")

	code, out = s.do("DELETE", AlertsPath+"/never-published", nil, shopToken)
	require.Equal(t, http.StatusForbidden, code, out, "an id nobody owns (the topic's) takes the right others")
	code, out = s.do("DELETE", AlertsPath+"/never-published", nil)
	require.Equal(t, http.StatusOK, code, out, "ingress.token has every right")
}

// A scoped id (@<principal>:<name>) is its principal's by its name: its principal
// publishes and cancels it with no owner recorded, inspect and the list name it;
// another principal can neither publish in its scope nor act on it (403, nothing
// published or changed), and a malformed one is refused (400). An alert published
// without an id gets one in its principal's scope, but ingress.token's, which stays
// unscoped.
func TestScopedIDsAreTheirPrincipals(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)
	publish := func(id, auth string) (int, map[string]any) {
		target := "ops"
		if auth == shopToken {
			target = "orders"
		}
		return s.do("POST", AlertsPath, map[string]any{"target": target, "in": "90m", "id": id, "text": "disk full"}, auth)
	}

	code, out := publish("@team:disk-1", teamToken)
	require.Equal(t, http.StatusAccepted, code, out)
	require.Equal(t, "@team:disk-1", out["id"])
	props, _ := s.published("@team:disk-1")
	require.Equal(t, "team", props[wire.PropPrincipal])
	require.NotEmpty(t, props[wire.PropPrincipalSig], "signed as team's: the scheduler takes a scoped id only so")
	n, err := s.rdb.Exists(t.Context(), "{"+s.prefix+"}:principal:alert:@team:disk-1").Result()
	require.NoError(t, err)
	require.Zero(t, n, "no owner is recorded for a scoped id")
	rep, err := failed.Inspector{Wheel: s.ws, Rows: s.fs, Config: s.cfg, Owners: s.owners}.Inspect(t.Context(), "@team:disk-1")
	require.NoError(t, err)
	require.Equal(t, "team", rep.Principal, "inspect names the scope's principal")

	code, out = publish("@team:disk-2", shopToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "foreign_id", out["reason"])
	require.Contains(t, out["error"], "@shop:…")
	code, out = s.do("DELETE", AlertsPath+"/@team:disk-1", nil, shopToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "foreign_id", out["reason"])
	code, out = s.do("POST", AlertsPath+"/@team:disk-1/reschedule", map[string]any{"in": "1m"}, shopToken)
	require.Equal(t, http.StatusForbidden, code, out)
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "90m", "id": "@shop:x", "text": "x"}, shopToken)
	require.Equal(t, http.StatusForbidden, code, out, "shop may not publish to ops, even in its own scope")
	require.Equal(t, "forbidden_target", out["reason"])
	code, out = publish("@shop:order-1", shopToken)
	require.Equal(t, http.StatusAccepted, code, out)

	for _, id := range []string{"@team", "@:disk", "@team:", "@te/am:disk", "@escalations"} {
		code, out = publish(id, teamToken)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", id, out)
		require.Equal(t, "bad_id", out["reason"], id)
	}

	code, out = s.do("DELETE", AlertsPath+"/@team:disk-1", nil, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "tombstoned", out["result"], "its principal's cancel is the first: the refused ones changed nothing")
	require.Zero(t, s.stored.Copies("@team:disk-2"), "the refused publish reached no topic")

	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "90m", "text": "made-up id"}, teamToken)
	require.Equal(t, http.StatusAccepted, code, out)
	require.True(t, strings.HasPrefix(out["id"].(string), "@team:rd-"), out)
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "90m", "text": "made-up id"})
	require.Equal(t, http.StatusAccepted, code, out)
	require.True(t, strings.HasPrefix(out["id"].(string), "rd-"), "ingress.token's ids stay unscoped: %v", out)
}

// An id the wheel stage holds as another's stays so, with one shard or several: a
// principal publishing under the id of an alert published to the topic directly (nobody's)
// or of another principal's whose owner record is gone (its trace still names it) is
// refused, and does not become the id's owner — it would then cancel or move an alert
// not its own, while its copy was dropped as that alert's duplicate. Its own id, traced
// as its own, it publishes again.
func TestPrincipalsCannotTakeAnIDTheStageHolds(t *testing.T) {
	t.Parallel()
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("%d shards", shards), func(t *testing.T) {
			t.Parallel()
			s := newSite(t, ingestToken, withPrincipals, func(c *config.Config) { c.Redis.Shards = shards })
			hop := func(id, principal string) {
				require.NoError(t, s.ws.TraceHop(t.Context(), store.HopNote{ID: id, Target: "ops", Due: s.clock.Now().Add(time.Hour),
					Hops: 1, Delay: time.Hour, Principal: principal}))
			}
			for i := range 6 { // ids in every shard
				id := fmt.Sprintf("topic-%d", i)
				hop(id, "")
				code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": id, "text": "mine now"}, teamToken)
				require.Equal(t, http.StatusForbidden, code, out)
				require.Equal(t, "foreign_id", out["reason"])
				require.Contains(t, out["error"], "published to the topic directly")
				owner, err := s.owners.Owner(t.Context(), store.OwnAlert, id)
				require.NoError(t, err)
				require.Empty(t, owner, "the refused publish recorded no owner")
				code, out = s.do("DELETE", AlertsPath+"/"+id, nil, teamToken)
				require.Equal(t, http.StatusForbidden, code, out)
			}
			hop("shop-9", "shop")
			code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": "shop-9", "text": "mine now"}, teamToken)
			require.Equal(t, http.StatusForbidden, code, out)
			require.Contains(t, out["error"], `"shop"`)
			hop("team-9", "team")
			code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": "team-9", "text": "again"}, teamToken)
			require.Equal(t, http.StatusAccepted, code, out)
		})
	}
}

// A principal with the right others that moves another's alert later keeps the owner's
// record as long as the alert at its new time (the owner can still act on it there),
// and moving an alert nobody owns makes it nobody's still.
func TestMovingAnothersAlertKeepsItsOwner(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)
	code, out := s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "90m", "id": "shop-1", "text": "order 1 unpaid"}, shopToken)
	require.Equal(t, http.StatusAccepted, code, out)
	// Past its done marker's lifetime (7 days) beyond the old time, where the record
	// would end. ingress.token has every right.
	s.do("POST", AlertsPath+"/shop-1/reschedule", map[string]any{"in": "200h"})
	ttl, err := s.rdb.PTTL(t.Context(), "{"+s.prefix+"}:principal:alert:shop-1").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 200*time.Hour, "the owner's record lasts as long as the alert at its new time")
	owner, err := s.owners.Owner(t.Context(), store.OwnAlert, "shop-1")
	require.NoError(t, err)
	require.Equal(t, "shop", owner)

	s.do("POST", AlertsPath+"/shop-1/reschedule", map[string]any{"in": "876000h"}) // a hundred years: refused
	ttl, err = s.rdb.PTTL(t.Context(), "{"+s.prefix+"}:principal:alert:shop-1").Result()
	require.NoError(t, err)
	require.LessOrEqual(t, ttl, s.cfg.Scheduler.Horizon+s.cfg.Scheduler.DoneTTL, "never kept past the horizon")

	s.do("POST", AlertsPath+"/topic-1/reschedule", map[string]any{"in": "200h"})
	owner, err = s.owners.Owner(t.Context(), store.OwnAlert, "topic-1")
	require.NoError(t, err)
	require.Empty(t, owner, "moving an alert makes its mover no owner of it")
}

// A principal publishes only to its targets, at most at its highest priority, and
// without the right raw neither a platform's message object nor a mention.
func TestPrincipalsPublishWithinTheirRights(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)
	for _, tc := range []struct {
		token  string
		req    map[string]any
		reason string
	}{
		{shopToken, map[string]any{"target": "ops", "in": "1m", "text": "x"}, "forbidden_target"},
		{shopToken, map[string]any{"target": "orders", "in": "1m", "text": "x", "priority": "high"}, "forbidden_priority"},
		{teamToken, map[string]any{"target": "ops", "in": "1m", "body": map[string]any{"msgtype": "text", "text": map[string]any{"content": "x"}, "at": map[string]any{"isAtAll": true}}}, "forbidden_raw"},
		{teamToken, map[string]any{"target": "ops", "in": "1m", "text": "wake up <at id=all></at>"}, "forbidden_mention"},
		{teamToken, map[string]any{"target": "ops", "in": "1m", "markdown": map[string]any{"title": "t", "text": "<@all> look"}}, "forbidden_mention"},
	} {
		code, out := s.do("POST", AlertsPath, tc.req, tc.token)
		require.Equal(t, http.StatusForbidden, code, "%v: %v", tc.req, out)
		require.Equal(t, tc.reason, out["reason"], "%v", tc.req)
	}
	code, out := s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "text": "latency < 5ms, ok"}, teamToken)
	require.Equal(t, http.StatusAccepted, code, "a < that opens nothing: %v", out)
	// A text that is itself DingTalk's message object, mentioning everyone, goes as the
	// text it is: the platform reads it as a text message that mentions nobody.
	object := `{"msgtype":"text","text":{"content":"x"},"at":{"isAtAll":true}}`
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": "team-object", "text": object}, teamToken)
	require.Equal(t, http.StatusAccepted, code, out)
	_, body := s.published("team-object")
	m, err := dingtalk.New("").Parse(body)
	require.NoError(t, err)
	require.Equal(t, sender.Message{Format: sender.FormatText, Text: object, Type: dingtalk.TypeText}, m, "published as %s", body)
	code, out = s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "1m", "text": "x", "priority": "normal"}, shopToken)
	require.Equal(t, http.StatusAccepted, code, out)

	code, out = s.do("POST", AlertmanagerPath+"/ops", amFiring("g-1"), shopToken)
	require.Equal(t, http.StatusForbidden, code, out, "an Alertmanager receiver is its target's")
	code, out = s.do("POST", AlertmanagerPath+"/ops?policy=db", amFiring("g-1"), teamToken)
	require.Equal(t, http.StatusOK, code, out, "team escalates on its own target")

	// What an escalation's pages and its resolution say mentions nobody either.
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "team-mention", "policy": "db", "text": "db down <at id=all></at>"}, teamToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "forbidden_mention", out["reason"])
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "team-mention", "policy": "db", "title": "<@ana>", "text": "db down"}, teamToken)
	require.Equal(t, "forbidden_mention", out["reason"], "%d %v", code, out)
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "team-mention", "policy": "db", "text": "db down"}, teamToken)
	require.Equal(t, http.StatusCreated, code, out)
	code, out = s.do("POST", EscalationsPath+"/team-mention/resolve", map[string]any{"text": "fixed <!channel>"}, teamToken)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "forbidden_mention", out["reason"])
	code, out = s.do("POST", EscalationsPath+"/team-mention/resolve", map[string]any{"text": strings.Repeat("fixed ", 3000)}, teamToken)
	require.Equal(t, http.StatusBadRequest, code, "a text longer than a page can say is refused now, not retried for ever: %v", out)
	require.Contains(t, out["error"], "at most 16384")
	code, out = s.do("POST", EscalationsPath+"/team-mention/resolve", map[string]any{"text": "fixed"}, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "team-long", "policy": "db", "text": strings.Repeat("down ", 4000)}, teamToken)
	require.Equal(t, http.StatusBadRequest, code, out)
}

// amFiring is a firing notification of one alert of group g.
func amFiring(g string) map[string]any {
	return map[string]any{"version": "4", "status": "firing", "receiver": "r", "groupKey": g,
		"alerts": []map[string]any{{"status": "firing", "labels": map[string]string{"alertname": "X"}, "fingerprint": "f" + g,
			"startsAt": "2026-12-05T10:00:00Z"}}}
}

// Escalation episodes are their starter's: another principal may not list, show,
// acknowledge or resolve them, nor start one on a policy that pages a target not its
// own; a principal with the right others (ingress.token) sees them all.
func TestPrincipalsCannotTouchAnothersEpisodes(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, func(c *config.Config) {
		withPrincipals(c)
		c.Ingress.Principals = append(c.Ingress.Principals, config.Principal{Name: "ops2", Token: "ops2-token-0123456789abc",
			Targets: []string{"ops"}, Rights: []string{config.RightEscalate}})
	})
	ops2 := "Bearer ops2-token-0123456789abc"

	code, out := s.do("POST", EscalationsPath, map[string]any{"key": "team-db", "policy": "db", "text": "db down"}, teamToken)
	require.Equal(t, http.StatusCreated, code, out)
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "shop-db", "policy": "db", "text": "db down"}, shopToken)
	require.Equal(t, http.StatusForbidden, code, out, "shop may not escalate")

	for _, req := range []struct{ method, path string }{
		{"GET", EscalationsPath + "/team-db"}, {"POST", EscalationsPath + "/team-db/resolve"}, {"POST", EscalationsPath + "/team-db/ack"},
	} {
		var body any
		if req.path == EscalationsPath+"/team-db/ack" {
			body = map[string]any{"by": "mallory"}
		}
		code, out := s.do(req.method, req.path, body, ops2)
		require.Equal(t, http.StatusForbidden, code, "%v: %v", req, out)
		require.Equal(t, "foreign_key", out["reason"])
	}
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "team-db", "policy": "db", "text": "mine"}, ops2)
	require.Equal(t, http.StatusForbidden, code, out, "nor update it")
	code, out = s.do("GET", EscalationsPath, nil, ops2)
	require.Equal(t, http.StatusOK, code, out)
	require.Empty(t, out["episodes"], "ops2 lists only its own")
	code, out = s.do("GET", EscalationsPath, nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Len(t, out["episodes"], 1, "ingress.token lists every principal's")

	code, out = s.do("GET", EscalationsPath+"/team-db", nil, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "pending", out["state"], "the refused requests changed nothing")
	require.Equal(t, "team", out["principal"])
	require.Equal(t, "db down", out["content"].(map[string]any)["text"])
	code, out = s.do("POST", EscalationsPath+"/team-db/ack", map[string]any{"by": "ana"}, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "acknowledged", out["result"])

	// An Alertmanager group's episode is its first sender's too: another principal that
	// names the same receiver and group (through its own receiver path) changes nothing,
	// nor may it claim the receiver's keys through the API first.
	code, out = s.do("POST", AlertmanagerPath+"/ops?policy=db", amFiring("g-team"), teamToken)
	require.Equal(t, http.StatusOK, code, out)
	episode := out["episode"].(string)
	resolved := amFiring("g-team")
	resolved["status"] = "resolved"
	code, out = s.do("POST", AlertmanagerPath+"/ops?policy=db", resolved, ops2)
	require.Equal(t, http.StatusForbidden, code, out)
	require.Equal(t, "foreign_key", out["reason"])
	code, out = s.do("GET", EscalationsPath+"/"+episode, nil, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, "pending", out["state"], "ops2's resolve changed nothing")
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "am-0123456789abcdef", "policy": "db", "text": "squat"}, ops2)
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Equal(t, "bad_key", out["reason"])
	// Nor may a producer publish under the id of a step to come (its key's hash and the
	// deployment's episode number are no secret), which would stand in for the step.
	step := escalation.StepID("team-db", 1_000_000, 0)
	for _, id := range []string{step, "am-0123456789abcdef"} {
		code, out = s.do("POST", AlertsPath, map[string]any{"target": "ops", "in": "1m", "id": id, "text": "squat"})
		require.Equal(t, http.StatusBadRequest, code, "even ingress.token: %v", out)
		require.Equal(t, string(wire.RejectBadID), out["reason"])
	}
}

// A principal over its rate is answered 429 with Retry-After, for all replicas
// A principal opens at most maxOpenEpisodes escalation episodes at once: one more, by the
// API or through an Alertmanager receiver, is 429 and starts nothing; an update of one it
// has open is no new one; once one is resolved, another may open.
func TestPrincipalsOpenEpisodesAreCapped(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, func(c *config.Config) {
		withPrincipals(c)
		c.Ingress.Principals[1].MaxOpenEpisodes = 2
	})
	start := func(key string) (int, map[string]any) {
		return s.do("POST", EscalationsPath, map[string]any{"key": key, "policy": "db", "text": key + " down"}, teamToken)
	}
	for _, key := range []string{"cap-1", "cap-2"} {
		code, out := start(key)
		require.Equal(t, http.StatusCreated, code, out)
	}
	code, out := start("cap-3")
	require.Equal(t, http.StatusTooManyRequests, code, out)
	require.Equal(t, "open_episodes", out["reason"])
	code, out = s.do("GET", EscalationsPath+"/cap-3", nil, teamToken)
	require.NotEqual(t, http.StatusOK, code, "cap-3 did not start: %v", out)
	code, out = s.do("POST", AlertmanagerPath+"/ops?policy=db", amFiring("g-cap"), teamToken)
	require.Equal(t, http.StatusServiceUnavailable, code, "nor through a receiver, answered so that Alertmanager sends it again (it drops a 4xx): %v", out)
	require.Equal(t, "open_episodes", out["reason"])
	code, out = start("cap-1")
	require.Equal(t, http.StatusOK, code, "an update of its own open episode: %v", out)

	code, out = s.do("POST", EscalationsPath+"/cap-1/resolve", nil, teamToken)
	require.Equal(t, http.StatusOK, code, out)
	code, out = start("cap-3")
	require.Equal(t, http.StatusCreated, code, "one resolved, another opens: %v", out)
	code, out = s.do("POST", EscalationsPath, map[string]any{"key": "ingest-1", "policy": "db", "text": "x"})
	require.Equal(t, http.StatusCreated, code, "the cap is team's alone: %v", out)
}

// together (the rate is kept in Redis), and another principal is not slowed.
func TestPrincipalsRate(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, func(c *config.Config) {
		withPrincipals(c)
		c.Ingress.Principals[0].RatePerSecond, c.Ingress.Principals[0].Burst = 0.001, 2
	})
	for i := range 2 {
		code, out := s.do("DELETE", AlertsPath+"/none", nil, shopToken)
		require.Equal(t, http.StatusForbidden, code, "request %d is within the burst: %v", i, out)
	}
	code, out := s.do("DELETE", AlertsPath+"/none", nil, shopToken)
	require.Equal(t, http.StatusTooManyRequests, code, out)
	require.Equal(t, "rate_limited", out["reason"])
	code, out = s.do("DELETE", AlertsPath+"/none", nil, teamToken)
	require.Equal(t, http.StatusForbidden, code, "team has a rate of its own: %v", out)
	// Over its rate, an Alertmanager receiver is answered 503, which Alertmanager sends
	// again (a 429 it drops).
	code, out = s.do("POST", AlertmanagerPath+"/orders", amFiring("g-rate"), shopToken)
	require.Equal(t, http.StatusServiceUnavailable, code, out)
	require.Equal(t, "rate_limited", out["reason"])
}

// A publish takes its principal's rate before the ownership of its id (a rate this small
// is asked of Redis every request): within the burst both are published and owned; over
// it the answer is 429 and the id is not recorded as anyone's, so nothing was taken from
// it.
func TestPrincipalsRateOnPublish(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, func(c *config.Config) {
		withPrincipals(c)
		c.Ingress.Principals[0].RatePerSecond, c.Ingress.Principals[0].Burst = 0.001, 2
	})
	publish := func(id string) (int, map[string]any) {
		return s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "90m", "id": id, "text": "order unpaid"}, shopToken)
	}
	for _, id := range []string{"rated-1", "rated-2"} {
		code, out := publish(id)
		require.Equal(t, http.StatusAccepted, code, out)
		owner, err := s.owners.Owner(t.Context(), store.OwnAlert, id)
		require.NoError(t, err)
		require.Equal(t, "shop", owner)
	}
	code, out := publish("rated-3")
	require.Equal(t, http.StatusTooManyRequests, code, out)
	require.Equal(t, "rate_limited", out["reason"])
	owner, err := s.owners.Owner(t.Context(), store.OwnAlert, "rated-3")
	require.NoError(t, err)
	require.Empty(t, owner, "a publish over the rate records no owner")
	require.Zero(t, s.stored.Copies("rated-3"), "nor reaches the topic")
}

// A rate large enough to be taken a lease at a time is taken once per request: a publish
// that spends its replica's lease asks Redis for its id's owner only. Seventy publishes
// of unscoped ids at once on a burst of 80 all go (taken twice, the burst would be spent
// by the fortieth).
func TestALeasedRateIsTakenOncePerPublish(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, func(c *config.Config) {
		withPrincipals(c)
		c.Ingress.Principals[0].RatePerSecond, c.Ingress.Principals[0].Burst = 100, 80
	})
	for i := range 70 {
		code, out := s.do("POST", AlertsPath, map[string]any{"target": "orders", "in": "90m", "id": fmt.Sprint("leased-", i), "text": "order unpaid"}, shopToken)
		require.Equal(t, http.StatusAccepted, code, "publish %d: %v", i, out)
	}
	owner, err := s.owners.Owner(t.Context(), store.OwnAlert, "leased-69")
	require.NoError(t, err)
	require.Equal(t, "shop", owner, "a publish that spent the lease still records its owner")
}

// The principals file is read again while the service runs: a principal added is in
// force at once, one removed is gone, and a file that is not valid leaves them as they
// were.
func TestPrincipalsFileIsReloaded(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "principals.yaml")
	write := func(content string) { require.NoError(t, os.WriteFile(file, []byte(content), 0o600)) }
	write("principals: []\n")
	s := newSite(t, ingestToken, func(c *config.Config) { c.Ingress.PrincipalsFile = file })
	ctx := t.Context()
	go s.in.WatchPrincipals(ctx, 10*time.Millisecond)
	late := "Bearer late-token-0123456789abc"
	status := func() int { code, _ := s.do("DELETE", AlertsPath+"/none", nil, late); return code }
	require.Equal(t, http.StatusUnauthorized, status())

	write("principals:\n  - {name: late, token: late-token-0123456789abc, targets: [ops]}\n")
	require.Eventually(t, func() bool { return status() == http.StatusForbidden }, 10*time.Second, 10*time.Millisecond,
		"the added principal is known (and may not cancel)")
	write("principals:\n  - {name: late, token: short, targets: [ops]}\n")
	write("principals:\n  - {name: late, token: late-token-0123456789abc, targets: [opz]}\n")
	changed, err := s.in.principals.Reload()
	require.ErrorContains(t, err, `"opz" is not a target`)
	require.False(t, changed)
	require.Equal(t, http.StatusForbidden, status(), "an invalid file leaves the principals as they were")
	write("principals: []\n")
	require.Eventually(t, func() bool { return status() == http.StatusUnauthorized }, 10*time.Second, 10*time.Millisecond,
		"the removed principal is gone")
}

// A principals file written in place is empty for an instant, between its truncate and
// its write: a read in that instant must not revoke every principal. An emptied file is
// put in force by the next read that agrees. On the code before, the first read of the
// empty file revoked them (and TestPrincipalsFileIsReloaded, whose watch reads every
// 10 ms, failed one CI run with 401 where 403 was due).
func TestAnEmptiedPrincipalsFileRevokesOnTheNextReadThatAgrees(t *testing.T) {
	t.Parallel()
	file := filepath.Join(t.TempDir(), "principals.yaml")
	write := func(content string) { require.NoError(t, os.WriteFile(file, []byte(content), 0o600)) }
	const listed = "principals:\n  - {name: late, token: late-token-0123456789abc, targets: [ops]}\n"
	write(listed)
	s := newSite(t, ingestToken, func(c *config.Config) { c.Ingress.PrincipalsFile = file })
	status := func() int {
		code, _ := s.do("DELETE", AlertsPath+"/none", nil, "Bearer late-token-0123456789abc")
		return code
	}
	reload := func() bool {
		changed, err := s.in.principals.Reload()
		require.NoError(t, err)
		return changed
	}
	require.Equal(t, http.StatusForbidden, status())

	write("") // caught between the truncate and the write
	require.False(t, reload(), "one empty read changes nothing")
	require.Equal(t, http.StatusForbidden, status())
	write(listed)
	require.False(t, reload())
	write("")
	require.False(t, reload(), "an empty read after a full one waits again")
	require.Equal(t, http.StatusForbidden, status())

	require.True(t, reload(), "the next empty read agrees: revoked")
	require.Equal(t, http.StatusUnauthorized, status())
}

// GET /api/v1/alerts lists the pending alerts: a principal sees its own and is refused
// another's list and the counts; ingress.token (every right) sees all, filters, pages and
// counts; a bad parameter is a 400 naming it.
func TestPrincipalsListTheirPendingAlerts(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)
	now := s.clock.Now()
	note := func(id, target, principal string, in time.Duration) {
		require.NoError(t, s.ws.TraceHop(t.Context(), store.HopNote{ID: id, Target: target, Due: now.Add(in), Hops: 1,
			Delay: time.Hour, Principal: principal}))
	}
	note("shop-1", "orders", "shop", 3*time.Hour)
	note("shop-2", "orders", "shop", 90*time.Minute)
	note("team-1", "ops", "team", 2*time.Hour)
	note("topic-1", "ops", "", 30*time.Minute)
	ids := func(out map[string]any) []string {
		var got []string
		for _, a := range out["alerts"].([]any) {
			got = append(got, a.(map[string]any)["id"].(string))
		}
		return got
	}

	code, out := s.do("GET", AlertsPath, nil, shopToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"shop-2", "shop-1"}, ids(out), "its own, earliest due first")
	first := out["alerts"].([]any)[0].(map[string]any)
	require.Equal(t, map[string]any{"id": "shop-2", "target": "orders", "principal": "shop", "stage": "hopping", "hops": 1.0,
		"dueAt": now.Add(90 * time.Minute).UTC().Format(time.RFC3339Nano)}, mapUTC(first))
	code, out = s.do("GET", AlertsPath+"?principal=team", nil, shopToken)
	require.Equal(t, http.StatusForbidden, code, out)
	code, out = s.do("GET", AlertsPath+"?counts=24", nil, shopToken)
	require.Equal(t, http.StatusForbidden, code, out)

	code, out = s.do("GET", AlertsPath+"?limit=3", nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"topic-1", "shop-2", "team-1"}, ids(out))
	code, out = s.do("GET", AlertsPath+"?limit=3&cursor="+out["next"].(string), nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"shop-1"}, ids(out))
	require.NotContains(t, out, "next", "the last page")
	code, out = s.do("GET", AlertsPath+"?target=ops&due_before=1h", nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, []string{"topic-1"}, ids(out))
	code, out = s.do("GET", AlertsPath+"?counts=2&limit=1", nil)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, map[string]any{"total": 4.0, "byTarget": map[string]any{"orders": 2.0, "ops": 2.0}, "overdue": 0.0,
		"byHour": []any{1.0, 1.0}, "later": 2.0}, out["counts"])

	for _, q := range []string{"limit=0", "limit=x", "due_before=tomorrow", "cursor=zz", "counts=-1"} {
		code, out = s.do("GET", AlertsPath+"?"+q, nil)
		require.Equal(t, http.StatusBadRequest, code, "%s: %v", q, out)
		require.Contains(t, out["error"], strings.SplitN(q, "=", 2)[0], q)
	}
}

// mapUTC returns a's dueAt in UTC, as the test writes times.
func mapUTC(a map[string]any) map[string]any {
	if s, ok := a["dueAt"].(string); ok {
		if t, err := time.Parse(time.RFC3339Nano, s); err == nil {
			a["dueAt"] = t.UTC().Format(time.RFC3339Nano)
		}
	}
	return a
}

// POST /api/v1/alerts/cancel cancels a principal's pending alerts that a filter matches,
// after a preview: a set that changed since is refused (409) and nothing cancelled; the
// confirmed set is cancelled; another principal's alerts are never in its set, nor may it
// name that principal; without a filter (ingress.token) it is a 400.
func TestPrincipalsCancelTheirPendingAlertsInBulk(t *testing.T) {
	t.Parallel()
	s := newSite(t, ingestToken, withPrincipals)
	publish := func(id, target, principal, token string) {
		code, out := s.do("POST", AlertsPath, map[string]any{"target": target, "in": "90m", "id": id, "text": "x"}, token)
		require.Equal(t, http.StatusAccepted, code, out)
		// The hop's note lists it, as the scheduler's consumer would.
		require.NoError(t, s.ws.TraceHop(t.Context(), store.HopNote{ID: id, Target: target, Due: s.clock.Now().Add(90 * time.Minute),
			Hops: 1, Delay: time.Hour, Principal: principal}))
	}
	publish("shop-1", "orders", "shop", shopToken)
	publish("shop-2", "orders", "shop", shopToken)
	publish("team-1", "ops", "team", teamToken)

	code, out := s.do("POST", AlertsPath+"/cancel", map[string]any{"preview": true}, shopToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, 2.0, out["matched"], "its own two")
	require.ElementsMatch(t, []any{"shop-1", "shop-2"}, out["ids"])
	set := out["set"].(string)
	code, out = s.do("POST", AlertsPath+"/cancel", map[string]any{"principal": "team", "preview": true}, shopToken)
	require.Equal(t, http.StatusForbidden, code, out)

	publish("shop-3", "orders", "shop", shopToken) // matches after the preview
	code, out = s.do("POST", AlertsPath+"/cancel", map[string]any{"set": set}, shopToken)
	require.Equal(t, http.StatusConflict, code, out)
	require.Equal(t, 3.0, out["matched"])
	require.Zero(t, out["cancelled"])
	for _, id := range []string{"shop-1", "shop-2", "shop-3"} {
		cancelled, err := s.ws.IsCancelled(t.Context(), id)
		require.NoError(t, err)
		require.False(t, cancelled, "%s: nothing cancelled on a changed set", id)
	}
	code, out = s.do("POST", AlertsPath+"/cancel", map[string]any{"set": out["set"]}, shopToken)
	require.Equal(t, http.StatusOK, code, out)
	require.Equal(t, 3.0, out["cancelled"])
	cancelled, err := s.ws.IsCancelled(t.Context(), "team-1")
	require.NoError(t, err)
	require.False(t, cancelled, "another principal's alert")

	code, out = s.do("POST", AlertsPath+"/cancel", map[string]any{"preview": true})
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out["error"], "give a filter")
	code, out = s.do("POST", AlertsPath+"/cancel", map[string]any{"target": "ops"})
	require.Equal(t, http.StatusBadRequest, code, out)
	require.Contains(t, out["error"], "confirm a preview")
}

// The principals file is read again with the secrets its tokens reference: a token's
// file rotated in place of the old one takes effect without a restart (it did not: only
// the principals file's own bytes were compared), and an empty file revokes every one of
// its principals (it was refused as EOF, leaving them in force). What it may not hold is
// refused without echoing it: a NaN rate (which bounded nothing), an operator's login
// token, a secret pasted after a YAML alias.
func TestPrincipalsFileFollowsItsSecrets(t *testing.T) {
	t.Parallel()
	dir := t.TempDir()
	file, tokFile := filepath.Join(dir, "principals.yaml"), filepath.Join(dir, "ci-token")
	write := func(path, content string) {
		tmp := path + ".new" // replaced whole, as a Secret's volume is
		require.NoError(t, os.WriteFile(tmp, []byte(content), 0o600))
		require.NoError(t, os.Rename(tmp, path))
	}
	write(tokFile, "first-token-0123456789abc")
	write(file, "principals:\n  - {name: ci, token: \"file:"+tokFile+"\", targets: [ops]}\n")
	operator := config.Secret("operator-token-0123456789")
	s := newSite(t, ingestToken, func(c *config.Config) {
		c.Ingress.PrincipalsFile = file
		c.Admin.Token = "admin-token-0123456789abcdef"
		c.Admin.Operators = []config.Operator{{Name: "ana", Token: operator}}
	})
	go s.in.WatchPrincipals(t.Context(), 10*time.Millisecond)
	status := func(token string) int {
		code, _ := s.do("DELETE", AlertsPath+"/none", nil, "Bearer "+token)
		return code
	}
	require.Equal(t, http.StatusForbidden, status("first-token-0123456789abc"), "known, and may not cancel")

	write(tokFile, "second-token-0123456789ab")
	require.Eventually(t, func() bool { return status("second-token-0123456789ab") == http.StatusForbidden }, 10*time.Second,
		10*time.Millisecond, "the rotated token is taken")
	require.Equal(t, http.StatusUnauthorized, status("first-token-0123456789abc"), "the old one is refused")

	for content, hidden := range map[string]string{
		"principals:\n  - {name: ci, token: second-token-0123456789ab, targets: [ops], ratePerSecond: .nan}\n": "",
		"principals:\n  - {name: ci, token: " + string(operator) + ", targets: [ops]}\n":                       string(operator),
		"principals:\n  - {name: ci, token: *Zx9secretZx9secret, targets: [ops]}\n":                            "Zx9secret",
	} {
		write(file, content)
		changed, err := s.in.principals.Reload()
		require.Error(t, err, content)
		require.False(t, changed)
		if hidden != "" {
			require.NotContains(t, err.Error(), hidden)
		}
	}
	require.ErrorContains(t, s.in.cfg.ValidatePrincipals([]config.Principal{{Name: "x", Token: operator, Targets: []string{"ops"}}}),
		"an operator's")

	write(file, "")
	require.Eventually(t, func() bool { return status("second-token-0123456789ab") == http.StatusUnauthorized }, 10*time.Second,
		10*time.Millisecond, "an empty file revokes its principals")
}
