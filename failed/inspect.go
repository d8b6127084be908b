package failed

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/rocketdelay/rocketdelay/config"
	"github.com/rocketdelay/rocketdelay/scheduler"
	"github.com/rocketdelay/rocketdelay/store"
	"github.com/rocketdelay/rocketdelay/wire"
)

// The states of an alert, as Inspect reports them.
const (
	StateHopping   = "hopping"     // taking broker hops towards its due time
	StateWaiting   = "waiting"     // in the wheel stage, due in a moment
	StateHandoff   = "handing_off" // claimed by a replica, being sent
	StateDelivered = "delivered"   // sent (by its hand-off, or by the retry job)
	StateFailed    = "failed"      // its send failed: a failed_sends row says what next
	StateCancelled = "cancelled"
	StateWithheld  = "withheld" // not sent on purpose: a step of an escalation episode that had ended
	StateRejected  = "rejected" // it can never be delivered as it is
	StateUnknown   = "unknown"
)

// Wheel is what Inspect reads of the wheel stage; *store.WheelStage implements it.
type Wheel interface {
	Inspect(ctx context.Context, id string) (store.AlertState, error)
}

// Rows finds the failed_sends rows of an RD_ID; *store.FailedSends implements it.
type Rows interface {
	ByMessageID(ctx context.Context, id string) ([]store.FailedSend, error)
}

// Inspector answers "where is my alert?" for any RD_ID, from its trace and live state in
// Redis and its rows in failed_sends.
type Inspector struct {
	Wheel Wheel
	Rows  Rows
	// Config gives the targets (kind, destination), the delay levels (planned hops) and
	// the trace's life (scheduler.doneTTL).
	Config config.Config
	// Now is the clock of "in" and "ago"; time.Now when nil.
	Now func() time.Time
	// Owners name the principal that published an alert through the HTTP ways in
	// (*store.Producers); nil: none is shown.
	Owners Owners
}

// Owners name the principal that owns an alert id; *store.Producers implements it.
type Owners interface {
	Owner(ctx context.Context, kind, id string) (string, error)
}

// Report is where an alert is and what happened to it, the JSON of GET
// /api/v1/alerts/{id} and `rocketdelay inspect -o json`.
type Report struct {
	ID string `json:"id"`
	// State is one of the State… constants; Summary says it in a sentence.
	State   string `json:"state"`
	Summary string `json:"summary"`
	Target  string `json:"target,omitempty"`
	// Principal is the producer that published it through the HTTP ways in; empty for
	// one published to the topic directly (or whose record has expired).
	Principal string `json:"principal,omitempty"`
	// Kind and Destination describe the target (see Targets).
	Kind        string     `json:"kind,omitempty"`
	Destination string     `json:"destination,omitempty"`
	DueAt       *time.Time `json:"due_at,omitempty"`
	// History is what happened, oldest first.
	History []Event `json:"history"`
	// Rows are its failed_sends rows, oldest first.
	Rows []View `json:"failed_sends"`
}

// Event is one step of an alert's history.
type Event struct {
	At   time.Time `json:"at"`
	What string    `json:"what"`
}

// Inspect reports on the alert id.
func (in Inspector) Inspect(ctx context.Context, id string) (Report, error) {
	now := time.Now
	if in.Now != nil {
		now = in.Now
	}
	s, err := in.Wheel.Inspect(ctx, id)
	if err != nil {
		return Report{}, err
	}
	rows, err := in.Rows.ByMessageID(ctx, id)
	if err != nil {
		return Report{}, err
	}
	r := Report{ID: id, History: []Event{}, Rows: []View{}, Target: s.Target}
	if principal, scoped := wire.Scope(id); scoped {
		r.Principal = principal // its own by its name
	} else if in.Owners != nil {
		if r.Principal, err = in.Owners.Owner(ctx, store.OwnAlert, id); err != nil {
			return Report{}, err
		}
	}
	targets := Targets(in.Config.Targets)
	for _, row := range rows {
		r.Rows = append(r.Rows, NewView(row, targets))
		if r.Target == "" {
			r.Target = row.Target
		}
	}
	if r.Target != "" {
		d := targets.Describe(store.FailedSend{Target: r.Target, MessageID: id})
		r.Kind, r.Destination = d.Kind, d.Where
	}
	if !s.DueAt.IsZero() {
		due := s.DueAt.UTC()
		r.DueAt = &due
	}
	in.history(&r, s, rows)
	in.state(&r, s, rows, now())
	return r, nil
}

// history lists the trace's and the rows' events, oldest first.
func (in Inspector) history(r *Report, s store.AlertState, rows []store.FailedSend) {
	add := func(at time.Time, format string, args ...any) {
		if !at.IsZero() {
			r.History = append(r.History, Event{At: at.UTC(), What: fmt.Sprintf(format, args...)})
		}
	}
	if s.Traced && !s.AcceptedAt.IsZero() {
		due := s.DueAt
		if !s.FirstDueAt.IsZero() {
			due = s.FirstDueAt // the move is its own event below
		}
		what := fmt.Sprintf("accepted for %s, due %s", s.Target, due.UTC().Format(time.RFC3339Nano))
		sc := in.Config.Scheduler
		if (sc.Mode == "" || sc.Mode == config.ModeLevels) && len(sc.Levels) > 0 {
			hops, rest := scheduler.Plan(due.Sub(s.AcceptedAt), scheduler.Route{Levels: sc.Levels, Threshold: sc.Threshold})
			what += fmt.Sprintf(" (planned: %d broker hops, then %s in the wheel stage)", len(hops), rest.Round(time.Millisecond))
		}
		add(s.AcceptedAt, "%s", what)
	}
	for _, m := range s.Moves {
		add(m.At, "rescheduled by %s from %s to %s", orDash(m.By), m.From.UTC().Format(time.RFC3339Nano), m.To.UTC().Format(time.RFC3339Nano))
	}
	if more := s.MoveCount - len(s.Moves); more > 0 && len(s.Moves) > 0 {
		add(s.Moves[len(s.Moves)-1].At, "rescheduled %d more times since, now due %s", more, s.DueAt.UTC().Format(time.RFC3339Nano))
	}
	if !s.LastHopAt.IsZero() {
		add(s.LastHopAt, "broker hop %d, expected back at %s", s.Hops, s.NextArrival.UTC().Format(time.RFC3339Nano))
	}
	add(s.PutAt, "entered the wheel stage after %d broker hops", s.Hops)
	if s.Done && s.Withheld {
		add(s.DoneAt, "withheld: its escalation episode had ended (resolved or acknowledged) before it was due")
	}
	if s.Done && !s.Recorded && !s.Withheld {
		what := "delivered"
		if s.Robot != "" {
			what += " by robot " + s.Robot
		}
		if s.Merged > 1 {
			what += fmt.Sprintf(", merged with %d other alerts", s.Merged-1)
		}
		if s.Parts > 1 {
			what += fmt.Sprintf(", in %d parts", s.Parts)
		}
		if s.Traced && !s.EndedAt.IsZero() {
			what += fmt.Sprintf(", %s after its due time", s.Late.Round(time.Millisecond))
		}
		if s.By != "" {
			what += ", handed off by " + s.By
		}
		add(s.DoneAt, "%s", what)
	}
	if s.Done && s.Recorded {
		add(s.DoneAt, "its send failed; recorded in failed_sends (handed off by %s)", orDash(s.By))
	}
	if s.Cancelled {
		add(s.CancelledAt, "cancelled")
	}
	for _, row := range rows {
		add(row.CreatedAt, "failed_sends row %d recorded: %s (%s)", row.ID, row.ErrorClass, oneLine(row.LastError))
		switch {
		case row.Status == store.StatusCancelled:
			add(row.UpdatedAt, "failed_sends row %d cancelled %s, after %d attempts", row.ID, cancelledBy(row), row.Attempts)
		case row.UpdatedAt.After(row.CreatedAt):
			add(row.UpdatedAt, "failed_sends row %d is %s after %d attempts", row.ID, row.Status, row.Attempts)
		}
	}
	slices.SortStableFunc(r.History, func(a, b Event) int { return a.At.Compare(b.At) })
}

// state settles the alert's state and summary from what is known, the most final first.
func (in Inspector) state(r *Report, s store.AlertState, rows []store.FailedSend, now time.Time) {
	var live *store.FailedSend
	for i := range rows {
		switch rows[i].Status {
		case store.StatusDelivered, store.StatusDiscarded, store.StatusCancelled:
		default:
			live = &rows[i]
		}
	}
	var last *store.FailedSend
	if len(rows) > 0 {
		last = &rows[len(rows)-1]
	}
	switch {
	case s.Done && s.Withheld:
		r.State = StateWithheld
		r.Summary = fmt.Sprintf("withheld %s ago: a step of an escalation episode that had ended; it will not be sent",
			short(now.Sub(s.DoneAt)))
	case s.Done && !s.Recorded:
		r.State = StateDelivered
		r.Summary = fmt.Sprintf("delivered %s ago", short(now.Sub(s.DoneAt)))
		if s.Robot != "" {
			r.Summary += " by robot " + s.Robot
		}
	case last != nil && last.Status == store.StatusDelivered && live == nil:
		r.State = StateDelivered
		r.Summary = fmt.Sprintf("delivered by the retry job %s ago (failed_sends row %d)", short(now.Sub(last.UpdatedAt)), last.ID)
	case last != nil && last.Status == store.StatusCancelled && live == nil && !s.InFlight && !s.Waiting:
		r.State = StateCancelled
		r.Summary = fmt.Sprintf("cancelled %s %s ago, while its failed send waited in failed_sends (row %d); it will not be sent",
			cancelledBy(*last), short(now.Sub(last.UpdatedAt)), last.ID)
	case s.Cancelled && live == nil:
		r.State = StateCancelled
		where := "before it reached the wheel stage (still hopping, or not consumed yet)"
		if s.Stage == "waiting" {
			where = "while it waited in the wheel stage"
		}
		r.Summary = fmt.Sprintf("cancelled %s ago, %s; it will not be sent", short(now.Sub(s.CancelledAt)), where)
	case s.InFlight:
		r.State = StateHandoff
		replica, _, _ := strings.Cut(s.Owner, "/")
		r.Summary = fmt.Sprintf("being handed off by %s (claim held until %s unless renewed)", replica, s.LeaseUntil.UTC().Format(time.RFC3339))
	case s.Waiting:
		r.State = StateWaiting
		r.Summary = "waiting in the wheel stage, due " + relative(s.NextDue, now)
		if s.Tries > 0 {
			r.Summary += fmt.Sprintf(" (a retry: %d hand-offs given back)", s.Tries)
		}
	case live != nil && live.Status == store.StatusRejected:
		r.State = StateRejected
		r.Summary = fmt.Sprintf("rejected: %s (failed_sends row %d)", oneLine(live.LastError), live.ID)
	case live != nil:
		r.State = StateFailed
		r.Summary = fmt.Sprintf("its send failed (%s); failed_sends row %d is %s", live.ErrorClass, live.ID, live.Status)
		if live.Status == store.StatusPending && live.NextAttemptAt != nil {
			r.Summary += ", next attempt " + relative(*live.NextAttemptAt, now)
		}
	case last != nil && last.Status == store.StatusDiscarded:
		r.State = StateFailed
		r.Summary = fmt.Sprintf("its send failed and an operator discarded it (failed_sends row %d)", last.ID)
	case s.Stage == "hopping":
		r.State = StateHopping
		r.Summary = fmt.Sprintf("taking broker hops: %d so far, the last back %s; due %s", s.Hops,
			relative(s.NextArrival, now), relative(s.DueAt, now))
	default:
		r.State = StateUnknown
		r.Summary = fmt.Sprintf("not known: never published with this id, not consumed yet (a consumer group behind), "+
			"or older than the trace's life (scheduler.doneTTL, %s)", in.Config.Scheduler.DoneTTL)
	}
}

// WriteReport writes r for a terminal.
func WriteReport(w io.Writer, r Report) error {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintf(tw, "Alert:\t%s\n", r.ID)
	fmt.Fprintf(tw, "State:\t%s\n", r.State)
	fmt.Fprintf(tw, "\t%s\n", r.Summary)
	if r.Target != "" {
		fmt.Fprintf(tw, "Target:\t%s (%s: %s)\n", r.Target, orDash(r.Kind), orDash(r.Destination))
	}
	if r.Principal != "" {
		fmt.Fprintf(tw, "Principal:\t%s\n", r.Principal)
	}
	if r.DueAt != nil {
		fmt.Fprintf(tw, "Due:\t%s\n", r.DueAt.Format(time.RFC3339Nano))
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	if len(r.History) > 0 {
		fmt.Fprintln(w, "History:")
		for _, e := range r.History {
			fmt.Fprintf(w, "  %s  %s\n", e.At.Format("2006-01-02T15:04:05.000Z07:00"), oneLine(e.What))
		}
	}
	if len(r.Rows) > 0 {
		fmt.Fprintln(w, "failed_sends rows (rocketdelay failed show ID):")
		for _, v := range r.Rows {
			fmt.Fprintf(w, "  %d  %s  %s  %s\n", v.ID, v.Status, v.ErrorClass, cell(orDash(v.LastError), tableErrorWidth))
		}
	}
	return nil
}

// cancelledBy says who cancelled a cancelled row, and why: "by console (order was paid)".
func cancelledBy(row store.FailedSend) string {
	out := "by " + orDash(deref(row.CancelledBy))
	if why := deref(row.CancelReason); why != "" {
		out += " (" + oneLine(why) + ")"
	}
	return out
}

func deref(s *string) string {
	if s == nil {
		return ""
	}
	return *s
}
