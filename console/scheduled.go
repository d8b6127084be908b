package console

import (
	"errors"
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
		"Filter": filter, "Filtered": len(filter) > 0, "Now": now, "First": q.Cursor == ""}
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
