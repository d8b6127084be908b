package ingress

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"regexp"
	"strconv"
	"strings"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/escalation"
	"github.com/rocketdelay/rocketdelay/store"
)

// EscalationsPath is the escalation API: start, resolve, acknowledge and list episodes.
const EscalationsPath = "/api/v1/escalations"

// StartRequest is the body of POST /api/v1/escalations.
type StartRequest struct {
	// Key names the episode's group: while an episode of the key runs, starting it again
	// updates what its steps say. 1 to 200 of A–Z a–z 0–9 . _ : -. Required.
	Key string `json:"key"`
	// Policy names the escalation policy (escalations.NAME). Required.
	Policy string `json:"policy"`
	// Title and Text are what the steps say, markdown (DingTalk's notification text, a
	// Feishu card's header: the title). Text is required.
	Title string `json:"title,omitempty"`
	Text  string `json:"text"`
}

// EndRequest is the body of POST /api/v1/escalations/{key}/resolve and …/ack.
type EndRequest struct {
	// Title and Text are a resolve's message to the chat, sent when a step was; none
	// when both are empty.
	Title string `json:"title,omitempty"`
	Text  string `json:"text,omitempty"`
	// By is who acknowledges (…/ack): required, one line, at most 64 characters.
	By string `json:"by,omitempty"`
	// Seq is the episode an acknowledgement is for; default the one that runs.
	Seq int64 `json:"seq,omitempty"`
}

// EpisodeResponse is the answer of a start, a resolve or an acknowledgement.
type EpisodeResponse struct {
	Key string `json:"key"`
	Seq int64  `json:"seq"`
	// Result: a start is started, updated or acknowledged (absorbed: someone is on it);
	// a resolve or an acknowledgement is resolved, acknowledged, or already (it had ended
	// so; by is who acknowledged).
	Result string `json:"result"`
	// Sent counts the steps sent before the episode ended.
	Sent int    `json:"sent,omitempty"`
	By   string `json:"by,omitempty"`
}

var episodeKey = regexp.MustCompile(`^[A-Za-z0-9._:-]{1,200}$`)

func checkEpisodeKey(key string) error {
	if !episodeKey.MatchString(key) {
		return fmt.Errorf("key %q is not an episode key: 1 to 200 of A–Z a–z 0–9 . _ : -", key)
	}
	return nil
}

// startEscalation serves POST /api/v1/escalations.
func (in *Ingress) startEscalation(w http.ResponseWriter, r *http.Request) {
	var req StartRequest
	if !decodeJSON(w, r, &req, true) {
		in.metrics.requests.WithLabelValues("escalation_start", "bad_json").Inc()
		return
	}
	bad := func(reason, msg string) {
		in.metrics.requests.WithLabelValues("escalation_start", reason).Inc()
		writeError(w, http.StatusBadRequest, reason, msg)
	}
	if err := checkEpisodeKey(req.Key); err != nil {
		bad("bad_key", err.Error())
		return
	}
	if strings.HasPrefix(req.Key, amEpisodePrefix) {
		bad("bad_key", fmt.Sprintf("key %q starts with %q: those are the Alertmanager receiver's episodes, started by its notifications", req.Key, amEpisodePrefix))
		return
	}
	if _, ok := in.cfg.Escalations[req.Policy]; !ok {
		if in.policyElsewhere(w, r, "escalation_start", req.Policy) {
			return
		}
		bad("unknown_policy", fmt.Sprintf("policy %q is not an escalation policy of the configuration (escalations)", req.Policy))
		return
	}
	if strings.TrimSpace(req.Text) == "" {
		bad("bad_request", "text is required: what the steps say")
		return
	}
	if why := contentTooLong(req.Title, req.Text); why != "" {
		bad("bad_request", why)
		return
	}
	p := principalOf(r)
	if reason, why := in.mayEscalate(p, req.Policy); reason != "" {
		in.forbid(w, "escalation_start", p, reason, "%s", why)
		return
	}
	if reason, why := mayMention(p, req.Title, req.Text); reason != "" {
		in.forbid(w, "escalation_start", p, reason, "%s", why)
		return
	}
	owner, err := in.deps.Producers.Own(r.Context(), store.OwnEpisode, req.Key, p.Name, episodeOwnerTTL)
	if err != nil {
		in.unavailableRedis(w, "escalation_start", req.Key, err)
		return
	}
	if !owns(p, owner) {
		in.forbid(w, "escalation_start", p, "foreign_key", "episode %q is another principal's", req.Key)
		return
	}
	if !in.mayOpenEpisode(w, r, "escalation_start", p, req.Key) {
		return
	}
	f, err := in.deps.Escalations.Fire(r.Context(), req.Key, req.Policy, escalation.Content{Title: req.Title, Text: req.Text})
	if err == nil && f.Result == "busy" {
		err = errBusy
	}
	if in.unavailable(w, "escalation_start", err) {
		return
	}
	in.metrics.requests.WithLabelValues("escalation_start", f.Result).Inc()
	code := http.StatusOK
	if f.Result == "started" {
		code = http.StatusCreated
	}
	writeJSON(w, code, EpisodeResponse{Key: req.Key, Seq: f.Seq, Result: f.Result})
}

// endEscalation serves POST /api/v1/escalations/{key}/resolve and …/ack.
func (in *Ingress) endEscalation(w http.ResponseWriter, r *http.Request) {
	key, how := r.PathValue("key"), r.PathValue("how")
	op := "escalation_" + how
	if how != "resolve" && how != "ack" {
		writeError(w, http.StatusNotFound, "not_found", "no such endpoint: POST "+r.URL.Path+" (resolve or ack)")
		return
	}
	var req EndRequest
	if r.ContentLength != 0 && !decodeJSON(w, r, &req, true) {
		in.metrics.requests.WithLabelValues(op, "bad_json").Inc()
		return
	}
	if err := checkEpisodeKey(key); err != nil {
		in.metrics.requests.WithLabelValues(op, "bad_key").Inc()
		writeError(w, http.StatusBadRequest, "bad_key", err.Error())
		return
	}
	if !in.episodeOwnedBy(w, r, op, principalOf(r), key) {
		return
	}
	if reason, why := mayMention(principalOf(r), req.Title, req.Text); reason != "" {
		in.forbid(w, op, principalOf(r), reason, "%s", why)
		return
	}
	if why := contentTooLong(req.Title, req.Text); why != "" {
		in.metrics.requests.WithLabelValues(op, "bad_request").Inc()
		writeError(w, http.StatusBadRequest, "bad_request", why)
		return
	}
	var end escalation.Ended
	var err error
	if how == "resolve" {
		end, err = in.deps.Escalations.Resolve(r.Context(), key, escalation.Content{Title: req.Title, Text: req.Text})
	} else {
		by := strings.TrimSpace(req.By)
		if err := escalation.CheckName(by); err != nil {
			in.metrics.requests.WithLabelValues(op, "bad_request").Inc()
			writeError(w, http.StatusBadRequest, "bad_request", "by: "+err.Error())
			return
		}
		seq := req.Seq
		if seq == 0 {
			st, gerr := in.deps.Escalations.Status(r.Context(), key)
			if gerr != nil && !errors.Is(gerr, store.ErrNoEpisode) {
				err = gerr
			}
			seq = st.Seq
		}
		if err == nil {
			end, err = in.deps.Escalations.Ack(r.Context(), key, seq, by)
		}
	}
	if in.unavailable(w, op, err) {
		return
	}
	in.metrics.requests.WithLabelValues(op, end.Result).Inc()
	switch end.Result {
	case "none":
		writeError(w, http.StatusNotFound, "no_episode", fmt.Sprintf("no episode of %q runs (or the acknowledgement is for an older one)", key))
	case "resolved_before":
		writeError(w, http.StatusConflict, "resolved_before", fmt.Sprintf("episode %d of %q was resolved before: nothing to acknowledge", end.Seq, key))
	default:
		writeJSON(w, http.StatusOK, EpisodeResponse{Key: key, Seq: end.Seq, Result: end.Result, Sent: end.Sent, By: end.By})
	}
}

// showEscalation serves GET /api/v1/escalations/{key}: the episode, ended or not.
func (in *Ingress) showEscalation(w http.ResponseWriter, r *http.Request) {
	key := r.PathValue("key")
	if err := checkEpisodeKey(key); err != nil {
		writeError(w, http.StatusBadRequest, "bad_key", err.Error())
		return
	}
	if !in.episodeOwnedBy(w, r, "escalation_show", principalOf(r), key) {
		return
	}
	st, err := in.deps.Escalations.Status(r.Context(), key)
	if errors.Is(err, store.ErrNoEpisode) {
		writeError(w, http.StatusNotFound, "no_episode", fmt.Sprintf("no episode of %q (an ended one is kept 7 days)", key))
		return
	}
	if in.unavailable(w, "escalation_show", err) {
		return
	}
	owner, err := in.deps.Producers.Owner(r.Context(), store.OwnEpisode, key)
	if in.unavailable(w, "escalation_show", err) {
		return
	}
	writeJSON(w, http.StatusOK, struct {
		escalation.Status
		// Principal started the episode (through the API or an Alertmanager receiver).
		Principal string `json:"principal,omitempty"`
	}{st, owner})
}

// listEscalations serves GET /api/v1/escalations?limit=N: the live episodes (running or
// acknowledged, not resolved), the oldest first.
func (in *Ingress) listEscalations(w http.ResponseWriter, r *http.Request) {
	limit := 100
	if v := r.URL.Query().Get("limit"); v != "" {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > 1000 {
			writeError(w, http.StatusBadRequest, "bad_request", fmt.Sprintf("limit=%q is not a number from 1 to 1000", v))
			return
		}
		limit = n
	}
	p := principalOf(r)
	if !p.Can(config.RightEscalate) && !p.Can(config.RightOthers) {
		in.forbid(w, "escalation_list", p, "forbidden", "may not list escalations: that takes the right \"escalate\"")
		return
	}
	live, err := in.deps.Escalations.Live(r.Context(), limit)
	if err == nil && !p.Can(config.RightOthers) {
		live, err = in.ownEpisodes(r.Context(), p, live)
	}
	if in.unavailable(w, "escalation_list", err) {
		return
	}
	writeJSON(w, http.StatusOK, map[string]any{"episodes": live})
}

// ownEpisodes are the episodes of live that p owns.
func (in *Ingress) ownEpisodes(ctx context.Context, p config.Principal, live []escalation.Status) ([]escalation.Status, error) {
	out := live[:0:0]
	for _, st := range live {
		owner, err := in.deps.Producers.Owner(ctx, store.OwnEpisode, st.Key)
		if err != nil {
			return nil, err
		}
		if owner == p.Name {
			out = append(out, st)
		}
	}
	return out, nil
}

// unavailable answers err, when there is one, as 503: a Redis or broker failure, or an
// episode still being wound up, all of which succeed when sent again.
func (in *Ingress) unavailable(w http.ResponseWriter, op string, err error) bool {
	if err == nil {
		return false
	}
	reason, msg := "unavailable", "not done; send it again: "+err.Error()
	if errors.Is(err, errBusy) {
		reason, msg = "busy", "the key's last episode is still being wound up; send it again in a moment"
	}
	in.metrics.requests.WithLabelValues(op, reason).Inc()
	in.deps.Logger.Warn("escalation request not done; the caller sends it again", "op", op, "err", err)
	w.Header().Set("Retry-After", "1")
	writeError(w, http.StatusServiceUnavailable, reason, msg)
	return true
}

// The longest title and text an escalation's pages and resolution may say: within what
// every chat platform takes as one message split into parts, with room for what a step
// adds (its header, its acknowledge link). A longer one would be refused by the platform
// when published, and retried by the outbox for ever.
const (
	maxEscalationTitle = 256
	maxEscalationText  = 16 << 10
)

// contentTooLong says why title and text are too long for an escalation, "" when not.
func contentTooLong(title, text string) string {
	switch {
	case len(title) > maxEscalationTitle:
		return fmt.Sprintf("title is %d bytes; at most %d are accepted", len(title), maxEscalationTitle)
	case len(text) > maxEscalationText:
		return fmt.Sprintf("text is %d bytes; at most %d are accepted", len(text), maxEscalationText)
	}
	return ""
}
