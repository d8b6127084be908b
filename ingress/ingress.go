package ingress

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// Paths the Handler serves.
const (
	// AlertsPath is the publish API: POST publishes, DELETE AlertsPath/{id} cancels.
	AlertsPath = "/api/v1/alerts"
	// AlertmanagerPath is the Alertmanager receiver: POST AlertmanagerPath/{target}.
	AlertmanagerPath = "/api/v1/alertmanager"
)

// Publisher stores a publication in RocketMQ; *wire.Producer implements it.
type Publisher interface {
	Publish(ctx context.Context, pub wire.Publication) (wire.Published, error)
}

// Wheel cancels alerts; failed.Canceller implements it (wherever the alert is), and
// *store.WheelStage (in the wheel stage only).
type Wheel interface {
	Cancel(ctx context.Context, id string) (store.CancelResult, error)
}

// Rescheduler moves alerts to a new due time; failed.Rescheduler implements it
// (wherever the alert is).
type Rescheduler interface {
	Reschedule(ctx context.Context, id string, dueAt time.Time) (store.Rescheduled, error)
}

// Escalations run the escalation episodes of the receivers that escalate (?policy=,
// ?delay=); *escalation.Escalator implements it.
type Escalations interface {
	Fire(ctx context.Context, key, policy string, c escalation.Content) (escalation.Fired, error)
	FireCopies(ctx context.Context, key, policy string, c escalation.Content, copies store.Copies) (escalation.Fired, error)
	Resolve(ctx context.Context, key string, c escalation.Content) (escalation.Ended, error)
	ResolveCopies(ctx context.Context, key string, c escalation.Content, copies store.Copies) (escalation.Ended, error)
	Ack(ctx context.Context, key string, seq int64, by string) (escalation.Ended, error)
	Status(ctx context.Context, key string) (escalation.Status, error)
	Live(ctx context.Context, limit int) ([]escalation.Status, error)
}

// Dedupe picks one id for the copies of a notification within a window judged by now;
// *store.Dedupe implements it.
type Dedupe interface {
	Once(ctx context.Context, key, id string, now time.Time, window time.Duration) (string, error)
}

type Deps struct {
	Publisher Publisher
	Wheel     Wheel
	// Rescheduler serves POST /api/v1/alerts/{id}/reschedule; nil answers it 503,
	// disabled.
	Rescheduler Rescheduler
	// Pending serves GET /api/v1/alerts; nil answers it 503, disabled.
	Pending     PendingLister
	Escalations Escalations
	Dedupe      Dedupe
	// Producers records who owns each alert id and episode key, and takes the
	// principals' rates. Required.
	Producers Producers
	// Roster says which targets the other replicas' configurations have: a request for a
	// target only they have is answered 503, not refused for good. Default none.
	Roster Roster
	// Chat checks and renders the bodies of chat targets, by their platform;
	// *sender.Chat implements it.
	Chat Chat
	// Signer signs the principal of every alert published (RD_PRINCIPAL_SIG), so that it
	// waits in its principal's share of a busy target; nil publishes none.
	Signer PrincipalSigner
	Logger *slog.Logger
	// Now is the clock due times are computed by (the service's reference clock).
	Now func() time.Time
}

// PrincipalSigner signs that principal published the alert id for target;
// *escalation.Signer implements it.
type PrincipalSigner interface {
	SignPrincipal(id, target, principal string) string
}

// stamp names p as pub's producer, signed (RD_PRINCIPAL), once pub has its id.
func (in *Ingress) stamp(pub *wire.Publication, p config.Principal) {
	if in.deps.Signer != nil && p.Name != "" {
		pub.Principal, pub.PrincipalSig = p.Name, in.deps.Signer.SignPrincipal(pub.ID, pub.Target, p.Name)
	}
}

// Chat is the part of the chat sender the ways in use.
type Chat interface {
	// Check checks a body for a chat target as its platform would.
	Check(target string, body []byte) error
	// Body is the body a producer publishes to a chat target for m.
	Body(target string, m sender.Message) ([]byte, error)
}

// Ingress serves the HTTP ways in.
type Ingress struct {
	cfg        config.Config
	limits     wire.DueLimits // the consumer's, from cfg
	deps       Deps
	renderers  map[string]*renderer // robot groups' Alertmanager rendering
	principals *principals
	rates      *rates
	metrics    *Metrics
}

// CheckTemplates parses the Alertmanager templates of cfg's robot groups; an unreadable
// or invalid one is an error naming its key.
func CheckTemplates(cfg config.Config) error {
	_, err := renderers(cfg)
	return err
}

func renderers(cfg config.Config) (map[string]*renderer, error) {
	out := map[string]*renderer{}
	for name, t := range cfg.Targets {
		if !t.Chat() {
			continue
		}
		r, err := newRenderer(name, t.Channel(), t.Alertmanager)
		if err != nil {
			return nil, err
		}
		out[name] = r
	}
	return out, nil
}

// New checks cfg's Alertmanager templates (an unreadable or invalid one is an error
// naming its key) and returns the ways in. metrics may come from NewMetrics(nil).
func New(cfg config.Config, deps Deps, metrics *Metrics) (*Ingress, error) {
	rs, err := renderers(cfg)
	if err != nil {
		return nil, err
	}
	if deps.Producers == nil {
		return nil, errors.New("ingress: no Producers: the owners of ids and the principals' rates need them")
	}
	ps, err := newPrincipals(cfg, deps.Logger)
	if err != nil {
		return nil, err
	}
	in := &Ingress{cfg: cfg, deps: deps, renderers: rs, principals: ps, metrics: metrics, rates: newRates(deps.Now),
		limits: wire.DueLimits{Horizon: cfg.Scheduler.Horizon, Dedupe: cfg.Scheduler.DoneTTL}}
	in.deps.Logger = deps.Logger.With("component", "ingress")
	return in, nil
}

// Handler returns the HTTP handler of both ways in, answering JSON:
//
//	POST   /api/v1/alerts                     publish one alert (202 once the broker stored it)
//	GET    /api/v1/alerts                     the pending alerts, earliest due first (pending.go)
//	POST   /api/v1/alerts/cancel              cancel every pending alert a filter matches, after a preview
//	DELETE /api/v1/alerts/{id}                cancel an alert not sent yet
//	POST   /api/v1/alerts/{id}/reschedule     move it to {"at": RFC 3339} or {"in": "90s"}, keeping its id
//	POST   /api/v1/alertmanager/{target}      Alertmanager's webhook (?policy=NAME or ?delay=10m, &sendResolved=false)
//	POST   /api/v1/escalations                start an escalation episode (or update the one that runs)
//	POST   /api/v1/escalations/{key}/resolve  resolve it; …/ack acknowledges it
//	GET    /api/v1/escalations[/{key}]        the live episodes, or one
//
// Every request needs "Authorization: Bearer <token>" of a principal (401 otherwise),
// and gets only what that principal may do (403 otherwise: principals.go), within its
// rate (429); with no principal configured they answer 503, disabled. Errors are {"error": "…", "reason": "…"}:
// 4xx for what can never be delivered as sent, 5xx for what may succeed when sent again.
func (in *Ingress) Handler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("POST "+AlertsPath, in.publish)
	mux.HandleFunc("GET "+AlertsPath, in.listPending)
	mux.HandleFunc("POST "+AlertsPath+"/cancel", in.cancelPending)
	mux.HandleFunc("DELETE "+AlertsPath+"/{id}", in.cancel)
	mux.HandleFunc("POST "+AlertsPath+"/{id}/reschedule", in.reschedule)
	mux.HandleFunc("POST "+AlertmanagerPath+"/{target}", in.alertmanager)
	mux.HandleFunc("POST "+EscalationsPath, in.startEscalation)
	mux.HandleFunc("GET "+EscalationsPath, in.listEscalations)
	mux.HandleFunc("GET "+EscalationsPath+"/{key}", in.showEscalation)
	mux.HandleFunc("POST "+EscalationsPath+"/{key}/{how}", in.endEscalation)
	notFound := func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: "+r.Method+" "+r.URL.Path+"; see docs/api.md, HTTP publish API")
	}
	mux.HandleFunc(AlertsPath+"/", notFound)
	mux.HandleFunc(AlertmanagerPath+"/", notFound)
	mux.HandleFunc(EscalationsPath+"/", notFound)
	api := http.MaxBytesHandler(mux, in.cfg.Ingress.MaxBody)
	receivers := http.MaxBytesHandler(mux, max(in.cfg.Ingress.MaxBody, AlertmanagerMaxBody))
	return in.authenticate(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if strings.HasPrefix(r.URL.Path, AlertmanagerPath+"/") {
			receivers.ServeHTTP(w, r)
			return
		}
		api.ServeHTTP(w, r)
	}))
}

// AlertmanagerMaxBody bounds an Alertmanager notification's body, bytes (ingress.maxBody
// when that is larger). A group is fitted to its platform, never published as it came,
// so it need not fit in one broker message; and Alertmanager drops a notification
// answered 413: a large group would be lost, where it is sent with the alerts that fit.
const AlertmanagerMaxBody = 16 << 20

// decodeJSON reads r's JSON body into v, strictly when strict (unknown fields are
// errors); the body must be one JSON value, in valid UTF-8, and nothing after it. It
// answers the error itself and reports false.
func decodeJSON(w http.ResponseWriter, r *http.Request, v any, strict bool) bool {
	body, err := io.ReadAll(r.Body)
	if err != nil {
		var tooLarge *http.MaxBytesError
		if errors.As(err, &tooLarge) {
			writeError(w, http.StatusRequestEntityTooLarge, "too_large", fmt.Sprintf("the body is over %d bytes (ingress.maxBody)", tooLarge.Limit))
			return false
		}
		writeError(w, http.StatusBadRequest, "bad_json", "the body could not be read: "+err.Error())
		return false
	}
	if !utf8.Valid(body) {
		writeError(w, http.StatusBadRequest, "bad_json", "the body is not valid UTF-8")
		return false
	}
	dec := json.NewDecoder(bytes.NewReader(body))
	if strict {
		dec.DisallowUnknownFields()
	}
	if err := dec.Decode(v); err != nil {
		writeError(w, http.StatusBadRequest, "bad_json", "the body is not the expected JSON: "+err.Error())
		return false
	}
	if _, err := dec.Token(); !errors.Is(err, io.EOF) {
		writeError(w, http.StatusBadRequest, "bad_json", "the body is not the expected JSON: something follows its value")
		return false
	}
	return true
}

type errorBody struct {
	Error  string `json:"error"`
	Reason string `json:"reason"`
}

func writeError(w http.ResponseWriter, code int, reason, msg string) {
	writeJSON(w, code, errorBody{Error: msg, Reason: reason})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}
