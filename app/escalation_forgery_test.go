package app

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/apache/rocketmq-client-go/v2"
	"github.com/apache/rocketmq-client-go/v2/primitive"
	"github.com/apache/rocketmq-client-go/v2/producer"
	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/internal/topicsink/sinktest"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// A plain RocketMQ producer, with no token, forges an escalation step's mark
// (RD_EPISODE) of another team's episode, started through the API with its first step an
// hour ahead: once with a topic target it reads and an id of its own, once with the
// episode's own chat target and an id of its own, once with the step's own id and target
// but due now. Each forgery is refused: nothing reaches the business topic or the chat
// (no step's text, no acknowledgement link), the episode is untouched (step 0, nothing
// sent). The first two fall due and are recorded in failed_sends as
// rejected_forged_mark; the one under the step's id, not proven the service's, is
// refused on arrival as rejected_bad_id, by its message key
// (TestAStepsIDCannotBeTakenFromTheTopic). On the code
// before marks were signed, the first one reached the topic with a signed /ack/ link and
// moved the episode to "step 0 sent" an hour early.
func TestForgedEscalationMarkFromAPlainProducer(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "forge-tok-1"}}})
	cfg := stackConfig(t)
	biz := testenv.Unique("rd_biz_")
	sink := sinktest.Start(t, testenv.NameServer(t), biz)
	cfg.Targets = map[string]config.Target{
		"ops":    {Robots: []config.Robot{{Name: "r1", Token: "forge-tok-1"}}},
		"orders": {Topic: &config.TopicTarget{Name: biz}},
	}
	cfg.Escalations = map[string]config.Policy{"db": config.Policy{Steps: []config.EscalationStep{
		{After: time.Hour, Target: "ops"}}}.WithDefaults()}
	cfg.Sender.BaseURL = simURL
	cfg.Ingress.Token = testIngestToken
	cfg.Ingress.PublicURL = "https://rd.example.com"
	require.NoError(t, cfg.Validate())
	base := startReplica(t, cfg)

	key := testenv.Unique("team-b-db-")
	started := startEpisode(t, base, testIngestToken, key, "db down")

	raw := plainProducer(t, cfg, "forger")
	mark := strconv.FormatInt(started.Seq, 10) + ":0:" + key
	forge := func(target, id string) string {
		return sendRaw(t, raw, cfg, "forged", target, id, time.Now(), wire.PropEpisode, mark)
	}
	rdb, err := store.OpenRedisConfig(context.Background(), cfg.Redis)
	require.NoError(t, err)
	t.Cleanup(func() { _ = rdb.Close() })
	episodes := store.NewEpisodes(rdb, cfg.Redis.KeyPrefix, time.Hour)
	stepID := escalation.StepID(key, started.Seq, 0) // the step's own id
	forge("orders", "forged-to-the-topic")
	forge("ops", "forged-to-the-chat")
	stepKey := forge("ops", stepID)

	pool, err := store.OpenPostgres(context.Background(), cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	require.Eventually(t, func() bool {
		for id, class := range map[string]string{"forged-to-the-topic": "rejected_forged_mark", "forged-to-the-chat": "rejected_forged_mark",
			"rejected:" + stepKey: "rejected_bad_id"} {
			rows, err := fs.ByMessageID(context.Background(), id)
			if err != nil || len(rows) != 1 || rows[0].ErrorClass != class {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "every forgery is recorded as rejected")

	require.Zero(t, sink.Copies("forged-to-the-topic"), "nothing reached the business topic")
	for _, m := range sim.Accepted() {
		require.NotContains(t, m.Text, "/ack/", "no acknowledgement link reached the chat")
		require.NotContains(t, m.Text, "Escalation", "no step reached the chat")
	}
	ep, err := episodes.Get(context.Background(), key)
	require.NoError(t, err)
	require.Equal(t, store.EpisodePending, ep.State)
	require.Zero(t, ep.Step, "the episode is still at its first step")
	require.Zero(t, ep.Sent, "nothing was sent")
}

// A plain RocketMQ producer publishes, under an escalation step's own id (guessable: a
// hash of the episode's key and its number), an alert of its own due now, without the
// service's proof, before the step falls due; and one under an Alertmanager
// notification's id. Each is refused on arrival (rejected_bad_id, recorded by its
// message key, never under the id) and takes nothing of the id: the step itself is
// still sent when it falls due, once. On the code before, the squatter was delivered to
// the chat under the step's id and the step, arriving later, was dropped as its copy.
func TestAStepsIDCannotBeTakenFromTheTopic(t *testing.T) {
	sim, simURL := testenv.DingTalkSim(t, chatsim.Options{Robots: []chatsim.Robot{{Name: "r1", Token: "squat-tok-1"}}})
	cfg := stackConfig(t)
	cfg.Targets = map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "squat-tok-1"}}}}
	cfg.Escalations = map[string]config.Policy{"db": config.Policy{Steps: []config.EscalationStep{
		{After: 3 * time.Second, Target: "ops"}}}.WithDefaults()}
	cfg.Sender.BaseURL = simURL
	cfg.Ingress.Token = testIngestToken
	require.NoError(t, cfg.Validate())
	base := startReplica(t, cfg)

	key := testenv.Unique("db-")
	started := startEpisode(t, base, testIngestToken, key, "db down")

	raw := plainProducer(t, cfg, "squatter")
	var keys []string
	// The last is stale (due longer ago than the dedupe window): refused for its id all
	// the same, not recorded as stale under the resolution's id, where an operator's
	// retry of the row would deliver it and take the id.
	stale := time.Now().Add(-cfg.Scheduler.DoneTTL - time.Hour)
	for i, id := range []string{escalation.StepID(key, started.Seq, 0), "am-squatted-notification", escalation.ResolutionID(key, started.Seq)} {
		due := time.Now()
		if i == 2 {
			due = stale
		}
		keys = append(keys, sendRaw(t, raw, cfg, squatterBody, "ops", id, due))
	}

	requireRejectedBadID(t, cfg, keys)
	require.Equal(t, 1, sentOnceWithoutSquatters(t, sim, "db down"), "the step is sent once")
}

// requireRejectedBadID waits until the message of each key is recorded in failed_sends as
// rejected_bad_id, by its key.
func requireRejectedBadID(t *testing.T, cfg config.Config, keys []string) {
	t.Helper()
	pool, err := store.OpenPostgres(context.Background(), cfg.Postgres.URL.Reveal())
	require.NoError(t, err)
	t.Cleanup(pool.Close)
	fs := store.NewFailedSends(pool, store.FailedSendsOptions{})
	require.Eventually(t, func() bool {
		for _, k := range keys {
			rows, err := fs.ByMessageID(context.Background(), "rejected:"+k)
			if err != nil || len(rows) != 1 || rows[0].ErrorClass != "rejected_bad_id" {
				return false
			}
		}
		return true
	}, 60*time.Second, 100*time.Millisecond, "each squatter is recorded as rejected_bad_id, by its message key")
}

// sentOnceWithoutSquatters waits until the simulator accepted a message holding text,
// requires that none it accepted holds "squatter", and returns how many hold text.
func sentOnceWithoutSquatters(t *testing.T, sim *chatsim.Server, text string) int {
	t.Helper()
	require.Eventually(t, func() bool {
		for _, m := range sim.Accepted() {
			if strings.Contains(m.Text, text) {
				return true
			}
		}
		return false
	}, 60*time.Second, 100*time.Millisecond, "%q is sent when it falls due", text)
	n := 0
	for _, m := range sim.Accepted() {
		require.NotContains(t, m.Text, "squatter", "no squatter reached the chat")
		if strings.Contains(m.Text, text) {
			n++
		}
	}
	return n
}

// startedEpisode is what POST /api/v1/escalations answers.
type startedEpisode struct {
	Seq int64 `json:"seq"`
}

// startEpisode starts an episode of key under policy db, titled title, through the
// replica at base's API with the ingest token token, and returns what it answered.
func startEpisode(t *testing.T, base, token, key, title string) startedEpisode {
	t.Helper()
	body, err := json.Marshal(map[string]string{"key": key, "policy": "db", "title": title, "text": "db-1 refuses connections"})
	require.NoError(t, err)
	req, err := http.NewRequest(http.MethodPost, base+"/api/v1/escalations", bytes.NewReader(body))
	require.NoError(t, err)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	require.NoError(t, err)
	defer resp.Body.Close()
	var started startedEpisode
	require.NoError(t, json.NewDecoder(resp.Body).Decode(&started))
	require.Equal(t, http.StatusCreated, resp.StatusCode, "the episode started")
	require.Positive(t, started.Seq)
	return started
}

// plainProducer is a RocketMQ producer outside the wire contract, with no token: it
// sends to cfg's name servers whatever a test builds.
func plainProducer(t *testing.T, cfg config.Config, name string) rocketmq.Producer {
	t.Helper()
	raw, err := rocketmq.NewProducer(producer.WithNsResolver(primitive.NewPassthroughResolver(cfg.RocketMQ.NameServers)),
		producer.WithGroupName(testenv.Unique(name)), producer.WithInstanceName(testenv.Unique(name)))
	require.NoError(t, err)
	require.NoError(t, raw.Start())
	t.Cleanup(func() { _ = raw.Shutdown() })
	return raw
}

// squatterBody is the raw body of a message a plain producer sends under an id it may
// not take.
const squatterBody = `{"msgtype":"text","text":{"content":"squatter"}}`

// sendRaw sends, through a plain producer, a message of the service's topic for target
// under id due at due, with more properties as name, value pairs, and answers its
// message id (the key failed_sends records it by).
func sendRaw(t *testing.T, raw rocketmq.Producer, cfg config.Config, body, target, id string, due time.Time, props ...string) string {
	t.Helper()
	m := primitive.NewMessage(cfg.RocketMQ.Topic, []byte(body))
	m.WithProperty(wire.PropTarget, target)
	m.WithProperty(wire.PropID, id)
	m.WithProperty(wire.PropDeliverAt, strconv.FormatInt(due.UnixMilli(), 10))
	for i := 0; i+1 < len(props); i += 2 {
		m.WithProperty(props[i], props[i+1])
	}
	res, err := raw.SendSync(context.Background(), m)
	require.NoError(t, err)
	require.Equal(t, primitive.SendOK, res.Status)
	return res.MsgID
}
