package console

import (
	"context"
	"fmt"
	"net/http"
	"strings"

	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Alerts finds an alert by id and cancels it, for reason.
type Alerts interface {
	Inspect(ctx context.Context, id string) (failed.Report, error)
	Cancel(ctx context.Context, id, reason string) (store.CancelResult, error)
}

// AlertFinder is the Alerts of a running service: the inspector and the canceller.
type AlertFinder struct {
	failed.Inspector
	Canceller failed.Canceller
}

// Cancel cancels the alert id wherever it is; a cancelled failed_sends row notes the
// console and reason.
func (a AlertFinder) Cancel(ctx context.Context, id, reason string) (store.CancelResult, error) {
	c := a.Canceller
	c.Note = store.CancelNote{By: "console", Reason: reason}
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
	c.render(w, r, http.StatusOK, "alert", map[string]any{"Report": rep, "Cancellable": cancellable,
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
	res, err := c.alerts.Cancel(r.Context(), id, reason)
	if err != nil {
		c.storeFail(w, r, "cancel the alert", err)
		return
	}
	c.logger.Info("console: cancel", "rd_id", id, "reason", reason, "result", res.String(), "remote", r.RemoteAddr)
	msg := fmt.Sprintf("Cancelled: %s.", res.Explain())
	if !res.Cancelled() {
		msg = fmt.Sprintf("Not cancelled: %s.", res.Explain())
	}
	http.Redirect(w, r, pageQuery("alerts", "id", id, "done", msg), http.StatusSeeOther)
}
