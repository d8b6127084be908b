package sender_test

import (
	"context"
	"encoding/json"
	"fmt"
	"regexp"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/internal/testenv"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/chatsim"
	"github.com/rocketdelay/rocketdelay/sender/dingtalk"
)

var alertID = regexp.MustCompile(`alert-\d{4}`)

// content is the text a simulator message shows to readers: text.content or
// markdown.text (a merged message's title repeats its first alert).
func content(t *testing.T, m chatsim.Message) string {
	t.Helper()
	var b struct {
		Text     *dingtalk.Text     `json:"text"`
		Markdown *dingtalk.Markdown `json:"markdown"`
	}
	require.NoError(t, json.Unmarshal(m.Body, &b))
	switch {
	case b.Text != nil:
		return b.Text.Content
	case b.Markdown != nil:
		return b.Markdown.Text
	}
	return ""
}

// TestCoalescedBurstAcrossFourSenders sends a burst of 1000 alerts from 200 goroutines
// through four senders sharing five robots (limit 19 per 1s window, the simulator
// allowing 20), with coalescing on: no robot goes over its limit, every alert arrives
// exactly once, in due order within each merged message, and DingTalk gets far fewer
// messages than alerts.
func TestCoalescedBurstAcrossFourSenders(t *testing.T) {
	const (
		window  = time.Second
		alerts  = 1000
		callers = 200
	)
	h := newHarness(t, window, 20, robotSpec{signed: true}, robotSpec{}, robotSpec{keyword: "alert"}, robotSpec{signed: true}, robotSpec{})
	var senders []*sender.Chat
	var merged, coalesced float64
	var gather []func()
	for range 4 {
		s, reg := h.sender(h.options(19)) // coalescing auto, the default
		senders = append(senders, s)
		gather = append(gather, func() {
			merged += metric(t, reg, "rocketdelay_sender_merged_messages_total")
			coalesced += metric(t, reg, "rocketdelay_sender_coalesced_alerts_total")
		})
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	base := time.Now()
	start := time.Now()
	var next atomic.Int64
	var wg sync.WaitGroup
	errs := make(chan error, alerts)
	for g := range callers {
		wg.Go(func() {
			for {
				i := int(next.Add(1)) - 1
				if i >= alerts {
					return
				}
				due := base.Add(time.Duration(i) * time.Millisecond)
				if err := sendAlert(senders[g%4], ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i), Due: due}); err != nil {
					errs <- err
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	elapsed := time.Since(start)

	stats := h.sim.Stats()
	t.Logf("simulator: %+v", stats)
	require.Zero(t, stats.OverLimit, "DingTalk saw a robot over its limit")
	got := h.sim.Accepted()
	seen := map[string]int{}
	for _, m := range got {
		ids := alertID.FindAllString(content(t, m), -1)
		require.NotEmpty(t, ids)
		for j, id := range ids {
			seen[id]++
			if j > 0 {
				require.Less(t, ids[j-1], id, "sections follow due order")
			}
		}
		require.LessOrEqual(t, len(m.Body), dingtalk.MaxBodyBytes)
	}
	for i := range alerts {
		id := fmt.Sprintf("alert-%04d", i)
		require.Equal(t, 1, seen[id], "%s delivered %d times", id, seen[id])
	}
	require.Len(t, seen, alerts)
	require.LessOrEqual(t, len(got), alerts/5, "coalescing sends far fewer messages than alerts")
	for _, g := range gather {
		g()
	}
	require.Greater(t, merged, 0.0)
	require.Equal(t, float64(alerts), coalesced+float64(len(got))-merged, "alerts = coalesced + alerts sent alone")
	windows := elapsed.Seconds() / window.Seconds()
	t.Logf("%d alerts in %d messages (%v merged) in %s = %.1f windows: %.0f alerts per window (pool capacity %d messages)",
		alerts, len(got), merged, elapsed.Round(time.Millisecond), windows, float64(alerts)/windows, 5*19)
}

// backlogged returns a harness with one robot allowed one message per window, and a
// sender whose first message (sent here) fills that window, so that the next alerts wait.
// The metrics it returns include the alerts waiting in the sender's queue.
func backlogged(t *testing.T, window time.Duration, specs ...robotSpec) (*harness, *sender.Chat, func() map[string]float64) {
	t.Helper()
	if len(specs) == 0 {
		specs = []robotSpec{{signed: true}}
	}
	h := newHarness(t, window, 20, specs...)
	opts := h.options(1)
	opts.BackoffBase, opts.BackoffMax = time.Millisecond, time.Millisecond
	s, reg := h.sender(opts)
	require.NoError(t, send(s, context.Background(), "ops", text("first")))
	return h, s, func() map[string]float64 {
		return map[string]float64{
			"merged":    metric(t, reg, "rocketdelay_sender_merged_messages_total"),
			"coalesced": metric(t, reg, "rocketdelay_sender_coalesced_alerts_total"),
			"failures":  metric(t, reg, "rocketdelay_sender_failures_total"),
			"waiting":   testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts"),
		}
	}
}

// queued holds the pool's picks until n alerts wait in the sender's queue (metrics is
// backlogged's), then lets the picks go: the sender finds all of them waiting at its
// next pick, however slowly their goroutines started.
func queued(t *testing.T, h *harness, metrics func() map[string]float64, n int, start func()) {
	t.Helper()
	h.picks.hold()
	defer h.picks.release()
	start()
	require.Eventually(t, func() bool { return metrics()["waiting"] == float64(n) }, 30*time.Second, time.Millisecond,
		"%d alerts never waited in the queue together", n)
}

// sendAll sends msgs concurrently (msgs[i] due at base+dues[i]), every one queued
// before a robot is picked for any (see queued), and returns their errors in order.
func sendAll(t *testing.T, h *harness, s *sender.Chat, metrics func() map[string]float64, msgs []dingtalk.Message, dues []time.Duration) []error {
	t.Helper()
	base := time.Now()
	errs := make([]error, len(msgs))
	var wg sync.WaitGroup
	queued(t, h, metrics, len(msgs), func() {
		for i, m := range msgs {
			wg.Go(func() { errs[i] = sendAt(s, context.Background(), "ops", m, base.Add(dues[i])) })
		}
	})
	wg.Wait()
	return errs
}

func TestWaitingAlertsAreMergedInDueOrderAndCardsGoAlone(t *testing.T) {
	h, s, metrics := backlogged(t, 500*time.Millisecond, robotSpec{signed: true, keyword: "告警"})
	link := dingtalk.Message{MsgType: dingtalk.TypeLink, Link: &dingtalk.Link{Title: "runbook", Text: "see", MessageURL: "https://e"}}
	errs := sendAll(t, h, s, metrics, []dingtalk.Message{
		{MsgType: dingtalk.TypeMarkdown, Markdown: &dingtalk.Markdown{Title: "m-late", Text: "**late** alert"}, At: &dingtalk.At{AtMobiles: []string{"13800000009"}}},
		text("text-first"),
		link,
		{MsgType: dingtalk.TypeText, Text: &dingtalk.Text{Content: "text-mid"}, At: &dingtalk.At{AtUserIDs: []string{"u1"}, IsAtAll: true}},
	}, []time.Duration{3 * time.Second, time.Second, 0, 2 * time.Second})
	for _, err := range errs {
		require.NoError(t, err)
	}
	got := h.sim.Accepted()
	require.Len(t, got, 3, "first, then the link alone (earliest due), then one merged message")
	require.Equal(t, "first\n告警", got[0].Text)
	require.Equal(t, "link", got[1].MsgType)
	require.Equal(t, "markdown", got[2].MsgType)
	var body struct {
		Markdown dingtalk.Markdown `json:"markdown"`
		At       dingtalk.At       `json:"at"`
	}
	require.NoError(t, json.Unmarshal(got[2].Body, &body))
	require.Equal(t, "3 alerts: text-first", body.Markdown.Title)
	require.Equal(t, "#### 3 alerts\n\n---\n\ntext-first\n\n---\n\ntext-mid\n\n@u1\n\n---\n\n#### m-late\n\n**late** alert\n\n@13800000009\n\n告警",
		body.Markdown.Text)
	require.Equal(t, dingtalk.At{AtMobiles: []string{"13800000009"}, AtUserIDs: []string{"u1"}, IsAtAll: true}, body.At)
	require.GreaterOrEqual(t, got[2].At.Sub(got[1].At), 500*time.Millisecond-50*time.Millisecond, "the pool's spacing holds")
	m := metrics()
	require.Equal(t, 1.0, m["merged"])
	require.Equal(t, 3.0, m["coalesced"])
}

func TestMergedMessageFailureIsEveryAlertsFailure(t *testing.T) {
	h, s, metrics := backlogged(t, 300*time.Millisecond)
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultStatus, Status: 503}))
	msgs := []dingtalk.Message{text("a-1"), text("a-2"), text("a-3")}
	errs := sendAll(t, h, s, metrics, msgs, []time.Duration{0, 1, 2})
	f := failure(t, errs[0])
	require.Equal(t, sender.ClassTransient, f.Class)
	require.Equal(t, 3, f.Merged)
	require.Equal(t, 503, f.HTTPStatus)
	require.Contains(t, f.Error(), "merged message of 3 alerts")
	for _, err := range errs[1:] {
		require.Same(t, f, failure(t, err), "one send, one result")
	}
	require.Equal(t, 5+1, h.sim.Stats().Requests, "the merged message was tried Attempts times")
	require.Equal(t, 3.0, metrics()["failures"])
	require.Zero(t, metrics()["merged"])
}

func TestRefusedMergedMessageIsSentAlertByAlert(t *testing.T) {
	h, s, metrics := backlogged(t, 300*time.Millisecond)
	// DingTalk refuses the next message's content (the merged one) once.
	require.NoError(t, h.sim.Inject(h.token(0), chatsim.Fault{Kind: chatsim.FaultErrcode, Errcode: 430102, Count: 1}))
	errs := sendAll(t, h, s, metrics, []dingtalk.Message{text("b-1"), text("b-2"), text("b-3")}, []time.Duration{0, 1, 2})
	for _, err := range errs {
		require.NoError(t, err)
	}
	got := h.sim.Accepted()
	require.Len(t, got, 4)
	for i, m := range got[1:] {
		require.Equal(t, "b-"+strconv.Itoa(i+1), m.Text, "each alert alone, in due order")
	}
	require.Contains(t, h.logs.String(), "the platform refused a merged message; sending its alerts alone")
	require.Zero(t, metrics()["merged"])
}

// An alert whose context ends while it waits in the queue fails with the context's error
// and is not sent; the alert that waited with it still goes.
func TestQueuedAlertHonoursContextAndOthersStillGo(t *testing.T) {
	h, s, metrics := backlogged(t, 300*time.Millisecond)
	h.picks.hold() // no robot is picked until both alerts waited: the second one's 50ms run out in the queue
	var wg sync.WaitGroup
	var kept error
	wg.Go(func() { kept = send(s, context.Background(), "ops", text("kept")) })
	require.Eventually(t, func() bool { return metrics()["waiting"] == 1 }, 30*time.Second, time.Millisecond)
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	f := failure(t, send(s, ctx, "ops", text("given-up")))
	require.Equal(t, sender.ClassTransient, f.Class)
	require.ErrorIs(t, f, context.DeadlineExceeded)
	h.picks.release()
	wg.Wait()
	require.NoError(t, kept)
	got := h.sim.Accepted()
	require.Len(t, got, 2)
	require.Equal(t, "kept", got[1].Text)
}

// Under sustained overload (5× the capacity of one robot allowing 12 per 1.2s window: 10
// alerts waiting at the first pick, 50 more over the window), pacing auto spends the
// budget evenly: in the first half window it sends no more than the bucket's burst plus
// the half window's tokens, merging what waits into each send, while burst spends most of
// the window's budget at once, sending the 10 waiting alerts alone (judged by the
// messages, not by how soon they went: the 50 others start once the 10 are taken); both
// deliver every alert and neither goes over DingTalk's limit.
func TestPacingSpendsTheBudgetEvenly(t *testing.T) {
	const (
		window = 1200 * time.Millisecond
		limit  = 12
		alerts = 60
		front  = 10 // waiting at the first pick: most of a window's budget
	)
	for _, pacing := range []string{config.PacingAuto, config.PacingBurst} {
		t.Run(pacing, func(t *testing.T) {
			h := newHarness(t, window, 20, robotSpec{})
			opts := h.options(limit)
			opts.Pacing = pacing
			s, reg := h.sender(opts)
			var wg sync.WaitGroup
			send := func(i int, due time.Time) {
				wg.Go(func() {
					err := sendAlert(s, context.Background(), sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i), Due: due})
					require.NoError(t, err)
				})
			}
			// The first alerts queue while the pool's picks are held, so that the first pick
			// finds them all, however slowly their goroutines start.
			h.picks.hold()
			due := time.Now()
			for i := range front {
				send(i, due)
			}
			require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == front },
				30*time.Second, time.Millisecond)
			start := time.Now() // before the first pick: the bucket fills from a later moment
			h.picks.release()
			// The others come once the waiting ones were taken into sends, so that what
			// burst does with the 10 does not depend on how fast the machine sends them.
			require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == 0 },
				30*time.Second, time.Millisecond)
			for i := front; i < alerts; i++ {
				at := start.Add(time.Duration(i-front) * window / (alerts - front))
				time.Sleep(time.Until(at))
				send(i, at)
			}
			wg.Wait()
			got := h.sim.Accepted()
			seen := map[string]int{}
			early := 0 // messages accepted in the first half window
			alone := 0 // waiting alerts (the first 10) sent alone
			for _, m := range got {
				ids := alertID.FindAllString(content(t, m), -1)
				for _, id := range ids {
					seen[id]++
				}
				if len(ids) == 1 && ids[0] < fmt.Sprintf("alert-%04d", front) {
					alone++
				}
				if m.At.Before(start.Add(window / 2)) {
					early++
				}
			}
			require.Len(t, seen, alerts, "every alert delivered")
			for id, n := range seen {
				require.Equal(t, 1, n, "%s delivered %d times", id, n)
			}
			require.Zero(t, h.sim.Stats().OverLimit)
			require.Less(t, len(got), alerts, "what waits is merged")
			hist := histogram(t, reg, "rocketdelay_sender_delivery_lateness_seconds")
			require.EqualValues(t, alerts, hist.GetSampleCount(), "every delivery's lateness is observed")
			t.Logf("%s: %d messages, %d in the first half window, %d of the %d waiting alerts alone, mean lateness %.0fms",
				pacing, len(got), early, alone, front, 1000*hist.GetSampleSum()/float64(hist.GetSampleCount()))
			if pacing == config.PacingAuto {
				// bucket 2 + 0.6s of 10 tokens per 1.2s = 7, and one to spare; the bucket
				// counts on Redis's clock from the first pick, after start, so a slow machine
				// only lowers this count
				require.LessOrEqual(t, early, 8, "auto spends the window evenly")
				require.Less(t, alone, front, "auto merges what waits")
			} else {
				// the 10 waiting alerts each go alone, at once: the window has room for 12
				require.Equal(t, front, alone, "burst spends most of the window at once")
			}
		})
	}
}

// ids returns the alerts a simulator message carries, each once, in order (a merged
// message's title names its first alert again).
func ids(t *testing.T, m chatsim.Message) []string {
	t.Helper()
	var out []string
	seen := map[string]bool{}
	for _, id := range alertID.FindAllString(m.Text, -1) {
		if !seen[id] {
			seen[id] = true
			out = append(out, id)
		}
	}
	return out
}

// trickle runs send(0) … send(n-1), each in a goroutine of its own, one started every
// millisecond (alerts of a flood reach a sender over a while, not all at once: a drainer
// may pick between two), and returns their errors in order once all returned.
func trickle(n int, send func(i int) error) []error {
	errs := make([]error, n)
	var wg sync.WaitGroup
	for i := range n {
		wg.Go(func() { errs[i] = send(i) })
		time.Sleep(time.Millisecond)
	}
	wg.Wait()
	return errs
}

// A burst larger than one message's worth, through one robot at DingTalk's limit per
// minute, right after a lone alert (which went alone: nothing else waited), its alerts
// arriving over a while: the burst goes in the fewest messages, full ones while it
// arrives and the rest once it stops, none with a few alerts while more were arriving,
// and without waiting for a token: the lone
// alert found the pool quiet, so it did not shrink the burst the bucket lets out at once
// (a sixth of 19 per minute: 3 sends).
func TestABurstGoesInTheFewestMessages(t *testing.T) {
	const burst = 120 // 50 + 50 + 20 with coalesceMax 50
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true})
	s, _ := h.sender(h.options(19))
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	require.NoError(t, sendAlert(s, ctx, sender.Alert{Target: "ops", Body: []byte("alert-0000")}))
	for _, err := range trickle(burst, func(i int) error {
		return sendAlert(s, ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i+1)})
	}) {
		require.NoError(t, err)
	}
	require.Equal(t, []int{1, 50, 50, 20}, onceEach(t, h, burst+1), "the lone alert, then the burst in ⌈%d/50⌉ messages", burst)
	require.Zero(t, h.picks.reserved.Load(), "no send waited for a token")
	require.Zero(t, h.sim.Stats().OverLimit)
}

// flood sends n alerts (alert-0000, …) to target ops through a sender of h at 19 a
// window, every one queued before a robot is picked for any (the pool's picks are
// held until then, so that they find the flood whole), and waits until all were sent.
func flood(t *testing.T, h *harness, n int) {
	t.Helper()
	s, reg := h.sender(h.options(19))
	var wg sync.WaitGroup
	h.picks.hold()
	for i := range n {
		wg.Go(func() {
			require.NoError(t, sendAlert(s, context.Background(), sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i)}))
		})
	}
	require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == float64(n) },
		30*time.Second, time.Millisecond)
	h.picks.release()
	wg.Wait()
}

// onceEach checks that the simulator accepted each of n alerts exactly once, and returns
// how many alerts each accepted message carried, in order.
func onceEach(t *testing.T, h *harness, n int) []int {
	t.Helper()
	var sizes []int
	seen := map[string]int{}
	for _, m := range h.sim.Accepted() {
		in := ids(t, m)
		sizes = append(sizes, len(in))
		for _, id := range in {
			seen[id]++
		}
	}
	require.Len(t, seen, n, "every alert arrives")
	for id, k := range seen {
		require.Equal(t, 1, k, "%s arrived %d times", id, k)
	}
	return sizes
}

// A flood of more full messages than the token bucket lets out at once (a sixth of 19 per
// minute: 3 sends) goes out as fast as the robot's window allows: a full message carries
// no more by waiting for a token, so none reserves one. With pacing alone the fourth
// full message waited one token's time (3.2 s), the fifth two.
func TestFullMessagesDoNotWaitForTokens(t *testing.T) {
	const burst = 250 // 5 full messages with coalesceMax 50
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true})
	flood(t, h, burst)
	require.Equal(t, []int{50, 50, 50, 50, 50}, onceEach(t, h, burst), "full messages")
	require.Zero(t, h.picks.reserved.Load(), "no full message waited for a token")
	require.Zero(t, h.sim.Stats().OverLimit)
}

// Full messages skip the bucket only while the target is not busy. Once a pick found no
// robot with room and reserved a token, the target is busy (its alerts park for whichever
// replica sends next) and every later pick is paced, so that the replicas share its
// sends one token at a time. Here one robot's window (19 in a second) takes 19 full
// messages at once; the 20th reserves a token, and the 10 after it are paced.
func TestFullMessagesArePacedOnceTheTargetIsBusy(t *testing.T) {
	const burst = 1500 // 30 full messages with coalesceMax 50
	h := newHarness(t, time.Second, 20, robotSpec{})
	flood(t, h, burst)
	onceEach(t, h, burst)
	require.Positive(t, h.picks.reserved.Load(), "the robot's window ran out: a pick reserved a token")
	require.Zero(t, h.picks.fullWhenBusy.Load(), "no full message skipped the bucket once the target was busy")
	require.Zero(t, h.sim.Stats().OverLimit)
}

// parkingClaim is a claim whose Park only counts (the alert would wait in the wheel
// stage's park); noAdoption is a park that never has anything to adopt.
type parkingClaim struct{ parks *atomic.Int64 }

func (c parkingClaim) Confirm(context.Context, int) error { return nil }
func (c parkingClaim) Park(context.Context, string) error {
	c.parks.Add(1)
	return nil
}
func (c parkingClaim) MarkFailed(context.Context, []byte) error { return nil }

type noAdoption struct{}

func (noAdoption) Adopt(context.Context, string, int) (int, int, error) { return 0, 0, nil }

// A target is busy, and its alerts park for whichever replica's send comes next, when a
// pick found its token bucket empty; a robot's short wait for its per-second window,
// with tokens in the bucket, is no reason: the alerts wait for it here and go merged.
func TestAPerSecondWaitDoesNotPark(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{})
	h.robots[0].LimitPerSecond = 1 // a second window is a sixtieth of the window: 1s
	opts := h.options(19)
	opts.CoalesceMax = 2 // full messages go at once: the next pick finds the second window full
	s, _ := h.sender(opts)
	s.SetParking(noAdoption{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	var parks atomic.Int64
	send := func(i int) error {
		return sendAlert(s, ctx, sender.Alert{Target: "ops", Body: fmt.Appendf(nil, "alert-%04d", i), Claim: parkingClaim{&parks}})
	}
	require.NoError(t, send(0)) // the robot's second window is full now
	for _, err := range trickle(4, func(i int) error { return send(i + 1) }) {
		require.NoError(t, err, "not parked")
	}
	require.Zero(t, parks.Load())
	var sizes []int
	for _, m := range h.sim.Accepted() {
		sizes = append(sizes, len(ids(t, m)))
	}
	require.Equal(t, []int{1, 2, 2}, sizes, "the four went merged, each message once the second window had room")
	require.Zero(t, h.picks.reserved.Load())
}

// Turns over principals: while a target is busy, its waiting alerts go in turns over
// their principals, so one principal's flood cannot keep another's alert waiting behind
// it. 60 alerts of principal flood, due first, and one of principal other, due last, all
// queued before the first pick: the first message (50 alerts) carries the other's alert
// — by due order alone it waited for the second — listed in due order, last; every alert
// arrives once, and the metric says whose alerts the turns held back.
func TestAFloodCannotKeepAnotherPrincipalWaiting(t *testing.T) {
	h := newHarness(t, time.Minute, 20, robotSpec{signed: true})
	opts := h.options(19)
	opts.PrincipalOf = func(a sender.Alert) string { return a.Props["principal"] }
	s, reg := h.sender(opts)
	due := time.Now().Truncate(time.Millisecond)
	var wg sync.WaitGroup
	send := func(i int, principal string, at time.Time) {
		wg.Go(func() {
			require.NoError(t, sendAlert(s, context.Background(), sender.Alert{Target: "ops", Due: at,
				Props: map[string]string{"principal": principal}, Body: fmt.Appendf(nil, "alert-%04d", i)}))
		})
	}
	h.picks.hold()
	for i := range 60 {
		send(i, "flood", due.Add(time.Duration(i)*time.Millisecond))
	}
	send(60, "other", due.Add(time.Second))
	require.Eventually(t, func() bool { return testenv.Metric(t, reg, "rocketdelay_sender_waiting_alerts") == 61 },
		30*time.Second, time.Millisecond)
	h.picks.release()
	wg.Wait()

	require.Equal(t, []int{50, 11}, onceEach(t, h, 61))
	first := h.sim.Accepted()[0]
	require.Equal(t, "alert-0060", ids(t, first)[49], "the other principal's alert went first, listed last (due last)")
	require.Equal(t, []string{"alert-0000", "alert-0048"}, []string{ids(t, first)[0], ids(t, first)[48]})
	require.Equal(t, 1.0, testenv.Metric(t, reg, "rocketdelay_sender_turns_deferred_total"), "one send held the flood back")
	require.Zero(t, h.sim.Stats().OverLimit)
}
