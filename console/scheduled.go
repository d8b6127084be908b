package console

import (
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/store"
)

// scheduledHours is how many hours ahead the Scheduled page counts hour by hour.
const scheduledHours = 24

// scheduledPage is how many alerts one page of the Scheduled page lists.
const scheduledPage = 50

// hourCount is one hour ahead and how many pending alerts fall due in it.
type hourCount struct {
	From, To time.Time
	N        int64
}

// scheduled serves the Scheduled page: every pending alert, hopping through the broker
// or waiting in the wheel stage, counted by target and by hour ahead, and listed
// earliest due first, a page at a time, filtered by target, principal and how soon it is
// due (?target=, ?principal=, ?within=2h, ?cursor=).
func (c *Console) scheduled(w http.ResponseWriter, r *http.Request) {
	v := r.URL.Query()
	now := c.now()
	filter := url.Values{}
	for _, k := range []string{"target", "principal", "within"} {
		if s := strings.TrimSpace(v.Get(k)); s != "" {
			filter.Set(k, s)
		}
	}
	q := store.PendingQuery{Target: filter.Get("target"), Principal: filter.Get("principal"), Cursor: v.Get("cursor"), Limit: scheduledPage}
	if s := filter.Get("within"); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			c.fail(w, r, http.StatusBadRequest, "“Due within” takes a duration such as 30m or 6h.")
			return
		}
		q.DueBefore = now.Add(d)
	}
	counts, err := c.alerts.CountPending(r.Context(), now, scheduledHours)
	var page store.PendingPage
	if err == nil {
		page, err = c.alerts.Pending(r.Context(), q)
	}
	switch {
	case errors.Is(err, store.ErrBadCursor):
		c.fail(w, r, http.StatusBadRequest, "That page link is not valid; start again from the first page.")
		return
	case errors.Is(err, errNoList):
		c.fail(w, r, http.StatusServiceUnavailable, "The list of pending alerts is not available in this service.")
		return
	case err != nil:
		c.logger.Warn("console: pending alerts", "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The pending alerts cannot be read right now (Redis unreachable?); try again in a moment.")
		return
	}
	hours := make([]hourCount, len(counts.ByHour))
	for h, n := range counts.ByHour {
		hours[h] = hourCount{From: now.Add(time.Duration(h) * time.Hour), To: now.Add(time.Duration(h+1) * time.Hour), N: n}
	}
	data := map[string]any{"Counts": counts, "Targets": counts.SortedTargets(), "Hours": hours, "Alerts": page.Alerts,
		"Filter": filter, "Filtered": len(filter) > 0, "Now": now, "First": q.Cursor == "", "Flash": v.Get("done"),
		"Query": template.URL(filter.Encode())} // encoded by url.Values: safe in an href
	if page.Next != "" {
		next := url.Values{}
		for k, vs := range filter {
			next[k] = vs
		}
		next.Set("cursor", page.Next)
		data["Next"] = Prefix + "scheduled?" + next.Encode()
	}
	c.render(w, r, http.StatusOK, "scheduled", data)
}

// pendingFilter reads the Scheduled page's filter from r's form for a bulk cancel:
// target, principal, and before (RFC 3339), to which a "within" from now is resolved, so
// that the preview's form confirms the alerts of the same window however long later it
// is posted.
func (c *Console) pendingFilter(r *http.Request) (url.Values, store.PendingQuery, error) {
	v := url.Values{}
	for _, k := range []string{"target", "principal", "before"} {
		if s := strings.TrimSpace(r.Form.Get(k)); s != "" {
			v.Set(k, s)
		}
	}
	if s := strings.TrimSpace(r.Form.Get("within")); s != "" {
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 {
			return nil, store.PendingQuery{}, errors.New("“due within” takes a duration such as 30m or 6h")
		}
		v.Set("before", c.now().Add(d).UTC().Format(time.RFC3339Nano))
	}
	q := store.PendingQuery{Target: v.Get("target"), Principal: v.Get("principal"), Limit: store.MaxPendingPage}
	if s := v.Get("before"); s != "" {
		t, err := time.Parse(time.RFC3339Nano, s)
		if err != nil {
			return nil, store.PendingQuery{}, errors.New("“before” takes an RFC 3339 time")
		}
		q.DueBefore = t
	}
	return v, q, nil
}

// scheduledActions are the bulk actions on the pending alerts a filter matches, by the
// path's {action}, and their verbs.
var scheduledActions = map[string]string{"cancel": "Cancel", "reschedule": "Reschedule"}

// bulkScheduled previews a bulk action on every pending alert the Scheduled page's
// filter matches (GET: how many, and what the action needs: a reason to cancel, a new
// due time to reschedule) and carries it out (POST) on exactly the alerts the preview
// counted: when they changed meanwhile (one was sent, cancelled or moved, or another now
// matches), nothing is changed and the answer is 409 with a new preview. Each cancel or
// move is recorded as the operator's.
func (c *Console) bulkScheduled(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	verb, ok := scheduledActions[action]
	if !ok {
		c.fail(w, r, http.StatusNotFound, "There is no such action.")
		return
	}
	_ = r.ParseForm()
	v, q, err := c.pendingFilter(r)
	if err != nil {
		c.fail(w, r, http.StatusBadRequest, "The filter is wrong: "+err.Error()+".")
		return
	}
	if len(v) == 0 {
		c.fail(w, r, http.StatusBadRequest, "A bulk action needs a filter (a target, a principal or a due time): it never applies to everything scheduled.")
		return
	}
	ids, err := store.PendingIDs(r.Context(), c.alerts, q, bulkMax, nil)
	if err != nil {
		c.logger.Warn("console: pending alerts", "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The pending alerts cannot be read right now (Redis unreachable?); try again in a moment.")
		return
	}
	when := strings.TrimSpace(r.Form.Get("when"))
	preview := func(status int, msg string) {
		data := map[string]any{"Action": action, "Verb": verb, "Filter": v, "Count": len(ids), "Max": bulkMax, "Set": store.PendingSet(ids),
			"TooMany": len(ids) > bulkMax, "When": when,
			"Back": template.URL(v.Encode())} // encoded by url.Values: safe in an href
		if msg != "" {
			data["Error"] = msg
		}
		c.render(w, r, status, "scheduled-bulk", data)
	}
	if r.Method == http.MethodGet {
		preview(http.StatusOK, "")
		return
	}
	shown, count := r.PostForm.Get("set"), r.PostForm.Get("count")
	if shown == "" {
		preview(http.StatusConflict, "Nothing was changed: a bulk action confirms a preview. Here it is; confirm it to go on.")
		return
	}
	if store.PendingSet(ids) != shown || len(ids) > bulkMax {
		preview(http.StatusConflict, fmt.Sprintf("The matching alerts changed since the preview, which showed %s: nothing was changed. "+
			"Here is the new preview; confirm it to go on.", count))
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var due time.Time
	switch action {
	case "cancel":
		if reason == "" {
			preview(http.StatusBadRequest, "Say why these alerts are cancelled: the reason is logged and kept with any failed send's row.")
			return
		}
	case "reschedule":
		if due, ok = parseWhen(when, c.now()); !ok {
			preview(http.StatusBadRequest, fmt.Sprintf("Give the new due time as a duration from now (90s, 2h30m) "+
				"or an RFC 3339 time (2026-12-02T15:04:05+08:00), not %q.", when))
			return
		}
	}
	ctx := store.WithAuthor(r.Context(), operatorOf(r))
	changed := 0
	for k, id := range ids {
		var done bool
		switch action {
		case "cancel":
			res, err := c.alerts.Cancel(ctx, id, reason)
			if err != nil {
				c.storeFail(w, r, fmt.Sprintf("cancel (after %d of %d)", k, len(ids)), err)
				return
			}
			done = res.Cancelled()
		case "reschedule":
			res, err := c.alerts.Reschedule(ctx, id, due)
			if errors.Is(err, store.ErrInvalid) {
				preview(http.StatusBadRequest, "Not rescheduled: "+err.Error()+".")
				return
			}
			if err != nil {
				c.storeFail(w, r, fmt.Sprintf("reschedule (after %d of %d)", k, len(ids)), err)
				return
			}
			done = res.Result.Moved()
		}
		if done {
			changed++
		}
	}
	c.logger.Info("console: bulk "+action, "filter", v.Encode(), "matched", len(ids), "changed", changed, "reason", reason,
		"when", when, "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	back := url.Values{}
	for _, k := range []string{"target", "principal"} {
		if v.Has(k) {
			back.Set(k, v.Get(k))
		}
	}
	msg := fmt.Sprintf("Cancelled %d of the %d previewed alerts (the others were being sent or sent already).", changed, len(ids))
	if action == "reschedule" {
		msg = fmt.Sprintf("Rescheduled %d of the %d previewed alerts to %s (the others were being sent, sent already, or "+
			"hopping toward a later time: they can be moved earlier once they reach the wheel stage).", changed, len(ids), due.UTC().Format(time.RFC3339))
	}
	back.Set("done", msg)
	http.Redirect(w, r, Prefix+"scheduled?"+back.Encode(), http.StatusSeeOther)
}
