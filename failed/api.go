package failed

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Store is the part of the failed_sends table the operators' API and commands use;
// *store.FailedSends implements it.
type Store interface {
	List(ctx context.Context, f store.Filter) ([]store.FailedSend, int64, error)
	Get(ctx context.Context, id int64) (store.FailedSend, error)
	Stats(ctx context.Context) (store.FailedStats, error)
	Retry(ctx context.Context, ids []int64) ([]int64, error)
	RetryWhere(ctx context.Context, status store.FailedStatus, target string) ([]int64, error)
	Discard(ctx context.Context, ids []int64, reason string) ([]int64, error)
}

// APIPrefix is the path under which Handler serves; mount Handler on both APIPrefix and
// APIPrefix + "/".
const APIPrefix = "/api/v1/failed"

// maxBody bounds the JSON body of a POST.
const maxBody = 1 << 20

// Handler returns the admin HTTP API for operators, all answers JSON:
//
//	GET  /api/v1/failed              list; query status, target, error_class, since, until, limit, after
//	GET  /api/v1/failed/stats        counts by status, target, error class; oldest pending
//	GET  /api/v1/failed/{id}         one row
//	POST /api/v1/failed/{id}/retry   retry one row now
//	POST /api/v1/failed/retry        body {"ids":[…]} or {"status":"dead","target":"…"}
//	POST /api/v1/failed/discard      body {"ids":[…],"reason":"…"}
//
// Every request needs "Authorization: Bearer <token>" (401 otherwise); with no token
// configured the API answers 503, disabled. Errors are {"error": "…"} with a message a
// person can act on; a store failure is logged and answered with a generic message,
// never with SQL or connection details. Rows name their target's kind and destination
// as targets describes them.
func Handler(fs Store, targets Targets, logger *slog.Logger, token config.Secret) http.Handler {
	a := &api{store: fs, targets: targets, logger: logger.With("component", "admin-api"), now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+APIPrefix, a.list)
	mux.HandleFunc("GET "+APIPrefix+"/{$}", a.list)
	mux.HandleFunc("GET "+APIPrefix+"/stats", a.stats)
	mux.HandleFunc("GET "+APIPrefix+"/{id}", a.get)
	mux.HandleFunc("POST "+APIPrefix+"/{id}/retry", a.retryOne)
	mux.HandleFunc("POST "+APIPrefix+"/retry", a.retry)
	mux.HandleFunc("POST "+APIPrefix+"/discard", a.discard)
	mux.HandleFunc(APIPrefix+"/", func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "no such endpoint: "+r.Method+" "+r.URL.Path+"; see docs/api.md, Failed sends")
	})
	return authenticate(token, mux)
}

// authenticate requires the bearer token on every request.
func authenticate(token config.Secret, next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if token == "" {
			writeError(w, http.StatusServiceUnavailable,
				"the admin API is disabled: set admin.token in the config (or ROCKETDELAY_ADMIN_TOKEN) to enable it")
			return
		}
		got, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
		if !ok || !token.Matches(strings.TrimSpace(got)) {
			w.Header().Set("WWW-Authenticate", `Bearer realm="rocketdelay admin"`)
			writeError(w, http.StatusUnauthorized, "missing or wrong bearer token (Authorization: Bearer <admin.token>)")
			return
		}
		next.ServeHTTP(w, r.WithContext(store.WithAuthor(r.Context(), "admin"))) // what it retries or discards is the admin's
	})
}

type api struct {
	store   Store
	targets Targets
	logger  *slog.Logger
	now     func() time.Time
}

func (a *api) list(w http.ResponseWriter, r *http.Request) {
	q, err := QueryFromValues(r.URL.Query())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	f, err := q.Filter(a.now())
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error())
		return
	}
	rows, next, err := a.store.List(r.Context(), f)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewPage(rows, next, a.targets))
}

func (a *api) get(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	row, err := a.store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewView(row, a.targets))
}

func (a *api) stats(w http.ResponseWriter, r *http.Request) {
	st, err := a.store.Stats(r.Context())
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	writeJSON(w, http.StatusOK, NewStatsView(st, a.now()))
}

// Changed is the answer of a retry or discard: the ids that changed, ascending, and how
// many; of the rows named, those that exist and did not change (delivered, cancelled or
// discarded already), and those that do not exist. With any of the latter the answer is
// 404 and Error says which, though the others changed.
type Changed struct {
	Error     string  `json:"error,omitempty"`
	IDs       []int64 `json:"ids"`
	Count     int     `json:"count"`
	Unchanged []int64 `json:"unchanged,omitempty"`
	NotFound  []int64 `json:"notFound,omitempty"`
}

func newChanged(ids []int64) Changed {
	if ids == nil {
		ids = []int64{}
	}
	return Changed{IDs: ids, Count: len(ids)}
}

// answerChanged answers a retry or discard (verb) of the rows asked, of which changed
// changed: 200, or 404 when a row asked does not exist.
func (a *api) answerChanged(w http.ResponseWriter, r *http.Request, verb string, asked, changed []int64) {
	out := newChanged(changed)
	for _, id := range asked {
		if slices.Contains(changed, id) || slices.Contains(out.Unchanged, id) || slices.Contains(out.NotFound, id) {
			continue
		}
		switch _, err := a.store.Get(r.Context(), id); {
		case errors.Is(err, store.ErrNotFound):
			out.NotFound = append(out.NotFound, id)
		case err != nil:
			a.storeError(w, r, err)
			return
		default:
			out.Unchanged = append(out.Unchanged, id)
		}
	}
	if len(out.NotFound) == 0 {
		writeJSON(w, http.StatusOK, out)
		return
	}
	out.Error = fmt.Sprintf("no failed send has the row id%s %s; the others named were %s", map[bool]string{true: "s"}[len(out.NotFound) > 1],
		joinIDs(out.NotFound), verb)
	writeJSON(w, http.StatusNotFound, out)
}

func joinIDs(ids []int64) string {
	parts := make([]string, len(ids))
	for i, id := range ids {
		parts[i] = strconv.FormatInt(id, 10)
	}
	return strings.Join(parts, ", ")
}

func (a *api) retryOne(w http.ResponseWriter, r *http.Request) {
	id, ok := pathID(w, r)
	if !ok {
		return
	}
	row, err := a.store.Get(r.Context(), id)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	ids, err := a.store.Retry(r.Context(), []int64{id})
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	if len(ids) == 0 {
		msg := fmt.Sprintf("failed send %d was delivered already; there is nothing to retry", id)
		if row.Status == store.StatusCancelled {
			msg = fmt.Sprintf("failed send %d was cancelled %s; it is never sent again", id, cancelledBy(row))
		}
		writeError(w, http.StatusConflict, msg)
		return
	}
	a.logger.Info("operator retried failed sends", "ids", ids, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, newChanged(ids))
}

// RetryRequest is the body of POST /api/v1/failed/retry: either IDs, or Status (and
// optionally Target) to retry every row with that status.
type RetryRequest struct {
	IDs    []int64 `json:"ids"`
	Status string  `json:"status"`
	Target string  `json:"target"`
}

func (a *api) retry(w http.ResponseWriter, r *http.Request) {
	var req RetryRequest
	if !decodeBody(w, r, &req) {
		return
	}
	var ids []int64
	var err error
	switch {
	case len(req.IDs) > 0 && (req.Status != "" || req.Target != ""):
		writeError(w, http.StatusBadRequest, `give either "ids" or "status" (with an optional "target"), not both`)
		return
	case len(req.IDs) > 0:
		if !validIDs(w, req.IDs) {
			return
		}
		ids, err = a.store.Retry(r.Context(), req.IDs)
		if err == nil {
			a.logger.Info("operator retried failed sends", "ids", ids, "remote", r.RemoteAddr)
			a.answerChanged(w, r, "retried", req.IDs, ids)
			return
		}
	case req.Status != "":
		st, perr := ParseRetryStatus(req.Status)
		if perr != nil {
			writeError(w, http.StatusBadRequest, perr.Error())
			return
		}
		ids, err = a.store.RetryWhere(r.Context(), st, req.Target)
	default:
		writeError(w, http.StatusBadRequest, `give "ids" (a list of row ids) or "status" (dead, rejected, discarded or pending)`)
		return
	}
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.logger.Info("operator retried failed sends", "ids", ids, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, newChanged(ids))
}

// DiscardRequest is the body of POST /api/v1/failed/discard.
type DiscardRequest struct {
	IDs    []int64 `json:"ids"`
	Reason string  `json:"reason"`
}

func (a *api) discard(w http.ResponseWriter, r *http.Request) {
	var req DiscardRequest
	if !decodeBody(w, r, &req) {
		return
	}
	if len(req.IDs) == 0 {
		writeError(w, http.StatusBadRequest, `"ids" is required: the row ids to discard`)
		return
	}
	if !validIDs(w, req.IDs) {
		return
	}
	if strings.TrimSpace(req.Reason) == "" {
		writeError(w, http.StatusBadRequest, `"reason" is required: say why these alerts are given up`)
		return
	}
	ids, err := a.store.Discard(r.Context(), req.IDs, req.Reason)
	if err != nil {
		a.storeError(w, r, err)
		return
	}
	a.logger.Info("operator discarded failed sends", "ids", ids, "reason", req.Reason, "remote", r.RemoteAddr)
	a.answerChanged(w, r, "discarded", req.IDs, ids)
}

// storeError answers a store error without its text, which is logged instead.
func (a *api) storeError(w http.ResponseWriter, r *http.Request, err error) {
	if r.Context().Err() != nil {
		return // the client went away; nobody reads the answer
	}
	code, msg, logIt := Answer(err)
	if logIt {
		a.logger.Error("admin API: store error", "path", r.URL.Path, "err", err)
	}
	writeError(w, code, msg)
}

func pathID(w http.ResponseWriter, r *http.Request) (int64, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id < 1 {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("%q is not a row id: want a positive whole number", cell(r.PathValue("id"), 40)))
		return 0, false
	}
	return id, true
}

func validIDs(w http.ResponseWriter, ids []int64) bool {
	if len(ids) > store.MaxListLimit {
		writeError(w, http.StatusBadRequest, fmt.Sprintf("at most %d ids per request", store.MaxListLimit))
		return false
	}
	for _, id := range ids {
		if id < 1 {
			writeError(w, http.StatusBadRequest, fmt.Sprintf("%d is not a row id: ids are positive", id))
			return false
		}
	}
	return true
}

func decodeBody(w http.ResponseWriter, r *http.Request, v any) bool {
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, maxBody))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		msg := "the body must be a JSON object"
		var syn *json.SyntaxError
		var typ *json.UnmarshalTypeError
		var tooBig *http.MaxBytesError
		switch {
		case errors.Is(err, io.EOF):
			msg = "the body is empty: " + msg
		case errors.As(err, &syn):
			msg = fmt.Sprintf("the body is not valid JSON (at byte %d)", syn.Offset)
		case errors.As(err, &typ):
			msg = fmt.Sprintf("field %q has the wrong type: want %s", typ.Field, typ.Type)
		case errors.As(err, &tooBig):
			msg = fmt.Sprintf("the body is larger than %d bytes", maxBody)
		case strings.HasPrefix(err.Error(), "json: unknown field "):
			msg = "unknown field " + strings.TrimPrefix(err.Error(), "json: unknown field ")
		}
		writeError(w, http.StatusBadRequest, msg)
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "the body must be one JSON object: something follows it")
		return false
	}
	return true
}

// apiError is the body of every error answer.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, msg string) {
	writeJSON(w, code, apiError{Error: msg})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json; charset=utf-8")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	_ = WriteJSON(w, v)
}

// AlertsPath is where InspectHandler serves: GET AlertsPath/{id}.
const AlertsPath = "/api/v1/alerts"

// InspectHandler returns the admin API's answer to "where is my alert?":
//
//	GET /api/v1/alerts/{id}   the alert's state, history and failed_sends rows (a Report)
//
// with the same bearer token and errors as Handler. (POST and DELETE on /api/v1/alerts
// are the publish API, with the ingest token.)
func InspectHandler(in Inspector, logger *slog.Logger, token config.Secret) http.Handler {
	a := &api{logger: logger.With("component", "admin-api"), now: time.Now}
	mux := http.NewServeMux()
	mux.HandleFunc("GET "+AlertsPath+"/{id}", func(w http.ResponseWriter, r *http.Request) {
		id := r.PathValue("id")
		if err := wire.CheckID(id); err != nil {
			writeError(w, http.StatusBadRequest, err.Error())
			return
		}
		rep, err := in.Inspect(r.Context(), id)
		if err != nil {
			a.storeError(w, r, err)
			return
		}
		writeJSON(w, http.StatusOK, rep)
	})
	return authenticate(token, mux)
}
