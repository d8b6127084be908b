package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"strconv"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// PendingLister lists and counts the pending alerts, hopping or waiting;
// *store.WheelStage implements it.
type PendingLister interface {
	Pending(ctx context.Context, q store.PendingQuery) (store.PendingPage, error)
	CountPending(ctx context.Context, now time.Time, hours int) (store.PendingCounts, error)
}

// PendingResponse is the answer of GET /api/v1/alerts: a page of pending alerts, the
// cursor of the next ("" on the last page), and, when asked for (?counts=HOURS), the
// counts of every pending alert.
type PendingResponse struct {
	Alerts []store.Pending      `json:"alerts"`
	Next   string               `json:"next,omitempty"`
	Counts *store.PendingCounts `json:"counts,omitempty"`
}

// maxCountHours bounds ?counts=HOURS: a week of hourly buckets.
const maxCountHours = 7 * 24

// listPending serves GET /api/v1/alerts: the alerts accepted and not yet handed off or
// cancelled, at any horizon, earliest due first, filtered by ?target=, ?principal=,
// ?due_after= and ?due_before= (RFC 3339, or a duration from now: "2h"), paged by
// ?limit= (1 to 1000, default 100) and ?cursor= (the previous page's next). A principal
// sees its own alerts; one with the right "others" sees everyone's, and may ask for the
// counts of all of them (?counts=HOURS: in all, by target, and by hour ahead).
func (in *Ingress) listPending(w http.ResponseWriter, r *http.Request) {
	const op = "list"
	bad := func(format string, args ...any) {
		in.metrics.requests.WithLabelValues(op, "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...))
	}
	if in.deps.Pending == nil {
		writeError(w, http.StatusServiceUnavailable, "disabled", "listing pending alerts is not enabled in this service")
		return
	}
	v := r.URL.Query()
	now := in.deps.Now()
	q := store.PendingQuery{Target: v.Get("target"), Principal: v.Get("principal"), Cursor: v.Get("cursor"), Limit: 100}
	var err error
	if q.DueAfter, err = timeParam(v, "due_after", now); err != nil {
		bad("%v", err)
		return
	}
	if q.DueBefore, err = timeParam(v, "due_before", now); err != nil {
		bad("%v", err)
		return
	}
	if s := v.Get("limit"); s != "" {
		if q.Limit, err = strconv.Atoi(s); err != nil || q.Limit < 1 || q.Limit > store.MaxPendingPage {
			bad("limit=%q is not a number from 1 to %d", s, store.MaxPendingPage)
			return
		}
	}
	hours := -1
	if s := v.Get("counts"); s != "" {
		if hours, err = strconv.Atoi(s); err != nil || hours < 0 || hours > maxCountHours {
			bad("counts=%q is not a number of hours from 0 to %d", s, maxCountHours)
			return
		}
	}
	p := principalOf(r)
	if !p.Can(config.RightOthers) {
		switch {
		case q.Principal != "" && q.Principal != p.Name:
			in.forbid(w, op, p, "forbidden", "may not list the alerts of principal %q: that takes the right %q", q.Principal, config.RightOthers)
			return
		case hours >= 0:
			in.forbid(w, op, p, "forbidden", "may not count every principal's alerts: that takes the right %q", config.RightOthers)
			return
		}
		q.Principal = p.Name
	}
	page, err := in.deps.Pending.Pending(r.Context(), q)
	if errors.Is(err, store.ErrBadCursor) {
		bad("cursor=%q: %v", q.Cursor, err)
		return
	}
	res := PendingResponse{Alerts: page.Alerts, Next: page.Next}
	if err == nil && hours >= 0 {
		var c store.PendingCounts
		c, err = in.deps.Pending.CountPending(r.Context(), now, hours)
		res.Counts = &c
	}
	if err != nil {
		in.metrics.requests.WithLabelValues(op, "redis").Inc()
		in.deps.Logger.Warn("list API: Redis did not answer", "err", err)
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "redis", "the pending alerts could not be read; ask again")
		return
	}
	in.metrics.requests.WithLabelValues(op, "ok").Inc()
	writeJSON(w, http.StatusOK, res)
}

// timeParam reads the query parameter name with ParseWhen; the zero time when it is
// absent.
func timeParam(v url.Values, name string, now time.Time) (time.Time, error) {
	s := v.Get(name)
	if s == "" {
		return time.Time{}, nil
	}
	t, err := ParseWhen(s, now)
	if err != nil {
		return time.Time{}, fmt.Errorf("%s=%q: %w", name, s, err)
	}
	return t, nil
}

// ParseWhen reads a moment written as RFC 3339 or as a duration from now ("2h", "-30m").
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := time.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.New("neither an RFC 3339 time nor a duration from now (2h, -30m)")
	}
	return t, nil
}
