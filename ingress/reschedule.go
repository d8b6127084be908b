package ingress

import (
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// RescheduleRequest is the body of POST /api/v1/alerts/{id}/reschedule: exactly one of
// At and In.
type RescheduleRequest struct {
	// At is the new due time, RFC 3339 ("2026-05-01T09:00:00+08:00"). A time that has
	// passed means now.
	At string `json:"at,omitempty"`
	// In is the new due time from now, a Go duration ("90s", "1h30m"), not negative.
	In string `json:"in,omitempty"`
}

// RescheduleResponse is the answer of POST /api/v1/alerts/{id}/reschedule.
type RescheduleResponse struct {
	ID string `json:"id"`
	// Result is moved, requeued, hop_moved or row_moved (200); unknown or recorded
	// (404); too_late, already_delivered, cancelled, withheld, in_hop, not_pending or
	// too_far (409).
	Result string `json:"result"`
	// Detail says what it means for the alert.
	Detail string `json:"detail"`
	// Due is the alert's new due time, when it was moved.
	Due *time.Time `json:"due,omitempty"`
	// Earliest is, for in_hop, the earliest time it can be moved to while it hops: the due
	// time its message carries.
	Earliest *time.Time `json:"earliest,omitempty"`
}

// reschedule serves POST /api/v1/alerts/{id}/reschedule: 200 with the new due time when
// the alert was moved, 404 when it is unknown, 409 when it is too late (being sent,
// delivered, cancelled, withheld) or cannot be moved that early or from where it is,
// 400 for a bad body or a time beyond the horizon, 503 when Redis, Postgres or (for a
// move back to the broker) RocketMQ cannot be reached.
func (in *Ingress) reschedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := wire.CheckID(id); err != nil {
		writeError(w, http.StatusBadRequest, string(wire.RejectBadID), err.Error())
		return
	}
	if in.deps.Rescheduler == nil {
		writeError(w, http.StatusServiceUnavailable, "disabled", "reschedule is not enabled in this process")
		return
	}
	var req RescheduleRequest
	if !decodeJSON(w, r, &req, true) {
		return
	}
	now := in.deps.Now()
	due, err := req.dueAt(now)
	if err != nil {
		in.metrics.requests.WithLabelValues("reschedule", "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_reschedule", err.Error())
		return
	}
	p := principalOf(r)
	if !in.alertOwnedBy(w, r, "reschedule", p, id) {
		return
	}
	// The owner's record, whoever's, lasts as long as the alert at its new time (never
	// past the horizon: a time beyond it is refused below); an alert nobody owns stays
	// nobody's. A scoped id has none: it is its principal's by its name.
	ttl := min(store.AlertOwnerTTL(due, now, in.cfg.Scheduler.DoneTTL), in.cfg.Scheduler.Horizon+in.cfg.Scheduler.DoneTTL)
	if _, scoped := wire.Scope(id); !scoped {
		if _, err := in.deps.Producers.Extend(r.Context(), store.OwnAlert, id, ttl); err != nil {
			in.unavailableRedis(w, "reschedule", id, err)
			return
		}
	}
	res, err := in.deps.Rescheduler.Reschedule(store.WithAuthor(r.Context(), p.Name), id, due)
	switch {
	case errors.Is(err, store.ErrInvalid):
		in.metrics.requests.WithLabelValues("reschedule", "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_reschedule", err.Error())
		return
	case err != nil:
		in.metrics.requests.WithLabelValues("reschedule", "unavailable").Inc()
		in.deps.Logger.Warn("reschedule API: a store did not answer", "rd_id", id, "err", err)
		writeError(w, http.StatusServiceUnavailable, "unavailable", "the reschedule was not recorded; send it again")
		return
	}
	in.metrics.requests.WithLabelValues("reschedule", res.Result.String()).Inc()
	answer := RescheduleResponse{ID: id, Result: res.Result.String(), Detail: res.Result.Explain()}
	code := http.StatusConflict
	switch res.Result {
	case store.RescheduleMoved, store.RescheduleHopMoved, store.RescheduleRowMoved, store.RescheduleRequeued:
		code, answer.Due = http.StatusOK, &res.DueAt
	case store.RescheduleUnknown, store.RescheduleRecorded:
		code = http.StatusNotFound
	case store.RescheduleInHop:
		answer.Earliest = &res.DueAt
	}
	writeJSON(w, code, answer)
}

// dueAt is the due time the request asks for, now being the service's clock.
func (req RescheduleRequest) dueAt(now time.Time) (time.Time, error) {
	switch {
	case req.At != "" && req.In != "":
		return time.Time{}, errors.New(`give either "at" or "in", not both`)
	case req.At != "":
		at, err := time.Parse(time.RFC3339Nano, req.At)
		if err != nil {
			return time.Time{}, fmt.Errorf(`"at" is not an RFC 3339 time (2026-05-01T09:00:00+08:00): %q`, req.At)
		}
		return at, nil
	case req.In != "":
		d, err := time.ParseDuration(req.In)
		if err != nil || d < 0 {
			return time.Time{}, fmt.Errorf(`"in" is not a duration of zero or more ("90s", "1h30m"): %q`, req.In)
		}
		return now.Add(d), nil
	}
	return time.Time{}, errors.New(`give the new due time: {"at": RFC 3339} or {"in": "90s"}`)
}
