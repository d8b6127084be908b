package escalation

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/store"
)

// ackCookie carries the acknowledgement form's CSRF token (double submit: the page sets
// it and puts the same value in the form; a POST must bring both).
const ackCookie = "rd_ack_csrf"

// maxAckName bounds the name an acknowledgement records.
const maxAckName = 64

var ackPage = template.Must(template.New("ack").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>rocketdelay · acknowledge</title>
<style>body{font:16px/1.5 system-ui,sans-serif;max-width:36em;margin:2em auto;padding:0 1em}
input,button{font:inherit;padding:.4em}.state{color:#555}.done{color:#0a6b2b}.error{color:#a40000}</style></head>
<body><h1>{{.Title}}</h1>
{{with .Error}}<p class="error">{{.}}</p>{{end}}
{{with .Done}}<p class="done" id="done">{{.}}</p>{{end}}
{{if .Episode}}<p class="state" id="state">Escalation episode {{.Episode.Key}} (policy {{.Episode.Policy}}): <strong>{{.State}}</strong>;
{{.Episode.Sent}} step(s) sent since {{.Started}}.</p>{{end}}
{{if .Form}}<form method="post">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label>Your name <input name="by" id="by" required maxlength="64" autocomplete="name"></label>
<button id="ack">Acknowledge</button>
<p class="state">Acknowledging stops the escalation's next steps and tells the chat who is on it.</p>
</form>{{end}}
</body></html>`))

// ackView is what the page shows.
type ackView struct {
	Title, Error, Done, State, Started, CSRF string
	Episode                                  *store.Episode
	Form                                     bool
}

// AckHandler serves the acknowledgement pages at AckPath: GET shows the episode and a
// form asking for a name; POST acknowledges it (the link is the capability; a CSRF token
// from the page is required).
func (e *Escalator) AckHandler(logger *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Security-Policy", "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'")
		w.Header().Set("Cache-Control", "no-store")
		w.Header().Set("Referrer-Policy", "no-referrer")
		token := strings.TrimPrefix(r.URL.Path, AckPath)
		show := func(status int, v ackView) {
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.WriteHeader(status)
			_ = ackPage.Execute(w, v)
		}
		if e.opts.Links == nil {
			show(http.StatusServiceUnavailable, ackView{Title: "Acknowledgement links are off", Error: "set ingress.publicURL to turn them on"})
			return
		}
		key, seq, err := e.opts.Links.Open(token, e.now())
		if err != nil {
			status := http.StatusNotFound
			if errors.Is(err, ErrExpiredLink) {
				status = http.StatusGone
			}
			show(status, ackView{Title: "This link cannot acknowledge", Error: strings.TrimPrefix(err.Error(), "escalation: ")})
			return
		}
		ep, err := e.episodes.Get(r.Context(), key)
		if err != nil && !errors.Is(err, store.ErrNoEpisode) {
			logger.Warn("acknowledgement page: cannot read the episode", "episode", key, "err", err)
			show(http.StatusServiceUnavailable, ackView{Title: "Try again in a moment", Error: "the episode cannot be read now"})
			return
		}
		if err != nil || ep.Seq != seq {
			show(http.StatusNotFound, ackView{Title: "This episode is over", Error: "a newer episode of the group runs, or none does"})
			return
		}
		v := ackView{Title: "Acknowledge the escalation", Episode: &ep, State: ep.State, Started: ep.Started.UTC().Format(time.RFC3339)}
		switch r.Method {
		case http.MethodGet:
			if ep.State == store.EpisodeAcked {
				v.Done = "Already acknowledged by " + ep.AckedBy + "."
				show(http.StatusOK, v)
				return
			}
			if ep.State == store.EpisodeResolved {
				v.Done = "It is resolved: nothing to acknowledge."
				show(http.StatusOK, v)
				return
			}
			v.Form, v.CSRF = true, newCSRF()
			http.SetCookie(w, &http.Cookie{Name: ackCookie, Value: v.CSRF, Path: AckPath, HttpOnly: true, Secure: r.TLS != nil,
				SameSite: http.SameSiteStrictMode, MaxAge: 3600})
			show(http.StatusOK, v)
		case http.MethodPost:
			c, err := r.Cookie(ackCookie)
			if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf"))) != 1 {
				show(http.StatusForbidden, ackView{Title: "Not acknowledged", Error: "the form's token does not match: open the link again"})
				return
			}
			by := strings.TrimSpace(r.PostFormValue("by"))
			if by == "" || utf8.RuneCountInString(by) > maxAckName || strings.ContainsAny(by, "\r\n\x00") {
				v.Form, v.CSRF, v.Error = true, c.Value, "give your name (at most 64 characters, one line)"
				show(http.StatusBadRequest, v)
				return
			}
			end, err := e.Ack(r.Context(), key, seq, by)
			if err != nil {
				logger.Warn("acknowledgement failed; the page asks to try again", "episode", key, "err", err)
				show(http.StatusServiceUnavailable, ackView{Title: "Not acknowledged yet", Error: "try again in a moment"})
				return
			}
			ep, _ = e.episodes.Get(r.Context(), key)
			v.Episode, v.State = &ep, ep.State
			switch end.Result {
			case "acknowledged":
				v.Done = "Acknowledged by " + by + ". The next steps are cancelled and the chat is told."
			case "already":
				v.Done = "Already acknowledged by " + end.By + "."
			default:
				v.Done = "It had ended before: " + end.Result + "."
			}
			show(http.StatusOK, v)
		default:
			w.Header().Set("Allow", "GET, POST")
			http.Error(w, "method not allowed", http.StatusMethodNotAllowed)
		}
	})
}

func newCSRF() string {
	b := make([]byte, 16)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}
