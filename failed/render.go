package failed

import (
	"encoding/base64"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"slices"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/rocketdelay/rocketdelay/store"
)

// View is the JSON form of a failed_sends row, shared by the admin API and
// `rocketdelay failed … -o json`. Its field names are stable; times are UTC, RFC 3339.
type View struct {
	ID        int64  `json:"id"`
	MessageID string `json:"message_id"`
	Target    string `json:"target"`
	// Kind is the target's kind (dingtalk, wecom, feishu, topic, or unknown when the configuration has
	// no such target) and Destination where its message goes; both are left out when
	// the configuration is not known.
	Kind          string     `json:"kind,omitempty"`
	Destination   string     `json:"destination,omitempty"`
	Status        string     `json:"status"`
	ErrorClass    string     `json:"error_class"`
	LastError     string     `json:"last_error"`
	HTTPStatus    *int       `json:"http_status"`
	Errcode       *int       `json:"errcode"`
	Attempts      int        `json:"attempts"`
	NextAttemptAt *time.Time `json:"next_attempt_at"`
	DueAt         *time.Time `json:"due_at"`
	DiscardReason *string    `json:"discard_reason"`
	// CancelledBy and CancelReason say who cancelled the alert and why, once the row is
	// cancelled.
	CancelledBy  *string `json:"cancelled_by"`
	CancelReason *string `json:"cancel_reason"`
	// DiscardedBy names who discarded the row; RetriedBy and RetriedAt who last asked
	// for it to be retried, and when (absent: nobody, or nobody named).
	DiscardedBy *string           `json:"discarded_by,omitempty"`
	RetriedBy   *string           `json:"retried_by,omitempty"`
	RetriedAt   *time.Time        `json:"retried_at,omitempty"`
	CreatedAt   time.Time         `json:"created_at"`
	UpdatedAt   time.Time         `json:"updated_at"`
	Properties  map[string]string `json:"properties"`
	// Payload is the alert body when it is UTF-8 text; otherwise PayloadBase64 holds it.
	Payload       *string `json:"payload,omitempty"`
	PayloadBase64 string  `json:"payload_base64,omitempty"`
}

// NewView returns the JSON form of row, its target described by targets (may be nil).
func NewView(row store.FailedSend, targets Targets) View {
	dest := targets.Describe(row)
	v := View{
		Kind:          dest.Kind,
		Destination:   dest.Where,
		ID:            row.ID,
		MessageID:     row.MessageID,
		Target:        row.Target,
		Status:        string(row.Status),
		ErrorClass:    row.ErrorClass,
		LastError:     row.LastError,
		HTTPStatus:    row.HTTPStatus,
		Errcode:       row.Errcode,
		Attempts:      row.Attempts,
		NextAttemptAt: utcPtr(row.NextAttemptAt),
		DueAt:         utcPtr(row.DueAt),
		DiscardReason: row.DiscardReason,
		CancelledBy:   row.CancelledBy,
		CancelReason:  row.CancelReason,
		DiscardedBy:   row.DiscardedBy,
		RetriedBy:     row.RetriedBy,
		RetriedAt:     utcPtr(row.RetriedAt),
		CreatedAt:     row.CreatedAt.UTC(),
		UpdatedAt:     row.UpdatedAt.UTC(),
		Properties:    row.Properties,
	}
	if v.Properties == nil {
		v.Properties = map[string]string{}
	}
	if utf8.Valid(row.Payload) {
		s := string(row.Payload)
		v.Payload = &s
	} else {
		v.PayloadBase64 = base64.StdEncoding.EncodeToString(row.Payload)
	}
	return v
}

// Page is the JSON form of one page of a listing.
type Page struct {
	Items []View `json:"items"`
	// Next is the cursor of the next page (pass it as `after`); empty on the last page.
	Next string `json:"next,omitempty"`
}

// NewPage returns the JSON form of rows and the next page's cursor (0: none), their
// targets described by targets (may be nil).
func NewPage(rows []store.FailedSend, next int64, targets Targets) Page {
	p := Page{Items: make([]View, 0, len(rows))}
	for _, r := range rows {
		p.Items = append(p.Items, NewView(r, targets))
	}
	if next != 0 {
		p.Next = strconv.FormatInt(next, 10)
	}
	return p
}

// StatsView is the JSON form of store.FailedStats. ByStatus always holds every status.
type StatsView struct {
	ByStatus     map[string]int64 `json:"by_status"`
	ByTarget     map[string]int64 `json:"by_target"`
	ByErrorClass map[string]int64 `json:"by_error_class"`
	// OldestPending is when the oldest pending row was recorded; null when none is.
	OldestPending *time.Time `json:"oldest_pending"`
	// OldestPendingAgeSeconds is its age at the time of the answer; 0 when none.
	OldestPendingAgeSeconds int64 `json:"oldest_pending_age_seconds"`
}

// NewStatsView returns the JSON form of st at now.
func NewStatsView(st store.FailedStats, now time.Time) StatsView {
	v := StatsView{
		ByStatus:      map[string]int64{},
		ByTarget:      st.ByTarget,
		ByErrorClass:  st.ByErrorClass,
		OldestPending: utcPtr(st.OldestPending),
	}
	for _, s := range store.FailedStatuses {
		v.ByStatus[string(s)] = st.ByStatus[s]
	}
	if v.ByTarget == nil {
		v.ByTarget = map[string]int64{}
	}
	if v.ByErrorClass == nil {
		v.ByErrorClass = map[string]int64{}
	}
	if st.OldestPending != nil {
		v.OldestPendingAgeSeconds = max(int64(now.Sub(*st.OldestPending)/time.Second), 0)
	}
	return v
}

// WriteJSON writes v as indented JSON and a newline.
func WriteJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(v)
}

// Widths of the table columns that are cut.
const (
	tableErrorWidth   = 60
	tableMessageWidth = 24
	tableTargetWidth  = 16
)

// WriteTable writes rows as a table for a terminal: one line each, newest first as
// given, ages relative to now, long values cut with "…", each target's kind from
// targets (may be nil). next, when not 0, is mentioned at the end with the flag that
// continues the listing.
func WriteTable(w io.Writer, rows []store.FailedSend, next int64, now time.Time, targets Targets) error {
	if len(rows) == 0 {
		_, err := fmt.Fprintln(w, "no failed sends match")
		return err
	}
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "ID\tSTATUS\tTARGET\tKIND\tMESSAGE ID\tCLASS\tTRIES\tAGE\tNEXT TRY\tLAST ERROR")
	for _, r := range rows {
		nextTry := "-"
		if r.Status == store.StatusPending && r.NextAttemptAt != nil {
			nextTry = relative(*r.NextAttemptAt, now)
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%d\t%s\t%s\t%s\n", r.ID, r.Status, cell(orDash(r.Target), tableTargetWidth),
			orDash(targets.Describe(r).Kind), cell(r.MessageID, tableMessageWidth), r.ErrorClass, r.Attempts, age(r.CreatedAt, now), nextTry,
			cell(orDash(r.LastError), tableErrorWidth))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if next != 0 {
		_, err := fmt.Fprintf(w, "\nmore rows: add --after %d\n", next)
		return err
	}
	return nil
}

// maxShownPayload bounds the payload WriteDetail prints.
const maxShownPayload = 4096

// WriteDetail writes everything about one row, for `rocketdelay failed show`, its
// target described by targets (may be nil).
func WriteDetail(w io.Writer, r store.FailedSend, now time.Time, targets Targets) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	line := func(k, v string) { fmt.Fprintf(tw, "%s:\t%s\n", k, v) }
	line("ID", strconv.FormatInt(r.ID, 10))
	line("Message ID", r.MessageID)
	line("Target", orDash(r.Target))
	if d := targets.Describe(r); d.Kind != "" {
		line("Kind", d.Kind)
		line("Destination", oneLine(d.Where))
	}
	line("Status", string(r.Status))
	line("Error class", r.ErrorClass)
	line("Last error", orDash(oneLine(r.LastError)))
	line("HTTP status", intOrDash(r.HTTPStatus))
	line("Errcode", intOrDash(r.Errcode))
	line("Attempts", strconv.Itoa(r.Attempts))
	if r.Status == store.StatusPending {
		line("Next attempt", timeAndRelative(r.NextAttemptAt, now))
	}
	line("Due at", timeAndRelative(r.DueAt, now))
	line("Recorded", timeAndRelative(&r.CreatedAt, now))
	line("Updated", timeAndRelative(&r.UpdatedAt, now))
	if r.DiscardReason != nil {
		line("Discard reason", oneLine(*r.DiscardReason))
	}
	if r.DiscardedBy != nil {
		line("Discarded by", oneLine(*r.DiscardedBy))
	}
	if r.RetriedBy != nil {
		line("Retried by", oneLine(*r.RetriedBy)+", "+timeAndRelative(r.RetriedAt, now))
	}
	if r.CancelledBy != nil {
		line("Cancelled by", oneLine(*r.CancelledBy))
		line("Cancel reason", orDash(oneLine(deref(r.CancelReason))))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintln(w, "Properties:")
	if len(r.Properties) == 0 {
		fmt.Fprintln(w, "  (none)")
	}
	for _, k := range slices.Sorted(maps.Keys(r.Properties)) {
		fmt.Fprintf(w, "  %s=%s\n", k, oneLine(r.Properties[k]))
	}
	shown := r.Payload
	if len(shown) > maxShownPayload {
		shown = shown[:maxShownPayload]
	}
	if utf8.Valid(r.Payload) {
		fmt.Fprintf(w, "Payload (%s):\n", bytesCount(len(r.Payload)))
		for l := range strings.Lines(strings.ToValidUTF8(string(shown), "")) {
			fmt.Fprintf(w, "  %s\n", strings.TrimRight(printable(l), "\n"))
		}
	} else {
		fmt.Fprintf(w, "Payload (%s, not UTF-8, base64):\n  %s\n", bytesCount(len(r.Payload)), base64.StdEncoding.EncodeToString(shown))
	}
	if len(shown) < len(r.Payload) {
		fmt.Fprintf(w, "  … %d more bytes (use -o json for all of it)\n", len(r.Payload)-len(shown))
	}
	return nil
}

func bytesCount(n int) string {
	if n == 1 {
		return "1 byte"
	}
	return strconv.Itoa(n) + " bytes"
}

// WriteStats writes st as three small tables for a terminal.
func WriteStats(w io.Writer, st store.FailedStats, now time.Time) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STATUS\tROWS")
	for _, s := range store.FailedStatuses {
		fmt.Fprintf(tw, "%s\t%d\n", s, st.ByStatus[s])
	}
	oldest := "none"
	if st.OldestPending != nil {
		oldest = age(*st.OldestPending, now) + " old, recorded " + st.OldestPending.UTC().Format(time.RFC3339)
	}
	fmt.Fprintf(tw, "\nOldest pending:\t%s\n", oldest)
	writeCounts(tw, "TARGET", st.ByTarget)
	writeCounts(tw, "ERROR CLASS", st.ByErrorClass)
	return tw.Flush()
}

// writeCounts writes one table of open-row counts, largest first.
func writeCounts(tw io.Writer, title string, counts map[string]int64) {
	fmt.Fprintf(tw, "\n%s\tOPEN ROWS (pending, dead, rejected)\n", title)
	if len(counts) == 0 {
		fmt.Fprintln(tw, "(none)")
		return
	}
	keys := slices.SortedFunc(maps.Keys(counts), func(a, b string) int {
		if counts[a] != counts[b] {
			return int(counts[b] - counts[a])
		}
		return strings.Compare(a, b)
	})
	for _, k := range keys {
		fmt.Fprintf(tw, "%s\t%d\n", orDash(k), counts[k])
	}
}

// age says how long ago t was, in the largest whole unit: "45s", "12m", "3h", "2d".
func age(t, now time.Time) string {
	return short(now.Sub(t))
}

// relative says when t is relative to now: "in 5m", "3h ago", "now".
func relative(t, now time.Time) string {
	d := t.Sub(now)
	switch {
	case d > -time.Second && d < time.Second:
		return "now"
	case d > 0:
		return "in " + short(d)
	default:
		return short(-d) + " ago"
	}
}

func short(d time.Duration) string {
	if d < 0 {
		d = 0
	}
	switch {
	case d < time.Minute:
		return fmt.Sprintf("%ds", int(d/time.Second))
	case d < time.Hour:
		return fmt.Sprintf("%dm", int(d/time.Minute))
	case d < 48*time.Hour:
		return fmt.Sprintf("%dh", int(d/time.Hour))
	default:
		return fmt.Sprintf("%dd", int(d/(24*time.Hour)))
	}
}

func timeAndRelative(t *time.Time, now time.Time) string {
	if t == nil {
		return "-"
	}
	return t.UTC().Format(time.RFC3339) + " (" + relative(*t, now) + ")"
}

// cell makes s fit one table cell: on one line, at most width runes.
func cell(s string, width int) string {
	s = oneLine(s)
	if utf8.RuneCountInString(s) <= width {
		return s
	}
	r := []rune(s)
	return string(r[:width-1]) + "…"
}

// oneLine replaces line breaks, tabs and other control characters by spaces, so a value
// cannot break a table or forge lines of output.
func oneLine(s string) string {
	return strings.Map(func(r rune) rune {
		if unicode.IsControl(r) {
			return ' '
		}
		return r
	}, strings.ToValidUTF8(s, "?"))
}

// printable is oneLine for one line of a payload: control characters but the line end
// become spaces.
func printable(l string) string {
	return strings.Map(func(r rune) rune {
		if r != '\n' && unicode.IsControl(r) {
			return ' '
		}
		return r
	}, l)
}

func orDash(s string) string {
	if s == "" {
		return "-"
	}
	return s
}

func intOrDash(p *int) string {
	if p == nil {
		return "-"
	}
	return strconv.Itoa(*p)
}

func utcPtr(t *time.Time) *time.Time {
	if t == nil {
		return nil
	}
	u := t.UTC()
	return &u
}
