package failed

import (
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
)

// The operators' questions and the store's answers, shaped once for the three ways in:
// the `rocketdelay failed` commands, the admin API and the console all read a listing
// with Query.Filter, the statuses to retry with ParseRetryStatus, and turn a store error
// into what an operator reads with Answer.

// Query is a listing of failed_sends as an operator asks for it, every field as typed
// ("" means any; Limit "" the default page).
type Query struct {
	Status, Target, ErrorClass, Since, Until, Limit, After string
}

// QueryParams are the names of Query's fields, in the admin API's query string and the
// console's form (the commands' flags are the same with dashes: --error-class).
var QueryParams = []string{"status", "target", "error_class", "since", "until", "limit", "after"}

// ParamError is a field of a Query that is wrong: Param is its name (QueryParams), Reason
// says what to write instead.
type ParamError struct {
	Param  string
	Reason string
}

func (e *ParamError) Error() string { return e.Param + ": " + e.Reason }

// QueryFromValues reads a Query from the parameters of a request, refusing one it does not
// know.
func QueryFromValues(v url.Values) (Query, error) {
	for key := range v {
		if !slices.Contains(QueryParams, key) {
			return Query{}, fmt.Errorf("unknown query parameter %q: use %s", cell(key, 40), strings.Join(QueryParams, ", "))
		}
	}
	return Query{Status: v.Get("status"), Target: v.Get("target"), ErrorClass: v.Get("error_class"),
		Since: v.Get("since"), Until: v.Get("until"), Limit: v.Get("limit"), After: v.Get("after")}, nil
}

// Filter parses q into the store's filter; relative times count back from now. Its error
// is a *ParamError.
func (q Query) Filter(now time.Time) (store.Filter, error) {
	bad := func(param, format string, args ...any) (store.Filter, error) {
		return store.Filter{}, &ParamError{Param: param, Reason: fmt.Sprintf(format, args...)}
	}
	f := store.Filter{Target: q.Target, ErrorClass: q.ErrorClass}
	var err error
	if f.Status, err = ParseStatus(q.Status); err != nil {
		return bad("status", "%v", err)
	}
	if q.Since != "" {
		if f.Since, err = ParseSince(q.Since, now); err != nil {
			return bad("since", "%v", err)
		}
	}
	if q.Until != "" {
		if f.Until, err = ParseUntil(q.Until); err != nil {
			return bad("until", "%v", err)
		}
	}
	if q.Limit != "" {
		n, err := strconv.Atoi(q.Limit)
		if err != nil || n < 1 || n > store.MaxListLimit {
			return bad("limit", "want a whole number from 1 to %d", store.MaxListLimit)
		}
		f.Limit = n
	}
	if q.After != "" {
		n, err := strconv.ParseInt(q.After, 10, 64)
		if err != nil || n < 1 {
			return bad("after", "want the next-page cursor of a previous listing (a positive row id)")
		}
		f.AfterID = n
	}
	return f, nil
}

// ParseSince reads a since value: an RFC 3339 time, or a duration back from now such as
// 90m, 6h or 3d.
func ParseSince(s string, now time.Time) (time.Time, error) {
	if t, err := time.Parse(time.RFC3339, s); err == nil {
		return t, nil
	}
	d, err := config.ParseDuration(s)
	if err != nil || d <= 0 {
		return time.Time{}, fmt.Errorf("%q is neither an RFC 3339 time (2006-01-02T15:04:05Z) nor a duration back from now (90m, 6h, 3d)", cell(s, 40))
	}
	return now.Add(-d), nil
}

// ParseUntil reads an until value: an RFC 3339 time.
func ParseUntil(s string) (time.Time, error) {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		return time.Time{}, fmt.Errorf("%q is not an RFC 3339 time (2006-01-02T15:04:05Z)", cell(s, 40))
	}
	return t, nil
}

// ParseStatus reads a status filter; "" means any.
func ParseStatus(s string) (store.FailedStatus, error) {
	st := store.FailedStatus(s)
	if s != "" && !st.Valid() {
		return "", fmt.Errorf("unknown status %q: want one of %s", cell(s, 40), names(store.FailedStatuses))
	}
	return st, nil
}

// RetryStatuses are the statuses whose rows can be retried all at once.
var RetryStatuses = []store.FailedStatus{store.StatusDead, store.StatusRejected, store.StatusDiscarded, store.StatusPending}

// ParseRetryStatus reads the status of a retry of every row with it.
func ParseRetryStatus(s string) (store.FailedStatus, error) {
	st := store.FailedStatus(s)
	if !slices.Contains(RetryStatuses, st) {
		return "", fmt.Errorf("status %q cannot be retried: want %s", cell(s, 40), names(RetryStatuses))
	}
	return st, nil
}

func names(statuses []store.FailedStatus) string {
	out := make([]string, len(statuses))
	for i, s := range statuses {
		out[i] = string(s)
	}
	return strings.Join(out, ", ")
}

// Answer is how a store error reaches an operator over HTTP: the status code, a message
// a person can act on that never holds SQL or connection details, and whether the caller
// must log the error (the message hides its cause).
func Answer(err error) (code int, msg string, logIt bool) {
	switch {
	case errors.Is(err, store.ErrNotFound):
		return http.StatusNotFound, "no failed send with this id", false
	case errors.Is(err, store.ErrInvalid):
		// ErrInvalid messages are written for people and hold no SQL.
		msg := err.Error()
		if _, after, ok := strings.Cut(msg, store.ErrInvalid.Error()+": "); ok {
			msg = after
		}
		return http.StatusBadRequest, msg, false
	case errors.Is(err, store.ErrUnavailable):
		return http.StatusServiceUnavailable, "a store (Postgres or Redis) is unavailable; try again shortly", true
	}
	return http.StatusInternalServerError, "internal error; see the server log", true
}
