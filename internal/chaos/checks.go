package chaos

import (
	"fmt"
	"slices"
	"time"
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

// checkMechanism checks the mechanism of e's scenario; got holds the valid alerts'
// acceptances. The caller holds e.mu.
func (e *env) checkMechanism(row *Row, got map[string][]acceptance) {
	switch {
	case e.name == ScenarioKillBusy:
		e.checkShared(row)
	case e.sink != nil:
		e.checkTopic(row, got)
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
	row.Observed = fmt.Sprintf("alerts of target other parked %d, adopted %d (rocketdelay_sender_shared_alerts_total)", parked, adopted)
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
	row.Observed = fmt.Sprintf("%d batch sends, %d of 2-%d messages, %d of more; %.1fs waited for the rate; at most %d messages stored in 1s (ratePerSecond %d, burst %d)",
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
	lo := 0
	for j, t := range stored {
		for t.Sub(stored[lo]) >= time.Second {
			lo++
		}
		peak = max(peak, j-lo+1)
		for i := range j {
			n, span := j-i+1, t.Sub(stored[i])
			if x := float64(n) - topicRate*(span+rateSlack).Seconds(); x > topicBurst && x > excess {
				excess, worst = x, overRate{n: n, from: stored[i], span: span}
			}
		}
	}
	return peak, worst
}
