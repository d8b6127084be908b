package escalation

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/hex"
	"encoding/json"
	"errors"
	"html/template"
	"log/slog"
	"net/http"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/proxies"
	"github.com/rocketdelay/rocketdelay/store"
)

// ackCookie carries the acknowledgement form's CSRF token (double submit: the page sets
// it and puts the same value in the form; a POST must bring both).
const ackCookie = "rd_ack_csrf"

// maxAckName bounds the name an acknowledgement records; maxAckForm the form's size.
const (
	maxAckName = 64
	maxAckForm = 4 << 10
)

// ErrBadName is the error of a name an acknowledgement cannot record.
var ErrBadName = errors.New("give a name of 1 to 64 letters, digits, spaces and . - _ @ ' : + (it is posted to the chat, so no markup)")

// CheckName checks the name an acknowledgement records: it is posted to the chat, so it
// may hold letters, digits, spaces and . - _ @ ' : + only — nothing that makes a link, a
// mention or a new line of the message. Every operator name (config.ValidOperatorName,
// a sign-in proxy's e-mail such as ana+oncall@corp.com) is one.
func CheckName(by string) error {
	if by == "" || utf8.RuneCountInString(by) > maxAckName || strings.TrimSpace(by) != by {
		return ErrBadName
	}
	for _, r := range by {
		if !unicode.IsLetter(r) && !unicode.IsDigit(r) && r != ' ' && !strings.ContainsRune(".-_@':+", r) {
			return ErrBadName
		}
	}
	return nil
}

// ackPage is opened from a chat app, mostly on a phone: one column, controls large
// enough to tap, nothing wider than the screen.
var ackPage = template.Must(template.New("ack").Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8"><meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}} · rocketdelay</title>
<style>*{box-sizing:border-box}
body{font:16px/1.5 system-ui,-apple-system,"Segoe UI",sans-serif;max-width:32em;margin:0 auto;padding:1em;color:#1c1c1c}
h1{font-size:1.35em;line-height:1.25;margin:.4em 0 .8em}
.alert{border-left:4px solid #c62828;background:#fdf1f1;border-radius:6px;padding:.7em .9em;margin:0 0 1em}
.acked .alert{border-color:#2e7d32;background:#eef7ef}
h2{font-size:1.05em;margin:0 0 .3em;overflow-wrap:anywhere}
.text{white-space:pre-wrap;overflow-wrap:anywhere;max-height:10em;overflow:auto;margin:0;font-size:.95em;color:#333}
.state{color:#555;font-size:.9em;overflow-wrap:anywhere}
label{display:block;font-weight:600;margin:1.2em 0 .3em}
input,button{font:inherit;width:100%;min-height:48px;padding:.5em .75em;border-radius:8px}
input{border:1px solid #8a8a8a}
button{margin-top:.75em;border:0;background:#c62828;color:#fff;font-weight:600}
.done{color:#1b5e20;font-weight:600;font-size:1.1em;overflow-wrap:anywhere}.error{color:#b00020}</style></head>
<body{{if .Acked}} class="acked"{{end}}><h1>{{.Title}}</h1>
{{with .Error}}<p class="error" id="error">{{.}}</p>{{end}}
{{with .Done}}<p class="done" id="done">{{.}}</p>{{end}}
{{with .Episode}}<div class="alert">{{with $.Content.Title}}<h2>{{.}}</h2>{{end}}{{with $.Content.Text}}<p class="text">{{.}}</p>{{end}}</div>
<p class="state" id="state">Episode {{.Key}} · policy {{.Policy}} · <strong>{{.State}}</strong> · {{.Sent}} step(s) sent · started {{$.Started}}</p>{{end}}
{{if .Form}}<form method="post">
<input type="hidden" name="csrf" value="{{.CSRF}}">
<label for="by">Your name</label>
<input id="by" name="by" value="{{.By}}" required maxlength="64" autocomplete="name">
<button id="ack">Acknowledge</button>
<p class="state">This stops the escalation's next steps and tells the chat who is on it.</p>
</form>{{end}}
</body></html>`))

// ackView is what the page shows.
type ackView struct {
	Title, Error, Done, Started, CSRF, By string
	Episode                               *store.Episode
	Content                               Content
	// Acked colours the page as an acknowledged one; Form shows the form.
	Acked, Form bool
}

// episodeView returns the page of episode ep at now, titled title.
func episodeView(title string, ep store.Episode, now time.Time) ackView {
	v := ackView{Title: title, Episode: &ep, Acked: ep.State == store.EpisodeAcked,
		Started: ep.Started.UTC().Format("2006-01-02 15:04:05 UTC") + " (" + max(now.Sub(ep.Started), 0).Round(time.Second).String() + " ago)"}
	_ = json.Unmarshal(ep.Content, &v.Content)
	return v
}

// AckHandler serves the acknowledgement pages at AckPath: GET shows the episode and a
// form asking for a name; POST acknowledges it (the link is the capability; a CSRF token
// from the page is required). The token never reaches the log. The CSRF cookie is Secure
// over HTTPS, also behind one of the trusted proxies that terminates it.
func (e *Escalator) AckHandler(trusted proxies.Trusted, logger *slog.Logger) http.Handler {
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
		now := e.now()
		key, seq, err := e.opts.Links.Open(token, now)
		if err != nil {
			status := http.StatusNotFound
			if errors.Is(err, ErrExpiredLink) {
				status = http.StatusGone
			}
			show(status, ackView{Title: "This link cannot acknowledge", Error: strings.TrimPrefix(err.Error(), "escalation: ")})
			return
		}
		over := func() {
			show(http.StatusNotFound, ackView{Title: "This episode is over", Error: "a newer episode of the group runs, or none does"})
		}
		ep, err := e.episodes.Get(r.Context(), key)
		if err != nil && !errors.Is(err, store.ErrNoEpisode) {
			logger.Warn("acknowledgement page: cannot read the episode", "episode", key, "err", err)
			show(http.StatusServiceUnavailable, ackView{Title: "Try again in a moment", Error: "the episode cannot be read now"})
			return
		}
		if err != nil || ep.Seq != seq {
			over()
			return
		}
		switch r.Method {
		case http.MethodGet:
			switch ep.State {
			case store.EpisodeAcked:
				v := episodeView("Acknowledged", ep, now)
				v.Done = "Already acknowledged by " + ep.AckedBy + "."
				show(http.StatusOK, v)
			case store.EpisodeResolved:
				v := episodeView("Resolved", ep, now)
				v.Done = "It is resolved: nothing to acknowledge."
				show(http.StatusOK, v)
			default:
				v := episodeView("Acknowledge this escalation", ep, now)
				v.Form, v.CSRF = true, newCSRF()
				http.SetCookie(w, &http.Cookie{Name: ackCookie, Value: v.CSRF, Path: AckPath, HttpOnly: true, Secure: trusted.Secure(r),
					SameSite: http.SameSiteStrictMode, MaxAge: 3600})
				show(http.StatusOK, v)
			}
		case http.MethodPost:
			r.Body = http.MaxBytesReader(w, r.Body, maxAckForm) // a form too large has no token: 403
			c, err := r.Cookie(ackCookie)
			if err != nil || c.Value == "" || subtle.ConstantTimeCompare([]byte(c.Value), []byte(r.PostFormValue("csrf"))) != 1 {
				show(http.StatusForbidden, ackView{Title: "Not acknowledged", Error: "the form's token does not match: open the link again"})
				return
			}
			by := strings.TrimSpace(r.PostFormValue("by"))
			if err := CheckName(by); err != nil {
				v := episodeView("Acknowledge this escalation", ep, now)
				v.Form, v.CSRF, v.By, v.Error = true, c.Value, by, err.Error()
				show(http.StatusBadRequest, v)
				return
			}
			end, err := e.Ack(r.Context(), key, seq, by)
			if err != nil {
				// The acknowledgement may be recorded and only its answer lost (Redis cut
				// off after the write): the episode's state says.
				if got, gerr := e.episodes.Get(r.Context(), key); gerr == nil && got.Seq == seq && got.State == store.EpisodeAcked {
					logger.Warn("escalation acknowledged, its answer lost on the way", "episode", key, "err", err)
					end = Ended{Result: "acknowledged", Seq: seq, Sent: got.Sent, By: got.AckedBy}
					if got.AckedBy != by {
						end.Result = "already"
					}
				} else {
					logger.Warn("acknowledgement failed; the page asks to try again", "episode", key, "err", err)
					show(http.StatusServiceUnavailable, ackView{Title: "Not acknowledged yet", Error: "try again in a moment"})
					return
				}
			}
			if got, err := e.episodes.Get(r.Context(), key); err == nil {
				ep = got
			}
			switch end.Result {
			case "acknowledged":
				logger.Info("escalation acknowledged from its link", "episode", key, "seq", seq, "by", by)
				v := episodeView("Acknowledged", ep, now)
				v.Done = "Acknowledged by " + by + ". Its next steps are cancelled, and the chat is told."
				if end.Sent == 0 {
					v.Done = "Acknowledged by " + by + ". Its next steps are cancelled. No step was sent yet, so the chat is not told."
				}
				show(http.StatusOK, v)
			case "already":
				v := episodeView("Acknowledged", ep, now)
				v.Done = "Already acknowledged by " + end.By + "."
				show(http.StatusOK, v)
			case "resolved_before":
				v := episodeView("Resolved", ep, now)
				v.Done = "It was resolved before: nothing to acknowledge."
				show(http.StatusOK, v)
			default: // "none": a newer episode started meanwhile
				over()
			}
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
