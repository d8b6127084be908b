package console

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Alerts finds an alert by id, cancels it, for reason, and reschedules it.
type Alerts interface {
	Inspect(ctx context.Context, id string) (failed.Report, error)
	Cancel(ctx context.Context, id, reason string) (store.CancelResult, error)
	Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error)
	// EpisodeOwner is the principal that started the escalation episode key through the
	// HTTP ways in; "" when none is recorded.
	EpisodeOwner(ctx context.Context, key string) (string, error)
	Scheduled
}

// Scheduled lists and counts the pending alerts, hopping or waiting; *store.WheelStage
// implements it.
type Scheduled interface {
	Pending(ctx context.Context, q store.PendingQuery) (store.PendingPage, error)
	CountPending(ctx context.Context, now time.Time, hours int) (store.PendingCounts, error)
}

// AlertFinder is the Alerts of a running service: the inspector, the canceller and the
// rescheduler.
type AlertFinder struct {
	failed.Inspector
	Canceller   failed.Canceller
	Rescheduler failed.Rescheduler
	// List is the list of pending alerts; nil: the Scheduled page says it is not
	// available.
	List Scheduled
}

// errNoList is the error of the Scheduled methods of an AlertFinder without a List.
var errNoList = errors.New("the list of pending alerts is not available in this service")

// Pending returns a page of the pending alerts (List).
func (a AlertFinder) Pending(ctx context.Context, q store.PendingQuery) (store.PendingPage, error) {
	if a.List == nil {
		return store.PendingPage{}, errNoList
	}
	return a.List.Pending(ctx, q)
}

// CountPending counts the pending alerts (List).
func (a AlertFinder) CountPending(ctx context.Context, now time.Time, hours int) (store.PendingCounts, error) {
	if a.List == nil {
		return store.PendingCounts{}, errNoList
	}
	return a.List.CountPending(ctx, now, hours)
}

// EpisodeOwner is the principal that started the episode key, from the inspector's
// owners; "" without them.
func (a AlertFinder) EpisodeOwner(ctx context.Context, key string) (string, error) {
	if a.Owners == nil {
		return "", nil
	}
	return a.Owners.Owner(ctx, store.OwnEpisode, key)
}

// Reschedule moves the alert id to dueAt wherever it is.
func (a AlertFinder) Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error) {
	return a.Rescheduler.Reschedule(ctx, id, dueAt)
}

// Cancel cancels the alert id wherever it is; a cancelled failed_sends row notes who
// (the operator, store.WithAuthor) and why.
func (a AlertFinder) Cancel(ctx context.Context, id, reason string) (store.CancelResult, error) {
	c := a.Canceller
	c.Note = store.CancelNote{By: cmp.Or(store.AuthorOf(ctx), "console"), Reason: reason}
	return c.Cancel(ctx, id)
}

// alert shows where the alert ?id= is and what happened to it (the search box of every
// page leads here).
func (c *Console) alert(w http.ResponseWriter, r *http.Request) {
	id := strings.TrimSpace(r.URL.Query().Get("id"))
	if id == "" {
		c.render(w, r, http.StatusOK, "alert", map[string]any{})
		return
	}
	if err := wire.CheckID(id); err != nil {
		c.fail(w, r, http.StatusBadRequest, "That is not an alert id: "+err.Error()+".")
		return
	}
	rep, err := c.alerts.Inspect(r.Context(), id)
	if err != nil {
		c.storeFail(w, r, "find the alert", err)
		return
	}
	cancellable := rep.State == failed.StateHopping || rep.State == failed.StateWaiting || rep.State == failed.StateUnknown ||
		rep.State == failed.StateFailed
	movable := rep.State == failed.StateHopping || rep.State == failed.StateWaiting || rep.State == failed.StateFailed
	c.render(w, r, http.StatusOK, "alert", map[string]any{"Report": rep, "Cancellable": cancellable, "Movable": movable,
		"Flash": r.URL.Query().Get("done")})
}

// cancelPage asks for the confirmation of a cancel, with a reason.
func (c *Console) cancelPage(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := wire.CheckID(id); err != nil {
		c.fail(w, r, http.StatusBadRequest, "That is not an alert id: "+err.Error()+".")
		return
	}
	c.render(w, r, http.StatusOK, "cancel", map[string]any{"ID": id})
}

// cancel carries out a confirmed cancel.
func (c *Console) cancel(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := wire.CheckID(id); err != nil {
		c.fail(w, r, http.StatusBadRequest, "That is not an alert id: "+err.Error()+".")
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	if reason == "" {
		c.render(w, r, http.StatusBadRequest, "cancel", map[string]any{"ID": id, "Error": "Say why the alert is cancelled: the reason goes to the log."})
		return
	}
	res, err := c.alerts.Cancel(store.WithAuthor(r.Context(), operatorOf(r)), id, reason)
	if err != nil {
		c.storeFail(w, r, "cancel the alert", err)
		return
	}
	c.logger.Info("console: cancel", "rd_id", id, "reason", reason, "result", res.String(), "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	msg := fmt.Sprintf("Cancelled: %s.", res.Explain())
	if !res.Cancelled() {
		msg = fmt.Sprintf("Not cancelled: %s.", res.Explain())
	}
	http.Redirect(w, r, pageQuery("alerts", "id", id, "done", msg), http.StatusSeeOther)
}

// reschedule moves the alert to the form's "when": a duration from now ("90s", "2h") or
// an RFC 3339 time; the alert's page then says what became of it.
func (c *Console) reschedule(w http.ResponseWriter, r *http.Request) {
	id := r.PathValue("id")
	if err := wire.CheckID(id); err != nil {
		c.fail(w, r, http.StatusBadRequest, "That is not an alert id: "+err.Error()+".")
		return
	}
	when := strings.TrimSpace(r.PostForm.Get("when"))
	due, ok := parseWhen(when, time.Now())
	if !ok {
		c.fail(w, r, http.StatusBadRequest, fmt.Sprintf("Give the new due time as a duration from now (90s, 2h30m) "+
			"or an RFC 3339 time (2026-12-02T15:04:05+08:00), not %q.", when))
		return
	}
	res, err := c.alerts.Reschedule(store.WithAuthor(r.Context(), operatorOf(r)), id, due)
	if errors.Is(err, store.ErrInvalid) {
		c.fail(w, r, http.StatusBadRequest, "Not rescheduled: "+err.Error()+".")
		return
	}
	if err != nil {
		c.storeFail(w, r, "reschedule the alert", err)
		return
	}
	c.logger.Info("console: reschedule", "rd_id", id, "when", when, "result", res.Result.String(), "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	msg := fmt.Sprintf("Not rescheduled: %s.", res.Result.Explain())
	switch {
	case res.Result.Moved():
		msg = fmt.Sprintf("Rescheduled to %s: %s.", res.DueAt.Format(time.RFC3339), res.Result.Explain())
	case res.Result == store.RescheduleInHop:
		msg = fmt.Sprintf("Not rescheduled: %s (%s).", res.Result.Explain(), res.DueAt.Format(time.RFC3339))
	}
	http.Redirect(w, r, pageQuery("alerts", "id", id, "done", msg), http.StatusSeeOther)
}

// parseWhen reads a reschedule's new due time: a duration from now, not negative, or an
// RFC 3339 time; false when when is neither.
func parseWhen(when string, now time.Time) (time.Time, bool) {
	if d, err := time.ParseDuration(when); err == nil && d >= 0 {
		return now.Add(d), true
	}
	at, err := time.Parse(time.RFC3339Nano, when)
	return at, err == nil
}
