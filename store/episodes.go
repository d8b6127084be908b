package store

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"time"

	"github.com/redis/go-redis/v9"
)

// Escalation episodes: the state machine of an on-call escalation, one hash per episode
// key under the wheel stage's hash tag {p} (keys.go):
//
//	{p}:ep:<key>     hash        seq, state (pending, acked, resolved), policy, started,
//	                             signed (the last step whose mark is signed),
//	                             step (the next step to grant), sent (steps granted), last,
//	                             last_target, last_at, content, acked_by, acked_at,
//	                             resolved_at, resolution; the outbox: ob_publish (the step
//	                             to publish), ob_cancel (the step to cancel), ob_resolution,
//	                             ob_ack
//	{p}:ep-seq       string      the deployment's episode counter: a new episode's number,
//	                             never reused (the ids of its steps carry it)
//	{p}:ep-live      sorted set  key -> started: the episodes not resolved
//	{p}:ep-outbox    sorted set  key -> when its outbox was set: the episodes with actions
//	                             to carry out
//	{p}:ep-alerts-prev:<key> set the alerts the key's previous episode saw, kept as long
//	                             as the episode (a late copy of its firing or resolve is
//	                             told by them)
//	{p}:ep-alerts:<key>  set     the alerts the episode saw firing (Copies.Alerts), kept
//	                             as long as the episode
//
// Every event — a firing notification, a resolve, an acknowledgement, a step falling due —
// is one script that checks and moves the state and names, in the episode's outbox, the
// one alert to publish or cancel; the caller carries the action out (publishing is
// idempotent: a step's id is fixed by the episode's key, its number and the step) and
// clears it with Done. A replica that dies between the two leaves the action in the
// outbox, where Outbox finds it for another. So no interleaving of replicas or
// Alertmanagers can send a step after a resolve or an acknowledgement that was answered
// before it, and no promise depends on a done marker's lifetime.

var (
	episodeFireScript = script("episode_fire.lua")
	episodeStepScript = script("episode_step.lua")
	episodeEndScript  = script("episode_end.lua")
	episodeDoneScript = script("episode_done.lua")
	episodeTidyScript = script("episode_tidy.lua")
)

// Episode states.
const (
	EpisodePending  = "pending"
	EpisodeAcked    = "acked"
	EpisodeResolved = "resolved"
)

// Episode is one escalation episode as Redis holds it.
type Episode struct {
	// Key names the episode's group: an Alertmanager group and receiver, or a key given
	// through the API.
	Key string `json:"key"`
	// Seq is the episode's number, unique in the deployment.
	Seq int64 `json:"seq"`
	// State is EpisodePending, EpisodeAcked or EpisodeResolved.
	State string `json:"state"`
	// Policy names the escalation policy.
	Policy string `json:"policy"`
	// Terms are the policy as the episode started with it (its JSON, the escalation
	// package's to read), nil for an episode started by a release that kept none: every
	// replica judges the episode's steps by them, whatever its own configuration says.
	Terms []byte `json:"-"`
	// Started is when the episode started (Redis's clock).
	Started time.Time `json:"started"`
	// Step is the next step to grant; Sent counts the steps granted (sent).
	Step int `json:"step"`
	Sent int `json:"sent"`
	// LastTarget and LastAt are the target and the time of the last step granted; zero
	// when none was.
	LastTarget string    `json:"lastTarget,omitempty"`
	LastAt     time.Time `json:"lastAt,omitzero"`
	// Content is what the steps render (the latest firing notification).
	Content []byte `json:"-"`
	// AckedBy and AckedAt say who acknowledged it, and when.
	AckedBy string    `json:"ackedBy,omitempty"`
	AckedAt time.Time `json:"ackedAt,omitzero"`
	// ResolvedAt is when it was resolved; Resolution the resolution's content.
	ResolvedAt time.Time `json:"resolvedAt,omitzero"`
	Resolution []byte    `json:"-"`
	// Outbox is what is still to be carried out.
	Outbox EpisodeOutbox `json:"outbox"`
	// SignedThrough is the last step whose mark the service signed (RD_EPISODE_SIG), -1
	// when none: the step an episode starts with and each next step a grant names are
	// signed, unless a replica of an earlier release (which signs nothing) opened or
	// granted it. A step up to it whose mark is not signed is refused; one past it, carried
	// by an earlier release during a rolling upgrade, is judged by the rest of its mark.
	SignedThrough int `json:"-"`
}

// EpisodeOutbox is what an episode's transitions named and nobody carried out yet.
type EpisodeOutbox struct {
	// Publish is the step to publish, -1 for none; Cancel the step to cancel, -1 for none.
	Publish int `json:"publish"`
	Cancel  int `json:"cancel"`
	// Resolution and Ack: the resolution to publish, the acknowledgement to announce.
	Resolution bool `json:"resolution,omitempty"`
	Ack        bool `json:"ack,omitempty"`
}

// Empty reports whether nothing is left to carry out.
func (o EpisodeOutbox) Empty() bool { return o.Publish < 0 && o.Cancel < 0 && !o.Resolution && !o.Ack }

// Fire is the answer of Episodes.Fire.
type Fire struct {
	// Result is "started" (a new episode: its step 0 is to be published), "pending" (it
	// runs; Publish, when not -1, is a step still to be published), "acked" (acknowledged:
	// absorbed), "resolved" (a late copy of a firing of the episode, which resolved
	// since: absorbed), "stale" (a late copy of a firing of an earlier episode, while
	// this one runs: absorbed, its content kept) or "busy" (the last episode's outbox is
	// not done: try again).
	Result string
	Seq    int64
	// Publish is the step to publish now, -1 for none.
	Publish int
}

// Ended is the answer of Episodes.Resolve and Episodes.Ack.
type Ended struct {
	// Result is "resolved" or "acked" (this call ended the episode), "already" (it had
	// ended that way), "other" (an acknowledgement of an episode resolved before),
	// "stale" (ResolveCopies: a late copy of an earlier episode's resolve; nothing
	// changed), or "none" (no such episode runs).
	Result string
	Seq    int64
	// Step is the step that was next (to cancel, when this call ended a running
	// episode); Sent counts the steps that were sent.
	Step, Sent int
	// By is who acknowledged.
	By string
}

// Episodes keep the escalation episodes in Redis. It is safe for concurrent use.
type Episodes struct {
	rdb       redis.UniversalClient
	keys      keys
	retention time.Duration
}

// NewEpisodes returns the episodes under key prefix prefix; an ended episode is kept
// retention for the record.
func NewEpisodes(rdb redis.UniversalClient, prefix string, retention time.Duration) *Episodes {
	return &Episodes{rdb: rdb, keys: newKeys(prefix), retention: retention}
}

// Copies tell the late copies of an episode's firings and resolves from new ones. Alerts
// name the alerts firing (or resolved), each once for good as "<fingerprint>@<start in
// Unix ms>" (an Alertmanager alert: its labels and its episode); the episode keeps those
// it saw firing. For Window after it resolved, a firing whose alerts it all saw firing is
// a late copy of one of its own (the second member of an Alertmanager HA pair whose
// gossip failed sends what it has not seen sent, late), not a new firing; while it runs,
// a firing or a resolve whose alerts are all the previous episode's and none its own is
// a late copy of the previous episode's. Names must match exactly, so a source whose
// starts move is never taken for a copy: the event acts as without Copies. The zero value
// tells none: every firing after a resolve is new, every resolve ends what runs.
type Copies struct {
	Alerts []string
	Window time.Duration
}

// Fire starts an episode of key under policy with content, or updates the content of
// the one that runs; an acknowledged one that fires reackAfter after its
// acknowledgement is over, and a new one starts. Every firing after a resolve starts a
// new episode: FireCopies tells late copies apart.
func (s *Episodes) Fire(ctx context.Context, key, policy string, content []byte, reackAfter time.Duration) (Fire, error) {
	return s.FireCopies(ctx, key, policy, nil, content, reackAfter, Copies{})
}

// FireCopies is Fire for a firing that may be a late copy (Copies): of the episode's
// own after it resolved, absorbed ("resolved"); of the previous episode's while this one
// runs, absorbed ("stale"). A new episode keeps terms (Episode.Terms; nil: none); one
// that runs keeps those it started with.
func (s *Episodes) FireCopies(ctx context.Context, key, policy string, terms, content []byte, reackAfter time.Duration, copies Copies) (Fire, error) {
	args := make([]any, 0, 6+len(copies.Alerts))
	args = append(args, key, policy, content, reackAfter.Milliseconds(), copies.Window.Milliseconds(), terms)
	for _, a := range copies.Alerts {
		args = append(args, a)
	}
	res, err := episodeFireScript.Run(ctx, s.rdb,
		[]string{s.keys.episode(key), s.keys.episodeSeq(), s.keys.episodesLive(), s.keys.episodeOutbox(), s.keys.epAlerts(key), s.keys.epAlertsPrev(key)},
		args...).StringSlice()
	if err != nil {
		return Fire{}, redisFail("fire an episode", err)
	}
	if len(res) != 3 {
		return Fire{}, fmt.Errorf("store: fire an episode: unexpected script result %v", res)
	}
	seq, _ := strconv.ParseInt(res[1], 10, 64)
	return Fire{Result: res[0], Seq: seq, Publish: stepOrNone(res[2])}, nil
}

// StepDue is step k (of target) of episode key number seq falling due: it reports
// whether the step is to be sent (granted now, or before), and names the next step, next
// (-1 for none), to be published. why says why a step is not sent: "old", "acked",
// "resolved", "ahead".
func (s *Episodes) StepDue(ctx context.Context, key string, seq int64, k int, target string, next int) (send bool, why string, err error) {
	nextArg := ""
	if next >= 0 {
		nextArg = strconv.Itoa(next)
	}
	res, err := episodeStepScript.Run(ctx, s.rdb, []string{s.keys.episode(key), s.keys.episodeOutbox()},
		key, seq, k, target, nextArg).StringSlice()
	if err != nil {
		return false, "", redisFail("step of an episode", err)
	}
	if len(res) != 2 {
		return false, "", fmt.Errorf("store: step of an episode: unexpected script result %v", res)
	}
	return res[0] == "send", res[1], nil
}

// Resolve resolves the episode of key: it stops; when a step was sent, resolution is
// to be published.
func (s *Episodes) Resolve(ctx context.Context, key string, resolution []byte) (Ended, error) {
	return s.end(ctx, key, "resolve", "", string(resolution))
}

// ResolveCopies is Resolve for a resolve that names its alerts (copies.Alerts, named as
// the firings named them; the window is not used): when they are all alerts the key's
// previous episode saw and none the running one saw, the resolve is a late copy of the
// previous episode's ("stale", the slow member of an Alertmanager HA pair whose gossip
// failed) and ends nothing.
func (s *Episodes) ResolveCopies(ctx context.Context, key string, resolution []byte, copies Copies) (Ended, error) {
	return s.end(ctx, key, "resolve", "", string(resolution), copies.Alerts...)
}

// Ack acknowledges episode number seq of key for by: it stops; when a step was sent,
// the acknowledgement is to be announced. An acknowledgement of another episode of the
// key than the one that runs changes nothing ("none").
func (s *Episodes) Ack(ctx context.Context, key string, seq int64, by string) (Ended, error) {
	return s.end(ctx, key, "ack", strconv.FormatInt(seq, 10), by)
}

func (s *Episodes) end(ctx context.Context, key, how, seq, arg string, alerts ...string) (Ended, error) {
	args := make([]any, 0, 5+len(alerts))
	args = append(args, key, how, seq, arg, s.retention.Milliseconds())
	for _, a := range alerts {
		args = append(args, a)
	}
	res, err := episodeEndScript.Run(ctx, s.rdb, []string{s.keys.episode(key), s.keys.episodesLive(), s.keys.episodeOutbox(), s.keys.epAlerts(key), s.keys.epAlertsPrev(key)},
		args...).StringSlice()
	if err != nil {
		return Ended{}, redisFail(how+" an episode", err)
	}
	if len(res) != 5 {
		return Ended{}, fmt.Errorf("store: %s an episode: unexpected script result %v", how, res)
	}
	e := Ended{Result: res[0], By: res[4]}
	e.Seq, _ = strconv.ParseInt(res[1], 10, 64)
	e.Step, _ = strconv.Atoi(res[2])
	e.Sent, _ = strconv.Atoi(res[3])
	return e, nil
}

// Outbox actions, as Done names them.
const (
	ActionPublish    = "publish"
	ActionCancel     = "cancel"
	ActionResolution = "resolution"
	ActionAck        = "ack"
)

// Done clears the action of episode key number seq that was carried out, if it is still
// the one its outbox names (value: the step of a publish or a cancel, ignored for the
// others); false when a newer transition named another.
func (s *Episodes) Done(ctx context.Context, key string, seq int64, action string, step int) (bool, error) {
	value := "1"
	if action == ActionPublish || action == ActionCancel {
		value = strconv.Itoa(step)
	}
	n, err := episodeDoneScript.Run(ctx, s.rdb, []string{s.keys.episode(key), s.keys.episodeOutbox()},
		key, seq, action, value).Int()
	if err != nil {
		return false, redisFail("episode outbox", err)
	}
	return n == 1, nil
}

// ErrNoEpisode is Get's answer for a key without an episode.
var ErrNoEpisode = errors.New("store: no such episode")

// Get returns the episode of key.
func (s *Episodes) Get(ctx context.Context, key string) (Episode, error) {
	m, err := s.rdb.HGetAll(ctx, s.keys.episode(key)).Result()
	if err != nil {
		return Episode{}, redisFail("read an episode", err)
	}
	if len(m) == 0 {
		return Episode{}, ErrNoEpisode
	}
	return decodeEpisode(key, m), nil
}

// Live returns the keys of the episodes not resolved, the oldest first, at most limit.
func (s *Episodes) Live(ctx context.Context, limit int) ([]string, error) {
	keys, err := s.rdb.ZRange(ctx, s.keys.episodesLive(), 0, int64(limit)-1).Result()
	if err != nil {
		return nil, redisFail("list episodes", err)
	}
	return keys, nil
}

// Outbox returns the keys of the episodes whose outbox was set olderThan ago or more:
// actions a replica named and did not clear (it died, or Redis was cut off before Done).
func (s *Episodes) Outbox(ctx context.Context, olderThan time.Duration, limit int) ([]string, error) {
	now, err := s.redisNow(ctx)
	if err != nil {
		return nil, err
	}
	keys, err := s.rdb.ZRangeByScore(ctx, s.keys.episodeOutbox(), &redis.ZRangeBy{Min: "-inf",
		Max: strconv.FormatInt(now.Add(-olderThan).UnixMilli(), 10), Count: int64(limit)}).Result()
	if err != nil {
		return nil, redisFail("episode outboxes", err)
	}
	return keys, nil
}

// Tidy forgets episode key in the list of outboxes (Outbox) when nothing of its outbox
// is left to carry out, or the episode is gone.
func (s *Episodes) Tidy(ctx context.Context, key string) error {
	if err := episodeTidyScript.Run(ctx, s.rdb, []string{s.keys.episode(key), s.keys.episodeOutbox()}, key).Err(); err != nil {
		return redisFail("tidy an episode's outbox", err)
	}
	return nil
}

func (s *Episodes) redisNow(ctx context.Context) (time.Time, error) {
	t, err := s.rdb.Time(ctx).Result()
	if err != nil {
		return time.Time{}, redisFail("redis time", err)
	}
	return t, nil
}

func decodeEpisode(key string, m map[string]string) Episode {
	ms := func(f string) time.Time {
		v, err := strconv.ParseInt(m[f], 10, 64)
		if err != nil || v == 0 {
			return time.Time{}
		}
		return time.UnixMilli(v)
	}
	e := Episode{Key: key, State: m["state"], Policy: m["policy"], Terms: []byte(m["terms"]), Started: ms("started"), LastTarget: m["last_target"],
		LastAt: ms("last_at"), Content: []byte(m["content"]), AckedBy: m["acked_by"], AckedAt: ms("acked_at"),
		ResolvedAt: ms("resolved_at"), Resolution: []byte(m["resolution"])}
	e.Seq, _ = strconv.ParseInt(m["seq"], 10, 64)
	e.Step, _ = strconv.Atoi(m["step"])
	e.Sent, _ = strconv.Atoi(m["sent"])
	e.Outbox = EpisodeOutbox{Publish: stepOrNone(m["ob_publish"]), Cancel: stepOrNone(m["ob_cancel"]),
		Resolution: m["ob_resolution"] != "", Ack: m["ob_ack"] != ""}
	e.SignedThrough = -1
	if v, err := strconv.Atoi(m["signed"]); err == nil {
		e.SignedThrough = v
	}
	return e
}

// stepOrNone reads a step number, -1 for "".
func stepOrNone(v string) int {
	k, err := strconv.Atoi(v)
	if err != nil {
		return -1
	}
	return k
}
