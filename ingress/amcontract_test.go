package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/amref"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Alertmanager's contract, held against a reference model (internal/amref) of when a
// single healthy Alertmanager notifies: rapid draws a group's life — alerts that fire,
// resolve and fire again (a new start), flushes after time passes, repeats after
// repeat_interval — and what the model sends reaches two replicas of the receiver (two
// Ingresses on one real Redis) as an Alertmanager HA pair whose gossip failed sends it:
// each notification once from each member, sometimes retried, each copy to either
// replica, late copies overtaken by the next notifications. Every notification the
// model sends must be published with an id of its own, every copy of it with that id
// (the wheel stage delivers an id once): nothing missing, nothing extra.
func TestAlertmanagerContractModel(t *testing.T) {
	if testing.Short() {
		t.Skip("needs Redis")
	}
	t.Parallel()
	rdb, prefix := testenv.Redis(t)
	cfg := config.Config{Targets: map[string]config.Target{"ops": {Robots: []config.Robot{{Name: "r1", Token: "t"}}}}}
	cfg.Ingress.Token = ingestToken
	cfg = cfg.WithDefaults()
	chat, err := sender.NewChat(sender.Options{Targets: map[string]sender.Target{
		"ops": {Protocol: dingtalk.New(""), Robots: []sender.Robot{{Name: "r1", Token: "t"}}}}}, nil, testenv.Logger(), nil, nil)
	require.NoError(t, err)
	var groups atomic.Int64

	rapid.Check(t, func(rt *rapid.T) {
		w := amWorld{clock: &clock{now: time.Now().Truncate(time.Millisecond)}, pub: &recorder{}}
		for i := range w.replicas {
			in, err := New(cfg, Deps{Publisher: w.pub, Dedupe: store.NewDedupe(rdb, prefix), Producers: store.NewProducers(rdb, prefix, 1), Chat: chat,
				Logger: testenv.Logger(), Now: w.clock.Now}, NewMetrics(nil))
			require.NoError(rt, err)
			w.replicas[i] = in.Handler()
		}
		w.group = fmt.Sprintf("g%d", groups.Add(1))
		sendResolved := rapid.Bool().Draw(rt, "sendResolved")
		m := amref.New(sendResolved, amRepeat)
		var trail []string // what happened, for the failure message

		for range rapid.IntRange(1, 40).Draw(rt, "events") {
			fp := rapid.SampledFrom([]string{"fa", "fb", "fc"}).Draw(rt, "alert")
			switch e := rapid.SampledFrom([]string{"fire", "fire", "resolve", "pass", "repeat", "deliver", "deliver"}).Draw(rt, "event"); e {
			case "fire":
				m.Fire(fp, w.clock.Now(), w.clock.Now())
				trail = append(trail, "fire "+fp)
			case "resolve":
				m.Resolve(fp, w.clock.Now())
				trail = append(trail, "resolve "+fp)
			case "pass", "repeat":
				d := time.Duration(rapid.IntRange(1, 30).Draw(rt, "seconds")) * time.Second
				if e == "repeat" {
					d = amRepeat + time.Second
				}
				w.pass(rt, d)
				trail = append(trail, fmt.Sprintf("+%s", d))
				if n, ok := m.Flush(w.clock.Now()); ok {
					w.sent(rt, n)
					trail = append(trail, fmt.Sprintf("notify #%d (%s): %s", len(w.notes)-1, n.Reason, w.notes[len(w.notes)-1].key))
				}
			case "deliver":
				if len(w.copies) > 0 {
					w.deliver(rt, rapid.IntRange(0, len(w.copies)-1).Draw(rt, "copy"))
				}
			}
		}
		for len(w.copies) > 0 {
			w.deliver(rt, rapid.IntRange(0, len(w.copies)-1).Draw(rt, "copy"))
		}

		// Each notification has one id, every copy of it; no two share one.
		owner := map[string]int{}
		for i, n := range w.notes {
			require.Len(rt, n.ids, 1, "notification #%d (%s) got %d ids: %v\n%s", i, n.key, len(n.ids), n.ids, strings.Join(trail, "\n"))
			for id := range n.ids {
				if j, ok := owner[id]; ok {
					rt.Fatalf("notifications #%d (%s) and #%d (%s) got one id: the second is lost\n%s", j, w.notes[j].key, i, n.key, strings.Join(trail, "\n"))
				}
				owner[id] = i
			}
		}
		require.Equal(rt, len(w.notes), len(w.pub.distinct()), "the ids published")
	})
}

// amRepeat is the route's repeat_interval in TestAlertmanagerContractModel: longer than
// ingress.dedupeWindow (5m), as it must be.
const amRepeat = time.Hour

// amLag is the latest a copy arrives after its notification: the HA peer's peer timeout
// and Alertmanager's retries, within ingress.dedupeWindow.
const amLag = 2 * time.Minute

// amWorld is one group's notifications on their way to two replicas.
type amWorld struct {
	clock    *clock
	pub      *recorder
	replicas [2]http.Handler
	group    string
	notes    []amNote
	copies   []amCopy // not delivered yet
}

// amNote is a notification the model sent: its payload, and the ids its copies got.
type amNote struct {
	key  string // its alerts, for the failure message
	body []byte
	at   time.Time
	ids  map[string]bool
}

// amCopy is one copy of notification note, for replica replica.
type amCopy struct{ note, replica int }

// sent queues the copies of n: the first member's, the second member's (gossip failed)
// and up to two retries, each to a replica drawn.
func (w *amWorld) sent(rt *rapid.T, n amref.Notification) {
	payload := Notification{Version: "4", GroupKey: "{}:{group=\"" + w.group + "\"}", Status: n.Status(), Receiver: "ops-now",
		GroupLabels: KV{"group": w.group}, CommonLabels: KV{"alertname": "Flap", "group": w.group}}
	var names []string
	for _, as := range [][]amref.Alert{n.Firing, n.Resolved} {
		for _, a := range as {
			alert := Alert{Status: "firing", Labels: KV{"alertname": "Flap", "group": w.group, "instance": a.Fingerprint},
				Annotations: KV{"summary": "flapping " + a.Fingerprint}, StartsAt: a.StartsAt, Fingerprint: a.Fingerprint}
			if !a.EndsAt.IsZero() {
				alert.Status, alert.EndsAt = "resolved", a.EndsAt
			}
			payload.Alerts = append(payload.Alerts, alert)
			names = append(names, alert.Status[:1]+":"+alert.named())
		}
	}
	body, err := json.Marshal(payload)
	require.NoError(rt, err)
	w.notes = append(w.notes, amNote{key: strings.Join(names, " "), body: body, at: w.clock.Now(), ids: map[string]bool{}})
	i := len(w.notes) - 1
	for range 2 + rapid.IntRange(0, 2).Draw(rt, "retries") {
		w.copies = append(w.copies, amCopy{note: i, replica: rapid.IntRange(0, 1).Draw(rt, "replica")})
	}
}

// pass moves the clock d on, delivering first (in an order drawn) every copy that would
// otherwise arrive later than amLag after its notification.
func (w *amWorld) pass(rt *rapid.T, d time.Duration) {
	for {
		var due []int
		for i, c := range w.copies {
			if w.clock.Now().Add(d).Sub(w.notes[c.note].at) > amLag {
				due = append(due, i)
			}
		}
		if len(due) == 0 {
			break
		}
		w.deliver(rt, due[rapid.IntRange(0, len(due)-1).Draw(rt, "overdue")])
	}
	w.clock.advance(d)
}

// deliver posts copy i to its replica and records the id it was published with.
func (w *amWorld) deliver(rt *rapid.T, i int) {
	c := w.copies[i]
	w.copies = append(w.copies[:i], w.copies[i+1:]...)
	req := httptest.NewRequest(http.MethodPost, AlertmanagerPath+"/ops", bytes.NewReader(w.notes[c.note].body))
	req.Header.Set("Authorization", "Bearer "+ingestToken)
	rec := httptest.NewRecorder()
	w.replicas[c.replica].ServeHTTP(rec, req)
	var out map[string]string
	require.NoError(rt, json.Unmarshal(rec.Body.Bytes(), &out))
	require.Equal(rt, http.StatusOK, rec.Code, out)
	require.Equal(rt, "published", out["outcome"])
	require.Equal(rt, out["id"], w.pub.last(), "the id answered is the one published")
	w.notes[c.note].ids[out["id"]] = true
}

// recorder is the receivers' publisher in TestAlertmanagerContractModel: it records the
// ids published. The decision under test is the id; that the broker stores what is
// published and the wheel stage delivers an id once are tested with the real broker.
type recorder struct {
	mu  sync.Mutex
	ids []string
}

// Publish records pub's id.
func (r *recorder) Publish(_ context.Context, pub wire.Publication) (wire.Published, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ids = append(r.ids, pub.ID)
	return wire.Published{ID: pub.ID}, nil
}

func (r *recorder) last() string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.ids[len(r.ids)-1]
}

func (r *recorder) distinct() map[string]bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	out := map[string]bool{}
	for _, id := range r.ids {
		out[id] = true
	}
	return out
}
