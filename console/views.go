package console

import (
	"bytes"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"time"
	"unicode/utf8"

	"github.com/yuin/goldmark"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/failed"
	"github.com/rocketdelay/rocketdelay/sender"
	"github.com/rocketdelay/rocketdelay/sender/platforms"
	"github.com/rocketdelay/rocketdelay/store"
)

// pageSize is how many rows a page of the list shows.
const pageSize = 50

// list shows the failed sends a filter selects, a page at a time, with the stats.
func (c *Console) list(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	query := failed.Query{Status: q.Get("status"), Target: q.Get("target"), ErrorClass: q.Get("error_class"),
		Since: q.Get("since"), Until: q.Get("until"), After: q.Get("after"), Limit: strconv.Itoa(pageSize)}
	f, err := query.Filter(c.now())
	if perr := (*failed.ParamError)(nil); errors.As(err, &perr) {
		c.fail(w, r, http.StatusBadRequest, "The filter's "+strings.ReplaceAll(perr.Param, "_", " ")+" is wrong: "+perr.Reason+".")
		return
	}
	rows, next, err := c.failed.List(r.Context(), f)
	if err != nil {
		c.storeFail(w, r, "list the failed sends", err)
		return
	}
	st, err := c.failed.Stats(r.Context())
	if err != nil {
		c.storeFail(w, r, "count the failed sends", err)
		return
	}
	var nextURL string
	if next != 0 {
		nq := url.Values{}
		for k, v := range q {
			nq[k] = v
		}
		nq.Set("after", strconv.FormatInt(next, 10))
		nextURL = Prefix + "failed?" + nq.Encode()
	}
	bulk := url.Values{}
	for _, k := range []string{"status", "target", "error_class", "since", "until"} {
		if v := q.Get(k); v != "" {
			bulk.Set(k, v)
		}
	}
	c.render(w, r, http.StatusOK, "list", map[string]any{
		"Rows": rows, "Next": nextURL, "Filter": q, "Statuses": store.FailedStatuses, "Bulk": template.URL(bulk.Encode()), // encoded by url.Values: safe in an href
		"Stats": statsView(st, c.now()), "Flash": q.Get("done"),
	})
}

// bar is one bar of the stats chart.
type bar struct {
	Label string
	Count int64
	Width int // percent of the largest
}

type stats struct {
	ByStatus, ByTarget, ByClass []bar
	OldestPending               string
}

// statsView draws the counts failed shapes (failed.NewStatsView) as bars, largest first.
func statsView(st store.FailedStats, now time.Time) stats {
	bars := func(m map[string]int64) []bar {
		var out []bar
		var top int64
		for k, v := range m {
			out = append(out, bar{Label: k, Count: v})
			top = max(top, v)
		}
		slices.SortFunc(out, func(a, b bar) int {
			if a.Count != b.Count {
				return int(b.Count - a.Count)
			}
			return strings.Compare(a.Label, b.Label)
		})
		for i := range out {
			if top > 0 {
				out[i].Width = int((out[i].Count*100/top+2)/5) * 5 // a .wN class of style.css
			}
		}
		return out
	}
	sv := failed.NewStatsView(st, now)
	v := stats{ByStatus: bars(sv.ByStatus), ByTarget: bars(sv.ByTarget), ByClass: bars(sv.ByErrorClass), OldestPending: "none pending"}
	if sv.OldestPending != nil {
		v.OldestPending = (time.Duration(sv.OldestPendingAgeSeconds) * time.Second).String()
	}
	return v
}

// detail shows one row: its body as its platform would show it, its attempts and errors.
func (c *Console) detail(w http.ResponseWriter, r *http.Request) {
	row, ok := c.row(w, r)
	if !ok {
		return
	}
	dest := c.targets.Describe(row)
	var b *body
	if dest.Kind != config.KindTopic {
		b = renderBody(row.Payload, dest.Kind) // a topic target's body is any bytes, not a chat message
	}
	c.render(w, r, http.StatusOK, "detail", map[string]any{"Row": row, "Body": b, "Raw": rawBody(row.Payload, dest.Kind),
		"Destination": dest, "Flash": r.URL.Query().Get("done")})
}

func (c *Console) row(w http.ResponseWriter, r *http.Request) (store.FailedSend, bool) {
	id, err := strconv.ParseInt(r.PathValue("id"), 10, 64)
	if err != nil || id <= 0 {
		c.fail(w, r, http.StatusNotFound, "There is no such failed send.")
		return store.FailedSend{}, false
	}
	row, err := c.failed.Get(r.Context(), id)
	if err != nil {
		c.storeFail(w, r, "read the failed send", err)
		return store.FailedSend{}, false
	}
	return row, true
}

// body is a payload as the console shows it.
type body struct {
	Kind  string        // text, markdown, or the msgtype shown as JSON
	Title string        // markdown's title
	Text  string        // text content, or JSON
	HTML  template.HTML // markdown rendered without raw HTML
	Error string        // why the payload is not a valid body of its platform
}

// renderBody shows text as text, markdown rendered (goldmark, which leaves raw HTML
// out, so a <script> in an alert stays inert), and the other message types as JSON. The
// body is read by its target's platform (a row whose target is unknown as DingTalk's).
func renderBody(payload []byte, kind string) *body {
	p, ok := platforms.Of(kind)
	if !ok {
		p, _ = platforms.Of(config.KindDingTalk)
	}
	m, err := p.New("").Parse(payload)
	if err != nil {
		return &body{Kind: "raw", Text: string(payload), Error: err.Error()}
	}
	switch m.Format {
	case sender.FormatText:
		return &body{Kind: "text", Text: m.Text}
	case sender.FormatMarkdown:
		var b bytes.Buffer
		if err := goldmark.Convert([]byte(m.Text), &b); err != nil {
			return &body{Kind: "raw", Text: m.Text, Error: "markdown: " + err.Error()}
		}
		return &body{Kind: "markdown", Title: m.Title, HTML: template.HTML(b.String())} // goldmark escapes; raw HTML off
	}
	var j bytes.Buffer
	if json.Indent(&j, payload, "", "  ") != nil {
		j.Reset()
		j.Write(payload)
	}
	return &body{Kind: m.Type, Text: j.String()}
}

// raw is a topic target's body as the console shows it: its bytes, as text when they
// are UTF-8, else base64.
type raw struct {
	Size   int
	Text   string
	Base64 bool
}

// rawBody returns the body of a topic target's row (kind config.KindTopic); nil for
// other kinds, whose body is a chat platform's message.
func rawBody(payload []byte, kind string) *raw {
	if kind != config.KindTopic {
		return nil
	}
	if utf8.Valid(payload) {
		return &raw{Size: len(payload), Text: string(payload)}
	}
	return &raw{Size: len(payload), Text: base64.StdEncoding.EncodeToString(payload), Base64: true}
}

// actions are what a row can be asked to do.
var actions = map[string]string{"retry": "Retry", "discard": "Discard"}

// confirm shows the confirmation form of an action, with a reason field.
func (c *Console) confirm(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if _, ok := actions[action]; !ok {
		c.fail(w, r, http.StatusNotFound, "There is no page "+r.URL.Path+".")
		return
	}
	row, ok := c.row(w, r)
	if !ok {
		return
	}
	c.render(w, r, http.StatusOK, "confirm", map[string]any{"Row": row, "Action": action, "Verb": actions[action]})
}

// act carries out a confirmed retry or discard.
func (c *Console) act(w http.ResponseWriter, r *http.Request) {
	action := r.PathValue("action")
	if _, ok := actions[action]; !ok {
		c.fail(w, r, http.StatusNotFound, "There is no such action.")
		return
	}
	row, ok := c.row(w, r)
	if !ok {
		return
	}
	reason := strings.TrimSpace(r.PostForm.Get("reason"))
	var done []int64
	var err error
	switch action {
	case "retry":
		done, err = c.failed.Retry(store.WithAuthor(r.Context(), operatorOf(r)), []int64{row.ID})
	case "discard":
		if reason == "" {
			c.render(w, r, http.StatusBadRequest, "confirm", map[string]any{"Row": row, "Action": action, "Verb": actions[action],
				"Error": "Say why the alert is discarded: the reason is kept with the row."})
			return
		}
		done, err = c.failed.Discard(store.WithAuthor(r.Context(), operatorOf(r)), []int64{row.ID}, reason)
	}
	if err != nil {
		c.storeFail(w, r, action+" the failed send", err)
		return
	}
	msg := fmt.Sprintf("%s: row %d", actions[action], row.ID)
	if len(done) == 0 {
		msg = fmt.Sprintf("Nothing to %s: row %d is %s.", action, row.ID, row.Status)
	}
	c.logger.Info("console: "+action, "id", row.ID, "rd_id", row.MessageID, "reason", reason, "changed", len(done) > 0, "by", operatorOf(r), "client", c.access.Proxies.Client(r))
	http.Redirect(w, r, pagePath("failed", row.ID)+"?"+url.Values{"done": {msg}}.Encode(), http.StatusSeeOther)
}

// scheduler shows the wheel stage, the robot pool and recent lateness.
func (c *Console) scheduler(w http.ResponseWriter, r *http.Request) {
	st, err := c.state(r.Context())
	if err != nil {
		c.logger.Warn("console: scheduler state", "err", err)
		c.fail(w, r, http.StatusServiceUnavailable, "The scheduler's state cannot be read right now (Redis unreachable?); try again in a moment.")
		return
	}
	byTarget := map[string]int{}
	for _, d := range st.Due {
		byTarget[d.Target]++
	}
	c.render(w, r, http.StatusOK, "scheduler", map[string]any{"State": st, "DueByTarget": byTarget, "Now": c.now()})
}
