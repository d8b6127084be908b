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

// MaxCountHours bounds ?counts=HOURS (and alerts list --counts): a week of hourly buckets.
const MaxCountHours = 7 * 24

// listPending serves GET /api/v1/alerts: the alerts accepted and not yet handed off or
// cancelled, at any horizon, earliest due first, filtered by ?target=, ?principal=,
// ?due_after= and ?due_before= (RFC 3339, or a duration from now: "2h"), paged by
// ?limit= (1 to 1000, default 100) and ?cursor= (the previous page's next). A principal
// sees its own alerts; one with the right "others" sees everyone's, and may ask for the
// counts of all of them (?counts=HOURS: in all, by target, and by hour ahead).
func (in *Ingress) listPending(w http.ResponseWriter, r *http.Request) {
	const op = "list"
	bad, ok := in.pendingRequest(w, op)
	if !ok {
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
		if hours, err = strconv.Atoi(s); err != nil || hours < 0 || hours > MaxCountHours {
			bad("counts=%q is not a number of hours from 0 to %d", s, MaxCountHours)
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

// pendingRequest starts a request op on the pending alerts: it answers 503 when the
// service lists none (ok false), and returns bad, which answers a 400 of the request.
func (in *Ingress) pendingRequest(w http.ResponseWriter, op string) (bad func(format string, args ...any), ok bool) {
	if in.deps.Pending == nil {
		writeError(w, http.StatusServiceUnavailable, "disabled", "listing pending alerts is not enabled in this service")
		return nil, false
	}
	return func(format string, args ...any) {
		in.metrics.requests.WithLabelValues(op, "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf(format, args...))
	}, true
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

// ParseWhen reads a moment written as RFC 3339 or as a duration from now ("2h",
// "-30m", "3d", as every duration of the service: config.ParseDuration).
func ParseWhen(s string, now time.Time) (time.Time, error) {
	if d, err := config.ParseDuration(s); err == nil {
		return now.Add(d), nil
	}
	t, err := time.Parse(time.RFC3339Nano, s)
	if err != nil {
		return time.Time{}, errors.New("neither an RFC 3339 time nor a duration from now (2h, -30m, 3d)")
	}
	return t, nil
}

// maxBulkCancel is the most alerts one bulk cancel cancels: a filter that matches more is
// to be narrowed first.
const maxBulkCancel = 10000

// BulkCancelRequest is the body of POST /api/v1/alerts/cancel: a filter of the pending
// alerts (as GET /api/v1/alerts's; due times RFC 3339 or a duration from now), and either
// Preview, or the Set of the preview it confirms.
type BulkCancelRequest struct {
	Target    string `json:"target,omitempty"`
	Principal string `json:"principal,omitempty"`
	DueAfter  string `json:"dueAfter,omitempty"`
	DueBefore string `json:"dueBefore,omitempty"`
	Preview   bool   `json:"preview,omitempty"`
	Set       string `json:"set,omitempty"`
}

// BulkCancelResponse says what a bulk cancel matched, and, confirmed, what it did: how
// many it cancelled and every result by count. A preview holds the Set to confirm and
// the first 10 ids.
type BulkCancelResponse struct {
	Matched   int            `json:"matched"`
	Set       string         `json:"set"`
	IDs       []string       `json:"ids,omitempty"`
	Cancelled int            `json:"cancelled"`
	Results   map[string]int `json:"results,omitempty"`
	Error     string         `json:"error,omitempty"`
	Reason    string         `json:"reason,omitempty"`
}

// cancelPending serves POST /api/v1/alerts/cancel: every pending alert a filter matches
// (at most 10,000) is cancelled, in two steps as the console's bulk actions: a preview
// ({"preview": true}) answers how many match and their set's digest; the confirmation
// with that set cancels exactly them, or, when the matching alerts changed meanwhile,
// answers 409 with the new preview and cancels nothing. It takes the right "cancel"
// (and a principal without "others" acts on its own alerts only: the principal filter
// is its own, and an id another principal owns is never matched).
func (in *Ingress) cancelPending(w http.ResponseWriter, r *http.Request) {
	const op = "bulk_cancel"
	bad, ok := in.pendingRequest(w, op)
	if !ok {
		return
	}
	p := principalOf(r)
	if !p.Can(config.RightCancel) && !p.Can(config.RightOthers) {
		in.forbid(w, op, p, "forbidden", "may not cancel alerts: that takes the right %q", config.RightCancel)
		return
	}
	var req BulkCancelRequest
	if !decodeJSON(w, r, &req, true) {
		return
	}
	now := in.deps.Now()
	q := store.PendingQuery{Target: req.Target, Principal: req.Principal, Limit: store.MaxPendingPage}
	var err error
	for _, t := range []struct {
		name, value string
		into        *time.Time
	}{{"dueAfter", req.DueAfter, &q.DueAfter}, {"dueBefore", req.DueBefore, &q.DueBefore}} {
		if t.value == "" {
			continue
		}
		if *t.into, err = ParseWhen(t.value, now); err != nil {
			bad("%s %q: %v", t.name, t.value, err)
			return
		}
	}
	if !p.Can(config.RightOthers) {
		if q.Principal != "" && q.Principal != p.Name {
			in.forbid(w, op, p, "forbidden", "may not cancel the alerts of principal %q: that takes the right %q", q.Principal, config.RightOthers)
			return
		}
		q.Principal = p.Name
	}
	if q.Target == "" && q.Principal == "" && q.DueAfter.IsZero() && q.DueBefore.IsZero() {
		bad("give a filter (target, principal, dueAfter or dueBefore): a bulk cancel never applies to everything scheduled")
		return
	}
	ids, err := store.PendingIDs(r.Context(), in.deps.Pending, q, maxBulkCancel, in.ownedBy(r.Context(), p))
	if err == nil && len(ids) > maxBulkCancel {
		bad("more than %d pending alerts match: narrow the filter", maxBulkCancel)
		return
	}
	if err != nil {
		in.metrics.requests.WithLabelValues(op, "redis").Inc()
		w.Header().Set("Retry-After", "1")
		writeError(w, http.StatusServiceUnavailable, "redis", "the pending alerts could not be read; nothing was cancelled, ask again")
		return
	}
	res := BulkCancelResponse{Matched: len(ids), Set: store.PendingSet(ids)}
	switch {
	case req.Preview:
		res.IDs = ids[:min(len(ids), 10)]
		in.metrics.requests.WithLabelValues(op, "preview").Inc()
		writeJSON(w, http.StatusOK, res)
		return
	case req.Set == "":
		bad("confirm a preview: send {\"preview\": true} with the filter first, then its set")
		return
	case req.Set != res.Set:
		res.IDs = ids[:min(len(ids), 10)]
		res.Error, res.Reason = "the matching alerts changed since the preview: nothing was cancelled; confirm this preview's set to go on", "changed"
		in.metrics.requests.WithLabelValues(op, "changed").Inc()
		writeJSON(w, http.StatusConflict, res)
		return
	}
	res.Results = map[string]int{}
	for _, id := range ids {
		c, err := in.deps.Wheel.Cancel(r.Context(), id)
		if err != nil {
			in.metrics.requests.WithLabelValues(op, "redis").Inc()
			in.deps.Logger.Warn("bulk cancel API: Redis did not answer", "rd_id", id, "cancelled", res.Cancelled, "err", err)
			w.Header().Set("Retry-After", "1")
			writeError(w, http.StatusServiceUnavailable, "redis",
				fmt.Sprintf("cancelled %d of %d before Redis stopped answering; preview again and confirm the rest", res.Cancelled, len(ids)))
			return
		}
		res.Results[c.String()]++
		if c.Cancelled() {
			res.Cancelled++
		}
	}
	in.deps.Logger.Info("bulk cancel", "principal", p.Name, "target", q.Target, "matched", len(ids), "cancelled", res.Cancelled)
	in.metrics.requests.WithLabelValues(op, "ok").Inc()
	writeJSON(w, http.StatusOK, res)
}

// ownedBy keeps, for a principal without the right "others", only the alerts it owns.
func (in *Ingress) ownedBy(ctx context.Context, p config.Principal) func(store.Pending) (bool, error) {
	if p.Can(config.RightOthers) {
		return nil
	}
	return func(a store.Pending) (bool, error) {
		owner, err := in.alertOwner(ctx, a.ID)
		return owner == p.Name, err
	}
}
