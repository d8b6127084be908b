package chaos

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/store"
)

// A scenario that stages a mechanism checks, from the replicas' metrics and what was
// received, that the mechanism ran: a run in which it never did proves nothing about
// it, however clean its counts.

// topicRate is targets.orders.topic.ratePerSecond in every scenario. store.TopicRate
// lets a tenth of a second's worth go at once (topicBurst), which bounds one batch send
// of the target's and is a bucket bound of rocketdelay_topic_batch_messages.
const (
	topicRate  = 40
	topicBurst = topicRate / 10
)

// rateSlack bounds how much more one message than another waits between taking its
// token of the rate and being stored by the broker: the confirm of its claim and its
// send, milliseconds unless the machine stalls.
const rateSlack = time.Second

// checkMechanism checks the mechanism of e's scenario and, in a scenario of chat
// targets, the robots' limits in what the simulator accepted; got holds the valid
// alerts' acceptances. The caller holds e.mu.
func (e *env) checkMechanism(row *Row, got map[string][]acceptance) {
	switch {
	case e.sink != nil:
		e.checkTopic(row, got)
		return
	case e.name == ScenarioKillBusy:
		e.checkShared(row)
	case e.name == ScenarioRedisBlips:
		e.checkNoTakeOver(row)
	case e.name == ScenarioRollingConfig, e.name == ScenarioReloadConfig:
		e.checkSentOn(row)
	}
	e.checkLimits(row)
	if stormScenarios[e.name] {
		e.checkStorm(row)
	}
}

// checkNoTakeOver checks, from the replicas' metrics, that the Redis blips took nothing
// over: every replica beat again within its liveness after each blip (the silence of
// Redis opens a quiet window), so none departed and no claim was lost.
func (e *env) checkNoTakeOver(row *Row) {
	departed := int(e.counterLocked("rocketdelay_liveness_departed_replicas_total", nil))
	lost := int(e.counterLocked("rocketdelay_claims_lost_total", nil))
	lapses := int(e.counterLocked("rocketdelay_liveness_lapses_total", nil))
	observe(row, "take-overs: %d replicas departed, %d claims lost; %d beats found their replica lapsed", departed, lost, lapses)
	if departed > 0 || lost > 0 {
		row.Problems = append(row.Problems, fmt.Sprintf("the blips caused take-overs: %d replicas departed, %d claims lost", departed, lost))
	}
}

// checkSentOn checks, from the replicas' metrics, that the rollout was staged: a replica
// consumed alerts for a target it did not have and sent them on for one that had it, or
// the scenario proves nothing about replicas on two revisions.
func (e *env) checkSentOn(row *Row) {
	sent := int(e.counterLocked("rocketdelay_unknown_target_sent_on_total", nil))
	observe(row, "%d alerts sent on by a replica without their target", sent)
	if sent == 0 {
		row.Problems = append(row.Problems, "no replica sent an alert on for a target it did not have: the two revisions never met")
	}
}

// observe adds what a check observed to row.Observed.
func observe(row *Row, format string, args ...any) {
	if row.Observed != "" {
		row.Observed += "; "
	}
	row.Observed += fmt.Sprintf(format, args...)
}

// stormScenarios are the scenarios that run storms of their platform (runStorm).
var stormScenarios = func() map[string]bool {
	out := map[string]bool{}
	for _, kind := range chatKinds {
		out[stormOf(kind)] = true
	}
	return out
}()

// checkLimits checks, in what the simulator accepted, that every message went through
// a robot of the scenario's kind, and that no robot accepted more than its limit within
// any window (senderLimits) nor, on a platform with a limit per second (Feishu's 5),
// more than that within any sixtieth of it: the simulator refuses either
// (Stats.OverLimit), and this counts again, from the record, what it let through.
func (e *env) checkLimits(row *Row) {
	byRobot := map[string][]time.Time{}
	kinds := map[string]int{}
	for _, m := range e.sim.Accepted() {
		byRobot[m.Robot] = append(byRobot[m.Robot], m.At)
		kinds[m.Kind]++
	}
	for kind, n := range kinds {
		if kind != e.kind {
			row.Problems = append(row.Problems, fmt.Sprintf("%d messages accepted by %s robots: every alert was for the %s target", n, kind, e.kind))
		}
	}
	second := senderWindow / 60
	p, _ := platforms.Of(e.kind)
	perSecond := p.Config.MaxPerSecond
	var peakWindow, peakSecond int
	for _, rb := range e.robots {
		ts := byRobot[rb.Name]
		slices.SortFunc(ts, time.Time.Compare)
		w, s := peakWithin(ts, senderWindow), peakWithin(ts, second)
		peakWindow, peakSecond = max(peakWindow, w), max(peakSecond, s)
		if w > rb.Limit {
			row.Problems = append(row.Problems, fmt.Sprintf("robot %s accepted %d messages within %s: over its limit %d", rb.Name, w, senderWindow, rb.Limit))
		}
		if perSecond > 0 && s > perSecond {
			row.Problems = append(row.Problems, fmt.Sprintf("robot %s accepted %d messages within %s (a sixtieth of the window): over %s's %d per second",
				rb.Name, s, second.Round(100*time.Microsecond), p.Config.Name, perSecond))
		}
	}
	observe(row, "%d messages accepted by %d %s robots, at most %d by one within a window (limit %d)",
		kinds[e.kind], len(e.robots), e.kind, peakWindow, senderLimits[e.kind])
	if perSecond > 0 {
		observe(row, "at most %d within a sixtieth of it, %s's second (its limit %d, the sender's limitPerSecond %d)",
			peakSecond, p.Config.Name, perSecond, p.Config.Defaults.LimitPerSecond)
	}
}

// peakWithin is the most of the sorted times ts that fall within any span shorter than d.
func peakWithin(ts []time.Time, d time.Duration) int {
	peak, lo := 0, 0
	for j, t := range ts {
		for t.Sub(ts[lo]) >= d {
			lo++
		}
		peak = max(peak, j-lo+1)
	}
	return peak
}

// checkStorm checks that a request met every phase of the storm (runStorm): a phase
// whose faults none met proves nothing about the platform's answer it injects.
func (e *env) checkStorm(row *Row) {
	st := e.sim.Stats()
	observe(row, "%d of %d requests answered by an injected fault", st.Faults, st.Requests)
	for _, p := range e.unmet {
		row.Problems = append(row.Problems, fmt.Sprintf("no request met the storm phase %q", p))
	}
}

// checkShared checks that both replicas parked alerts of the busy target "other" and
// adopted them into their sends (rocketdelay_sender_shared_alerts_total, summed over
// every replica instance; a killed one's scraped just before its kill).
func (e *env) checkShared(row *Row) {
	way := func(w string) int {
		return int(e.counterLocked("rocketdelay_sender_shared_alerts_total", map[string]string{"target": "other", "way": w}))
	}
	parked, adopted := way("parked"), way("adopted")
	observe(row, "alerts of target other parked %d, adopted %d (rocketdelay_sender_shared_alerts_total)", parked, adopted)
	if parked == 0 {
		row.Problems = append(row.Problems, "no alert was parked: the cluster never took the target past its budget")
	}
	if adopted == 0 {
		row.Problems = append(row.Problems, "no parked alert was adopted into a send")
	}
}

// checkTopic checks the topic target's batch sends and its rate: every batch send
// carried at most topicBurst messages and some more than one
// (rocketdelay_topic_batch_messages), messages waited for the rate
// (rocketdelay_topic_rate_wait_seconds_total), and the business consumer never saw
// more than the rate lets through: k messages stored over a span d need
// k ≤ topicBurst + topicRate × (d + rateSlack).
func (e *env) checkTopic(row *Row, got map[string][]acceptance) {
	h := e.histogramLocked("rocketdelay_topic_batch_messages")
	single, upToBurst := h.cumulative(1), h.cumulative(topicBurst)
	waited := e.counterLocked("rocketdelay_topic_rate_wait_seconds_total", map[string]string{"target": "orders"})
	var stored []time.Time
	for _, cs := range got {
		for _, c := range cs {
			stored = append(stored, c.at)
		}
	}
	slices.SortFunc(stored, time.Time.Compare)
	peak, worst := rateOf(stored)
	observe(row, "%d batch sends, %d of 2-%d messages, %d of more; %.1fs waited for the rate; at most %d messages stored in 1s (ratePerSecond %d, burst %d)",
		h.count, upToBurst-single, topicBurst, h.count-upToBurst, waited, peak, topicRate, topicBurst)
	switch {
	case h.count == 0:
		row.Problems = append(row.Problems, "no batch send was observed")
	case h.count > upToBurst:
		row.Problems = append(row.Problems, fmt.Sprintf("%d batch sends carried more than the rate's burst of %d", h.count-upToBurst, topicBurst))
	case single == h.count:
		row.Problems = append(row.Problems, "every send carried one message: nothing was batched")
	}
	if waited == 0 {
		row.Problems = append(row.Problems, "no message waited for the rate: the cluster never reached it")
	}
	if worst.n > 0 {
		row.Problems = append(row.Problems, fmt.Sprintf("%d messages stored within %s from %s: over ratePerSecond %d (burst %d, slack %s)",
			worst.n, worst.span, worst.from.Format("15:04:05.000"), topicRate, topicBurst, rateSlack))
	}
}

// overRate is a run of stored messages past the rate.
type overRate struct {
	n    int
	from time.Time
	span time.Duration
}

// rateOf returns the most messages stored within any second, and the run of messages
// the furthest past what the rate lets through (n 0: none is).
func rateOf(stored []time.Time) (peak int, worst overRate) {
	excess := 0.0
	for j, t := range stored {
		for i := range j {
			n, span := j-i+1, t.Sub(stored[i])
			if x := float64(n) - topicRate*(span+rateSlack).Seconds(); x > topicBurst && x > excess {
				excess, worst = x, overRate{n: n, from: stored[i], span: span}
			}
		}
	}
	return peakWithin(stored, time.Second), worst
}

// checkPending: once every alert was handed off, none may be left in the list of pending
// alerts (store.WheelStage.Pending, `rocketdelay alerts list`): the list is kept exact
// through the scenario's faults. Not judged where the previous release ran (it keeps no
// list), nor on a Redis topology of the scenario's own.
func (e *env) checkPending(ctx context.Context, row *Row) {
	if e.rdb == nil || row.Lost > 0 || e.name == ScenarioRollingUpgrade {
		return
	}
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 30*time.Second)
	defer cancel()
	ws, err := store.OpenWheelStage(ctx, e.rdb, e.prefix, store.WheelStageOptions{}) // every shard of the deployment's layout
	if err != nil {
		row.Err = errors.Join(row.Err, fmt.Errorf("chaos: count the pending alerts: %w", err))
		return
	}
	c, err := ws.CountPending(ctx, time.Now(), 0)
	if err != nil {
		row.Err = errors.Join(row.Err, fmt.Errorf("chaos: count the pending alerts: %w", err))
		return
	}
	if c.Total != 0 || len(c.ByTarget) != 0 {
		row.Problems = append(row.Problems, fmt.Sprintf("every alert was handed off, yet the list of pending alerts holds %d (by target %v)",
			c.Total, c.ByTarget))
	}
}
