package console

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"time"

	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/store"
)

// Escalations are the on-call escalation episodes: the live ones, and their
// acknowledgement; *escalation.Escalator implements it.
type Escalations interface {
	Live(ctx context.Context, limit int) ([]escalation.Status, error)
	Ack(ctx context.Context, key string, seq int64, by string) (escalation.Ended, error)
}

// episodesShown is how many live episodes the escalations view lists, the oldest first.
const episodesShown = 200

// episode is one live episode as the escalations view shows it.
type episode struct {
	escalation.Status
	// Started, Sent, Next and Due are its start, steps sent, next step and that step's
	// due time, as the page says them ("—" for no next step).
	Started, Sent, Next, Due string
	// Ackable: it runs, so it can be acknowledged.
	Ackable bool
	// Principal started it through the HTTP ways in ("—" when none is recorded: an
	// older episode, or one whose record expired).
	Principal string
}

// escalations lists the live episodes: state, steps sent, the next step, its target and
// when it falls due; a running one has an Acknowledge button.
func (c *Console) escalations(w http.ResponseWriter, r *http.Request) {
	live, err := c.episodes.Live(r.Context(), episodesShown)
	if err != nil {
		c.logger.Warn("console: escalation episodes", "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The escalation episodes cannot be read right now (Redis unreachable?); try again in a moment.")
		return
	}
	now := c.now()
	rows := make([]episode, len(live))
	for i, s := range live {
		rows[i] = episode{Status: s, Started: stamp(s.Started, now), Sent: strconv.Itoa(s.Sent), Next: "—", Due: "—",
			Ackable: s.State == store.EpisodePending, Principal: "—"}
		if p, err := c.alerts.EpisodeOwner(r.Context(), s.Key); err != nil {
			c.logger.Warn("console: an episode's principal", "episode", s.Key, "err", err)
		} else if p != "" {
			rows[i].Principal = p
		}
		if s.Steps > 0 {
			rows[i].Sent = fmt.Sprintf("%d of %d", s.Sent, s.Steps)
		}
		if s.Next > 0 {
			rows[i].Next = fmt.Sprintf("%d → %s", s.Next, s.NextTarget)
			rows[i].Due = stamp(s.NextDue, now)
		}
	}
	c.render(w, r, http.StatusOK, "escalations", map[string]any{"Episodes": rows, "More": len(live) == episodesShown,
		"Shown": episodesShown, "Flash": r.URL.Query().Get("done")})
}

// ack acknowledges the episode a row of the escalations view shows (key and seq: that
// episode, not a newer one of the key), for the console.
func (c *Console) ack(w http.ResponseWriter, r *http.Request) {
	key := r.PostForm.Get("key")
	seq, err := strconv.ParseInt(r.PostForm.Get("seq"), 10, 64)
	if key == "" || err != nil || seq < 1 {
		c.fail(w, r, http.StatusBadRequest, "The form does not say which episode to acknowledge: go back to the escalations and use a row's button.")
		return
	}
	end, err := c.episodes.Ack(r.Context(), key, seq, operatorOf(r)) // recorded as by them, and the chat told
	if errors.Is(err, escalation.ErrBadName) {                       // not a passing failure: said as it is
		c.fail(w, r, http.StatusBadRequest, "Your operator name cannot be recorded with an acknowledgement: "+err.Error())
		return
	}
	if err != nil {
		c.logger.Warn("console: acknowledge an episode", "episode", key, "seq", seq, "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The episode could not be acknowledged right now (Redis or the broker unreachable?); try again in a moment.")
		return
	}
	c.logger.Info("console: acknowledge", "episode", key, "seq", seq, "result", end.Result, "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	var msg string
	switch end.Result {
	case "acknowledged":
		msg = fmt.Sprintf("Acknowledged episode %d of %s: no more steps are sent.", seq, key)
		if end.Sent > 0 {
			msg = fmt.Sprintf("Acknowledged episode %d of %s: no more steps are sent, and the chat is told.", seq, key)
		}
	case "already":
		msg = fmt.Sprintf("Not acknowledged: episode %d of %s was acknowledged by %s before.", seq, key, end.By)
	case "resolved_before":
		msg = fmt.Sprintf("Not acknowledged: episode %d of %s was resolved before.", seq, key)
	default: // none
		msg = fmt.Sprintf("Not acknowledged: episode %d of %s does not run any more.", seq, key)
	}
	http.Redirect(w, r, pageQuery("escalations", "done", msg), http.StatusSeeOther)
}

// stamp is t with how far it is from now, to the second: "2026-03-01 10:04:05Z (in
// 3m12s)", "… (5s ago)".
func stamp(t, now time.Time) string {
	d := t.Sub(now).Round(time.Second)
	rel := "now"
	switch {
	case d > 0:
		rel = "in " + d.String()
	case d < 0:
		rel = (-d).String() + " ago"
	}
	return t.UTC().Format("2006-01-02 15:04:05Z") + " (" + rel + ")"
}
