package store_test

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"
	"pgregory.net/rapid"

	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/store"
)

// The life of one episode, event by event: start, a step granted and the next named,
// an update absorbed, a resolve that names the cancel and the resolution, and the next
// firing that waits for the outbox, then starts a new episode with a new number.
func TestEpisodeLifecycle(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := store.NewEpisodes(rdb, prefix, time.Hour)

	f, err := s.Fire(ctx, "g1", "db", []byte("v1"), time.Hour)
	require.NoError(t, err)
	require.Equal(t, store.Fire{Result: "started", Seq: f.Seq, Publish: 0}, f)
	first := f.Seq

	f, err = s.Fire(ctx, "g1", "db", []byte("v2"), time.Hour)
	require.NoError(t, err)
	require.Equal(t, "pending", f.Result)
	require.Equal(t, 0, f.Publish, "step 0 is still to be published: a retried firing publishes it again")
	ok, err := s.Done(ctx, "g1", first, store.ActionPublish, 0)
	require.NoError(t, err)
	require.True(t, ok)

	send, why, err := s.StepDue(ctx, "g1", first, 0, "ops", 1)
	require.NoError(t, err)
	require.True(t, send, why)
	send, why, err = s.StepDue(ctx, "g1", first, 0, "ops", 1)
	require.NoError(t, err)
	require.Equal(t, "again", why, "a repeated due step is granted again")
	require.True(t, send)
	send, why, err = s.StepDue(ctx, "g1", first, 3, "ops", -1)
	require.NoError(t, err)
	require.False(t, send)
	require.Equal(t, "ahead", why)

	e, err := s.Get(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodePending, e.State)
	require.Equal(t, 1, e.Sent)
	require.Equal(t, "ops", e.LastTarget)
	require.Equal(t, "v2", string(e.Content), "the update's content")
	require.Equal(t, store.EpisodeOutbox{Publish: 1, Cancel: -1}, e.Outbox)

	end, err := s.Resolve(ctx, "g1", []byte("resolved!"))
	require.NoError(t, err)
	require.Equal(t, store.Ended{Result: "resolved", Seq: first, Step: 1, Sent: 1}, end)
	e, err = s.Get(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeOutbox{Publish: -1, Cancel: 1, Resolution: true}, e.Outbox)
	send, why, err = s.StepDue(ctx, "g1", first, 1, "ops", -1)
	require.NoError(t, err)
	require.False(t, send, "a step due after the resolve is not sent")
	require.Equal(t, "resolved", why)
	send, why, err = s.StepDue(ctx, "g1", first, 0, "ops", 1)
	require.NoError(t, err)
	require.False(t, send, "a step granted before the resolve, handed off again, pages nobody once it resolved")
	require.Equal(t, "resolved", why)

	f, err = s.Fire(ctx, "g1", "db", []byte("v3"), time.Hour)
	require.NoError(t, err)
	require.Equal(t, "busy", f.Result, "the resolution is not published yet")
	for _, a := range []struct {
		action string
		step   int
	}{{store.ActionCancel, 1}, {store.ActionResolution, 0}} {
		ok, err := s.Done(ctx, "g1", first, a.action, a.step)
		require.NoError(t, err)
		require.True(t, ok, a.action)
	}
	out, err := s.Outbox(ctx, 0, 10)
	require.NoError(t, err)
	require.NotContains(t, out, "g1")
	f, err = s.Fire(ctx, "g1", "db", []byte("v3"), time.Hour)
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
	require.Greater(t, f.Seq, first, "a new episode, a new number: its steps' ids are new")
	send, why, err = s.StepDue(ctx, "g1", first, 1, "ops", -1)
	require.NoError(t, err)
	require.False(t, send, "a step of the last episode")
	require.Equal(t, "old", why)

	// Acknowledged: the link of the episode acknowledges it; an old link does nothing.
	end, err = s.Ack(ctx, "g1", first, "alice")
	require.NoError(t, err)
	require.Equal(t, "none", end.Result)
	end, err = s.Ack(ctx, "g1", f.Seq, "bob")
	require.NoError(t, err)
	require.Equal(t, "acked", end.Result)
	require.Zero(t, end.Sent)
	end, err = s.Ack(ctx, "g1", f.Seq, "carol")
	require.NoError(t, err)
	require.Equal(t, store.Ended{Result: "already", Seq: f.Seq, Step: 0, By: "bob"}, end)
	f2, err := s.Fire(ctx, "g1", "db", []byte("v4"), time.Hour)
	require.NoError(t, err)
	require.Equal(t, "acked", f2.Result, "an acknowledged episode absorbs firings")
}

// A firing whose alerts the resolved episode all saw firing, within the copy window
// after its resolve, is a late copy of one of its own firings (the second member of an
// Alertmanager HA pair whose gossip failed sends each notification a peer timeout late):
// it is absorbed, and never starts an episode that pages again. A firing with an alert
// the episode did not see — a new alert, or one that fired again (a new start) — starts
// a new episode, as does one after the window, or one without alerts.
func TestEpisodeLateCopyOfAFiringAfterItsResolve(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := store.NewEpisodes(rdb, prefix, time.Hour)
	done := func(key string, seq int64, action string, step int) {
		t.Helper()
		ok, err := s.Done(ctx, key, seq, action, step)
		require.NoError(t, err)
		require.True(t, ok, action)
	}
	copies := func(alerts ...string) store.Copies { return store.Copies{Alerts: alerts, Window: 5 * time.Minute} }

	f, err := s.FireCopies(ctx, "g1", "db", nil, []byte("a"), time.Hour, copies("fa@1000"))
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
	first := f.Seq
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("a b"), time.Hour, copies("fa@1000", "fb@2000"))
	require.NoError(t, err)
	require.Equal(t, "pending", f.Result)
	done("g1", first, store.ActionPublish, 0)
	send, _, err := s.StepDue(ctx, "g1", first, 0, "ops", 1)
	require.NoError(t, err)
	require.True(t, send)
	end, err := s.Resolve(ctx, "g1", []byte("resolved"))
	require.NoError(t, err)
	require.Equal(t, "resolved", end.Result)

	// The late member's copies, before and after the resolve was wound up.
	for _, alerts := range [][]string{{"fa@1000"}, {"fb@2000", "fa@1000"}} {
		f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("late"), time.Hour, copies(alerts...))
		require.NoError(t, err)
		require.Equal(t, store.Fire{Result: "resolved", Seq: first, Publish: -1}, f, alerts)
	}
	done("g1", first, store.ActionCancel, 1)
	done("g1", first, store.ActionResolution, 0)
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("late"), time.Hour, copies("fa@1000"))
	require.NoError(t, err)
	require.Equal(t, "resolved", f.Result)
	e, err := s.Get(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, store.EpisodeResolved, e.State)
	require.Equal(t, "a b", string(e.Content), "a late copy changes nothing")
	ttl, err := rdb.PTTL(ctx, "{"+prefix+"}:ep-alerts:g1").Result()
	require.NoError(t, err)
	require.Greater(t, ttl, 59*time.Minute, "the alerts seen are kept as long as the episode")

	// fa fired again (a new start): a new episode, which forgets the alerts of the last.
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("again"), time.Hour, copies("fa@1000", "fa@9000"))
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
	require.Greater(t, f.Seq, first)
	n, err := rdb.SCard(ctx, "{"+prefix+"}:ep-alerts:g1").Result()
	require.NoError(t, err)
	require.Equal(t, int64(2), n)
	ttl, err = rdb.PTTL(ctx, "{"+prefix+"}:ep-alerts:g1").Result()
	require.NoError(t, err)
	require.Equal(t, time.Duration(-1), ttl, "a running episode's alerts do not expire")

	// Past the window, the same alerts are a new firing.
	_, err = s.Resolve(ctx, "g1", nil)
	require.NoError(t, err)
	done("g1", f.Seq, store.ActionCancel, 0)
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("late"), time.Hour, copies("fa@9000"))
	require.NoError(t, err)
	require.Equal(t, "resolved", f.Result)
	require.NoError(t, rdb.HSet(ctx, "{"+prefix+"}:ep:g1", "resolved_at", time.Now().Add(-6*time.Minute).UnixMilli()).Err())
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("after"), time.Hour, copies("fa@9000"))
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)

	// A firing without alerts (the API) after a resolve starts a new episode.
	f, err = s.Fire(ctx, "api", "db", []byte("x"), time.Hour)
	require.NoError(t, err)
	_, err = s.Resolve(ctx, "api", nil)
	require.NoError(t, err)
	done("api", f.Seq, store.ActionCancel, 0)
	f, err = s.FireCopies(ctx, "api", "db", nil, []byte("x"), time.Hour, store.Copies{Window: time.Hour})
	require.NoError(t, err)
	require.Equal(t, "started", f.Result)
}

// The model of one group's episodes: the spec the scripts implement, event by event.
type episodeModel struct {
	counter             int64 // the deployment's episode counter
	seq                 int64 // 0: none
	state               string
	step, sent          int
	obPublish, obCancel int // -1: none
	obResolution, obAck bool
	ackedBy             string
}

func newEpisodeModel() *episodeModel { return &episodeModel{obPublish: -1, obCancel: -1} }

func (m *episodeModel) outboxEmpty() bool {
	return m.obPublish < 0 && m.obCancel < 0 && !m.obResolution && !m.obAck
}

// apply runs event e on the model and returns the answer the scripts must give.
func (m *episodeModel) apply(e episodeEvent) string {
	switch e.kind {
	case "fire":
		switch {
		case m.state == store.EpisodePending:
			return fmt.Sprintf("pending %d %d", m.seq, m.obPublish)
		case m.state == store.EpisodeAcked:
			return fmt.Sprintf("acked %d -1", m.seq) // reackAfter is an hour: never past
		case m.state != "" && !m.outboxEmpty():
			return fmt.Sprintf("busy %d -1", m.seq)
		}
		// A new number from the deployment's counter, which other groups move too: any
		// number above the last one this group saw will do (apply takes it from the
		// answer: e.seq).
		if e.seq <= m.counter {
			return "started: a number that does not grow"
		}
		*m = episodeModel{counter: e.seq, seq: e.seq, state: store.EpisodePending, obPublish: 0, obCancel: -1}
		return fmt.Sprintf("started %d 0", m.seq)
	case "step":
		if m.state == "" || e.seq != m.seq {
			return "skip old"
		}
		if m.state != store.EpisodePending {
			return "skip " + m.state
		}
		if e.k < m.step {
			return "send again"
		}
		if e.k > m.step {
			return "skip ahead"
		}
		m.step, m.sent = e.k+1, m.sent+1
		m.obPublish = e.next
		return "send granted"
	case "resolve", "ack":
		ack := e.kind == "ack"
		if m.state == "" || (ack && e.seq != m.seq) {
			return "none"
		}
		switch {
		case m.state == store.EpisodeResolved && ack:
			return fmt.Sprintf("other %d %d %d", m.seq, m.step, m.sent)
		case m.state == store.EpisodeResolved, ack && m.state == store.EpisodeAcked:
			return fmt.Sprintf("already %d %d %d", m.seq, m.step, m.sent)
		}
		result := "resolved"
		if ack {
			result = "acked"
			m.obAck = m.obAck || m.sent > 0
		} else {
			m.obResolution = m.obResolution || m.sent > 0
		}
		if m.state == store.EpisodePending {
			m.obCancel, m.obPublish = m.step, -1
		}
		m.state = map[bool]string{true: store.EpisodeAcked, false: store.EpisodeResolved}[ack]
		return fmt.Sprintf("%s %d %d %d", result, m.seq, m.step, m.sent)
	case "done":
		if e.seq != m.seq {
			return "false"
		}
		var ok bool
		switch e.action {
		case store.ActionPublish:
			ok, m.obPublish = m.obPublish == e.k && e.k >= 0, ifEq(m.obPublish, e.k)
		case store.ActionCancel:
			ok, m.obCancel = m.obCancel == e.k && e.k >= 0, ifEq(m.obCancel, e.k)
		case store.ActionResolution:
			ok, m.obResolution = m.obResolution, false
		case store.ActionAck:
			ok, m.obAck = m.obAck, false
		}
		return strconv.FormatBool(ok)
	}
	panic(e.kind)
}

// ifEq is -1 when v is k (the action is cleared), else v.
func ifEq(v, k int) int {
	if v == k {
		return -1
	}
	return v
}

// episodeEvent is one call an actor makes, with what it answered.
type episodeEvent struct {
	actor      int
	kind       string // fire, step, resolve, ack, done
	seq        int64  // the episode the step, ack or done is for
	k, next    int    // step and next step; the done's step
	action     string // the done's action
	answer     string
	start, end int64 // when the call began and ended, as one counter for both actors
}

// While a later episode of the key runs, a late copy of the previous episode's firing or
// resolve (the slow member of an HA pair whose gossip failed, sending a peer timeout
// behind: fire, resolve, fire again within its lag) changes nothing: its alerts are all
// the previous episode's and none the running one's ("stale": the content is kept, the
// episode runs on). Any other resolve ends it — one naming an alert neither saw (a source
// whose starts move), or one without alerts (the API).
func TestEpisodeLateCopiesOfAnEarlierEpisode(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	rdb, prefix := testenv.Redis(t)
	s := store.NewEpisodes(rdb, prefix, time.Hour)
	copies := func(alerts ...string) store.Copies { return store.Copies{Alerts: alerts, Window: 5 * time.Minute} }
	done := func(seq int64, action string, step int) {
		t.Helper()
		ok, err := s.Done(ctx, "g1", seq, action, step)
		require.NoError(t, err)
		require.True(t, ok, action)
	}

	f, err := s.FireCopies(ctx, "g1", "db", nil, []byte("one"), time.Hour, copies("fa@1000", "fb@1500"))
	require.NoError(t, err)
	first := f.Seq
	done(first, store.ActionPublish, 0)
	end, err := s.ResolveCopies(ctx, "g1", nil, copies("fa@1000", "fb@1500"))
	require.NoError(t, err)
	require.Equal(t, "resolved", end.Result)
	done(first, store.ActionCancel, 0)

	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("two"), time.Hour, copies("fa@9000"))
	require.NoError(t, err)
	require.Equal(t, "started", f.Result, "fa fired again: a new episode")
	second := f.Seq

	for _, late := range [][]string{{"fa@1000"}, {"fa@1000", "fb@1500"}} {
		f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("late"), time.Hour, copies(late...))
		require.NoError(t, err)
		require.Equal(t, store.Fire{Result: "stale", Seq: second, Publish: -1}, f, "a late copy of the first episode's firing %v", late)
		end, err = s.ResolveCopies(ctx, "g1", nil, copies(late...))
		require.NoError(t, err)
		require.Equal(t, "stale", end.Result, "a late copy of the first episode's resolve %v", late)
	}
	e, err := s.Get(ctx, "g1")
	require.NoError(t, err)
	require.Equal(t, second, e.Seq)
	require.Equal(t, store.EpisodePending, e.State)
	require.Equal(t, "two", string(e.Content), "a late copy changes nothing")
	n, err := rdb.SCard(ctx, "{"+prefix+"}:ep-alerts:g1").Result()
	require.NoError(t, err)
	require.Equal(t, int64(1), n, "a late copy adds no alert to those the episode saw")

	// The same alerts, or a new one beside them, update the running episode.
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("two, fb too"), time.Hour, copies("fa@9000", "fb@9500"))
	require.NoError(t, err)
	require.Equal(t, "pending", f.Result)

	// Acknowledged, the episode absorbs the late copies the same way.
	_, err = s.Ack(ctx, "g1", second, "ana")
	require.NoError(t, err)
	f, err = s.FireCopies(ctx, "g1", "db", nil, []byte("late"), time.Hour, copies("fa@1000"))
	require.NoError(t, err)
	require.Equal(t, "stale", f.Result)
	end, err = s.ResolveCopies(ctx, "g1", nil, copies("fb@1500"))
	require.NoError(t, err)
	require.Equal(t, "stale", end.Result)

	end, err = s.ResolveCopies(ctx, "g1", nil, copies("fa@1000", "fa@5000"))
	require.NoError(t, err)
	require.Equal(t, "resolved", end.Result, "a resolve naming an alert the previous episode did not see ends it (a source whose starts move)")
	require.Equal(t, second, end.Seq)

	// An episode that saw no alerts (started through the API) is ended by any resolve.
	f, err = s.Fire(ctx, "api", "db", []byte("x"), time.Hour)
	require.NoError(t, err)
	end, err = s.ResolveCopies(ctx, "api", nil, copies("fz@1"))
	require.NoError(t, err)
	require.Equal(t, "resolved", end.Result)
}

// TestEpisodesAreLinearizable: two actors (two replicas, or two Alertmanagers) fire,
// resolve, acknowledge, see steps fall due and carry out outboxes on one group at the
// same time, on the real Redis. Every run must be explained by one order of the calls
// that respects each actor's own order and real time (a call that ended before another
// began comes first) in which the model gives every call the answer it got. So no step is
// granted after a resolve or an acknowledgement answered before it; and across the run,
// the episode numbers only grow (a step's id is never reused), and a resolution is named
// exactly when a step was sent.
func TestEpisodesAreLinearizable(t *testing.T) {
	rdb, prefix := testenv.Redis(t)
	s := store.NewEpisodes(rdb, prefix, time.Hour)
	var clock struct {
		sync.Mutex
		n int64
	}
	tick := func() int64 { clock.Lock(); defer clock.Unlock(); clock.n++; return clock.n }
	run := 0
	rapid.Check(t, func(rt *rapid.T) {
		run++
		key := fmt.Sprintf("g%d", run)
		ctx := context.Background()
		plans := [2][]string{}
		for a := range plans {
			plans[a] = rapid.SliceOfN(rapid.SampledFrom([]string{"fire", "fire", "step", "step", "step", "resolve", "ack", "done"}), 1, 8).
				Draw(rt, fmt.Sprintf("actor%d", a))
		}
		ks := rapid.SliceOfN(rapid.IntRange(0, 2), 16, 16).Draw(rt, "steps")
		var mu sync.Mutex
		var log []episodeEvent
		var wg sync.WaitGroup
		for a := range plans {
			wg.Go(func() {
				var seq int64 // the episode this actor last saw
				for i, kind := range plans[a] {
					e := episodeEvent{actor: a, kind: kind, seq: seq, k: ks[(a*8+i)%16]}
					e.next = e.k + 1
					if e.next > 2 {
						e.next = -1
					}
					e.start = tick()
					switch kind {
					case "fire":
						f, err := s.Fire(ctx, key, "p", []byte("x"), time.Hour)
						if err != nil {
							rt.Error(err)
							return
						}
						if f.Seq > 0 {
							seq = f.Seq
						}
						e.seq = f.Seq // what a started episode's number is checked against
						e.answer = fmt.Sprintf("%s %d %d", f.Result, f.Seq, f.Publish)
					case "step":
						send, why, err := s.StepDue(ctx, key, seq, e.k, "ops", e.next)
						if err != nil {
							rt.Error(err)
							return
						}
						e.answer = map[bool]string{true: "send ", false: "skip "}[send] + why
					case "resolve", "ack":
						var end store.Ended
						var err error
						if kind == "ack" {
							end, err = s.Ack(ctx, key, seq, "actor")
						} else {
							end, err = s.Resolve(ctx, key, []byte("r"))
						}
						if err != nil {
							rt.Error(err)
							return
						}
						e.answer = end.Result
						if end.Result != "none" {
							e.answer = fmt.Sprintf("%s %d %d %d", end.Result, end.Seq, end.Step, end.Sent)
						}
					case "done":
						ep, err := s.Get(ctx, key)
						if err != nil {
							e.kind, e.answer = "skip", "" // nothing to carry out
							break
						}
						e.seq = ep.Seq
						switch {
						case ep.Outbox.Cancel >= 0:
							e.action, e.k = store.ActionCancel, ep.Outbox.Cancel
						case ep.Outbox.Publish >= 0:
							e.action, e.k = store.ActionPublish, ep.Outbox.Publish
						case ep.Outbox.Resolution:
							e.action, e.k = store.ActionResolution, 0
						case ep.Outbox.Ack:
							e.action, e.k = store.ActionAck, 0
						default:
							e.kind, e.answer = "skip", ""
						}
						if e.kind == "done" {
							ok, err := s.Done(ctx, key, e.seq, e.action, e.k)
							if err != nil {
								rt.Error(err)
								return
							}
							e.answer = strconv.FormatBool(ok)
						}
					}
					e.end = tick()
					mu.Lock()
					log = append(log, e)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		var per [2][]episodeEvent
		for _, e := range log {
			if e.kind != "skip" {
				per[e.actor] = append(per[e.actor], e)
			}
		}
		if !linearizable(newEpisodeModel(), per[0], per[1]) {
			rt.Fatalf("no order of the calls explains their answers:\n%v\n%v", per[0], per[1])
		}
		// Across the run: the episode numbers only grow (an episode started after another
		// ended has a larger number; two never share one), and a resolution is named
		// exactly when a step was sent (the final state says so). The log is in the order
		// the calls were noted, not the order Redis ran them: two fires whose calls
		// overlapped may be noted either way.
		var started []episodeEvent
		for _, e := range log {
			if e.kind == "fire" && strings.HasPrefix(e.answer, "started ") {
				started = append(started, e)
			}
		}
		for _, a := range started {
			for _, b := range started {
				if a.seq == b.seq && a != b {
					rt.Fatalf("episode number %d started twice: reused", a.seq)
				}
				if a.end < b.start && a.seq >= b.seq {
					rt.Fatalf("episode number %d started after %d had: reused", b.seq, a.seq)
				}
			}
		}
		if ep, err := s.Get(ctx, key); err == nil && ep.State == store.EpisodeResolved && ep.Outbox.Resolution && ep.Sent == 0 {
			rt.Fatalf("a resolution is named for an episode that sent nothing: %+v", ep)
		}
	})
}

// linearizable reports whether some merge of a and b (each in its own order, a call
// that ended before another began first) gives every call, on m, the answer it got.
func linearizable(m *episodeModel, a, b []episodeEvent) bool {
	if len(a) == 0 && len(b) == 0 {
		return true
	}
	try := func(e episodeEvent, other []episodeEvent, rest func(*episodeModel) bool) bool {
		// e may go first only if no call of the other actor ended before e began.
		if len(other) > 0 && other[0].end < e.start {
			return false
		}
		c := *m
		if c.apply(e) != e.answer {
			return false
		}
		return rest(&c)
	}
	if len(a) > 0 && try(a[0], b, func(c *episodeModel) bool { return linearizable(c, a[1:], b) }) {
		return true
	}
	return len(b) > 0 && try(b[0], a, func(c *episodeModel) bool { return linearizable(c, a, b[1:]) })
}
