package app

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/http/cookiejar"
	"net/url"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
)

// escalationsConfig writes a config file whose policy db pages ops at once, then lead
// after 10m, then repeats twice; Redis under prefix.
func escalationsConfig(t *testing.T, prefix string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "rocketdelay.yaml")
	require.NoError(t, os.WriteFile(file, []byte(`rocketmq: {nameServers: ["127.0.0.1:1"]}
redis: {keyPrefix: `+prefix+`}
postgres: {url: "postgres://u@127.0.0.1:1/db"}
targets:
  ops: {robots: [{name: r1, token: t1}]}
  lead: {robots: [{name: r2, token: t2}]}
escalations:
  db:
    steps:
      - {after: 0s, target: ops}
      - {after: 10m, target: lead}
    repeat: {every: 30m, limit: 2}
`), 0o600))
	return file
}

// `rocketdelay escalations`: list shows each live episode's state, steps sent and next
// step with its target and due time; ack ends the episode in Redis and leaves the cancel
// of the next step and the announcement to the running service's sweeper (its outbox);
// a second ack, and an ack of a resolved episode, fail saying how it ended; resolve ends
// it with its resolution named; an unknown key fails naming it; bad use is a usage error.
func TestEscalationsCommands(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	file := escalationsConfig(t, prefix)
	env := map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t), "USER": "alice"}
	ctx := context.Background()
	eps := store.NewEpisodes(rdb, prefix, time.Hour)

	out, _, err := run(t, env, "escalations", "list", "-f", file)
	require.NoError(t, err)
	require.Equal(t, "no live episodes\n", out)

	content, err := json.Marshal(escalation.Content{Title: "Payments down", Text: "checkout fails\nat 40%"})
	require.NoError(t, err)
	pay, err := eps.Fire(ctx, "pay-1", "db", content, time.Hour)
	require.NoError(t, err)
	send, why, err := eps.StepDue(ctx, "pay-1", pay.Seq, 0, "ops", 1) // step 1 sent, step 2 named
	require.NoError(t, err)
	require.True(t, send, why)
	disk, err := eps.Fire(ctx, "disk-2", "db", []byte(`{"text":"disk full"}`), time.Hour)
	require.NoError(t, err)
	ep, err := eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	due := ep.Started.Add(10 * time.Minute)

	out, _, err = run(t, env, "escalations", "list", "-f", file)
	require.NoError(t, err)
	lines := strings.Split(strings.TrimSpace(out), "\n")
	require.Len(t, lines, 3, out)
	require.Regexp(t, `^KEY +SEQ +STATE +POLICY +STARTED +SENT +NEXT +ACKED BY$`, lines[0])
	require.Regexp(t, fmt.Sprintf(`(?m)^pay-1 +%d +pending +db +(now|\S+ ago) +1/4 +2 → lead at %s \(in (9m5\ds|10m0s)\) +-$`,
		pay.Seq, regexp.QuoteMeta(due.UTC().Format(time.RFC3339))), out)
	require.Regexp(t, fmt.Sprintf(`(?m)^disk-2 +%d +pending +db +(now|\S+ ago) +0/4 +1 → ops at \S+ \((now|\S+ ago)\) +-$`, disk.Seq), out)

	out, _, err = run(t, env, "escalations", "list", "-f", file, "-o", "json")
	require.NoError(t, err)
	var listed struct{ Episodes []escalation.Status }
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Episodes, 2)
	i := slices.IndexFunc(listed.Episodes, func(s escalation.Status) bool { return s.Key == "pay-1" })
	require.GreaterOrEqual(t, i, 0, out)
	st := listed.Episodes[i]
	require.Equal(t, "pay-1", st.Key)
	require.Equal(t, 2, st.Next)
	require.Equal(t, "lead", st.NextTarget)
	require.True(t, due.Equal(st.NextDue), "due %s, listed %s", due, st.NextDue)
	require.Equal(t, escalation.Content{Title: "Payments down", Text: "checkout fails\nat 40%"}, st.Content)
	out, _, err = run(t, env, "escalations", "list", "-f", file, "--limit", "1", "-o", "json")
	require.NoError(t, err)
	require.NoError(t, json.Unmarshal([]byte(out), &listed))
	require.Len(t, listed.Episodes, 1, "--limit")

	out, _, err = run(t, env, "escalations", "show", "-f", file, "pay-1")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^State: +pending$`, out)
	require.Regexp(t, `(?m)^Steps sent: +1/4$`, out)
	require.Regexp(t, `(?m)^Last step: +ops at `, out)
	require.Regexp(t, `(?m)^Next step: +2 → lead at `+regexp.QuoteMeta(due.UTC().Format(time.RFC3339)), out)
	require.Regexp(t, `(?m)^Title: +Payments down$`, out)
	require.Contains(t, out, "Text:\n  checkout fails\n  at 40%\n")
	require.Regexp(t, `(?m)^To carry out: +publish step 2 \(the running service does, within seconds\)$`, out)

	// ack: the episode ends in Redis; the cancel and the announcement wait in its outbox.
	out, _, err = run(t, env, "escalations", "ack", "-f", file, "pay-1")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("acknowledged episode %d of pay-1 by cli:alice: no more steps are sent; "+
		"the running service announces it within seconds\n", pay.Seq), out)
	ep, err = eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeAcked, ep.State)
	require.Equal(t, "cli:alice", ep.AckedBy)
	require.Equal(t, store.EpisodeOutbox{Publish: -1, Cancel: 1, Ack: true}, ep.Outbox, "step 2 to cancel, the acknowledgement to announce")
	waiting, err := eps.Outbox(ctx, 0, 100)
	require.NoError(t, err)
	require.Contains(t, waiting, "pay-1", "a sweeper finds it")

	out, _, err = run(t, env, "escalations", "show", "-f", file, "pay-1")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^State: +acked$`, out)
	require.Regexp(t, `(?m)^Next step: +-$`, out)
	require.Regexp(t, `(?m)^Acknowledged: +by cli:alice at `, out)
	require.Regexp(t, `(?m)^To carry out: +cancel step 2, announce the acknowledgement `, out)
	out, _, err = run(t, env, "escalations", "list", "-f", file)
	require.NoError(t, err)
	require.Regexp(t, fmt.Sprintf(`(?m)^pay-1 +%d +acked +db +(now|\S+ ago) +1/4 +- +cli:alice$`, pay.Seq), out)

	_, _, err = run(t, env, "escalations", "ack", "-f", file, "pay-1", "--by", "bob")
	require.ErrorContains(t, err, fmt.Sprintf("episode %d of pay-1 has ended: acknowledged by cli:alice at ", pay.Seq))
	require.NotErrorIs(t, err, ErrUsage)
	ep, err = eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, "cli:alice", ep.AckedBy, "the second acknowledgement changed nothing")

	_, _, err = run(t, env, "escalations", "ack", "-f", file, "disk-2", "--seq", fmt.Sprint(pay.Seq), "--by", "bob")
	require.EqualError(t, err, fmt.Sprintf("episode %d of disk-2 does not run: the key's episode is number %d (pending)", pay.Seq, disk.Seq))
	want := ExitTooLate // an episode that ended is 4, one yet to come 3, as for every command
	if pay.Seq > disk.Seq {
		want = ExitNotFound
	}
	require.Equal(t, want, ExitCode(err))
	_, _, err = run(t, env, "escalations", "ack", "-f", file, "disk-2", "--seq", fmt.Sprint(disk.Seq+1000), "--by", "bob")
	require.Equal(t, ExitNotFound, ExitCode(err), "%v", err)

	// resolve: an acknowledged episode resolves; its resolution is named for publishing.
	out, _, err = run(t, env, "escalations", "resolve", "-f", file, "pay-1", "--title", "Payments back", "--text", "all good")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("resolved episode %d of pay-1: no more steps are sent; "+
		"the running service publishes the resolution within seconds\n", pay.Seq), out)
	ep, err = eps.Get(ctx, "pay-1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeResolved, ep.State)
	require.True(t, ep.Outbox.Resolution)
	require.JSONEq(t, `{"title":"Payments back","text":"all good"}`, string(ep.Resolution))
	out, _, err = run(t, env, "escalations", "list", "-f", file)
	require.NoError(t, err)
	require.NotContains(t, out, "pay-1", "a resolved episode is not live")
	out, _, err = run(t, env, "escalations", "show", "-f", file, "pay-1")
	require.NoError(t, err)
	require.Regexp(t, `(?m)^Resolved: +`, out, "an ended episode is shown")

	_, _, err = run(t, env, "escalations", "ack", "-f", file, "pay-1", "--by", "bob")
	require.ErrorContains(t, err, fmt.Sprintf("episode %d of pay-1 has ended: resolved at ", pay.Seq))
	require.ErrorContains(t, err, "(acknowledged by cli:alice before)")
	_, _, err = run(t, env, "escalations", "resolve", "-f", file, "pay-1")
	require.ErrorContains(t, err, fmt.Sprintf("episode %d of pay-1 has ended: resolved at ", pay.Seq))

	// An episode that sent nothing resolves without a resolution; its pending step 1 is
	// to be cancelled and no longer published.
	out, _, err = run(t, env, "escalations", "resolve", "-f", file, "disk-2", "--text", "freed")
	require.NoError(t, err)
	require.Equal(t, fmt.Sprintf("resolved episode %d of disk-2: no more steps are sent; no step was sent, so no resolution is published\n", disk.Seq), out)
	ep, err = eps.Get(ctx, "disk-2")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeOutbox{Publish: -1, Cancel: 0}, ep.Outbox)

	for _, args := range [][]string{{"show", "nobody"}, {"ack", "nobody"}, {"resolve", "nobody"}} {
		_, _, err = run(t, env, append([]string{"escalations", "-f", file}, args...)...)
		require.EqualError(t, err, "no episode of nobody (an ended one is kept 7 days)", "%v", args)
	}
	for _, args := range [][]string{
		{"list", "--limit", "0"}, {"list", "-o", "yaml"}, {"show"}, {"show", "a", "b"}, {"ack", "pay-1", "--by", " "},
		{"ack", "pay-1", "--by", "a\nb"}, {"ack", "pay-1", "--seq", "0"}, {"resolve", "pay-1", "--title", "t"},
	} {
		_, _, err = run(t, env, append([]string{"escalations", "-f", file}, args...)...)
		require.ErrorIs(t, err, ErrUsage, "%v", args)
	}
}

// What `escalations ack` and `resolve` leave in the outbox is carried out by a running
// service: two episodes started through the API send their first steps; the service's
// console, reached through an authenticating proxy that names the person
// (admin.proxyUserHeader), lists them with their next step, and its Acknowledge on one
// has "acknowledged by" that person reach the chat; the command's acknowledgement of the other cancels its
// second step and "acknowledged by" reaches the chat, and the command's resolve
// publishes the resolution.
func TestEscalationsThroughTheService(t *testing.T) {
	const ingestToken = "esc-cmd-ingest-token-7d1f"
	robots := []chatsim.Robot{{Name: "r1", Token: "esc-cmd-tok-1"}}
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: robots})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "esc-cmd-tok-1"}}}}
	cfg.Escalations = map[string]config.Policy{"db": config.Policy{Steps: []config.EscalationStep{{Target: "ops"}, {After: time.Hour, Target: "ops"}}}.WithDefaults()}
	cfg.Sender.BaseURL = simURL
	cfg.Ingress.Token = ingestToken
	cfg.Admin.Token = "esc-cmd-admin-token-91c2"
	cfg.HTTP.TrustedProxies = []string{"127.0.0.1/32", "::1/128"} // the test stands for the proxy
	cfg.Admin.ProxyUserHeader = "X-Forwarded-User"
	require.NoError(t, cfg.Validate())
	base := serveInTest(t, cfg)
	accepted := func(s string) int {
		n := 0
		for _, m := range sim.Accepted() {
			if strings.Contains(m.Text, s) {
				n++
			}
		}
		return n
	}

	start := func(key, title string) int64 { return startEpisode(t, base, ingestToken, key, title).Seq }
	key, other := testenv.Unique("pay-"), testenv.Unique("disk-")
	seq := start(key, "Payments down")
	start(other, "Disk full")
	require.Eventually(t, func() bool {
		return accepted("[ESCALATION 1] Payments down") == 1 && accepted("[ESCALATION 1] Disk full") == 1
	}, 60*time.Second, 50*time.Millisecond)

	// The console lists the episode, and its Acknowledge announces at once.
	jar, err := cookiejar.New(nil)
	require.NoError(t, err)
	browser := &http.Client{Jar: jar}
	post := func(path string, form url.Values) *http.Response {
		req, err := http.NewRequest(http.MethodPost, base+path, strings.NewReader(form.Encode()))
		require.NoError(t, err)
		req.Header.Set("Content-Type", "application/x-www-form-urlencoded")
		req.Header.Set("Origin", base)
		req.Header.Set("X-Forwarded-User", "ana.oncall@example.com") // the proxy names her in every request
		resp, err := browser.Do(req)
		require.NoError(t, err)
		resp.Body.Close()
		return resp
	}
	req, err := http.NewRequest(http.MethodGet, base+"/ui/escalations", nil)
	require.NoError(t, err)
	req.Header.Set("X-Forwarded-User", "ana.oncall@example.com") // no login: the proxy says who
	resp, err := browser.Do(req)
	require.NoError(t, err)
	page, err := io.ReadAll(resp.Body)
	resp.Body.Close()
	require.NoError(t, err)
	require.Equal(t, http.StatusOK, resp.StatusCode)
	require.Regexp(t, fmt.Sprintf(`<td>%s</td><td>%d</td><td class="principal">ingest</td><td>db</td><td>pending</td><td>[^<]+</td><td>1 of 2</td><td>2 → ops</td>`+
		`<td>[^<]+ \((in 59m[0-9]+s|in 1h0m0s)\)</td>`, key, seq), string(page), "the console lists the episode")
	form := regexp.MustCompile(`name="csrf" value="([0-9a-f]+)"><input type="hidden" name="key" value="` + other +
		`"><input type="hidden" name="seq" value="(\d+)">`).FindStringSubmatch(string(page))
	require.NotNil(t, form, "an Acknowledge button for %s", other)
	resp = post("/ui/escalations/ack", url.Values{"csrf": {form[1]}, "key": {other}, "seq": {form[2]}})
	require.Equal(t, http.StatusOK, resp.StatusCode, "the acknowledgement leads back to the list")
	require.Eventually(t, func() bool { return accepted("Acknowledged by ana.oncall@example.com: Disk full") == 1 }, 60*time.Second, 50*time.Millisecond)

	file := escalationsConfig(t, cfg.Redis.KeyPrefix) // the command reads the policies only to show next steps
	env := map[string]string{"ROCKETDELAY_REDIS_URL": testenv.RedisURL(t)}
	out, _, err := run(t, env, "escalations", "ack", "-f", file, key, "--by", "ana")
	require.NoError(t, err)
	require.Contains(t, out, "the running service announces it within seconds")
	require.Eventually(t, func() bool { return accepted("Acknowledged by ana: Payments down") == 1 }, 60*time.Second, 50*time.Millisecond)
	rdb, err := store.OpenRedisConfig(context.Background(), cfg.Redis)
	require.NoError(t, err)
	defer rdb.Close()
	ws := store.NewWheelStage(rdb, cfg.Redis.KeyPrefix, store.WheelStageOptions{})
	cancelled, err := ws.IsCancelled(context.Background(), escalation.StepID(key, seq, 1))
	require.NoError(t, err)
	require.True(t, cancelled, "the second step is cancelled")

	out, _, err = run(t, env, "escalations", "resolve", "-f", file, key, "--title", "Payments back", "--text", "all good again")
	require.NoError(t, err)
	require.Contains(t, out, "publishes the resolution within seconds")
	require.Eventually(t, func() bool { return accepted("all good again") == 1 }, 60*time.Second, 50*time.Millisecond)
	require.Zero(t, accepted("[ESCALATION 2]"), "the second step was never sent")
}
